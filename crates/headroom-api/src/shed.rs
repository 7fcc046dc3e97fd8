//! The in-flight limit: at most `api.max_requests_in_flight` requests are handled at once, and
//! one past it is answered 503 at once. A queue in front of a server that is already behind only
//! makes every answer late (and its memory grows with the flood); an immediate 503 with
//! Retry-After tells a client to back off while the requests in hand finish.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::{ApiError, AppState};

/// Answered whatever the load: a liveness or readiness probe that failed under load would have
/// the server restarted, losing the requests in hand, and a scrape would go blind when it is
/// most needed. The API's own document is static and cheap.
const ALWAYS_ANSWERED: [&str; 4] = ["/healthz", "/readyz", "/metrics", "/openapi.json"];

pub(crate) async fn when_busy(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if ALWAYS_ANSWERED.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    // The permit is held until the answer is built, and released when the handler is dropped
    // (a timeout or a closed connection) too.
    let Ok(_permit) = state.in_flight.clone().try_acquire_owned() else {
        state.engine.metrics().service.http_requests_shed.inc();
        return ApiError::Busy(state.limits.max_requests_in_flight).into_response();
    };
    next.run(request).await
}
