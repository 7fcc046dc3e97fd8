//! Capacity requests: `POST /v1/capacity-requests` asks for more ready replicas of a pool and
//! `GET /v1/capacity-requests` lists them, newest first; `GET` and
//! `DELETE /v1/capacity-requests/{id}` read and cancel one.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use headroom_core::{PoolName, Priority, RequestId, RequestState};
use headroom_engine::PoolStatus;
use headroom_ledger::{IdempotencyKey, NewCapacityRequest};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input::{QueryParams, RawBody, RawPath, instant, json_body, request_id_from_path};
use super::page::{self, PageParams};
use super::responses::{Authenticated, Forbidden, InvalidInput, JsonBody, NotFound};
use crate::auth::{Principal, Scope};
use crate::problem::ApiError;
use crate::{AppState, Problem};

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(create_capacity_request, list_capacity_requests))
        .routes(routes!(get_capacity_request, cancel_capacity_request))
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

/// The `Idempotency-Key` header, if sent: 1 to 255 visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match headers.get("idempotency-key") {
        None => Ok(None),
        Some(v) => {
            let key = v
                .to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= MAX_IDEMPOTENCY_KEY_LEN)
                .ok_or_else(|| ApiError::bad("bad-idempotency-key", format!("Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters")))?;
            Ok(Some(key.to_string()))
        }
    }
}

#[utoipa::path(
    post,
    path = "/v1/capacity-requests",
    request_body = CreateCapacityRequest,
    params(
        (
            "Idempotency-Key" = Option<String>,
            Header,
            description = "Makes a retry return the first request"
        )
    ),
    responses(
        (status = 201, description = "Created", body = CreatedView, headers(("Location" = String, description = "The request's own URL"))),
        (status = 200, description = "The request this Idempotency-Key already made", body = CreatedView),
        (
            status = 409,
            description = "Idempotency-Key reused with another body",
            body = Problem,
            content_type = "application/problem+json"
        ),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        JsonBody,
        Authenticated,
    )
)]
#[tracing::instrument(name = "api.create_capacity_request", skip_all)]
async fn create_capacity_request(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    // The scope first, then the pool: a token without the scope learns nothing about which
    // pools exist, and another account's pool answers exactly as an absent one.
    principal.require(Scope::Capacity)?;
    let input: CreateCapacityRequest = json_body(&headers, body)?;
    let idempotency_key = idempotency_key(&headers)?;
    let pool_name: PoolName = input
        .pool
        .parse()
        .map_err(|e| ApiError::bad("invalid-pool", format!("pool: {e}")))?;
    let config = state.engine.config();
    let pool = config
        .pool(&pool_name)
        .filter(|pool| principal.acts_for(&pool.account))
        .ok_or_else(|| {
            ApiError::bad(
                "unknown-pool",
                format!("pool: no pool named {pool_name}; GET /v1/pools lists them"),
            )
        })?;
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
        idempotency_key: idempotency_key.map(|key| IdempotencyKey {
            account: pool.account.clone(),
            key,
        }),
        at: state.engine.clock().now(),
    };
    let ledger = state.engine.ledger();
    let (request, created) = ledger.record_capacity_request(&new).await?;
    let outcome = if created {
        state
            .engine
            .remember_request_span(&request.id, &tracing::Span::current());
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
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
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

/// A capacity request with its requested-versus-delivered accounting.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct RequestView {
    #[serde(flatten)]
    outcome: headroom_ledger::RequestOutcome,
    fill: headroom_ledger::derive::Fill,
}

/// The configured pools whose account the caller acts for: the requests it may see.
fn visible_pools(state: &AppState, principal: &Principal) -> Vec<headroom_core::PoolName> {
    state
        .engine
        .config()
        .pools
        .iter()
        .filter(|p| principal.acts_for(&p.account))
        .map(|p| p.name.clone())
        .collect()
}

/// One page of the capacity requests the token may see, newest first.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct RequestList {
    /// Newest first: by `created_at`, then `id`, both descending.
    capacity_requests: Vec<headroom_ledger::RequestOutcome>,
    /// The next (older) page's cursor; null on the last page.
    next_cursor: Option<String>,
}

/// A request's place in the list: its creation instant (microseconds, as the ledger keeps it
/// at most) and its id.
type RequestKey = (i64, String);

/// May read capacity requests: the capacity scope (which makes them) or the reports scope.
fn may_read_requests(principal: &Principal) -> Result<(), ApiError> {
    if !(principal.has(Scope::Capacity) || principal.has(Scope::Reports)) {
        principal.require(Scope::Capacity)?;
    }
    Ok(())
}

#[utoipa::path(
    get,
    path = "/v1/capacity-requests",
    params(
        ("pool" = Option<String>, Query, description = "Only this pool's requests"),
        (
            "state" = Option<RequestState>,
            Query,
            description = "Only requests in this state; another word is a 400 problem listing the states"
        ),
        (
            "since" = Option<String>,
            Query,
            format = DateTime,
            description = "Only requests created at or after this RFC 3339 instant; a malformed one is a 400 problem"
        ),
        PageParams
    ),
    responses(
        (
            status = 200,
            description = "The capacity requests of the pools the token acts for, newest first, with their outcomes",
            body = RequestList,
            headers(("Link" = String, description = "`<URL>; rel=\"next\"`: the next page, when there is one"))
        ),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        Authenticated,
    )
)]
async fn list_capacity_requests(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    uri: axum::http::Uri,
    query: QueryParams,
) -> Result<Response, ApiError> {
    may_read_requests(&principal)?;
    let params = page::query(query, &["pool", "state", "since", "limit", "cursor"])?;
    let mut pools = visible_pools(&state, &principal);
    if let Some(raw) = params.get("pool") {
        // Another account's pool is refused in the same words as one that does not exist.
        let shown: String = raw.chars().take(64).collect();
        let name = raw
            .parse::<PoolName>()
            .ok()
            .filter(|name| pools.contains(name))
            .ok_or_else(|| {
                ApiError::bad(
                    "unknown-pool",
                    format!("pool: no pool named {shown:?}; GET /v1/pools lists them"),
                )
            })?;
        pools = vec![name];
    }
    let wanted = params
        .get("state")
        .map(|raw| {
            RequestState::parse(raw).ok_or_else(|| {
                let shown: String = raw.chars().take(32).collect();
                let valid: Vec<&str> = RequestState::ALL.iter().map(|s| s.as_str()).collect();
                ApiError::bad(
                    "invalid-state",
                    format!(
                        "state: {shown:?} is not a request state; use one of {}",
                        valid.join(", ")
                    ),
                )
            })
        })
        .transpose()?;
    let since = params
        .get("since")
        .map(|raw| instant("since", raw, "invalid-since"))
        .transpose()?;
    // A cursor belongs to one query: the same filters, or it is refused.
    let list = format!(
        "capacity-requests?pool={}&state={}&since={}",
        params.get("pool").map_or("", String::as_str),
        wanted.map_or("", RequestState::as_str),
        since.map(|t| t.to_rfc3339()).unwrap_or_default()
    );
    let request = page::read::<RequestKey>(&params, &list)?;
    let before = request
        .after
        .map(|(micros, id)| {
            chrono::DateTime::from_timestamp_micros(micros)
                .map(|at| (at, RequestId(id)))
                .ok_or_else(|| {
                    ApiError::bad(
                        "invalid-cursor",
                        "cursor: not a cursor this API gave; leave cursor out to start at the first page",
                    )
                })
        })
        .transpose()?;
    let mut outcomes = state
        .engine
        .ledger()
        .capacity_request_page(&headroom_ledger::RequestPageQuery {
            pools: &pools,
            state: wanted,
            since,
            before,
            limit: request.limit + 1,
        })
        .await?;
    let more = outcomes.len() > request.limit as usize;
    outcomes.truncate(request.limit as usize);
    let next_cursor = match (more, outcomes.last()) {
        (true, Some(last)) => Some(page::cursor(
            &list,
            &(
                last.request.created_at.timestamp_micros(),
                last.request.id.0.clone(),
            ),
        )),
        _ => None,
    };
    Ok(page::answer(
        RequestList {
            capacity_requests: outcomes,
            next_cursor: next_cursor.clone(),
        },
        &uri,
        &params,
        next_cursor.as_deref(),
    ))
}

#[utoipa::path(
    get,
    path = "/v1/capacity-requests/{id}",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "Requested versus delivered, state, refusals, fill", body = RequestView),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        Authenticated,
    )
)]
async fn get_capacity_request(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: RawPath,
) -> Result<Response, ApiError> {
    let id = request_id_from_path(path)?;
    may_read_requests(&principal)?;
    let ledger = state.engine.ledger();
    // Another account's request costs what an unknown one does (invariant 10).
    let outcome = ledger
        .capacity_request_in(&id, &visible_pools(&state, &principal))
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no capacity request {id}")))?;
    // The request's own events, not its pool's history: the cost stays with the request.
    let events = ledger.request_events(&outcome.request.id).await?;
    let fill = headroom_ledger::derive::fill(std::slice::from_ref(&outcome), &events);
    Ok(Json(RequestView { outcome, fill }).into_response())
}

#[utoipa::path(
    delete,
    path = "/v1/capacity-requests/{id}",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "Cancelled", body = headroom_ledger::RequestOutcome),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        Authenticated,
    )
)]
async fn cancel_capacity_request(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: RawPath,
) -> Result<Response, ApiError> {
    let id = request_id_from_path(path)?;
    principal.require(Scope::Capacity)?;
    let ledger = state.engine.ledger();
    ledger
        .capacity_request_in(&id, &visible_pools(&state, &principal))
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no capacity request {id}")))?;
    let outcome = ledger
        .cancel_capacity_request(&id, state.engine.clock().now())
        .await?;
    state.engine.wake();
    Ok(Json(outcome).into_response())
}
