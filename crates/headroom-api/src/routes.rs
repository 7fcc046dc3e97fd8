//! Routes and handlers.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use headroom_core::{
    AccountName, Budget, BudgetPeriod, HardAction, Money, PoolName, Priority, RequestId, Timestamp,
};
use headroom_engine::{PoolStatus, SignalInput};
use headroom_ledger::NewCapacityRequest;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::auth::{Principal, Scope};
use crate::problem::ApiError;
use crate::{AppState, MAX_BODY_BYTES, Problem};

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi_json))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/capacity-requests", post(create_capacity_request))
        .route(
            "/v1/capacity-requests/{id}",
            get(get_capacity_request).delete(cancel_capacity_request),
        )
        .route("/v1/pools", get(list_pools))
        .route("/v1/pools/{name}", get(get_pool))
        .route("/v1/pools/{name}/signals", post(push_signal))
        .route("/v1/pools/{name}/ledger", get(pool_ledger))
        .route("/v1/pools/{name}/decisions", get(pool_decisions))
        .route("/v1/pools/{name}/admission", get(pool_admission))
        .route("/v1/budgets", get(list_budgets))
        .route("/v1/alerts", get(list_alerts))
        .route("/v1/offerings", get(list_offerings))
        .route("/v1/reports/budget", get(budget_report))
        .route("/v1/budgets/{account}", get(get_budget).put(put_budget))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::authenticate,
        ))
        .layer(
            tower::ServiceBuilder::new()
                .layer(axum::error_handling::HandleErrorLayer::new(
                    |_: tower::BoxError| async { ApiError::Timeout },
                ))
                .timeout(state.limits.request_timeout),
        )
        .with_state(state)
}

async fn not_found() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not-found",
        "Not found",
        "no such endpoint; see GET /v1/pools and POST /v1/capacity-requests",
    )
}

async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "Method not allowed",
        "this endpoint does not accept that HTTP method",
    )
}

#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "Alive", body = String)))]
async fn healthz() -> &'static str {
    "ok"
}

#[utoipa::path(get, path = "/readyz", responses((status = 200, description = "The ledger answers", body = String), (status = 503, description = "The ledger does not", body = Problem, content_type = "application/problem+json")))]
async fn readyz(State(state): State<AppState>) -> Result<&'static str, ApiError> {
    state.engine.ledger().ping().await?;
    Ok("ready")
}

/// Reads a JSON body: checks the media type, the size, and the shape, in that order.
fn json_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    match media_type.as_deref() {
        Some("application/json") => {}
        Some(t) if t.starts_with("application/") && t.ends_with("+json") => {}
        _ => {
            return Err(ApiError::UnsupportedMediaType(
                "send the body as JSON with Content-Type: application/json".into(),
            ));
        }
    }
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(format!("the body exceeds {MAX_BODY_BYTES} bytes"))
        } else {
            ApiError::bad("unreadable-body", "the request body could not be read")
        }
    })?;
    let malformed = |e: serde_json::Error| {
        ApiError::bad(
            "malformed-body",
            format!("the body is not valid for this endpoint: {e}"),
        )
    };
    // Objects only: serde would otherwise also read a struct from a JSON array.
    let value: serde_json::Value = serde_json::from_slice(&body).map_err(malformed)?;
    if !value.is_object() {
        return Err(ApiError::bad(
            "malformed-body",
            "the body is not valid for this endpoint: expected a JSON object",
        ));
    }
    serde_json::from_value(value).map_err(malformed)
}

/// The pool a path names, if it exists and the caller acts for its account (else 404, so a
/// token cannot learn what other accounts run).
fn pool_from_path(
    state: &AppState,
    principal: &Principal,
    path: Result<Path<String>, PathRejection>,
) -> Result<PoolName, ApiError> {
    let Path(raw) = path
        .map_err(|_| ApiError::bad("bad-path", "the pool name in the path is not valid UTF-8"))?;
    raw.parse::<PoolName>()
        .ok()
        .filter(|name| {
            state
                .engine
                .config()
                .pool(name)
                .is_some_and(|p| principal.acts_for(&p.account))
        })
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no pool named {:?}; GET /v1/pools lists them",
                truncate(&raw)
            ))
        })
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

/// A client's ask: this many more ready replicas of a pool.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateCapacityRequest {
    pool: String,
    replicas: i64,
    #[serde(default)]
    priority: Option<String>,
}

const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

#[utoipa::path(post, path = "/v1/capacity-requests", request_body = CreateCapacityRequest, params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first request")), responses((status = 201, description = "Created", body = Object), (status = 200, description = "The request this Idempotency-Key already made", body = Object), (status = 409, description = "Idempotency-Key reused with another body", body = Problem, content_type = "application/problem+json"), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
#[tracing::instrument(name = "api.create_capacity_request", skip_all)]
async fn create_capacity_request(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let input: CreateCapacityRequest = json_body(&headers, body)?;
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => {
            let key = v
                .to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= MAX_IDEMPOTENCY_KEY_LEN)
                .ok_or_else(|| ApiError::bad("bad-idempotency-key", format!("Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters")))?;
            Some(key.to_string())
        }
    };
    let pool_name: PoolName = input
        .pool
        .parse()
        .map_err(|e| ApiError::bad("invalid-pool", format!("pool: {e}")))?;
    let config = state.engine.config();
    let pool = config.pool(&pool_name).ok_or_else(|| {
        ApiError::bad(
            "unknown-pool",
            format!("pool: no pool named {pool_name}; GET /v1/pools lists them"),
        )
    })?;
    principal.require(Scope::Capacity)?;
    if !principal.acts_for(&pool.account) {
        return Err(ApiError::Forbidden(format!(
            "this token cannot charge account {}, which pool {} charges",
            pool.account, pool.name
        )));
    }
    if input.replicas < 1 {
        return Err(ApiError::bad(
            "invalid-replicas",
            format!("replicas: must be at least 1, got {}", input.replicas),
        ));
    }
    if input.replicas > pool.max_replicas as i64 {
        return Err(ApiError::bad(
            "invalid-replicas",
            format!(
                "replicas: {} is above pool {}'s max_replicas of {}",
                input.replicas, pool.name, pool.max_replicas
            ),
        ));
    }
    let priority = match input.priority.as_deref() {
        None => Priority::default(),
        Some(p) => Priority::parse(p)
            .map_err(|e| ApiError::bad("invalid-priority", format!("priority: {e}")))?,
    };
    let new = NewCapacityRequest {
        pool: pool_name,
        replicas: input.replicas as u32,
        priority,
        idempotency_key,
        at: state.engine.clock().now(),
    };
    let ledger = state.engine.ledger();
    let (request, created) = ledger.record_capacity_request(&new).await?;
    let outcome = if created {
        state
            .engine
            .remember_request_span(&request.id, tracing::Span::current());
        state.engine.wake();
        // Nothing can have happened to a request this new: skip three reads on the hot path.
        headroom_ledger::RequestOutcome {
            request,
            delivered: 0,
            state: headroom_core::RequestState::Pending,
            refusals: Vec::new(),
        }
    } else {
        ledger
            .capacity_request(&request.id)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("no capacity request {}", request.id)))?
    };
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let location = format!("/v1/capacity-requests/{}", outcome.request.id);
    let warnings = state
        .engine
        .pool_status(&outcome.request.pool)
        .map(|s| limit_warnings(&s, outcome.request.replicas))
        .unwrap_or_default();
    let mut response = (status, Json(CreatedView { outcome, warnings })).into_response();
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// A created (or replayed) capacity request, with what already limits its pool.
#[derive(Debug, serde::Serialize)]
struct CreatedView {
    #[serde(flatten)]
    outcome: headroom_ledger::RequestOutcome,
    /// Conditions of the pool that will clamp or delay this request (the HPA's ScalingLimited,
    /// made visible up front); the refusals themselves appear on the request once recorded.
    warnings: Vec<String>,
}

fn limit_warnings(status: &PoolStatus, replicas: u32) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(why) = &status.halted {
        warnings.push(format!(
            "pool {} is halted and launches nothing: {why}",
            status.name
        ));
    }
    let active = status.requested + status.starting + status.ready;
    let room = status.max_replicas.saturating_sub(active);
    if replicas > room {
        warnings.push(format!(
            "pool {} has room for {room} more replicas below max_replicas {}: the rest will be refused (max_replicas)",
            status.name, status.max_replicas
        ));
    }
    if let Some(clamp) = &status.clamped {
        warnings.push(format!(
            "pool {} is clamped: {} replicas refused for {} at the last step",
            status.name, clamp.replicas, clamp.reason
        ));
    }
    warnings
}

fn request_id_from_path(path: Result<Path<String>, PathRejection>) -> Result<RequestId, ApiError> {
    let Path(raw) = path
        .map_err(|_| ApiError::bad("bad-path", "the request id in the path is not valid UTF-8"))?;
    let valid = raw.len() <= 64 && raw.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !valid {
        return Err(ApiError::NotFound(format!(
            "no capacity request {:?}",
            truncate(&raw)
        )));
    }
    Ok(RequestId(raw))
}

/// A capacity request with its requested-versus-delivered accounting.
#[derive(Debug, serde::Serialize)]
struct RequestView {
    #[serde(flatten)]
    outcome: headroom_ledger::RequestOutcome,
    fill: headroom_ledger::derive::Fill,
}

/// Whether the caller acts for the account of the request's pool.
fn visible_request(
    state: &AppState,
    principal: &Principal,
    request: &headroom_core::CapacityRequest,
) -> bool {
    state
        .engine
        .config()
        .pool(&request.pool)
        .is_some_and(|p| principal.acts_for(&p.account))
}

#[utoipa::path(get, path = "/v1/capacity-requests/{id}", params(("id" = String, Path)), responses((status = 200, description = "Requested versus delivered, state, refusals, fill", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn get_capacity_request(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = request_id_from_path(path)?;
    if !(principal.has(Scope::Capacity) || principal.has(Scope::Reports)) {
        principal.require(Scope::Capacity)?;
    }
    let ledger = state.engine.ledger();
    let outcome = ledger
        .capacity_request(&id)
        .await?
        .filter(|o| visible_request(&state, &principal, &o.request))
        .ok_or_else(|| ApiError::NotFound(format!("no capacity request {id}")))?;
    let events = ledger.pool_events(&outcome.request.pool).await?;
    let fill = headroom_ledger::derive::fill(std::slice::from_ref(&outcome), &events);
    Ok(Json(RequestView { outcome, fill }).into_response())
}

#[utoipa::path(delete, path = "/v1/capacity-requests/{id}", params(("id" = String, Path)), responses((status = 200, description = "Cancelled", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn cancel_capacity_request(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = request_id_from_path(path)?;
    principal.require(Scope::Capacity)?;
    let ledger = state.engine.ledger();
    ledger
        .capacity_request(&id)
        .await?
        .filter(|o| visible_request(&state, &principal, &o.request))
        .ok_or_else(|| ApiError::NotFound(format!("no capacity request {id}")))?;
    let outcome = ledger
        .cancel_capacity_request(&id, state.engine.clock().now())
        .await?;
    state.engine.wake();
    Ok(Json(outcome).into_response())
}

#[derive(Debug, serde::Serialize)]
struct PoolList {
    pools: Vec<PoolStatus>,
}

#[utoipa::path(get, path = "/v1/pools", responses((status = 200, description = "The pools the token acts for", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn list_pools(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> Json<PoolList> {
    let pools = state
        .engine
        .pool_statuses()
        .into_iter()
        .filter(|p| p.account.parse().is_ok_and(|a| principal.acts_for(&a)))
        .collect();
    Json(PoolList { pools })
}

#[utoipa::path(get, path = "/v1/pools/{name}", params(("name" = String, Path)), responses((status = 200, description = "Counts, desired, hold and limit conditions", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn get_pool(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<PoolStatus>, ApiError> {
    let name = pool_from_path(&state, &principal, path)?;
    state
        .engine
        .pool_status(&name)
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no pool named {name}")))
}

/// What the serving layer should admit for one pool, per priority tier.
#[derive(Debug, serde::Serialize)]
struct AdmissionView {
    pool: PoolName,
    /// True while any tier is shed.
    shedding: bool,
    ready: u32,
    /// Ready replicas measured demand calls for.
    demand: u32,
    /// Lowest tier first: `{priority, admit, retry_after_s}`.
    tiers: Vec<headroom_core::admission::TierAdmission>,
}

#[utoipa::path(get, path = "/v1/pools/{name}/admission", params(("name" = String, Path)), responses((status = 200, description = "Admit or shed, per priority tier, with retry_after_s for shed tiers", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn pool_admission(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<AdmissionView>, ApiError> {
    let name = pool_from_path(&state, &principal, path)?;
    let status = state
        .engine
        .pool_status(&name)
        .ok_or_else(|| ApiError::NotFound(format!("no pool named {name}")))?;
    Ok(Json(AdmissionView {
        pool: name,
        shedding: status.admission.iter().any(|t| !t.admit),
        ready: status.ready,
        demand: status.demand,
        tiers: status.admission,
    }))
}

/// A pool's signals at one instant; only `queue_depth` is required.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SignalBody {
    queue_depth: i64,
    oldest_age_s: Option<f64>,
    #[serde(default)]
    oldest_age_by_class_s: std::collections::BTreeMap<String, f64>,
    arrival_rate_rps: Option<f64>,
    departure_rate_rps: Option<f64>,
    error_rate_rps: Option<f64>,
    batch_occupancy: Option<f64>,
    gpu_utilization: Option<f64>,
}

/// A non-negative finite number, or a one-line problem naming the field.
fn non_negative(field: &str, value: Option<f64>, max: f64) -> Result<Option<f64>, ApiError> {
    match value {
        Some(v) if !(v.is_finite() && (0.0..=max).contains(&v)) => Err(ApiError::bad(
            "invalid-signal",
            format!("{field}: must be a number from 0 to {max}"),
        )),
        other => Ok(other),
    }
}

#[utoipa::path(post, path = "/v1/pools/{name}/signals", params(("name" = String, Path)), request_body = SignalBody, responses((status = 202, description = "Accepted"), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn push_signal(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let name = pool_from_path(&state, &principal, path)?;
    principal.require(Scope::Signals)?;
    let input: SignalBody = json_body(&headers, body)?;
    if input.queue_depth < 0 {
        return Err(ApiError::bad(
            "invalid-signal",
            "queue_depth: must be zero or more",
        ));
    }
    const LARGE: f64 = 1e12;
    let signal = SignalInput {
        queue_depth: input.queue_depth as u64,
        oldest_age_s: non_negative("oldest_age_s", input.oldest_age_s, LARGE)?,
        arrival_rate_rps: non_negative("arrival_rate_rps", input.arrival_rate_rps, LARGE)?,
        departure_rate_rps: non_negative("departure_rate_rps", input.departure_rate_rps, LARGE)?,
        error_rate_rps: non_negative("error_rate_rps", input.error_rate_rps, LARGE)?,
        batch_occupancy: non_negative("batch_occupancy", input.batch_occupancy, 1.0)?,
        gpu_utilization: non_negative("gpu_utilization", input.gpu_utilization, 1.0)?,
        oldest_age_by_class_s: input
            .oldest_age_by_class_s
            .into_iter()
            .take(64)
            .map(|(class, age)| {
                non_negative("oldest_age_by_class_s", Some(age), LARGE)
                    .map(|a| (class.chars().take(63).collect(), a.unwrap_or(0.0)))
            })
            .collect::<Result<_, _>>()?,
    };
    state.engine.push_signal(&name, signal);
    Ok(StatusCode::ACCEPTED)
}

#[derive(Debug, serde::Serialize)]
struct DecisionLog {
    pool: PoolName,
    shadow: bool,
    /// Newest first; consecutive identical decisions are folded (`repeated`).
    decisions: Vec<serde_json::Value>,
}

#[utoipa::path(get, path = "/v1/pools/{name}/decisions", params(("name" = String, Path)), responses((status = 200, description = "Decisions, newest first", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn pool_decisions(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<DecisionLog>, ApiError> {
    let pool = pool_from_path(&state, &principal, path)?;
    principal.require(Scope::Reports)?;
    let shadow = state
        .engine
        .config()
        .pool(&pool)
        .is_some_and(|p| p.scaling.shadow);
    let decisions = state.engine.decisions(&pool).await.map_err(|e| match e {
        headroom_engine::EngineError::Ledger(l) => ApiError::from(l),
        other => ApiError::Ledger(headroom_ledger::LedgerError::Corrupt(other.to_string())),
    })?;
    Ok(Json(DecisionLog {
        decisions,
        shadow,
        pool,
    }))
}

/// A budget as finance reads it: the ceiling in force and where the period stands.
#[derive(Debug, serde::Serialize)]
struct BudgetView {
    account: AccountName,
    currency: &'static str,
    period: BudgetPeriod,
    period_start: Timestamp,
    period_end: Timestamp,
    ceiling: Money,
    spent: Money,
    held: Money,
    remaining: Money,
    soft_threshold_percent: u8,
    soft_threshold_reached: bool,
    hard_action: HardAction,
}

async fn budget_view(state: &AppState, budget: Budget) -> Result<BudgetView, ApiError> {
    let now = state.engine.clock().now();
    let standing = state.engine.ledger().budget_standing(&budget, now).await?;
    let (period_start, period_end) = budget.period.bounds(now);
    let committed = standing.spent + standing.held;
    // Integer arithmetic: committed / ceiling >= threshold / 100.
    let soft_threshold_reached = (committed.micros() as i128) * 100
        >= (budget.ceiling.micros() as i128) * budget.soft_threshold_percent as i128;
    Ok(BudgetView {
        account: budget.account,
        currency: "USD",
        period: budget.period,
        period_start,
        period_end,
        ceiling: standing.ceiling,
        spent: standing.spent,
        held: standing.held,
        remaining: standing.remaining(),
        soft_threshold_percent: budget.soft_threshold_percent,
        soft_threshold_reached,
        hard_action: budget.hard_action,
    })
}

#[derive(Debug, serde::Serialize)]
struct BudgetList {
    budgets: Vec<BudgetView>,
}

#[utoipa::path(get, path = "/v1/budgets", responses((status = 200, description = "Budgets the token acts for", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn list_budgets(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> Result<Json<BudgetList>, ApiError> {
    principal.require(Scope::Reports)?;
    let mut budgets = Vec::new();
    for budget in state
        .engine
        .ledger()
        .budgets()
        .await?
        .into_iter()
        .filter(|b| principal.acts_for(&b.account))
    {
        budgets.push(budget_view(&state, budget).await?);
    }
    Ok(Json(BudgetList { budgets }))
}

fn account_from_path(path: Result<Path<String>, PathRejection>) -> Result<AccountName, ApiError> {
    let Path(raw) =
        path.map_err(|_| ApiError::bad("bad-path", "the account in the path is not valid UTF-8"))?;
    raw.parse::<AccountName>()
        .map_err(|e| ApiError::NotFound(format!("no budget for {:?}: {e}", truncate(&raw))))
}

#[utoipa::path(get, path = "/v1/budgets/{account}", params(("account" = String, Path)), responses((status = 200, description = "Ceiling, spent, held, remaining", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn get_budget(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<BudgetView>, ApiError> {
    principal.require(Scope::Reports)?;
    let account = account_from_path(path)?;
    if !principal.acts_for(&account) {
        return Err(ApiError::NotFound(format!(
            "no budget for account {account}"
        )));
    }
    let budget = state
        .engine
        .ledger()
        .budget(&account)
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no budget for account {account}; PUT /v1/budgets/{account} sets one"
            ))
        })?;
    Ok(Json(budget_view(&state, budget).await?))
}

/// A budget's new version; `ceiling_usd` is a decimal string such as "5000.00".
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct PutBudget {
    period: String,
    ceiling_usd: String,
    #[serde(default)]
    soft_threshold_percent: Option<i64>,
    #[serde(default)]
    hard_action: Option<String>,
}

#[utoipa::path(put, path = "/v1/budgets/{account}", params(("account" = String, Path)), request_body = PutBudget, responses((status = 200, description = "The new version, in force", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn put_budget(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<BudgetView>, ApiError> {
    let account = account_from_path(path).map_err(|_| {
        ApiError::bad(
            "invalid-account",
            "account: use 1-63 characters of a-z, 0-9, '-', '_' and '.'",
        )
    })?;
    principal.require(Scope::Budgets)?;
    if !principal.acts_for(&account) {
        return Err(ApiError::Forbidden(format!(
            "this token cannot set the budget of account {account}"
        )));
    }
    let input: PutBudget = json_body(&headers, body)?;
    let period = BudgetPeriod::parse(&input.period).ok_or_else(|| {
        ApiError::bad(
            "invalid-budget",
            "period: use \"hour\", \"day\" or \"month\"",
        )
    })?;
    let ceiling: Money = input
        .ceiling_usd
        .parse()
        .map_err(|e| ApiError::bad("invalid-budget", format!("ceiling_usd: {e}")))?;
    if ceiling <= Money::ZERO {
        return Err(ApiError::bad(
            "invalid-budget",
            "ceiling_usd: must be more than zero",
        ));
    }
    let soft = input.soft_threshold_percent.unwrap_or(80);
    if !(1..=100).contains(&soft) {
        return Err(ApiError::bad(
            "invalid-budget",
            "soft_threshold_percent: must be between 1 and 100",
        ));
    }
    let hard_action = match input.hard_action.as_deref() {
        None => HardAction::Refuse,
        Some(a) => HardAction::parse(a).ok_or_else(|| {
            ApiError::bad(
                "invalid-budget",
                "hard_action: use \"refuse\", \"clamp\" or \"shed-lowest-tier\"",
            )
        })?,
    };
    let budget = Budget {
        account,
        period,
        ceiling,
        soft_threshold_percent: soft as u8,
        hard_action,
    };
    state
        .engine
        .ledger()
        .put_budget(&budget, state.engine.clock().now())
        .await?;
    state.engine.wake();
    Ok(Json(budget_view(&state, budget).await?))
}

/// Requested versus delivered for one pool over a time range.
#[derive(Debug, serde::Serialize)]
struct PoolLedger {
    pool: PoolName,
    from: Timestamp,
    to: Timestamp,
    /// Capacity requests created in the range.
    capacity_requests: headroom_ledger::derive::Fill,
    /// Replicas the controller launched or woke on its own in the range.
    organic: headroom_ledger::derive::OrganicFill,
    /// Spend of the pool's nodes within the range.
    spend: Money,
}

/// Reads `from` and `to` (RFC 3339; `to` defaults to now, `from` to `default_span` before it)
/// from query parameters, refusing parameters not in `allowed`.
fn range(
    params: &std::collections::BTreeMap<String, String>,
    allowed: &[&str],
    slug: &'static str,
    default_span: chrono::Duration,
    now: Timestamp,
) -> Result<(Timestamp, Timestamp), ApiError> {
    if let Some(unknown) = params.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::bad(
            slug,
            format!(
                "unknown query parameter {:?}; use {}",
                truncate(unknown),
                allowed.join(", ")
            ),
        ));
    }
    let to = params
        .get("to")
        .map(|v| parse_instant("to", v))
        .transpose()?
        .unwrap_or(now);
    let from = params
        .get("from")
        .map(|v| parse_instant("from", v))
        .transpose()?
        .unwrap_or(to - default_span);
    if from >= to {
        return Err(ApiError::bad(slug, "from: must be before to"));
    }
    Ok((from, to))
}

fn parse_instant(name: &str, value: &str) -> Result<Timestamp, ApiError> {
    chrono::DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|_| {
            ApiError::bad(
                "invalid-range",
                format!(
                    "{name}: {:?} is not an RFC 3339 instant such as 2026-11-30T09:00:00Z",
                    truncate(value)
                ),
            )
        })
}

#[utoipa::path(get, path = "/v1/pools/{name}/ledger", params(("name" = String, Path), ("from" = Option<String>, Query), ("to" = Option<String>, Query)), responses((status = 200, description = "Requested versus delivered over the range", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn pool_ledger(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    query: Result<
        axum::extract::Query<std::collections::BTreeMap<String, String>>,
        axum::extract::rejection::QueryRejection,
    >,
) -> Result<Json<PoolLedger>, ApiError> {
    let pool = pool_from_path(&state, &principal, path)?;
    principal.require(Scope::Reports)?;
    let axum::extract::Query(params) = query.map_err(|_| {
        ApiError::bad(
            "invalid-range",
            "the query string is malformed; use ?from=…&to=… with RFC 3339 instants",
        )
    })?;
    let now = state.engine.clock().now();
    let (from, to) = range(
        &params,
        &["from", "to"],
        "invalid-range",
        chrono::Duration::days(1),
        now,
    )?;
    let ledger = state.engine.ledger();
    let outcomes = ledger.capacity_requests_between(&pool, from, to).await?;
    let events = ledger.pool_events(&pool).await?;
    Ok(Json(PoolLedger {
        capacity_requests: headroom_ledger::derive::fill(&outcomes, &events),
        organic: headroom_ledger::derive::organic_fill(&events, from, to),
        spend: headroom_ledger::derive::spend(&events, None, Some(from), to.min(now)),
        pool,
        from,
        to,
    }))
}

#[utoipa::path(get, path = "/v1/reports/budget", params(("from" = Option<String>, Query), ("to" = Option<String>, Query), ("group_by" = Option<String>, Query, description = "account, pool, provider, region or market"), ("format" = Option<String>, Query, description = "json, csv, focus or html")), responses((status = 200, description = "The report in the format asked for", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn budget_report(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    query: Result<
        axum::extract::Query<std::collections::BTreeMap<String, String>>,
        axum::extract::rejection::QueryRejection,
    >,
) -> Result<Response, ApiError> {
    principal.require(Scope::Reports)?;
    let axum::extract::Query(params) =
        query.map_err(|_| ApiError::bad("invalid-report", "the query string is malformed"))?;
    let now = state.engine.clock().now();
    let (from, to) = range(
        &params,
        &["from", "to", "group_by", "format"],
        "invalid-report",
        chrono::Duration::days(30),
        now,
    )?;
    let group_by: headroom_report::GroupBy = params
        .get("group_by")
        .map_or("account", String::as_str)
        .parse()
        .map_err(|e: headroom_report::ReportError| {
            ApiError::bad("invalid-report", e.to_string())
        })?;
    let format: headroom_report::Format = params
        .get("format")
        .map_or("json", String::as_str)
        .parse()
        .map_err(|e: headroom_report::ReportError| {
            ApiError::bad("invalid-report", e.to_string())
        })?;
    let (report, events) = headroom_report::from_ledger(
        state.engine.ledger().as_ref(),
        from,
        to,
        group_by,
        now,
        principal.accounts.as_ref(),
    )
    .await
    .map_err(|e| match e {
        headroom_report::ReportError::Ledger(l) => ApiError::from(l),
        other => ApiError::bad("invalid-report", other.to_string()),
    })?;
    let body = headroom_report::render(&report, &events, format)
        .map_err(|e| ApiError::bad("invalid-report", e.to_string()))?;
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    Ok(response)
}

/// Prometheus metrics; budget figures are read from the ledger at scrape time.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "OpenMetrics text", body = String, content_type = "application/openmetrics-text"), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn metrics(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> Result<Response, ApiError> {
    principal.require(Scope::Metrics)?;
    let ledger = state.engine.ledger();
    let m = state.engine.metrics();
    let now = state.engine.clock().now();
    for budget in ledger.budgets().await? {
        let standing = ledger.budget_standing(&budget, now).await?;
        let label = headroom_engine::metrics::AccountLabels {
            account: budget.account.to_string(),
        };
        m.budget_ceiling_dollars
            .get_or_create(&label)
            .set(standing.ceiling.as_f64_lossy());
        m.budget_spent_dollars
            .get_or_create(&label)
            .set(standing.spent.as_f64_lossy());
        m.budget_held_dollars
            .get_or_create(&label)
            .set(standing.held.as_f64_lossy());
    }
    let mut response = m.encode().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    Ok(response)
}

#[derive(Debug, serde::Serialize)]
struct OfferingList {
    offerings: Vec<headroom_engine::OfferingPrice>,
}

/// Every offering at the price plans use now: the cloud's live quote (spot) or the configured
/// one, whether the market is above the most a launch pays, and any refusal cooldown.
#[utoipa::path(get, path = "/v1/offerings", responses((status = 200, description = "Offerings with configured, live and effective prices", body = Object), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn list_offerings(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> Result<Json<OfferingList>, ApiError> {
    principal.require(Scope::Reports)?;
    Ok(Json(OfferingList {
        offerings: state.engine.offering_prices(),
    }))
}

#[derive(Debug, serde::Serialize)]
struct AlertList {
    alerts: Vec<headroom_engine::alerts::ActiveAlert>,
}

/// The alerts firing now (this replica's pools).
#[utoipa::path(get, path = "/v1/alerts", responses((status = 200, description = "Alerts firing now", body = Object), (status = 400, description = "Invalid input", body = Problem, content_type = "application/problem+json"), (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"), (status = 403, description = "Token lacks the scope or account", body = Problem, content_type = "application/problem+json"), (status = 404, description = "Not found, or another account's", body = Problem, content_type = "application/problem+json"), (status = 429, description = "Rate limited; see Retry-After", body = Problem, content_type = "application/problem+json")))]
async fn list_alerts(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> Result<Json<AlertList>, ApiError> {
    principal.require(Scope::Reports)?;
    let config = state.engine.config();
    let visible = |a: &headroom_engine::alerts::ActiveAlert| {
        let account = match (a.alert.labels.get("pool"), a.alert.labels.get("account")) {
            (Some(pool), _) => pool
                .parse()
                .ok()
                .and_then(|p| config.pool(&p))
                .map(|p| p.account.clone()),
            (None, Some(account)) => account.parse().ok(),
            (None, None) => None,
        };
        account.is_some_and(|a| principal.acts_for(&a)) || principal.accounts.is_none()
    };
    let alerts = state
        .engine
        .active_alerts()
        .into_iter()
        .filter(visible)
        .collect();
    Ok(Json(AlertList { alerts }))
}

#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "This document", body = Object)))]
async fn openapi_json() -> Response {
    let mut response = openapi().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The OpenAPI document, generated from the handlers' annotations.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Headroom",
        description = "GPU capacity orchestrator. Every endpoint but the probes and this document takes `Authorization: Bearer <token>`; errors are RFC 9457 problems."
    ),
    paths(
        healthz,
        readyz,
        openapi_json,
        create_capacity_request,
        get_capacity_request,
        cancel_capacity_request,
        list_pools,
        get_pool,
        push_signal,
        pool_decisions,
        pool_admission,
        pool_ledger,
        list_budgets,
        get_budget,
        put_budget,
        budget_report,
        metrics,
        list_alerts,
        list_offerings
    ),
    components(schemas(Problem, CreateCapacityRequest, SignalBody, PutBudget))
)]
struct ApiDoc;

/// The OpenAPI document as pretty JSON (what `GET /openapi.json` serves and `openapi.json` holds).
pub fn openapi() -> String {
    use utoipa::OpenApi;
    let mut text = ApiDoc::openapi().to_pretty_json().unwrap_or_default();
    text.push('\n');
    text
}
