//! The problem answers many endpoints share, described once for the OpenAPI document.
//!
//! Each is a component (`#/components/responses/…`) that paths reference, so its description,
//! media type and headers live here and nowhere else. A path lists only the ones its handler can
//! give: 400, 403 and 404 one by one, and [`Authenticated`] for what the token check in front of
//! every non-public endpoint adds. The types are never built: handlers answer with
//! [`ApiError`](crate::ApiError), which renders these same problems.

use crate::Problem;

/// A field, the path or the query string is invalid; `detail` names it and says how to fix it.
#[derive(utoipa::ToResponse)]
#[response(
    description = "Invalid input",
    content_type = "application/problem+json"
)]
#[expect(dead_code, reason = "the body is read by the derive only")]
pub(super) struct InvalidInput(Problem);

/// No bearer token, or one that is unknown, malformed or revoked.
#[derive(utoipa::ToResponse)]
#[response(
    description = "No valid token",
    content_type = "application/problem+json"
)]
#[expect(dead_code, reason = "the body is read by the derive only")]
pub(super) struct Unauthorized(Problem);

/// The token lacks the scope the endpoint needs, or does not act for the account it charges.
#[derive(utoipa::ToResponse)]
#[response(
    description = "Token lacks the scope or account",
    content_type = "application/problem+json"
)]
#[expect(dead_code, reason = "the body is read by the derive only")]
pub(super) struct Forbidden(Problem);

/// Nothing by that name, or it belongs to an account the token does not act for (the same
/// answer, so a token cannot learn what other accounts run).
#[derive(utoipa::ToResponse)]
#[response(
    description = "Not found, or another account's",
    content_type = "application/problem+json"
)]
#[expect(dead_code, reason = "the body is read by the derive only")]
pub(super) struct NotFound(Problem);

/// `If-Match` names a version that is no longer in force: read it again and retry.
#[derive(utoipa::ToResponse)]
#[response(
    description = "If-Match names a version no longer in force",
    content_type = "application/problem+json"
)]
#[expect(dead_code, reason = "the body is read by the derive only")]
pub(super) struct PreconditionFailed(Problem);

/// The token's request rate is used up.
#[derive(utoipa::ToResponse)]
#[response(
    description = "Rate limited; see Retry-After",
    content_type = "application/problem+json",
    headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))
)]
#[expect(dead_code, reason = "the body is read by the derive only")]
pub(super) struct RateLimited(Problem);

/// The ledger could not be reached, so nothing was recorded (`ledger-unavailable`); its write
/// queue is full (`ledger-busy`); the server already has `api.max_requests_in_flight` requests
/// in hand (`server-busy`); or the request ran past the server's timeout (`timeout`).
#[derive(utoipa::ToResponse)]
#[response(
    description = "Ledger unavailable or busy, server busy, or request timed out; retry after Retry-After",
    content_type = "application/problem+json",
    headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))
)]
#[expect(dead_code, reason = "the body is read by the derive only")]
pub(super) struct LedgerUnavailable(Problem);

/// The path exists but does not take this method. Any path can answer it (for every method it
/// does not list), so every operation lists it: the document's way to say so. RFC 9110 §15.5.6.
#[derive(utoipa::ToResponse)]
#[response(
    description = "The path does not take this method; Allow lists those it does",
    content_type = "application/problem+json",
    headers(("Allow" = String, description = "The methods the path takes, e.g. `GET, HEAD`"))
)]
#[expect(dead_code, reason = "the body is read by the derive only")]
pub(super) struct MethodNotAllowed(Problem);

/// The body is not sent as JSON: its `Content-Type` is missing or another media type.
#[derive(utoipa::ToResponse)]
#[response(
    description = "The body must be sent as JSON (Content-Type: application/json)",
    content_type = "application/problem+json",
    headers((
        "Accept-Post" = String,
        description = "On a POST: the media types it takes (`application/json`)"
    ))
)]
#[expect(dead_code, reason = "the body is read by the derive only")]
pub(super) struct UnsupportedMediaType(Problem);

/// The body is larger than the API reads (64 KiB).
#[derive(utoipa::ToResponse)]
#[response(
    description = "The body exceeds 64 KiB",
    content_type = "application/problem+json"
)]
#[expect(dead_code, reason = "the body is read by the derive only")]
pub(super) struct PayloadTooLarge(Problem);

/// What every endpoint that reads a JSON body can answer about the body itself, before its
/// fields are read.
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "a list for the document, never built")]
pub(super) enum JsonBody {
    #[response(status = 413)]
    PayloadTooLarge(#[ref_response] PayloadTooLarge),
    #[response(status = 415)]
    UnsupportedMediaType(#[ref_response] UnsupportedMediaType),
}

/// What every endpoint behind the bearer-token check can answer before its handler runs: no
/// valid token, the rate limit, and the ledger being down (tokens are looked up in it).
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "a list for the document, never built")]
pub(super) enum Authenticated {
    #[response(status = 401)]
    Unauthorized(#[ref_response] Unauthorized),
    #[response(status = 429)]
    RateLimited(#[ref_response] RateLimited),
    #[response(status = 503)]
    LedgerUnavailable(#[ref_response] LedgerUnavailable),
}
