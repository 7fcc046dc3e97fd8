//! HTTP request metrics: every request counted by method, matched route and status, and timed
//! by method and route, on the engine's registry (`/metrics`).

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use headroom_engine::metrics::{HttpLabels, HttpStatusLabels};

use crate::AppState;

/// The route template (`/v1/pools/{name}`), never the raw path: the label set stays bounded.
pub(crate) async fn observe(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().as_str().to_string();
    let started = headroom_engine::metrics::latency_timer();
    let response = next.run(request).await;
    let m = &state.engine.metrics().service;
    m.http_request_seconds
        .get_or_create(&HttpLabels {
            method: method.clone(),
            route: route.clone(),
        })
        .observe(started.elapsed().as_secs_f64());
    m.http_requests
        .get_or_create(&HttpStatusLabels {
            method,
            route,
            status: response.status().as_u16().to_string(),
        })
        .inc();
    response
}
