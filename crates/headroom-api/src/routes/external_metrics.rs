//! The Kubernetes External Metrics API (`external.metrics.k8s.io/v1beta1`), so a model server's
//! HorizontalPodAutoscaler scales its pods on the same signals Headroom scales nodes on: the
//! queue depth and oldest age the controller read last, and the replicas it wants. One source of
//! truth: the values are the pool status the controller published, never a second scrape.
//!
//! Served on the API's own router under the bearer token (scope `metrics`) and the token's
//! accounts. The kube-apiserver's aggregation layer reaches an APIService over HTTPS with its
//! front-proxy client certificate; README "External metrics" says how to put that in front.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use headroom_engine::PoolStatus;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input::QueryParams;
use super::responses::Authenticated;
use crate::AppState;
use crate::auth::{Principal, Scope};
use crate::problem::ApiError;

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(resources))
        .routes(routes!(metric_values))
}

const GROUP_VERSION: &str = "external.metrics.k8s.io/v1beta1";

/// The metrics served, each read off a pool's status. Signal metrics are absent while the pool
/// holds for a missing or stale signal, so the HPA holds too (it scales on no value).
const METRICS: [(&str, Source); 6] = [
    ("headroom_queue_depth", Source::QueueDepth),
    ("headroom_oldest_age_seconds", Source::OldestAge),
    ("headroom_arrival_rate", Source::ArrivalRate),
    ("headroom_queued_tokens", Source::QueuedTokens),
    ("headroom_desired_replicas", Source::Desired),
    ("headroom_ready_replicas", Source::Ready),
];

#[derive(Debug, Clone, Copy)]
enum Source {
    QueueDepth,
    OldestAge,
    ArrivalRate,
    QueuedTokens,
    Desired,
    Ready,
}

impl Source {
    /// The value now and the instant it stands for.
    fn read(
        self,
        pool: &PoolStatus,
        now: headroom_core::Timestamp,
    ) -> Option<(f64, headroom_core::Timestamp)> {
        let holding_for_signal = matches!(
            pool.scaling_hold,
            Some(
                headroom_core::controller::ScalingHold::SignalMissing
                    | headroom_core::controller::ScalingHold::SignalStale
            )
        );
        let signal = pool.last_signal.as_ref().filter(|_| !holding_for_signal);
        match self {
            Source::QueueDepth => signal.map(|s| (s.queue_depth as f64, s.received_at)),
            Source::OldestAge => signal.and_then(|s| Some((s.oldest_age_s?, s.received_at))),
            Source::ArrivalRate => signal.and_then(|s| Some((s.arrival_rate_rps?, s.received_at))),
            Source::QueuedTokens => signal.and_then(|s| Some((s.queued_tokens?, s.received_at))),
            Source::Desired => Some((pool.desired as f64, now)),
            Source::Ready => Some((pool.ready as f64, now)),
        }
    }
}

/// Kubernetes' `Status`: how this API group answers a mistake, so the HPA's events and
/// `kubectl get --raw` show the message (a problem+json body would read as an unknown error).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct KubeStatus {
    kind: &'static str,
    api_version: &'static str,
    #[schema(value_type = Object)]
    metadata: serde_json::Value,
    /// Always `Failure`.
    status: &'static str,
    message: String,
    /// `BadRequest`, `Forbidden` or `NotFound`.
    reason: &'static str,
    code: u16,
}

/// A handler's mistake as a Kubernetes `Status`.
#[derive(Debug)]
struct KubeError(ApiError);

impl From<ApiError> for KubeError {
    fn from(e: ApiError) -> KubeError {
        KubeError(e)
    }
}

impl axum::response::IntoResponse for KubeError {
    fn into_response(self) -> axum::response::Response {
        use axum::http::StatusCode;
        let (code, reason, message) = match self.0 {
            ApiError::BadRequest { detail, .. } => (StatusCode::BAD_REQUEST, "BadRequest", detail),
            ApiError::Forbidden(detail) => (StatusCode::FORBIDDEN, "Forbidden", detail),
            ApiError::NotFound(detail) => (StatusCode::NOT_FOUND, "NotFound", detail),
            other => return other.into_response(),
        };
        let status = KubeStatus {
            kind: "Status",
            api_version: "v1",
            metadata: serde_json::json!({}),
            status: "Failure",
            message,
            reason,
            code: code.as_u16(),
        };
        (code, Json(status)).into_response()
    }
}

/// Kubernetes' `APIResourceList`: what this group-version serves (the aggregator's discovery).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct ApiResourceList {
    kind: &'static str,
    api_version: &'static str,
    group_version: &'static str,
    resources: Vec<ApiResource>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct ApiResource {
    name: &'static str,
    singular_name: &'static str,
    namespaced: bool,
    kind: &'static str,
    verbs: Vec<&'static str>,
}

#[utoipa::path(
    get,
    path = "/apis/external.metrics.k8s.io/v1beta1",
    responses(
        (status = 200, description = "The external metrics served (Kubernetes discovery)", body = ApiResourceList),
        (status = 403, description = "The token lacks the metrics scope", body = KubeStatus),
        Authenticated,
    )
)]
async fn resources(
    axum::Extension(principal): axum::Extension<Principal>,
) -> Result<Json<ApiResourceList>, KubeError> {
    principal.require(Scope::Metrics)?;
    Ok(Json(ApiResourceList {
        kind: "APIResourceList",
        api_version: "v1",
        group_version: GROUP_VERSION,
        resources: METRICS
            .iter()
            .map(|(name, _)| ApiResource {
                name,
                singular_name: "",
                namespaced: true,
                kind: "ExternalMetricValueList",
                verbs: vec!["get"],
            })
            .collect(),
    }))
}

/// Kubernetes' `ExternalMetricValueList`: one value per pool the selector matches.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct ExternalMetricValueList {
    kind: &'static str,
    api_version: &'static str,
    #[schema(value_type = Object)]
    metadata: serde_json::Value,
    items: Vec<ExternalMetricValue>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct ExternalMetricValue {
    metric_name: &'static str,
    /// `pool` and `account`: what a selector matches on.
    metric_labels: BTreeMap<&'static str, String>,
    #[schema(value_type = String, format = DateTime)]
    timestamp: headroom_core::Timestamp,
    /// A Kubernetes quantity: an integer (`"40"`) or thousandths (`"2500m"`).
    value: String,
}

#[utoipa::path(
    get,
    path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}",
    params(
        ("namespace" = String, Path, description = "The HPA's namespace; pools are not namespaced, so any"),
        ("metric" = String, Path, description = "headroom_queue_depth, headroom_oldest_age_seconds, headroom_arrival_rate, headroom_queued_tokens, headroom_desired_replicas or headroom_ready_replicas"),
        (
            "labelSelector" = Option<String>,
            Query,
            description = "Kubernetes label selector on `pool` and `account`, e.g. `pool=llama-70b-interactive`"
        )
    ),
    responses(
        (status = 200, description = "The metric's value per matching pool; none for a pool holding on a missing signal", body = ExternalMetricValueList),
        (status = 400, description = "A malformed label selector or query", body = KubeStatus),
        (status = 403, description = "The token lacks the metrics scope", body = KubeStatus),
        (status = 404, description = "No such external metric", body = KubeStatus),
        Authenticated,
    )
)]
async fn metric_values(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    axum::extract::Path((_namespace, metric)): axum::extract::Path<(String, String)>,
    query: QueryParams,
) -> Result<Json<ExternalMetricValueList>, KubeError> {
    principal.require(Scope::Metrics)?;
    let (name, source) = METRICS
        .iter()
        .find(|(name, _)| *name == metric)
        .copied()
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no external metric {metric:?}; GET /apis/{GROUP_VERSION} lists them"
            ))
        })?;
    let axum::extract::Query(params) =
        query.map_err(|_| ApiError::bad("invalid-selector", "the query string is malformed"))?;
    if let Some(unknown) = params
        .keys()
        .find(|k| !["labelSelector", "metricLabelSelector"].contains(&k.as_str()))
    {
        return Err(ApiError::bad(
            "invalid-selector",
            format!("unknown query parameter {unknown:?}; use labelSelector"),
        )
        .into());
    }
    let selector_text = params
        .get("labelSelector")
        .or(params.get("metricLabelSelector"));
    let selector = Selector::parse(selector_text.map_or("", String::as_str))
        .map_err(|e| ApiError::bad("invalid-selector", format!("labelSelector: {e}")))?;
    let now = state.engine.clock().now();
    let items = state
        .engine
        .pool_statuses()
        .into_iter()
        .filter(|p| p.account.parse().is_ok_and(|a| principal.acts_for(&a)))
        .filter_map(|pool| {
            let labels = BTreeMap::from([
                ("account", pool.account.clone()),
                ("pool", pool.name.to_string()),
            ]);
            if !selector.matches(&labels) {
                return None;
            }
            let (value, at) = source.read(&pool, now)?;
            Some(ExternalMetricValue {
                metric_name: name,
                metric_labels: labels,
                timestamp: at,
                value: quantity(value),
            })
        })
        .collect();
    Ok(Json(ExternalMetricValueList {
        kind: "ExternalMetricValueList",
        api_version: GROUP_VERSION,
        metadata: serde_json::json!({}),
        items,
    }))
}

/// A value as a Kubernetes quantity: whole numbers as they are, others in thousandths (what the
/// HPA compares exactly), never a float's exponent.
fn quantity(value: f64) -> String {
    let milli = (value * 1000.0).round();
    if milli % 1000.0 == 0.0 {
        format!("{}", (milli / 1000.0) as i64)
    } else {
        format!("{}m", milli as i64)
    }
}

/// A Kubernetes label selector: requirements joined by commas, each `key=value`, `key==value`,
/// `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key` or `!key`.
#[derive(Debug, Default, PartialEq)]
struct Selector(Vec<Requirement>);

#[derive(Debug, PartialEq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    Absent(String),
}

impl Selector {
    fn parse(text: &str) -> Result<Selector, String> {
        let mut out = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            // A comma inside parentheses belongs to a set, not between requirements.
            let end = split_point(rest);
            let (item, tail) = rest.split_at(end);
            rest = tail.strip_prefix(',').unwrap_or(tail).trim_start();
            out.push(Requirement::parse(item.trim())?);
        }
        Ok(Selector(out))
    }

    fn matches(&self, labels: &BTreeMap<&str, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::In(k, set) => labels.get(k.as_str()).is_some_and(|v| set.contains(v)),
            Requirement::NotIn(k, set) => labels.get(k.as_str()).is_none_or(|v| !set.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k.as_str()),
            Requirement::Absent(k) => !labels.contains_key(k.as_str()),
        })
    }
}

/// Where the first requirement of `text` ends: its first comma outside parentheses.
fn split_point(text: &str) -> usize {
    let mut depth = 0i32;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => return i,
            _ => {}
        }
    }
    text.len()
}

impl Requirement {
    fn parse(item: &str) -> Result<Requirement, String> {
        let key = |k: &str| -> Result<String, String> {
            let k = k.trim();
            let valid = !k.is_empty()
                && k.len() <= 63
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
            if valid {
                Ok(k.to_string())
            } else {
                Err(format!("{k:?} is not a label key"))
            }
        };
        let set = |s: &str| -> Result<Vec<String>, String> {
            let inner = s
                .trim()
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(|| format!("{item:?}: a set is written (a,b)"))?;
            Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
        };
        if let Some((k, v)) = item.split_once("!=") {
            return Ok(Requirement::NotIn(key(k)?, vec![v.trim().to_string()]));
        }
        if let Some((k, v)) = item.split_once("==").or_else(|| item.split_once('=')) {
            return Ok(Requirement::In(key(k)?, vec![v.trim().to_string()]));
        }
        if let Some((k, s)) = item.split_once(" notin ") {
            return Ok(Requirement::NotIn(key(k)?, set(s)?));
        }
        if let Some((k, s)) = item.split_once(" in ") {
            return Ok(Requirement::In(key(k)?, set(s)?));
        }
        match item.strip_prefix('!') {
            Some(k) => Ok(Requirement::Absent(key(k)?)),
            None => Ok(Requirement::Exists(key(item)?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pool: &str, account: &str) -> BTreeMap<&'static str, String> {
        BTreeMap::from([("pool", pool.to_string()), ("account", account.to_string())])
    }

    #[test]
    fn selectors_read_as_kubernetes_writes_them() {
        let a = labels("llama-70b", "ml");
        let b = labels("mistral-7b", "research");
        for (text, want_a, want_b) in [
            ("", true, true),
            ("pool=llama-70b", true, false),
            ("pool==llama-70b", true, false),
            ("pool!=llama-70b", false, true),
            ("pool in (llama-70b, mistral-7b)", true, true),
            ("pool notin (llama-70b)", false, true),
            ("account=research,pool", false, true),
            ("!pool", false, false),
            ("zone=us-east-1a", false, false),
        ] {
            let s = Selector::parse(text).unwrap();
            assert_eq!((s.matches(&a), s.matches(&b)), (want_a, want_b), "{text}");
        }
        for bad in ["pool in llama", "=x", "po ol=x"] {
            assert!(Selector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quantities_are_whole_or_thousandths() {
        assert_eq!(quantity(40.0), "40");
        assert_eq!(quantity(2.5), "2500m");
        assert_eq!(quantity(0.0004), "0");
        assert_eq!(quantity(1e12), "1000000000000");
    }
}
