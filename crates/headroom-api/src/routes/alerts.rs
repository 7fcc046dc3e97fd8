//! Alerts: `/v1/alerts`, the alerts firing now for the accounts the token acts for.

use axum::extract::State;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input::QueryParams;
use super::page::{self, PageParams};
use super::responses::{Authenticated, Forbidden, InvalidInput};
use crate::AppState;
use crate::auth::{Principal, Scope};
use crate::problem::ApiError;

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default().routes(routes!(list_alerts))
}

/// One page of the alerts firing now, by alert name and labels.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct AlertList {
    alerts: Vec<headroom_engine::alerts::ActiveAlert>,
    /// The next page's cursor; null on the last page.
    next_cursor: Option<String>,
}

/// The alerts firing now (this replica's pools).
#[utoipa::path(
    get,
    path = "/v1/alerts",
    params(PageParams),
    responses(
        (status = 200, description = "Alerts firing now, by name then labels", body = AlertList,
            headers(("Link" = String, description = "`<URL>; rel=\"next\"`: the next page, when there is one"))),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        Authenticated,
    )
)]
async fn list_alerts(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    uri: axum::http::Uri,
    query: QueryParams,
) -> Result<Response, ApiError> {
    principal.require(Scope::Reports)?;
    let params = page::query(query, &["limit", "cursor"])?;
    let request = page::read::<String>(&params, "alerts")?;
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
    // An alert's key (its name and labels) is what makes it one alert.
    let (alerts, next) = page::of(alerts, |a| a.alert.key(), &request);
    let next_cursor = next.map(|key| page::cursor("alerts", &key));
    Ok(page::answer(
        AlertList {
            alerts,
            next_cursor: next_cursor.clone(),
        },
        &uri,
        &params,
        next_cursor.as_deref(),
    ))
}
