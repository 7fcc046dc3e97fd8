//! Reports: `/v1/reports/budget`, spend and requested-versus-delivered over a range, in JSON,
//! CSV, FinOps FOCUS or HTML.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input::{QueryParams, range};
use super::responses::{Authenticated, Forbidden, InvalidInput};
use crate::AppState;
use crate::auth::{Principal, Scope};
use crate::problem::ApiError;

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default().routes(routes!(budget_report))
}

// The report covers only the accounts the token acts for, so it has nothing to answer 404 for.
#[utoipa::path(
    get,
    path = "/v1/reports/budget",
    params(
        ("from" = Option<String>, Query),
        ("to" = Option<String>, Query),
        (
            "group_by" = Option<String>,
            Query,
            description = "account, pool, provider, region or market"
        ),
        ("format" = Option<String>, Query, description = "json, csv, focus or html")
    ),
    responses(
        (
            status = 200,
            description = "The report in the format asked for",
            content(
                (headroom_report::BudgetReport = "application/json"),
                (String = "text/csv; charset=utf-8"),
                (String = "text/html; charset=utf-8")
            )
        ),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        Authenticated,
    )
)]
async fn budget_report(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    query: QueryParams,
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
    // Reservations are paid for whether used or not: their idle hours are spend too.
    let reservations = headroom_report::reserved::visible_to(
        &state.engine.config().reserved_capacity(),
        principal.accounts.as_ref(),
    );
    let (report, events) = headroom_report::from_ledger(
        state.engine.ledger().as_ref(),
        from,
        to,
        group_by,
        now,
        principal.accounts.as_ref(),
        &reservations,
    )
    .await
    .map_err(|e| match e {
        headroom_report::ReportError::Ledger(l) => ApiError::from(l),
        other => ApiError::bad("invalid-report", other.to_string()),
    })?;
    let body = headroom_report::render(&report, &events, &reservations, format)
        .map_err(|e| ApiError::bad("invalid-report", e.to_string()))?;
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    Ok(response)
}
