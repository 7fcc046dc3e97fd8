//! Budgets: `/v1/budgets` lists those the token acts for; `/v1/budgets/{account}` reads one
//! account's standing or sets a new version.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use headroom_core::{AccountName, Budget, BudgetPeriod, HardAction, Money, Timestamp};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input::{QueryParams, RawBody, RawPath, account_from_path, json_body};
use super::page::{self, PageParams};
use super::responses::{
    Authenticated, Forbidden, InvalidInput, JsonBody, NotFound, PreconditionFailed,
};
use crate::AppState;
use crate::auth::{Principal, Scope};
use crate::problem::ApiError;

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(list_budgets))
        .routes(routes!(get_budget, put_budget))
}

/// A budget as finance reads it: the ceiling in force and where the period stands.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct BudgetView {
    account: AccountName,
    currency: &'static str,
    period: BudgetPeriod,
    #[schema(value_type = String, format = DateTime)]
    period_start: Timestamp,
    #[schema(value_type = String, format = DateTime)]
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

/// The entity tag of a budget's version: a digest of what it sets, so a client that read one
/// version can make its change conditional on it (`If-Match`).
fn etag(budget: &Budget) -> String {
    use sha2::Digest;
    let text = format!(
        "{}|{}|{}|{}|{}",
        budget.account,
        budget.period.as_str(),
        budget.ceiling,
        budget.soft_threshold_percent,
        budget.hard_action.as_str()
    );
    let digest = sha2::Sha256::digest(text.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// `view` answered with its version's `ETag`.
fn with_etag(view: BudgetView, tag: &str) -> Response {
    let mut response = Json(view).into_response();
    if let Ok(value) = HeaderValue::from_str(tag) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

/// Whether `If-Match` (RFC 9110 §13.1.1) lets a write replace `current`: no header, `*` with a
/// budget in force, or a listed tag equal to the current version's.
fn if_match_allows(headers: &HeaderMap, current: Option<&Budget>) -> Result<bool, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(true);
    };
    let value = value
        .to_str()
        .map_err(|_| ApiError::bad("invalid-if-match", "If-Match: not visible ASCII"))?;
    let Some(current) = current else {
        return Ok(false);
    };
    let tag = etag(current);
    Ok(value
        .split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == tag))
}

/// One page of the budgets the token acts for, by account.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct BudgetList {
    budgets: Vec<BudgetView>,
    /// The next page's cursor; null on the last page.
    next_cursor: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/budgets",
    params(PageParams),
    responses(
        (status = 200, description = "Budgets the token acts for, by account", body = BudgetList,
            headers(("Link" = String, description = "`<URL>; rel=\"next\"`: the next page, when there is one"))),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        Authenticated,
    )
)]
async fn list_budgets(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    uri: axum::http::Uri,
    query: QueryParams,
) -> Result<Response, ApiError> {
    principal.require(Scope::Reports)?;
    let params = page::query(query, &["limit", "cursor"])?;
    let request = page::read::<String>(&params, "budgets")?;
    let in_force: Vec<Budget> = state
        .engine
        .ledger()
        .budgets()
        .await?
        .into_iter()
        .filter(|b| principal.acts_for(&b.account))
        .collect();
    // The versions in force are a row per account; where each stands (its spend, the costly
    // part) is read for this page's accounts only.
    let (page_budgets, next) = page::of(in_force, |b| b.account.to_string(), &request);
    let mut budgets = Vec::with_capacity(page_budgets.len());
    for budget in page_budgets {
        budgets.push(budget_view(&state, budget).await?);
    }
    let next_cursor = next.map(|account| page::cursor("budgets", &account));
    Ok(page::answer(
        BudgetList {
            budgets,
            next_cursor: next_cursor.clone(),
        },
        &uri,
        &params,
        next_cursor.as_deref(),
    ))
}

#[utoipa::path(
    get,
    path = "/v1/budgets/{account}",
    params(("account" = String, Path)),
    responses(
        (status = 200, description = "Ceiling, spent, held, remaining", body = BudgetView,
            headers(("ETag" = String, description = "The version in force; send it as If-Match to change exactly this version"))),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        Authenticated,
    )
)]
async fn get_budget(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: RawPath,
) -> Result<Response, ApiError> {
    principal.require(Scope::Reports)?;
    let account = account_from_path(path)?;
    // Another account's budget reads exactly as one never set.
    let budget = if principal.acts_for(&account) {
        state.engine.ledger().budget(&account).await?
    } else {
        None
    };
    let budget = budget.ok_or_else(|| {
        ApiError::NotFound(format!(
            "no budget for account {account}; PUT /v1/budgets/{account} sets one"
        ))
    })?;
    let tag = etag(&budget);
    Ok(with_etag(budget_view(&state, budget).await?, &tag))
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

// An account that cannot be parsed is invalid input here, not a missing budget: no 404.
#[utoipa::path(
    put,
    path = "/v1/budgets/{account}",
    params(
        ("account" = String, Path),
        ("If-Match" = Option<String>, Header, description = "Change the budget only if its version in force is this ETag (or any, with *)")
    ),
    request_body = PutBudget,
    responses(
        (status = 200, description = "The new version, in force", body = BudgetView,
            headers(("ETag" = String, description = "The new version"))),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 412, response = PreconditionFailed),
        JsonBody,
        Authenticated,
    )
)]
async fn put_budget(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: RawPath,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
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
    if ceiling <= Money::ZERO || ceiling > headroom_core::budget::MOST_CEILING {
        return Err(ApiError::bad(
            "invalid-budget",
            format!(
                "ceiling_usd: must be more than zero and at most {}",
                headroom_core::budget::MOST_CEILING
            ),
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
    let ledger = state.engine.ledger();
    // Checked against the version in force just before the write: two writers racing past the
    // check within one round trip both land (the ledger's append is not conditional).
    let current = ledger.budget(&budget.account).await?;
    if !if_match_allows(&headers, current.as_ref())? {
        return Err(ApiError::PreconditionFailed(format!(
            "the budget of account {} is no longer the version If-Match names; GET it again and retry with its ETag",
            budget.account
        )));
    }
    ledger
        .put_budget(&budget, state.engine.clock().now())
        .await?;
    state.engine.wake();
    let tag = etag(&budget);
    Ok(with_etag(budget_view(&state, budget).await?, &tag))
}
