//! A pool's scheduled windows: `GET`/`POST /v1/pools/{name}/schedules` and
//! `DELETE /v1/pools/{name}/schedules/{id}`. A window keeps a replica floor for a known event
//! (a weekday job, a launch), one cold start ahead of its start, in a time zone.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use headroom_config::schedule::WindowSpec;
use headroom_core::{PoolName, PoolSpec};
use headroom_engine::{DeclaredWindow, EngineError};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input::{QueryParams, RawBody, RawPath, json_body, pool_from_path};
use super::page::{self, PageParams};
use super::responses::{Authenticated, Forbidden, InvalidInput, JsonBody, NotFound};
use crate::AppState;
use crate::auth::{Principal, Scope};
use crate::problem::ApiError;

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(list_windows, declare_window))
        .routes(routes!(cancel_window))
}

/// One page of a pool's scheduled windows.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct WindowList {
    pool: PoolName,
    /// The configuration's windows first, by name, then those declared here, oldest first (by
    /// `declared_at`, then id).
    windows: Vec<DeclaredWindow>,
    /// The next page's cursor; null on the last page.
    next_cursor: Option<String>,
}

/// A window's place in the list: the configuration's (0) before the API's (1), then the
/// declaration instant (none for the configuration's), then the id.
type WindowKey = (u8, Option<i64>, String);

fn window_key(w: &DeclaredWindow) -> WindowKey {
    (
        u8::from(w.declared_at.is_some()),
        w.declared_at.map(|t| t.timestamp_micros()),
        w.id.clone(),
    )
}

fn engine_error(e: EngineError) -> ApiError {
    match e {
        EngineError::Ledger(l) => ApiError::from(l),
        EngineError::InvalidWindow(p) => ApiError::bad(
            "invalid-window",
            format!("{}: {}; {}", p.field, p.what, p.fix),
        ),
        EngineError::WindowConflict(detail) => ApiError::Clash {
            slug: "window-conflict",
            title: "Scheduled window conflict",
            detail,
        },
        other => ApiError::Ledger(headroom_ledger::LedgerError::Corrupt(other.to_string())),
    }
}

/// The pool named in the path, for a token with the capacity scope.
fn pool_spec(state: &AppState, principal: &Principal, path: RawPath) -> Result<PoolSpec, ApiError> {
    principal.require(Scope::Capacity)?;
    let name = pool_from_path(state, principal, path)?;
    state
        .engine
        .config()
        .pool(&name)
        .cloned()
        .ok_or_else(|| ApiError::NotFound(format!("no pool named {name}")))
}

#[utoipa::path(
    get,
    path = "/v1/pools/{name}/schedules",
    params(("name" = String, Path), PageParams),
    responses(
        (status = 200, description = "The pool's scheduled windows", body = WindowList,
            headers(("Link" = String, description = "`<URL>; rel=\"next\"`: the next page, when there is one"))),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        Authenticated,
    )
)]
async fn list_windows(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    uri: axum::http::Uri,
    path: RawPath,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let pool = pool_spec(&state, &principal, path)?;
    let params = page::query(query, &["limit", "cursor"])?;
    let list = format!("schedules:{}", pool.name);
    let request = page::read::<WindowKey>(&params, &list)?;
    // At most MAX_WINDOWS_PER_POOL of them: paged in memory.
    let windows = state
        .engine
        .schedule_windows(&pool)
        .await
        .map_err(engine_error)?;
    let (windows, next) = page::of(windows, window_key, &request);
    let next_cursor = next.map(|key| page::cursor(&list, &key));
    Ok(page::answer(
        WindowList {
            pool: pool.name,
            windows,
            next_cursor: next_cursor.clone(),
        },
        &uri,
        &params,
        next_cursor.as_deref(),
    ))
}

#[utoipa::path(
    post,
    path = "/v1/pools/{name}/schedules",
    params(("name" = String, Path)),
    request_body = WindowSpec,
    responses(
        (status = 201, description = "Declared; the next tick applies it", body = DeclaredWindow),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        (status = 409, description = "The pool has a window of that name, or as many as it keeps", body = crate::Problem, content_type = "application/problem+json"),
        JsonBody,
        Authenticated,
    )
)]
async fn declare_window(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: RawPath,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    let pool = pool_spec(&state, &principal, path)?;
    let spec: WindowSpec = json_body(&headers, body)?;
    let window = state
        .engine
        .declare_window(&pool, spec)
        .await
        .map_err(engine_error)?;
    let location = format!("/v1/pools/{}/schedules/{}", pool.name, window.id);
    let mut response = (StatusCode::CREATED, Json(window)).into_response();
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

#[utoipa::path(
    delete,
    path = "/v1/pools/{name}/schedules/{id}",
    params(("name" = String, Path), ("id" = String, Path)),
    responses(
        (status = 204, description = "Cancelled; the next tick no longer keeps its floor"),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        Authenticated,
    )
)]
async fn cancel_window(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
) -> Result<StatusCode, ApiError> {
    let Path((name, id)) =
        path.map_err(|_| ApiError::bad("bad-path", "the path is not valid UTF-8"))?;
    principal.require(Scope::Capacity)?;
    let pool = name
        .parse::<PoolName>()
        .ok()
        .and_then(|n| state.engine.config().pool(&n).cloned())
        .filter(|p| principal.acts_for(&p.account))
        .ok_or_else(|| ApiError::NotFound("no such pool; GET /v1/pools lists them".into()))?;
    if id.starts_with("config:") {
        return Err(ApiError::bad(
            "invalid-window",
            "id: the window is in the configuration; remove it from [[pools.schedule]] and restart",
        ));
    }
    let cancelled = state
        .engine
        .cancel_window(&pool, &id)
        .await
        .map_err(engine_error)?;
    if !cancelled {
        return Err(ApiError::NotFound(format!(
            "pool {} has no window {id:?} in force; GET /v1/pools/{}/schedules lists them",
            pool.name, pool.name
        )));
    }
    Ok(StatusCode::NO_CONTENT)
}
