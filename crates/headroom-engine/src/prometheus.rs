//! Signals read from a Prometheus server with PromQL (`[pools.signals] source = "prometheus"`),
//! as KEDA's Prometheus scaler and the Prometheus adapter read them: one instant query per
//! signal through the HTTP API (`GET /api/v1/query`).
//!
//! Everything here but [`read`] is pure: the queries are checked with a PromQL parser when the
//! configuration loads, and an answer is turned into a number or into the reason it cannot be
//! used. A reason never becomes a number: an empty result, NaN, several series, a sample older
//! than the pool's `signal_max_age`, a server that is down or answers an error all fail the read,
//! and the pool holds on its last good signal until that is stale, saying why.

use std::time::Duration;

use headroom_config::prometheus::{PrometheusAuth, PrometheusSource};
use headroom_config::{Config, ConfigErrors};
use headroom_core::Timestamp;
use serde::Deserialize;

use crate::views::SignalInput;

/// Reads each file `source` names (the bearer token, the basic-auth password, the CA bundle)
/// once, as a process does before it starts reading signals: the first that is missing,
/// unreadable or empty (or a CA file with no certificate), as the key that names it and why.
/// What a secret holds is never in the answer.
pub fn check_files(source: &PrometheusSource) -> Result<(), (&'static str, String)> {
    let secret = |key: &'static str, path: &std::path::Path| match std::fs::read_to_string(path) {
        Err(e) => Err((key, format!("cannot read {}: {e}", path.display()))),
        Ok(text) if text.trim().is_empty() => Err((key, format!("{} is empty", path.display()))),
        Ok(_) => Ok(()),
    };
    match &source.auth {
        PrometheusAuth::None => {}
        PrometheusAuth::BearerTokenFile(path) => secret("bearer_token_file", path)?,
        PrometheusAuth::Basic { password_file, .. } => {
            secret("basic_auth_password_file", password_file)?;
        }
    }
    if let Some(ca_file) = &source.ca_file {
        crate::http::ca_certificates(ca_file).map_err(|why| ("ca_file", why))?;
    }
    Ok(())
}

/// Reads the credential and CA files every `[pools.signals]` source of `config` names, as
/// `serve` and `replay` do before they start (`config check` does not: the files usually exist
/// only where the server runs): each that is missing, unreadable or empty is one line naming its
/// key. The token and password are read again on every query, so a rotation is picked up.
pub fn check_signal_files(config: &Config, origin: &str) -> Result<(), ConfigErrors> {
    let lines: Vec<String> = config
        .pools
        .iter()
        .enumerate()
        .filter_map(|(i, pool)| {
            let (key, why) = check_files(config.prometheus.get(&pool.name)?).err()?;
            Some(format!(
                "{origin}: key `pools[{i}].signals.{key}`: {why}; fix: point it at the file that holds it (a mounted Secret, say), or remove the key"
            ))
        })
        .collect();
    if lines.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(lines))
    }
}

/// The API's answer to an instant query, as documented at
/// <https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries>.
#[derive(Debug, Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<AnswerData>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum AnswerData {
    Vector(Vec<VectorSample>),
    Scalar(Sample),
    Matrix(Vec<MatrixSeries>),
    String(serde::de::IgnoredAny),
}

#[derive(Debug, Deserialize)]
struct VectorSample {
    #[serde(default)]
    metric: serde_json::Map<String, serde_json::Value>,
    value: Sample,
}

#[derive(Debug, Deserialize)]
struct MatrixSeries {
    #[serde(default)]
    metric: serde_json::Map<String, serde_json::Value>,
    values: Vec<Sample>,
}

/// `[<unix seconds>, "<value>"]`: the value is a string so that NaN and ±Inf survive JSON.
#[derive(Debug, Deserialize)]
struct Sample(f64, String);

/// The data of a successful answer, or why the answer is not one: Prometheus's own error (its
/// type and message), or the HTTP status when the body is not Prometheus's JSON.
fn answer_data(status: u16, body: &str) -> Result<Option<AnswerData>, String> {
    let answer: Answer = match serde_json::from_str(body) {
        Ok(answer) => answer,
        Err(_) if !(200..300).contains(&status) => {
            return Err(format!("Prometheus answered HTTP {status}"));
        }
        Err(e) => return Err(format!("the answer is not Prometheus's JSON: {e}")),
    };
    if answer.status != "success" {
        return Err(format!(
            "Prometheus answered HTTP {status}, {}: {}",
            answer.error_type.as_deref().unwrap_or("error"),
            answer.error.as_deref().unwrap_or("no reason given")
        ));
    }
    Ok(answer.data)
}

/// The one number an instant query answered, or why there is none. `status` is the HTTP status
/// and `body` what the server sent; `now` and `max_age` judge the sample's timestamp.
pub fn value_of(status: u16, body: &str, now: Timestamp, max_age: Duration) -> Result<f64, String> {
    let data = answer_data(status, body)?;
    let sample = match data {
        Some(AnswerData::Scalar(sample)) => sample,
        Some(AnswerData::Vector(mut series)) => match series.len() {
            0 => {
                return Err(
                    "the query returned no series (append `or vector(0)` if none means zero)"
                        .into(),
                );
            }
            1 => series.remove(0).value,
            n => {
                let first = serde_json::Value::Object(series.swap_remove(0).metric);
                return Err(format!(
                    "the query returned {n} series (one is {first}); aggregate it with sum() or max()"
                ));
            }
        },
        Some(AnswerData::Matrix(_) | AnswerData::String(_)) | None => {
            return Err("the query did not return an instant vector or a scalar".into());
        }
    };
    let Sample(at, text) = sample;
    let value: f64 = text
        .parse()
        .map_err(|_| format!("the value {text:?} is not a number"))?;
    if !value.is_finite() {
        return Err(format!("the value is {text}"));
    }
    let sampled_ms = (at * 1000.0).round() as i64;
    let age_ms = now.timestamp_millis() - sampled_ms;
    if age_ms > max_age.as_millis() as i64 {
        return Err(format!(
            "the sample is {}s old (max {}s)",
            age_ms / 1000,
            max_age.as_secs()
        ));
    }
    Ok(value)
}

/// The most steps asked of Prometheus in one range query (it refuses more than 11,000 points
/// per series).
const MAX_STEPS_PER_QUERY: i64 = 10_000;

/// What a range query (`/api/v1/query_range`) answered: `(unix milliseconds, value)` at each
/// step that had a finite value. No series is a history with no points; several series are
/// refused, as for an instant query.
pub fn range_points(status: u16, body: &str) -> Result<Vec<(i64, f64)>, String> {
    let data = answer_data(status, body)?;
    let Some(AnswerData::Matrix(mut series)) = data else {
        return Err("a range query did not return a matrix".into());
    };
    match series.len() {
        0 => Ok(Vec::new()),
        1 => Ok(series
            .remove(0)
            .values
            .into_iter()
            .filter_map(|Sample(at, text)| {
                let value: f64 = text.parse().ok()?;
                value
                    .is_finite()
                    .then(|| ((at * 1000.0).round() as i64, value))
            })
            .collect()),
        n => {
            let first = serde_json::Value::Object(series.swap_remove(0).metric);
            Err(format!(
                "the query returned {n} series (one is {first}); aggregate it with sum() or max()"
            ))
        }
    }
}

/// The history of `query` from `from` to `to` every `step`, read in as many range queries as
/// Prometheus's per-query limit needs (blocking): value by unix milliseconds.
pub fn read_range(
    source: &PrometheusSource,
    query: &str,
    from: Timestamp,
    to: Timestamp,
    step: Duration,
) -> Result<std::collections::BTreeMap<i64, f64>, String> {
    let step_ms = i64::try_from(step.as_millis()).unwrap_or(i64::MAX).max(1);
    let (mut start, end) = (from.timestamp_millis(), to.timestamp_millis());
    let mut points = std::collections::BTreeMap::new();
    let seconds = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    let step_text = format!("{:.3}", step_ms as f64 / 1000.0);
    while start <= end {
        let chunk_end = end.min(start.saturating_add(step_ms * (MAX_STEPS_PER_QUERY - 1)));
        let (status, body) = crate::http::prometheus_get(
            source,
            "/api/v1/query_range",
            &[
                ("query", query),
                ("start", &seconds(start)),
                ("end", &seconds(chunk_end)),
                ("step", &step_text),
            ],
        )?;
        points.extend(range_points(status, &body)?);
        start = chunk_end + step_ms;
    }
    Ok(points)
}

/// A pool's history as signals: one per step, `None` where `queue_depth` had no value (the pool
/// would have had no signal then). `histories` holds each query's points, in
/// [`SignalQueries::named`] order.
pub fn signals_over(
    histories: &[(&str, std::collections::BTreeMap<i64, f64>)],
    steps: impl IntoIterator<Item = i64>,
) -> Vec<(i64, Option<SignalInput>)> {
    steps
        .into_iter()
        .map(|at| {
            let answers: Vec<(&str, Result<f64, String>)> = histories
                .iter()
                .filter_map(|(name, points)| points.get(&at).map(|v| (*name, Ok(*v))))
                .collect();
            let has_queue = answers.iter().any(|(name, _)| *name == "queue_depth");
            (at, has_queue.then(|| signal_from(&answers).ok()).flatten())
        })
        .collect()
}

/// Builds the pool's signal from each query's answer (in [`SignalQueries::named`] order); the
/// first query that failed fails the whole read, named.
pub fn signal_from(answers: &[(&str, Result<f64, String>)]) -> Result<SignalInput, String> {
    let mut signal = SignalInput::default();
    for (name, answer) in answers {
        let value = answer
            .as_ref()
            .map_err(|why| format!("{name}: {why}"))?
            .max(0.0);
        match *name {
            "queue_depth" => signal.queue_depth = value.round() as u64,
            "oldest_age_s" => signal.oldest_age_s = Some(value),
            "arrival_rate_rps" => signal.arrival_rate_rps = Some(value),
            "departure_rate_rps" => signal.departure_rate_rps = Some(value),
            "error_rate_rps" => signal.error_rate_rps = Some(value),
            "batch_occupancy" => signal.batch_occupancy = Some(value.min(1.0)),
            "gpu_utilization" => signal.gpu_utilization = Some(value.min(1.0)),
            "queued_tokens" => signal.queued_tokens = Some(value),
            "token_arrival_rate_tps" => signal.token_arrival_rate_tps = Some(value),
            other => return Err(format!("{other} is not a signal")),
        }
    }
    Ok(signal)
}

/// Reads every query of `source` once (blocking: run it off the async runtime) and builds the
/// signal, or says why it could not.
pub fn read(
    source: &PrometheusSource,
    now: impl Fn() -> Timestamp,
    max_age: Duration,
) -> Result<SignalInput, String> {
    let queries = source.queries.named();
    let mut answers = Vec::with_capacity(queries.len());
    for (name, query) in queries {
        let answer = crate::http::prometheus_get(source, "/api/v1/query", &[("query", query)])
            .and_then(|(status, body)| value_of(status, &body, now(), max_age));
        let failed = answer.is_err();
        answers.push((name, answer));
        if failed {
            break;
        }
    }
    signal_from(&answers)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use headroom_core::Timestamp;

    use super::{range_points, signal_from, signals_over, value_of};

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const AT: f64 = 1_796_115_600.0; // 2026-12-01T09:00:00Z

    fn vector(values: &[&str]) -> String {
        let series: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!(r#"{{"metric":{{"pod":"p{i}"}},"value":[{AT},"{v}"]}}"#))
            .collect();
        format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
            series.join(",")
        )
    }

    #[test]
    fn one_series_or_a_scalar_is_a_value() {
        let now = t("2026-12-01T09:00:02Z");
        let max = Duration::from_secs(30);
        assert_eq!(value_of(200, &vector(&["12"]), now, max), Ok(12.0));
        let scalar = format!(
            r#"{{"status":"success","data":{{"resultType":"scalar","result":[{AT},"0.5"]}}}}"#
        );
        assert_eq!(value_of(200, &scalar, now, max), Ok(0.5));
    }

    #[test]
    fn every_unusable_answer_says_why() {
        let now = t("2026-12-01T09:00:02Z");
        let max = Duration::from_secs(30);
        let why = |status, body: &str, now| value_of(status, body, now, max).unwrap_err();
        assert!(why(200, &vector(&[]), now).contains("no series"));
        assert!(why(200, &vector(&["1", "2"]), now).contains("2 series"));
        assert!(why(200, &vector(&["NaN"]), now).contains("NaN"));
        assert!(why(200, &vector(&["+Inf"]), now).contains("+Inf"));
        assert!(why(200, &vector(&["3"]), t("2026-12-01T09:01:00Z")).contains("60s old (max 30s)"));
        let error = r#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#;
        let said = why(400, error, now);
        assert!(
            said.contains("HTTP 400") && said.contains("parse error at char 5"),
            "{said}"
        );
        assert_eq!(
            why(503, "Service Unavailable", now),
            "Prometheus answered HTTP 503"
        );
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(why(200, matrix, now).contains("instant vector"));
    }

    #[test]
    fn a_signal_needs_every_query_and_names_the_one_that_failed() {
        let ok = signal_from(&[
            ("queue_depth", Ok(11.6)),
            ("oldest_age_s", Ok(4.0)),
            ("gpu_utilization", Ok(1.3)),
        ])
        .unwrap();
        assert_eq!(
            (ok.queue_depth, ok.oldest_age_s, ok.gpu_utilization),
            (12, Some(4.0), Some(1.0))
        );
        let failed = signal_from(&[
            ("queue_depth", Ok(3.0)),
            ("arrival_rate_rps", Err("the value is NaN".into())),
        ])
        .unwrap_err();
        assert_eq!(failed, "arrival_rate_rps: the value is NaN");
    }

    #[test]
    fn a_range_answer_is_a_history_and_gaps_stay_gaps() {
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"matrix","result":[{{"metric":{{}},"values":[[{AT},"3"],[{},"NaN"],[{},"5"]]}}]}}}}"#,
            AT + 15.0,
            AT + 30.0
        );
        let at = (AT * 1000.0) as i64;
        assert_eq!(
            range_points(200, &body),
            Ok(vec![(at, 3.0), (at + 30_000, 5.0)])
        );
        let empty = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert_eq!(range_points(200, empty), Ok(vec![]));
        let two = r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"1"},"values":[]},{"metric":{"a":"2"},"values":[]}]}}"#;
        assert!(range_points(200, two).unwrap_err().contains("2 series"));
        let histories = [
            ("queue_depth", [(at, 3.0)].into_iter().collect()),
            (
                "arrival_rate_rps",
                [(at, 2.0), (at + 15_000, 4.0)].into_iter().collect(),
            ),
        ];
        let signals = signals_over(&histories, [at, at + 15_000]);
        assert_eq!(signals[0].1.as_ref().map(|s| s.queue_depth), Some(3));
        assert_eq!(signals[1].1, None, "no queue depth: no signal at all");
    }
}
