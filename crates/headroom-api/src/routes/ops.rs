//! Operational endpoints: the probes (`/healthz`, `/readyz`), `/metrics` and this API's own
//! OpenAPI document.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::responses::{Authenticated, Forbidden, LedgerUnavailable};
use crate::AppState;
use crate::auth::{Principal, Scope};
use crate::problem::ApiError;

/// How long `/readyz` waits for the ledger before it answers 503.
pub const READY_BOUND: std::time::Duration = std::time::Duration::from_secs(2);

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(openapi_json))
}

// The probes and the document are public (see `auth::is_public`): no token, no rate limit, so
// they list no 401 or 429.
#[utoipa::path(
    get,
    path = "/healthz",
    security(()),
    responses((status = 200, description = "Alive", body = String))
)]
async fn healthz() -> &'static str {
    "ok"
}

#[utoipa::path(
    get,
    path = "/readyz",
    security(()),
    responses(
        (
            status = 200,
            description = "The ledger answers and the reconcile loop ticked without error lately",
            body = String
        ),
        (status = 503, response = LedgerUnavailable),
    )
)]
async fn readyz(State(state): State<AppState>) -> Result<&'static str, Response> {
    // A probe that hangs on a blackholed database is no answer: not ready within the bound.
    match tokio::time::timeout(READY_BOUND, state.engine.ledger().ping()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(ApiError::from(e).into_response()),
        Err(_) => {
            return Err(crate::Problem::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "not-ready",
                "Not ready",
                format!(
                    "the ledger did not answer within {} s",
                    READY_BOUND.as_secs()
                ),
            )
            .into_response());
        }
    }
    state.engine.readiness().map_err(|why| {
        crate::Problem::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "not-ready",
            "Not ready",
            why,
        )
        .into_response()
    })?;
    Ok("ready")
}

/// Prometheus metrics; budget figures are read from the ledger at scrape time. A token sees the
/// series of its own accounts' pools and budgets; the rest only a token for every account.
#[utoipa::path(
    get,
    path = "/metrics",
    responses(
        (
            status = 200,
            description = "The series of the token's accounts (every series for a token of every account): OpenMetrics when the Accept header asks for it, as Prometheus does, otherwise the text format 0.0.4",
            content(
                (String = "application/openmetrics-text"),
                (String = "text/plain")
            )
        ),
        (status = 403, response = Forbidden),
        Authenticated,
    )
)]
async fn metrics(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    principal.require(Scope::Metrics)?;
    let ledger = state.engine.ledger();
    let m = state.engine.metrics();
    let now = state.engine.clock().now();
    for budget in ledger.budgets().await? {
        let standing = ledger.budget_standing(&budget, now).await?;
        let (period_start, _) = budget.period.bounds(now);
        let reading = headroom_engine::metrics::SpendReading {
            period: budget.period,
            period_start,
            spent: standing.spent,
        };
        // A period ended since the last scrape: what it spent after that scrape counts too.
        let closed = match m.last_spend(budget.account.as_str()) {
            Some(last) if last.period == budget.period && last.period_start < period_start => {
                let (_, last_end) = budget.period.bounds(last.period_start);
                let at_end = last_end - chrono::Duration::microseconds(1);
                Some(ledger.budget_standing(&budget, at_end).await?.spent)
            }
            _ => None,
        };
        m.record_budget(&budget, &standing, reading, closed);
    }
    let config = state.engine.config();
    let visible = |pool: Option<&str>, account: Option<&str>| {
        let pool_account = pool.map(|p| {
            p.parse()
                .ok()
                .and_then(|p| config.pool(&p))
                .is_some_and(|p| principal.acts_for(&p.account))
        });
        let account = account.map(|a| a.parse().is_ok_and(|a| principal.acts_for(&a)));
        pool_account.unwrap_or(true) && account.unwrap_or(true)
    };
    let text = super::exposition::filter(&m.encode(), principal.accounts.is_none(), visible);
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (text, content_type) = if super::exposition::wants_openmetrics(accept) {
        (
            text,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
    } else {
        (
            super::exposition::to_text_004(&text),
            "text/plain; version=0.0.4; charset=utf-8",
        )
    };
    let mut response = text.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}

#[utoipa::path(
    get,
    path = "/openapi.json",
    security(()),
    responses((status = 200, description = "This document", body = Object))
)]
async fn openapi_json() -> Response {
    let mut response = super::openapi().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
