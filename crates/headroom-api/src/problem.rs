//! RFC 9457 problem details, and the API's error type.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use headroom_ledger::LedgerError;
use serde::Serialize;
use thiserror::Error;

/// An RFC 9457 problem document.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem; stable, so clients can match on it.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
}

impl Problem {
    pub fn new(status: StatusCode, slug: &str, title: &str, detail: impl Into<String>) -> Problem {
        Problem {
            kind: format!("https://headroom.dev/problems/{slug}"),
            title: title.to_string(),
            status: status.as_u16(),
            detail: detail.into(),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        let mut response = (status, axum::Json(self)).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

/// Everything a handler can fail with. Database internals never reach the client.
/// Which allowance a 429 used up: the answer names it, so a client without a token is not told
/// about a token's rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateLimit {
    /// Per client address (`api.client_requests_per_second`), before any token is looked up.
    Client,
    /// Per token (`api.requests_per_second`).
    Token,
    /// The API's one allowance when authentication is off.
    Open,
}

impl RateLimit {
    pub fn describe(self) -> &'static str {
        match self {
            RateLimit::Client => "this client address's request rate",
            RateLimit::Token => "this token's request rate",
            RateLimit::Open => {
                "the API's request rate (authentication is off, so all callers share it)"
            }
        }
    }
}

#[derive(Debug, Error)]
pub enum ApiError {
    #[error("{detail}")]
    BadRequest { slug: &'static str, detail: String },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("rate limited ({}); retry after {retry_after_s}s", limit.describe())]
    RateLimited {
        retry_after_s: u64,
        limit: RateLimit,
    },
    #[error("the request took too long")]
    Timeout,
    /// The server already has this many requests in hand (`api.max_requests_in_flight`).
    #[error("{0} requests are already in hand")]
    Busy(u32),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// A 409 other than a reused idempotency key: what clashes, named by `slug` and `title`.
    #[error("{detail}")]
    Clash {
        slug: &'static str,
        title: &'static str,
        detail: String,
    },
    /// An `If-Match` that no longer matches: the resource changed since the client read it.
    #[error("{0}")]
    PreconditionFailed(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("the ledger is unavailable")]
    Ledger(#[source] LedgerError),
}

impl ApiError {
    pub fn bad(slug: &'static str, detail: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            slug,
            detail: detail.into(),
        }
    }
}

impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> ApiError {
        match e {
            LedgerError::IdempotencyConflict { key, existing } => ApiError::Conflict(format!(
                "Idempotency-Key {key:?} was already used for request {existing} with a different body; use a new key for a new request"
            )),
            LedgerError::UnknownRequest(id) => {
                ApiError::NotFound(format!("no capacity request {id}"))
            }
            other => ApiError::Ledger(other),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = match &self {
            ApiError::BadRequest { slug, detail } => Problem::new(
                StatusCode::BAD_REQUEST,
                slug,
                "Invalid request",
                detail.clone(),
            ),
            ApiError::Unauthorized(detail) => {
                let mut response = Problem::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "Unauthorized",
                    detail.clone(),
                )
                .into_response();
                response.headers_mut().insert(
                    axum::http::header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer"),
                );
                return response;
            }
            ApiError::RateLimited {
                retry_after_s,
                limit,
            } => {
                let mut response = Problem::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate-limited",
                    "Too many requests",
                    format!(
                        "{} is used up; retry after {retry_after_s} s",
                        limit.describe()
                    ),
                )
                .into_response();
                if let Ok(v) = HeaderValue::from_str(&retry_after_s.to_string()) {
                    response
                        .headers_mut()
                        .insert(axum::http::header::RETRY_AFTER, v);
                }
                return response;
            }
            ApiError::Timeout => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                "Request timed out",
                "the request did not finish in time; retry it with the same Idempotency-Key",
            ),
            ApiError::Busy(limit) => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server-busy",
                "Server busy",
                format!(
                    "{limit} requests (api.max_requests_in_flight) are already being handled; nothing was done, retry after 1 s"
                ),
            ),
            ApiError::Forbidden(detail) => Problem::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "Forbidden",
                detail.clone(),
            ),
            ApiError::NotFound(detail) => Problem::new(
                StatusCode::NOT_FOUND,
                "not-found",
                "Not found",
                detail.clone(),
            ),
            ApiError::Conflict(detail) => Problem::new(
                StatusCode::CONFLICT,
                "idempotency-key-reused",
                "Idempotency key reused",
                detail.clone(),
            ),
            ApiError::PreconditionFailed(detail) => Problem::new(
                StatusCode::PRECONDITION_FAILED,
                "precondition-failed",
                "Precondition failed",
                detail.clone(),
            ),
            ApiError::UnsupportedMediaType(detail) => Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Unsupported media type",
                detail.clone(),
            ),
            ApiError::Clash {
                slug,
                title,
                detail,
            } => Problem::new(StatusCode::CONFLICT, slug, title, detail.clone()),
            ApiError::PayloadTooLarge(detail) => Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "Payload too large",
                detail.clone(),
            ),
            ApiError::Ledger(LedgerError::Overloaded(waiting)) => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ledger-busy",
                "Ledger busy",
                format!(
                    "{waiting} ledger writes are already waiting; nothing was recorded, retry after 1 s"
                ),
            ),
            ApiError::Ledger(source) => {
                tracing::error!(error = %headroom_engine::error_chain(source), "ledger error");
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ledger-unavailable",
                    "Ledger unavailable",
                    "the ledger could not be reached; nothing was recorded, retry later",
                )
            }
        };
        let mut response = problem.into_response();
        // Every 503 says when to come back (RFC 9110 §10.2.3): a busy ledger or a timeout in a
        // second, a ledger that cannot be reached in five.
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            let after = match &self {
                ApiError::Ledger(LedgerError::Overloaded(_))
                | ApiError::Timeout
                | ApiError::Busy(_) => "1",
                _ => "5",
            };
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                HeaderValue::from_static(after),
            );
        }
        response
    }
}
