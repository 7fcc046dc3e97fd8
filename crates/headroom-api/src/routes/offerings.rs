//! Offerings: `/v1/offerings`, every offering at the price plans use now.

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
    OpenApiRouter::default().routes(routes!(list_offerings))
}

/// One page of the offerings, by id.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct OfferingList {
    offerings: Vec<headroom_engine::OfferingPrice>,
    /// The next page's cursor; null on the last page.
    next_cursor: Option<String>,
}

/// Every offering at the price plans use now: the cloud's live quote (spot) or the configured
/// one, whether the market is above the most a launch pays, and any refusal cooldown.
#[utoipa::path(
    get,
    path = "/v1/offerings",
    params(PageParams),
    responses(
        (
            status = 200,
            description = "Offerings that the token's pools may launch, by id, with configured, live and effective prices",
            body = OfferingList,
            headers(("Link" = String, description = "`<URL>; rel=\"next\"`: the next page, when there is one"))
        ),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        Authenticated,
    )
)]
async fn list_offerings(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    uri: axum::http::Uri,
    query: QueryParams,
) -> Result<Response, ApiError> {
    principal.require(Scope::Reports)?;
    let params = page::query(query, &["limit", "cursor"])?;
    let request = page::read::<String>(&params, "offerings")?;
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
    let (offerings, next) = page::of(offerings, |o| o.offering.to_string(), &request);
    let next_cursor = next.map(|id| page::cursor("offerings", &id));
    Ok(page::answer(
        OfferingList {
            offerings,
            next_cursor: next_cursor.clone(),
        },
        &uri,
        &params,
        next_cursor.as_deref(),
    ))
}
