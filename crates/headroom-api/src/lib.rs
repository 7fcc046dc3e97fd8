//! Headroom's REST API. Build the router with [`app`]; serve it with axum.
//!
//! Every error is an RFC 9457 `application/problem+json` body that says what was wrong and how
//! to fix it. Bad input is rejected before anything is written.

pub mod auth;
mod http_metrics;
mod problem;
mod routes;

use std::sync::Arc;

use axum::Router;
use headroom_engine::Engine;

pub use problem::{ApiError, Problem};
pub use routes::openapi;

/// Request bodies larger than this are refused with 413 before they are read.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Requests per second each token (or, without authentication, the whole API) may make, with
/// a burst on top; past it the API answers 429 with Retry-After.
pub type RateLimiter = governor::DefaultKeyedRateLimiter<String>;

/// The limits every request meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub requests_per_second: u32,
    pub burst: u32,
    /// A request still unanswered after this gets a 503 problem (the handler is dropped).
    pub request_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            requests_per_second: 50,
            burst: 100,
            request_timeout: std::time::Duration::from_secs(30),
        }
    }
}

/// What handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    /// Bearer tokens required (the default for `serve`); off only for `demo` on loopback.
    pub require_auth: bool,
    pub limits: Limits,
    pub rate_limiter: Arc<RateLimiter>,
}

impl AppState {
    pub fn new(engine: Arc<Engine>, require_auth: bool, limits: Limits) -> AppState {
        let per_second = std::num::NonZeroU32::new(limits.requests_per_second.max(1))
            .unwrap_or(std::num::NonZeroU32::MIN);
        let burst =
            std::num::NonZeroU32::new(limits.burst.max(1)).unwrap_or(std::num::NonZeroU32::MIN);
        let quota = governor::Quota::per_second(per_second).allow_burst(burst);
        AppState {
            engine,
            require_auth,
            limits,
            rate_limiter: Arc::new(governor::RateLimiter::keyed(quota)),
        }
    }
}

/// The API router.
pub fn app(state: AppState) -> Router {
    routes::router(state.clone()).layer(axum::middleware::from_fn_with_state(
        state,
        http_metrics::observe,
    ))
}
