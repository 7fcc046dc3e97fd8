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
use headroom_core::Timestamp;
use headroom_ledger::report_rows;

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(budget_report))
        .routes(routes!(reservations_report))
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
    let (params, now, from, to) = read_range(
        &state,
        &principal,
        query,
        &["from", "to", "group_by", "format"],
        30,
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
    let rows = report_rows::budget(
        state.engine.ledger().as_ref(),
        from,
        to,
        principal.accounts.as_ref(),
    )
    .await?;
    let report = headroom_report::from_rows(&rows, &reservations, from, to, group_by, now)
        .map_err(report_error)?;
    let body = headroom_report::render(&report, &rows.events, &reservations, format)
        .map_err(report_error)?;
    Ok(with_content_type(body, format.content_type()))
}

/// The history advice reads when no range is given: long enough for a term commitment.
const RESERVATIONS_DEFAULT_DAYS: i64 = 90;

// Advice reads only the nodes and refusals of the accounts the token acts for.
#[utoipa::path(
    get,
    path = "/v1/reports/reservations",
    params(
        (
            "from" = Option<String>,
            Query,
            description = "start of the history; default 90 days before `to` (never before the ledger's first entry)"
        ),
        ("to" = Option<String>, Query, description = "end of the history; default now"),
        ("format" = Option<String>, Query, description = "json, csv or html")
    ),
    responses(
        (
            status = 200,
            description = "Per pool and instance family: the demand profile, the refusals a reservation would have avoided, and the commitments advised with their savings",
            content(
                (headroom_report::reservations::ReservationReport = "application/json"),
                (String = "text/csv; charset=utf-8"),
                (String = "text/html; charset=utf-8")
            )
        ),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        Authenticated,
    )
)]
async fn reservations_report(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    query: QueryParams,
) -> Result<Response, ApiError> {
    use headroom_report::reservations;
    let (params, now, from, to) = read_range(
        &state,
        &principal,
        query,
        &["from", "to", "format"],
        RESERVATIONS_DEFAULT_DAYS,
    )?;
    let format = params.get("format").map_or("json", String::as_str);
    let content_type = match format {
        "json" => "application/json",
        "csv" => "text/csv; charset=utf-8",
        "html" => "text/html; charset=utf-8",
        other => {
            return Err(ApiError::bad(
                "invalid-report",
                format!("format: {other:?} is not one of json, csv, html"),
            ));
        }
    };
    let terms = reservations::parse_terms(reservations::DEFAULT_TERMS)
        .map_err(|e| ApiError::bad("invalid-report", e.to_string()))?;
    let ledger = state.engine.ledger();
    let accounts = principal.accounts.as_ref();
    let (events, finished) = report_rows::history(ledger.as_ref(), accounts).await?;
    let range = reservations::history_range(&events, finished, Some(from), Some(to), now)
        .map_err(report_error)?;
    let refusals =
        report_rows::visible_refusals(ledger.as_ref(), &events, range.from, range.end, accounts)
            .await?;
    let advice =
        reservations::from_rows(&events, &refusals, &terms, &range).map_err(report_error)?;
    let body = match format {
        "csv" => reservations::to_csv(&advice).map_err(report_error)?,
        "html" => reservations::to_html(&advice),
        _ => serde_json::to_string_pretty(&advice)
            .map_err(|e| report_error(headroom_report::ReportError::Io(e.into())))?,
    };
    Ok(with_content_type(body, content_type))
}

/// A report's query: the token may read reports, the query string parses, and its range
/// (`default_days` back from now when `from` is absent) is valid. Returns the parameters, the
/// engine's now and the range.
fn read_range(
    state: &AppState,
    principal: &Principal,
    query: QueryParams,
    known: &[&str],
    default_days: i64,
) -> Result<
    (
        std::collections::BTreeMap<String, String>,
        Timestamp,
        Timestamp,
        Timestamp,
    ),
    ApiError,
> {
    principal.require(Scope::Reports)?;
    let axum::extract::Query(params) =
        query.map_err(|_| ApiError::bad("invalid-report", "the query string is malformed"))?;
    let now = state.engine.clock().now();
    let (from, to) = range(
        &params,
        known,
        "invalid-report",
        chrono::Duration::days(default_days),
        now,
    )?;
    Ok((params, now, from, to))
}

/// A report that cannot be made is the request's fault (a ledger that cannot be read answers as
/// the ledger's errors do, through `?`).
fn report_error(e: headroom_report::ReportError) -> ApiError {
    ApiError::bad("invalid-report", e.to_string())
}

fn with_content_type(body: String, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
