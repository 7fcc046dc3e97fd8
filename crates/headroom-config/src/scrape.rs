//! `[pools.scrape]` and `[pools.signals]`: where a pool's signals are read from, and how often;
//! the selectors that name a page's series, and how a fleet's oldest ages become one.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::raw::{RawScrape, RawSignals};
use super::{Problems, Within};
use crate::prometheus::{PrometheusAuth, PrometheusSource};

/// A series selector: a metric name and equality label matchers, as in PromQL:
/// `vllm:num_requests_waiting{model_name="llama-70b"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub name: String,
    pub labels: Vec<(String, String)>,
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if !self.labels.is_empty() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect();
            write!(f, "{{{}}}", labels.join(","))?;
        }
        Ok(())
    }
}

/// A character of a metric or label name.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Parses `k="v",k2="v2"` (the inside of braces), with the text format's escapes.
pub fn parse_labels(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut labels = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let eq = rest.find('=').ok_or("a label needs =")?;
        let key = rest[..eq].trim();
        if key.is_empty() || !key.chars().all(is_name_char) {
            return Err(format!("bad label name {key:?}"));
        }
        let after = rest[eq + 1..].trim_start();
        let mut chars = after.char_indices();
        if chars.next().map(|(_, c)| c) != Some('"') {
            return Err("a label value must be quoted".into());
        }
        let mut value = String::new();
        let mut end = None;
        let mut escaped = false;
        for (i, c) in chars {
            match (escaped, c) {
                (true, 'n') => {
                    value.push('\n');
                    escaped = false;
                }
                (true, other) => {
                    value.push(other);
                    escaped = false;
                }
                (false, '\\') => escaped = true,
                (false, '"') => {
                    end = Some(i);
                    break;
                }
                (false, other) => value.push(other),
            }
        }
        let end = end.ok_or("unterminated label value")?;
        labels.push((key.to_string(), value));
        rest = after[end + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    Ok(labels)
}

impl FromStr for Selector {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (name, labels) = match s.split_once('{') {
            Some((name, rest)) => {
                let inner = rest
                    .strip_suffix('}')
                    .ok_or("a selector's labels end with }")?;
                (name.trim(), parse_labels(inner)?)
            }
            None => (s, Vec::new()),
        };
        if name.is_empty() || !name.chars().all(is_name_char) {
            return Err(format!("{name:?} is not a metric name"));
        }
        Ok(Selector {
            name: name.to_string(),
            labels,
        })
    }
}

impl<'de> Deserialize<'de> for Selector {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Which series become which signal. Gauges are summed over matching series, except GPU
/// utilisation and batch occupancy (averaged) and the oldest age (the maximum); counters become
/// rates between scrapes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrapeSelectors {
    pub queue_depth: Selector,
    pub oldest_age_s: Option<Selector>,
    pub batch_occupancy: Option<Selector>,
    /// A 0..1 gauge; see `gpu_utilization_percent` for exporters that report 0..100.
    pub gpu_utilization: Option<Selector>,
    pub gpu_utilization_percent: Option<Selector>,
    pub arrivals_total: Option<Selector>,
    pub departures_total: Option<Selector>,
    pub errors_total: Option<Selector>,
    /// Tokens waiting (prompt plus estimated output), a gauge summed over matching series: with
    /// the pool's `replica_throughput_tps` the pool is sized in tokens.
    pub queued_tokens: Option<Selector>,
    /// A counter of tokens arriving, turned into `token_arrival_rate_tps`.
    pub token_arrivals_total: Option<Selector>,
}

/// How the oldest-request ages a fleet reports (one a replica, or one a series) become the
/// pool's one age (`[pools.scrape] oldest_age_aggregation`): the maximum, or a high percentile,
/// which one replica with a stuck request does not move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AgeAggregation {
    /// The oldest request of any replica (the default).
    #[default]
    Max,
    /// The given percentile (50 to 99) across the series, interpolated between the two nearest
    /// as PromQL's `quantile()` interpolates, so a replay's PromQL gives the same number.
    Percentile(u8),
}

impl FromStr for AgeAggregation {
    type Err = String;

    /// `max`, or `p50` to `p99`.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "max" {
            return Ok(AgeAggregation::Max);
        }
        match s.strip_prefix('p').map(str::parse::<u8>) {
            Some(Ok(p)) if (50..=99).contains(&p) && s.len() == 3 => {
                Ok(AgeAggregation::Percentile(p))
            }
            _ => Err(format!(
                "{s:?} is neither max nor a percentile from p50 to p99"
            )),
        }
    }
}

impl fmt::Display for AgeAggregation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgeAggregation::Max => f.write_str("max"),
            AgeAggregation::Percentile(p) => write!(f, "p{p}"),
        }
    }
}

impl AgeAggregation {
    /// The fleet's age from every series' age; `None` with none.
    pub fn aggregate(self, mut ages: Vec<f64>) -> Option<f64> {
        if ages.is_empty() {
            return None;
        }
        match self {
            AgeAggregation::Max => ages.into_iter().reduce(f64::max),
            AgeAggregation::Percentile(p) => {
                // As Prometheus's `quantile(φ, …)`: rank φ·(n−1) in the sorted values, linear
                // between the two around it.
                ages.sort_by(f64::total_cmp);
                let rank = f64::from(p) / 100.0 * (ages.len() - 1) as f64;
                let lower = rank.floor() as usize;
                let upper = (lower + 1).min(ages.len() - 1);
                let weight = rank - rank.floor();
                Some(ages[lower] * (1.0 - weight) + ages[upper] * weight)
            }
        }
    }

    /// The PromQL that aggregates `selector`'s series the same way.
    pub fn promql(self, selector: &Selector) -> String {
        match self {
            AgeAggregation::Max => format!("max({selector})"),
            AgeAggregation::Percentile(p) => format!("quantile(0.{p:02}, {selector})"),
        }
    }
}

/// One pool's scrape target.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeTarget {
    /// One page per replica (or one aggregator): all are read each interval, and a signal
    /// needs every one of them.
    pub urls: Vec<String>,
    /// Instead of `urls`: every Ready model-server pod of the pool, as the Kubernetes cluster
    /// (`[kube]`) sees it at each interval.
    pub pods: Option<PodEndpoints>,
    pub interval: Duration,
    pub timeout: Duration,
    pub selectors: ScrapeSelectors,
    /// How the replicas' oldest ages become the pool's.
    pub age: AgeAggregation,
}

/// Where a model-server pod serves its metrics: `{scheme}://{pod IP}:{port}{path}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEndpoints {
    pub scheme: String,
    pub port: u16,
    pub path: String,
}

impl PodEndpoints {
    /// The page of the pod at `ip` (IPv6 addresses in brackets).
    pub fn url(&self, ip: &str) -> String {
        let host = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_string()
        };
        format!("{}://{host}:{}{}", self.scheme, self.port, self.path)
    }
}

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
) -> PodEndpoints {
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
    PodEndpoints {
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

#[cfg(test)]
mod tests {
    use super::AgeAggregation;

    #[test]
    fn the_age_is_the_maximum_or_a_percentile_as_promql_takes_it() {
        let ages = vec![1.0, 2.0, 3.0, 4.0, 100.0];
        assert_eq!(AgeAggregation::Max.aggregate(ages.clone()), Some(100.0));
        // Rank 0.9 × 4 = 3.6: 60 % of the way from 4 to 100, as `quantile(0.9, …)` answers.
        let p90 = AgeAggregation::Percentile(90)
            .aggregate(ages.clone())
            .unwrap();
        assert!((p90 - 61.6).abs() < 1e-9, "{p90}");
        // The median of an even count lies between the middle two; order does not matter.
        assert_eq!(
            AgeAggregation::Percentile(50).aggregate(vec![8.0, 2.0, 6.0, 4.0]),
            Some(5.0)
        );
        assert_eq!(
            AgeAggregation::Percentile(99).aggregate(vec![7.0]),
            Some(7.0)
        );
        assert_eq!(AgeAggregation::Percentile(90).aggregate(Vec::new()), None);
        assert_eq!("p95".parse(), Ok(AgeAggregation::Percentile(95)));
        assert_eq!("max".parse(), Ok(AgeAggregation::Max));
        for bad in ["p100", "p49", "p5", "p099", "p9.5", "95", "avg", ""] {
            let e = bad.parse::<AgeAggregation>().unwrap_err();
            assert!(e.contains("from p50 to p99"), "{bad}: {e}");
        }
        assert_eq!(AgeAggregation::Percentile(90).to_string(), "p90");
    }
}
