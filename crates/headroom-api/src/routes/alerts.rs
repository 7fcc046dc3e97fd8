//! Alerts: `/v1/alerts`, the alerts firing now for the accounts the token acts for.

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::responses::{Authenticated, Forbidden};
use crate::AppState;
use crate::auth::{Principal, Scope};
use crate::problem::ApiError;

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default().routes(routes!(list_alerts))
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct AlertList {
    alerts: Vec<headroom_engine::alerts::ActiveAlert>,
}

/// The alerts firing now (this replica's pools).
#[utoipa::path(
    get,
    path = "/v1/alerts",
    responses(
        (status = 200, description = "Alerts firing now", body = AlertList),
        (status = 403, response = Forbidden),
        Authenticated,
    )
)]
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
