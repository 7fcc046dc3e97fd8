//! `[pools.scrape]` and `[pools.signals]`: where a pool's signals are read from, and how often.

use std::time::Duration;

use super::raw::{RawScrape, RawSignals};
use super::{Problems, Within};
use crate::prometheus::{PrometheusAuth, PrometheusSource};
use crate::scrape::{AgeAggregation, ScrapeTarget};

/// The most endpoints one pool scrapes itself each interval (one thread each); a larger fleet
/// belongs behind Prometheus (`[pools.signals]`).
const MAX_SCRAPE_TARGETS: usize = 256;

/// A read's interval and timeout: the timeout at most the interval, so reads never pile up.
fn cadence(
    key: &str,
    interval: Option<&str>,
    timeout: Option<&str>,
    p: &mut Problems,
) -> (Duration, Duration) {
    let (interval_key, timeout_key) = (format!("{key}.interval"), format!("{key}.timeout"));
    let interval = match interval {
        Some(text) => p.duration(&interval_key, text, Within::secs(1, 300, "5s")),
        None => Duration::from_secs(5),
    };
    let timeout = match timeout {
        Some(text) => p.duration(&timeout_key, text, Within::millis(10, 300_000, "2s")),
        None => Duration::from_secs(2),
    };
    if !p.reported(&interval_key) && !p.reported(&timeout_key) && timeout > interval {
        p.add(
            &timeout_key,
            "must be at most the interval",
            "use e.g. \"2s\"",
        );
    }
    (interval, timeout)
}

/// An http(s) URL without credentials in it: a URL is logged and shown in errors, so a password
/// belongs in a file (`basic_auth_password_file`), never in the URL.
fn check_url(key: &str, url: &str, example: &str, p: &mut Problems) {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        p.add(
            key,
            format!("{url:?} is not an http:// or https:// URL"),
            format!("use e.g. \"{example}\""),
        );
        return;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        p.add(
            key,
            "holds credentials (user:password@), which would be logged with the URL",
            "remove them from the URL ([pools.signals] takes basic_auth_username and basic_auth_password_file)",
        );
    }
}

/// `kube_enabled`: whether `[kube] enabled = true`, which `[pools.scrape.pods]` reads pods from.
pub(super) fn target(
    key: &str,
    raw: &RawScrape,
    kube_enabled: bool,
    p: &mut Problems,
) -> ScrapeTarget {
    let (interval, timeout) = cadence(key, raw.interval.as_deref(), raw.timeout.as_deref(), p);
    let pods = raw
        .pods
        .as_ref()
        .map(|pods| pod_endpoints(&format!("{key}.pods"), pods, kube_enabled, p));
    let urls = match (&raw.url, &raw.targets) {
        (None, None) if pods.is_some() => Vec::new(),
        (_, _) if pods.is_some() => {
            p.add(
                &format!("{key}.pods"),
                "is set beside url or targets",
                "read pods from the cluster, or list endpoints: one of the three",
            );
            Vec::new()
        }
        (Some(url), None) => {
            check_url(
                &format!("{key}.url"),
                url,
                "http://10.0.0.5:8000/metrics",
                p,
            );
            vec![url.clone()]
        }
        (None, Some(targets)) if (1..=MAX_SCRAPE_TARGETS).contains(&targets.len()) => {
            for (i, url) in targets.iter().enumerate() {
                let example = "http://10.0.0.5:8000/metrics";
                check_url(&format!("{key}.targets[{i}]"), url, example, p);
            }
            targets.clone()
        }
        (None, Some(targets)) => {
            p.add(
                &format!("{key}.targets"),
                format!("lists {} targets", targets.len()),
                format!(
                    "list 1 to {MAX_SCRAPE_TARGETS} endpoints, or scrape one aggregator with url"
                ),
            );
            Vec::new()
        }
        (Some(_), Some(_)) | (None, None) => {
            p.add(
                key,
                "needs exactly one of url (one endpoint), targets (one per replica) and [pools.scrape.pods] (every Ready pod)",
                "set url = \"http://10.0.0.5:8000/metrics\", targets = [\"http://10.0.0.5:8000/metrics\", …] or [pools.scrape.pods] port = 8000",
            );
            Vec::new()
        }
    };
    let age_key = format!("{key}.oldest_age_aggregation");
    let age = match raw.oldest_age_aggregation.as_deref().map(str::parse) {
        None => AgeAggregation::Max,
        Some(Ok(age)) => {
            if raw.series.oldest_age_s.is_none() {
                p.add(
                    &age_key,
                    "is set, but [pools.scrape.series] reads no oldest_age_s",
                    "add oldest_age_s = '<the oldest waiting request's age, in seconds>' to [pools.scrape.series], or remove the key",
                );
            }
            age
        }
        Some(Err(why)) => {
            p.add(
                &age_key,
                why,
                "use \"max\" (the default) or a percentile such as \"p90\"",
            );
            AgeAggregation::Max
        }
    };
    ScrapeTarget {
        urls,
        pods,
        interval,
        timeout,
        selectors: raw.series.clone(),
        age,
    }
}

fn pod_endpoints(
    key: &str,
    raw: &super::raw::RawPodEndpoints,
    kube_enabled: bool,
    p: &mut Problems,
) -> crate::scrape::PodEndpoints {
    if !kube_enabled {
        p.add(
            key,
            "reads the pool's pods from Kubernetes, but [kube] is not enabled",
            "set [kube] enabled = true with the pool's model_selector in [kube.pools.NAME], or list targets",
        );
    }
    if raw.port == 0 {
        p.add(
            &format!("{key}.port"),
            "must be 1 to 65535",
            "use the model server's metrics port, e.g. 8000",
        );
    }
    let path = raw.path.clone().unwrap_or_else(|| "/metrics".to_string());
    if !path.starts_with('/') {
        p.add(
            &format!("{key}.path"),
            format!("{path:?} does not start with /"),
            "use e.g. \"/metrics\"",
        );
    }
    let scheme = raw.scheme.clone().unwrap_or_else(|| "http".to_string());
    if scheme != "http" && scheme != "https" {
        p.add(
            &format!("{key}.scheme"),
            format!("{scheme:?} is not http or https"),
            "use \"http\" or \"https\"",
        );
    }
    crate::scrape::PodEndpoints {
        scheme,
        port: raw.port,
        path,
    }
}

pub(super) fn prometheus(key: &str, raw: &RawSignals, p: &mut Problems) -> PrometheusSource {
    if raw.source != "prometheus" {
        p.add(
            &format!("{key}.source"),
            format!("{:?} is not a signal source this table configures", raw.source),
            "use source = \"prometheus\"; a metrics page is [pools.scrape], and pushed signals need no table",
        );
    }
    let (interval, timeout) = cadence(key, raw.interval.as_deref(), raw.timeout.as_deref(), p);
    check_url(
        &format!("{key}.url"),
        &raw.url,
        "http://prometheus.monitoring:9090",
        p,
    );
    for (name, query) in raw.queries.named() {
        if let Err(why) = crate::prometheus::check_query(query) {
            p.add(
                &format!("{key}.queries.{name}"),
                format!("is not a usable PromQL query: {why}"),
                "write one expression with one value, e.g. sum(vllm:num_requests_waiting{model_name=\"llama-70b\"})",
            );
        }
    }
    let auth = match (
        &raw.bearer_token_file,
        &raw.basic_auth_username,
        &raw.basic_auth_password_file,
    ) {
        (None, None, None) => PrometheusAuth::None,
        (Some(file), None, None) => PrometheusAuth::BearerTokenFile(file.clone()),
        (None, Some(username), Some(password_file)) => PrometheusAuth::Basic {
            username: username.clone(),
            password_file: password_file.clone(),
        },
        (None, _, _) => {
            p.add(
                &format!("{key}.basic_auth_password_file"),
                "basic auth needs both basic_auth_username and basic_auth_password_file",
                "set both, or neither",
            );
            PrometheusAuth::None
        }
        (Some(_), _, _) => {
            p.add(
                &format!("{key}.bearer_token_file"),
                "is set beside basic auth",
                "choose one: a bearer token file or basic auth",
            );
            PrometheusAuth::None
        }
    };
    PrometheusSource {
        url: raw.url.clone(),
        interval,
        timeout,
        auth,
        ca_file: raw.ca_file.clone(),
        queries: raw.queries.clone(),
    }
}
