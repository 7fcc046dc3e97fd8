//! Offerings: `/v1/offerings`, every offering at the price plans use now.

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::responses::{Authenticated, Forbidden};
use crate::AppState;
use crate::auth::{Principal, Scope};
use crate::problem::ApiError;

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default().routes(routes!(list_offerings))
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct OfferingList {
    offerings: Vec<headroom_engine::OfferingPrice>,
}

/// Every offering at the price plans use now: the cloud's live quote (spot) or the configured
/// one, whether the market is above the most a launch pays, and any refusal cooldown.
#[utoipa::path(
    get,
    path = "/v1/offerings",
    responses(
        (
            status = 200,
            description = "Offerings that the token's pools may launch, with configured, live and effective prices",
            body = OfferingList
        ),
        (status = 403, response = Forbidden),
        Authenticated,
    )
)]
async fn list_offerings(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> Result<Json<OfferingList>, ApiError> {
    principal.require(Scope::Reports)?;
    // Only offerings some pool of the token's accounts may launch: the rest of the catalog
    // (and its cooldowns) tells of other tenants' pools.
    let config = state.engine.config();
    let usable: std::collections::BTreeSet<_> = config
        .pools
        .iter()
        .filter(|pool| principal.acts_for(&pool.account))
        .flat_map(|pool| pool.offerings.iter())
        .collect();
    let offerings = state
        .engine
        .offering_prices()
        .into_iter()
        .filter(|o| principal.accounts.is_none() || usable.contains(&o.offering))
        .collect();
    Ok(Json(OfferingList { offerings }))
}
