//! `[pools.signals] source = "prometheus"`: the PromQL a pool's signals are queried with, the
//! server and how Headroom proves itself to it, and the check every query meets when the
//! configuration loads (`promql-parser`). Querying is the engine's (`headroom_engine::prometheus`).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::scrape::{AgeAggregation, ScrapeSelectors, Selector};

/// One PromQL expression per signal. Only `queue_depth` is required.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalQueries {
    /// Requests waiting across the pool: `sum(vllm:num_requests_waiting{model_name="…"})`.
    pub queue_depth: String,
    /// The oldest waiting request, in seconds: a `max(…)`.
    pub oldest_age_s: Option<String>,
    /// Arrivals per second: `sum(rate(…_total[1m]))`.
    pub arrival_rate_rps: Option<String>,
    pub departure_rate_rps: Option<String>,
    pub error_rate_rps: Option<String>,
    /// Mean batch occupancy, 0..1.
    pub batch_occupancy: Option<String>,
    /// Mean GPU utilisation, 0..1 (divide DCGM's percent by 100 in the query).
    pub gpu_utilization: Option<String>,
    /// Tokens waiting, and tokens arriving per second.
    pub queued_tokens: Option<String>,
    pub token_arrival_rate_tps: Option<String>,
}

impl SignalQueries {
    /// Each configured query with the name of the signal it feeds.
    pub fn named(&self) -> Vec<(&'static str, &str)> {
        let optional = [
            ("oldest_age_s", &self.oldest_age_s),
            ("arrival_rate_rps", &self.arrival_rate_rps),
            ("departure_rate_rps", &self.departure_rate_rps),
            ("error_rate_rps", &self.error_rate_rps),
            ("batch_occupancy", &self.batch_occupancy),
            ("gpu_utilization", &self.gpu_utilization),
            ("queued_tokens", &self.queued_tokens),
            ("token_arrival_rate_tps", &self.token_arrival_rate_tps),
        ];
        std::iter::once(("queue_depth", self.queue_depth.as_str()))
            .chain(
                optional
                    .into_iter()
                    .filter_map(|(name, q)| q.as_deref().map(|q| (name, q))),
            )
            .collect()
    }
}

impl SignalQueries {
    /// The PromQL that reads what a `[pools.scrape]` table's selectors read, from the Prometheus
    /// that scrapes the same pages: gauges summed (the age aggregated as `age` says,
    /// utilisation and occupancy the mean), counters as `rate()` over `window`.
    pub fn from_selectors(s: &ScrapeSelectors, age: AgeAggregation, window: &str) -> SignalQueries {
        let rate = |c: &Option<Selector>| c.as_ref().map(|c| format!("sum(rate({c}[{window}]))"));
        SignalQueries {
            queue_depth: format!("sum({})", s.queue_depth),
            oldest_age_s: s.oldest_age_s.as_ref().map(|a| age.promql(a)),
            arrival_rate_rps: rate(&s.arrivals_total),
            departure_rate_rps: rate(&s.departures_total),
            error_rate_rps: rate(&s.errors_total),
            batch_occupancy: s.batch_occupancy.as_ref().map(|b| format!("avg({b})")),
            gpu_utilization: s
                .gpu_utilization
                .as_ref()
                .map(|u| format!("avg({u})"))
                .or_else(|| {
                    s.gpu_utilization_percent
                        .as_ref()
                        .map(|u| format!("avg({u}) / 100"))
                }),
            queued_tokens: s.queued_tokens.as_ref().map(|t| format!("sum({t})")),
            token_arrival_rate_tps: rate(&s.token_arrivals_total),
        }
    }
}

/// How Headroom proves itself to the Prometheus server. Secrets are read from files on every
/// query (so a rotated token is picked up) and never logged.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum PrometheusAuth {
    #[default]
    None,
    /// `Authorization: Bearer <the file's content>` (a Kubernetes service account token, say).
    BearerTokenFile(PathBuf),
    Basic {
        username: String,
        password_file: PathBuf,
    },
}

/// One pool's Prometheus source.
#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusSource {
    /// The server's base URL: `http://prometheus.monitoring:9090`.
    pub url: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub auth: PrometheusAuth,
    /// A PEM bundle of the certificate authorities to trust for an https:// server, instead of
    /// the system's roots.
    pub ca_file: Option<PathBuf>,
    pub queries: SignalQueries,
}

/// Why a query is not usable as a signal, if it is not: PromQL that does not parse, or an
/// expression that does not evaluate to one number per instant (a range vector, a string).
pub fn check_query(query: &str) -> Result<(), String> {
    use promql_parser::parser::value::ValueType;
    let expr = promql_parser::parser::parse(query).map_err(|e| e.trim().to_string())?;
    match expr.value_type() {
        ValueType::Vector | ValueType::Scalar => Ok(()),
        other => Err(format!(
            "it evaluates to a {other}, not to a number per instant"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{AgeAggregation, ScrapeSelectors, SignalQueries, check_query};

    #[test]
    fn scrape_selectors_become_the_same_promql() {
        let selectors: ScrapeSelectors = toml::from_str(
            "queue_depth = 'vllm:num_requests_waiting{model_name=\"m\"}'\noldest_age_s = 'oldest_seconds'\narrivals_total = 'vllm:request_success_total'\ngpu_utilization_percent = 'DCGM_FI_DEV_GPU_UTIL'\n",
        )
        .unwrap();
        let queries = SignalQueries::from_selectors(&selectors, AgeAggregation::Max, "1m");
        assert_eq!(
            queries.queue_depth,
            r#"sum(vllm:num_requests_waiting{model_name="m"})"#
        );
        assert_eq!(
            queries.arrival_rate_rps.as_deref(),
            Some("sum(rate(vllm:request_success_total[1m]))")
        );
        assert_eq!(
            queries.gpu_utilization.as_deref(),
            Some("avg(DCGM_FI_DEV_GPU_UTIL) / 100")
        );
        assert_eq!(queries.oldest_age_s.as_deref(), Some("max(oldest_seconds)"));
        for (_, query) in queries.named() {
            assert_eq!(check_query(query), Ok(()), "{query}");
        }
        let p90 = SignalQueries::from_selectors(&selectors, AgeAggregation::Percentile(90), "1m");
        assert_eq!(
            p90.oldest_age_s.as_deref(),
            Some("quantile(0.90, oldest_seconds)")
        );
        assert_eq!(check_query(p90.oldest_age_s.as_deref().unwrap()), Ok(()));
    }

    #[test]
    fn queries_are_checked_as_promql() {
        assert_eq!(
            check_query(r#"sum(vllm:num_requests_waiting{model_name="llama-70b"})"#),
            Ok(())
        );
        assert_eq!(
            check_query("sum(rate(vllm:request_success_total[1m]))"),
            Ok(())
        );
        assert_eq!(check_query("max(x) or vector(0)"), Ok(()));
        assert!(
            check_query("sum(rate(x[1m])").is_err(),
            "unclosed parenthesis"
        );
        assert!(check_query("").is_err());
        let range = check_query("x[5m]").unwrap_err();
        assert!(range.contains("matrix"), "{range}");
    }
}
