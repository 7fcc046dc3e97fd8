//! The router and the OpenAPI document, both built from the handlers' `#[utoipa::path]`
//! attributes: each module below registers its handlers with `routes!`, so a route's method and
//! path are written once, beside its handler.

mod alerts;
mod budgets;
mod capacity;
mod exposition;
mod external_metrics;
mod input;
mod offerings;
mod ops;
mod page;
mod pools;
mod reports;
mod responses;
mod schedules;

use std::sync::LazyLock;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use crate::problem::ApiError;
use crate::{AppState, MAX_BODY_BYTES, Problem};

pub fn router(state: AppState) -> Router {
    let (routes, _) = api().split_for_parts();
    let routes = routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(accept_post))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::authenticate,
        ));
    with_timeout(routes, &state).with_state(state)
}

/// The External Metrics API alone, for a listener that authenticated its caller by TLS client
/// certificate (the kube-apiserver's front-proxy certificate): no bearer token is looked for.
pub fn external_metrics_router(state: AppState) -> Router {
    let (routes, _) = OpenApiRouter::default()
        .merge(external_metrics::routes())
        .split_for_parts();
    let routes = routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(
            |mut request: axum::extract::Request, next: axum::middleware::Next| async move {
                request
                    .extensions_mut()
                    .insert(crate::auth::Principal::metrics_reader());
                next.run(request).await
            },
        ));
    with_timeout(routes, &state).with_state(state)
}

/// `router` with the server's timeout: a request past it answers 503 `timeout`.
fn with_timeout(router: Router<AppState>, state: &AppState) -> Router<AppState> {
    router.layer(
        tower::ServiceBuilder::new()
            .layer(axum::error_handling::HandleErrorLayer::new(
                |_: tower::BoxError| async { ApiError::Timeout },
            ))
            .timeout(state.limits.request_timeout),
    )
}

/// Every resource's routes, and the document they describe, in one router.
fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(ops::routes())
        .merge(capacity::routes())
        .merge(pools::routes())
        .merge(schedules::routes())
        .merge(budgets::routes())
        .merge(reports::routes())
        .merge(offerings::routes())
        .merge(alerts::routes())
        .merge(external_metrics::routes())
}

async fn not_found() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not-found",
        "Not found",
        "no such endpoint; see GET /v1/pools and POST /v1/capacity-requests",
    )
}

/// axum adds the `Allow` header (RFC 9110 §15.5.6) to what this answers: the path's methods.
async fn method_not_allowed(method: axum::http::Method) -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "Method not allowed",
        format!("this endpoint does not take {method}; the Allow header lists the methods it does"),
    )
}

/// A POST refused for its media type says which one it takes (`Accept-Post`, as the W3C's
/// Linked Data Platform defines it): every POST body here is JSON.
async fn accept_post(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let post = request.method() == axum::http::Method::POST;
    let mut response = next.run(request).await;
    if post && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        response.headers_mut().insert(
            "accept-post",
            axum::http::HeaderValue::from_static("application/json"),
        );
    }
    response
}

/// Every operation lists the 405 its path gives for the methods it does not take: the router
/// answers it, not a handler, so it is added here once the paths are merged.
fn with_method_not_allowed(mut doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    use utoipa::openapi::{Ref, RefOr};
    for item in doc.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ];
        for operation in operations.into_iter().flatten() {
            operation.responses.responses.insert(
                "405".to_string(),
                RefOr::Ref(Ref::from_response_name("MethodNotAllowed")),
            );
        }
    }
    doc
}

/// What the document says beyond its paths: the title, and the components that paths reference
/// (`Problem` through the shared responses; request bodies are collected from the paths).
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Headroom",
        description = "GPU capacity orchestrator. Every endpoint but the probes and this document takes `Authorization: Bearer <token>`; errors are RFC 9457 problems."
    ),
    modifiers(&BearerScheme),
    security(("bearer" = [])),
    components(
        schemas(Problem),
        responses(
            responses::InvalidInput,
            responses::Unauthorized,
            responses::Forbidden,
            responses::NotFound,
            responses::PreconditionFailed,
            responses::RateLimited,
            responses::LedgerUnavailable,
            responses::MethodNotAllowed,
            responses::UnsupportedMediaType,
            responses::PayloadTooLarge
        )
    )
)]
struct ApiDoc;

/// The `bearer` security scheme every operation requires unless it says otherwise (the probes
/// and this document are public): tokens from `headroom token create`.
struct BearerScheme;

impl utoipa::Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("hr_<id>_<secret>")
                    .description(Some(
                        "A token from `headroom token create`, bound to accounts and scopes",
                    ))
                    .build(),
            ),
        );
    }
}

/// Built once: the document cannot change while the process runs.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    let mut text = with_method_not_allowed(api().into_openapi())
        .to_pretty_json()
        .unwrap_or_default();
    text.push('\n');
    text
});

/// The OpenAPI document as pretty JSON (what `GET /openapi.json` serves and `openapi.json` holds).
pub fn openapi() -> String {
    DOCUMENT.clone()
}
