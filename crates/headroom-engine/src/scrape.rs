//! Signals scraped from Prometheus text endpoints (vLLM's `/metrics`, DCGM's exporter, …).
//!
//! The parser and selectors are pure; [`Scraper`] keeps the previous counter readings so that
//! counters (`…_total`) become per-second rates between two scrapes.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use headroom_core::Timestamp;
use serde::Deserialize;

use crate::engine::SignalInput;

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

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Parses `k="v",k2="v2"` (the inside of braces), with the text format's escapes.
fn parse_labels(text: &str) -> Result<Vec<(String, String)>, String> {
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

/// The values of every series in `text` that `selector` matches.
pub fn matching(text: &str, selector: &Selector) -> Vec<f64> {
    let mut values = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
        if line[..name_end] != selector.name {
            continue;
        }
        let rest = &line[name_end..];
        let (labels, value_part) = match rest.strip_prefix('{') {
            Some(inner) => match inner.rfind('}') {
                Some(close) => match parse_labels(&inner[..close]) {
                    Ok(labels) => (labels, &inner[close + 1..]),
                    Err(_) => continue,
                },
                None => continue,
            },
            None => (Vec::new(), rest),
        };
        let all_match = selector
            .labels
            .iter()
            .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v));
        if !all_match {
            continue;
        }
        if let Some(value) = value_part
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            && value.is_finite()
        {
            values.push(value);
        }
    }
    values
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

/// One pool's scrape target.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeTarget {
    pub url: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub selectors: ScrapeSelectors,
}

/// Counters read per scrape: arrivals, departures, errors, token arrivals.
const COUNTERS: usize = 4;

/// Turns successive scrapes of one target into signals.
#[derive(Debug, Default)]
pub struct Scraper {
    previous: Option<(Timestamp, [Option<f64>; COUNTERS])>,
}

impl Scraper {
    /// The signal in `text`, scraped at `at`. Counter rates need a previous scrape; a counter
    /// that went down (a restart) gives no rate for this interval.
    pub fn signal(
        &mut self,
        selectors: &ScrapeSelectors,
        text: &str,
        at: Timestamp,
    ) -> Result<SignalInput, String> {
        let sum = |s: &Selector| -> Option<f64> {
            let values = matching(text, s);
            (!values.is_empty()).then(|| values.iter().sum())
        };
        let average = |s: &Selector| -> Option<f64> {
            let values = matching(text, s);
            (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
        };
        let queue = sum(&selectors.queue_depth)
            .ok_or_else(|| format!("no series matches queue_depth {}", selectors.queue_depth))?;
        let counters = [
            selectors.arrivals_total.as_ref().and_then(sum),
            selectors.departures_total.as_ref().and_then(sum),
            selectors.errors_total.as_ref().and_then(sum),
            selectors.token_arrivals_total.as_ref().and_then(sum),
        ];
        let rates = match self.previous {
            Some((then, before)) if at > then => {
                let seconds = (at - then).num_milliseconds() as f64 / 1000.0;
                let mut rates = [None; COUNTERS];
                for i in 0..COUNTERS {
                    if let (Some(now), Some(before)) = (counters[i], before[i])
                        && now >= before
                    {
                        rates[i] = Some((now - before) / seconds);
                    }
                }
                rates
            }
            _ => [None; COUNTERS],
        };
        self.previous = Some((at, counters));
        let utilization = selectors
            .gpu_utilization
            .as_ref()
            .and_then(average)
            .or_else(|| {
                selectors
                    .gpu_utilization_percent
                    .as_ref()
                    .and_then(average)
                    .map(|p| p / 100.0)
            });
        Ok(SignalInput {
            queue_depth: queue.max(0.0).round() as u64,
            // The oldest request across every matching series (replica, engine).
            oldest_age_s: selectors
                .oldest_age_s
                .as_ref()
                .map(|s| matching(text, s))
                .and_then(|ages| ages.into_iter().reduce(f64::max))
                .map(|a| a.max(0.0)),
            arrival_rate_rps: rates[0],
            departure_rate_rps: rates[1],
            error_rate_rps: rates[2],
            batch_occupancy: selectors
                .batch_occupancy
                .as_ref()
                .and_then(average)
                .map(|b| b.clamp(0.0, 1.0)),
            gpu_utilization: utilization.map(|u| u.clamp(0.0, 1.0)),
            oldest_age_by_class_s: Default::default(),
            queue_depth_by_priority: Default::default(),
            arrival_rate_by_priority_rps: Default::default(),
            queued_tokens: selectors
                .queued_tokens
                .as_ref()
                .and_then(sum)
                .map(|t| t.max(0.0)),
            token_arrival_rate_tps: rates[3],
        })
    }
}

/// Scrapes every pool that has a `[pools.scrape]` target, each on its own interval, until
/// `shutdown` resolves, pushing each signal to `engine`. A failed scrape is logged and skipped;
/// with no fresh signal the pool holds and says so.
pub async fn run(
    engine: std::sync::Arc<crate::Engine>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    for (pool, target) in engine.config().scrape.clone() {
        let engine = engine.clone();
        tasks.spawn(async move {
            let mut scraper = Scraper::default();
            loop {
                let url = target.url.clone();
                let timeout = target.timeout;
                let fetched = tokio::task::spawn_blocking(move || {
                    crate::http::get_metrics_text(&url, timeout)
                })
                .await;
                let at = engine.clock().now();
                let result = match fetched {
                    Ok(Ok(text)) => scraper.signal(&target.selectors, &text, at),
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(e.to_string()),
                };
                match result {
                    Ok(signal) => engine.push_signal(&pool, signal),
                    Err(e) => {
                        tracing::warn!(pool = %pool, url = %target.url, error = %e, "scrape failed")
                    }
                }
                tokio::time::sleep(target.interval).await;
            }
        });
    }
    shutdown.await;
    tasks.abort_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: &str = r#"
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama-70b"} 7.0
vllm:num_requests_waiting{engine="1",model_name="llama-70b"} 5.0
vllm:num_requests_waiting{engine="0",model_name="mistral-7b"} 100.0
vllm:num_requests_running{engine="0",model_name="llama-70b"} 30.0
vllm:request_success_total{finished_reason="stop",model_name="llama-70b"} 1000
vllm:request_success_total{finished_reason="length",model_name="llama-70b"} 200
DCGM_FI_DEV_GPU_UTIL{gpu="0",label="with \"quote\", comma"} 90
DCGM_FI_DEV_GPU_UTIL{gpu="1"} 70
headroom_oldest_age_seconds{replica="a"} 2.5
headroom_oldest_age_seconds{replica="b"} 9.0
"#;

    #[test]
    fn selectors_parse_and_match_labels() {
        let s: Selector = r#"vllm:num_requests_waiting{model_name="llama-70b"}"#
            .parse()
            .unwrap();
        assert_eq!(matching(VLLM, &s), [7.0, 5.0]);
        let all: Selector = "vllm:num_requests_waiting".parse().unwrap();
        assert_eq!(matching(VLLM, &all).iter().sum::<f64>(), 112.0);
        assert!("bad name{".parse::<Selector>().is_err());
        assert!(
            r#"m{a=b}"#.parse::<Selector>().is_err(),
            "values are quoted"
        );
        let quoted: Selector = r#"DCGM_FI_DEV_GPU_UTIL{label="with \"quote\", comma"}"#
            .parse()
            .unwrap();
        assert_eq!(matching(VLLM, &quoted), [90.0]);
    }

    #[test]
    fn counters_become_rates_between_scrapes() {
        let selectors = ScrapeSelectors {
            queue_depth: r#"vllm:num_requests_waiting{model_name="llama-70b"}"#
                .parse()
                .unwrap(),
            oldest_age_s: Some("headroom_oldest_age_seconds".parse().unwrap()),
            batch_occupancy: None,
            gpu_utilization: None,
            gpu_utilization_percent: Some("DCGM_FI_DEV_GPU_UTIL".parse().unwrap()),
            arrivals_total: None,
            departures_total: Some(
                r#"vllm:request_success_total{model_name="llama-70b"}"#
                    .parse()
                    .unwrap(),
            ),
            errors_total: None,
            queued_tokens: None,
            token_arrivals_total: None,
        };
        let t0: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let mut scraper = Scraper::default();
        let first = scraper.signal(&selectors, VLLM, t0).unwrap();
        assert_eq!(first.queue_depth, 12);
        assert_eq!(first.departure_rate_rps, None, "a rate needs two scrapes");
        assert_eq!(first.gpu_utilization, Some(0.8));
        assert_eq!(
            first.oldest_age_s,
            Some(9.0),
            "the oldest across replicas, not a sum"
        );
        let later = VLLM.replace("} 1000", "} 1050");
        let second = scraper
            .signal(&selectors, &later, t0 + chrono::Duration::seconds(5))
            .unwrap();
        assert_eq!(second.departure_rate_rps, Some(10.0));
        let missing = ScrapeSelectors {
            queue_depth: "nope".parse().unwrap(),
            ..selectors
        };
        assert!(
            scraper
                .signal(&missing, VLLM, t0)
                .unwrap_err()
                .contains("queue_depth")
        );
    }

    #[test]
    fn token_counts_are_scraped_as_a_gauge_and_a_rate() {
        let text = "queue_waiting 3\nqueue_tokens{replica=\"a\"} 1200\nqueue_tokens{replica=\"b\"} 800\ntokens_in_total 10000\n";
        let selectors = ScrapeSelectors {
            queue_depth: "queue_waiting".parse().unwrap(),
            oldest_age_s: None,
            batch_occupancy: None,
            gpu_utilization: None,
            gpu_utilization_percent: None,
            arrivals_total: None,
            departures_total: None,
            errors_total: None,
            queued_tokens: Some("queue_tokens".parse().unwrap()),
            token_arrivals_total: Some("tokens_in_total".parse().unwrap()),
        };
        let t0: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let mut scraper = Scraper::default();
        let first = scraper.signal(&selectors, text, t0).unwrap();
        assert_eq!(first.queued_tokens, Some(2000.0), "summed over replicas");
        assert_eq!(
            first.token_arrival_rate_tps, None,
            "a rate needs two scrapes"
        );
        let later = text.replace("tokens_in_total 10000", "tokens_in_total 15000");
        let second = scraper
            .signal(&selectors, &later, t0 + chrono::Duration::seconds(10))
            .unwrap();
        assert_eq!(second.token_arrival_rate_tps, Some(500.0));
    }
}
