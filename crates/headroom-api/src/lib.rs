//! Headroom's REST API. Build the router with [`app`]; serve it with axum.
//!
//! Every error is an RFC 9457 `application/problem+json` body that says what was wrong and how
//! to fix it. Bad input is rejected before anything is written.

pub mod auth;
mod problem;
mod routes;

use std::sync::Arc;

use axum::Router;
use headroom_engine::Engine;

pub use problem::{ApiError, Problem};

/// Request bodies larger than this are refused with 413 before they are read.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    /// Bearer tokens required (the default for `serve`); off only for `demo` on loopback.
    pub require_auth: bool,
}

/// The API router.
pub fn app(state: AppState) -> Router {
    routes::router(state)
}
