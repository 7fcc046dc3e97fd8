//! Reading a request: JSON bodies, path segments and time ranges, each refused with a problem
//! that says how to fix it.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, StatusCode, header};
use headroom_core::{AccountName, PoolName, RequestId, Timestamp};
use serde::de::DeserializeOwned;

use crate::auth::Principal;
use crate::problem::ApiError;
use crate::{AppState, MAX_BODY_BYTES};

/// A path segment as handlers take it: the rejection (not UTF-8) becomes a 400 problem here.
pub(super) type RawPath = Result<Path<String>, PathRejection>;

/// A body as handlers take it: [`json_body`] turns a rejection (too large) into a problem.
pub(super) type RawBody = Result<Bytes, BytesRejection>;

/// A query string as handlers take it: the rejection is kept so each endpoint words its own
/// problem.
pub(super) type QueryParams = Result<Query<BTreeMap<String, String>>, QueryRejection>;

/// Reads a JSON body: checks the media type, the size, and the shape, in that order.
pub(super) fn json_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: RawBody,
) -> Result<T, ApiError> {
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    match media_type.as_deref() {
        Some("application/json") => {}
        Some(t) if t.starts_with("application/") && t.ends_with("+json") => {}
        _ => {
            return Err(ApiError::UnsupportedMediaType(
                "send the body as JSON with Content-Type: application/json".into(),
            ));
        }
    }
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(format!("the body exceeds {MAX_BODY_BYTES} bytes"))
        } else {
            ApiError::bad("unreadable-body", "the request body could not be read")
        }
    })?;
    let malformed = |e: serde_json::Error| {
        ApiError::bad(
            "malformed-body",
            format!("the body is not valid for this endpoint: {e}"),
        )
    };
    // A key sent twice is refused, not resolved by "last one wins": two readers of one body
    // (a proxy, an audit log, this service) must not see two different requests.
    serde_json::from_slice::<UniqueKeys>(&body).map_err(malformed)?;
    // Objects only: serde would otherwise also read a struct from a JSON array.
    let value: serde_json::Value = serde_json::from_slice(&body).map_err(malformed)?;
    if !value.is_object() {
        return Err(ApiError::bad(
            "malformed-body",
            "the body is not valid for this endpoint: expected a JSON object",
        ));
    }
    serde_json::from_value(value).map_err(malformed)
}

/// Any JSON value, read only to check that no object in it names a key twice.
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = std::collections::BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!(
                    "the key {:?} appears more than once; send each field once",
                    truncate(&key)
                )));
            }
            map.next_value::<UniqueKeys>()?;
        }
        Ok(UniqueKeys)
    }
}

/// The pool a path names, if it exists and the caller acts for its account (else 404, so a
/// token cannot learn what other accounts run).
pub(super) fn pool_from_path(
    state: &AppState,
    principal: &Principal,
    path: RawPath,
) -> Result<PoolName, ApiError> {
    let Path(raw) = path
        .map_err(|_| ApiError::bad("bad-path", "the pool name in the path is not valid UTF-8"))?;
    raw.parse::<PoolName>()
        .ok()
        .filter(|name| {
            state
                .engine
                .config()
                .pool(name)
                .is_some_and(|p| principal.acts_for(&p.account))
        })
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no pool named {:?}; GET /v1/pools lists them",
                truncate(&raw)
            ))
        })
}

/// At most 64 characters of what the client sent, so a problem never echoes a huge value.
fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

/// The capacity request id a path names; one that cannot be an id is simply not found.
pub(super) fn request_id_from_path(path: RawPath) -> Result<RequestId, ApiError> {
    let Path(raw) = path
        .map_err(|_| ApiError::bad("bad-path", "the request id in the path is not valid UTF-8"))?;
    let valid = raw.len() <= 64 && raw.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !valid {
        return Err(ApiError::NotFound(format!(
            "no capacity request {:?}",
            truncate(&raw)
        )));
    }
    Ok(RequestId(raw))
}

/// The account a path names; a name that cannot be an account has no budget (404).
pub(super) fn account_from_path(path: RawPath) -> Result<AccountName, ApiError> {
    let Path(raw) =
        path.map_err(|_| ApiError::bad("bad-path", "the account in the path is not valid UTF-8"))?;
    raw.parse::<AccountName>()
        .map_err(|e| ApiError::NotFound(format!("no budget for {:?}: {e}", truncate(&raw))))
}

/// Reads `from` and `to` (RFC 3339; `to` defaults to now, `from` to `default_span` before it)
/// from query parameters, refusing parameters not in `allowed`.
pub(super) fn range(
    params: &BTreeMap<String, String>,
    allowed: &[&str],
    slug: &'static str,
    default_span: chrono::Duration,
    now: Timestamp,
) -> Result<(Timestamp, Timestamp), ApiError> {
    if let Some(unknown) = params.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::bad(
            slug,
            format!(
                "unknown query parameter {:?}; use {}",
                truncate(unknown),
                allowed.join(", ")
            ),
        ));
    }
    let to = params
        .get("to")
        .map(|v| parse_instant("to", v))
        .transpose()?
        .unwrap_or(now);
    let from = params
        .get("from")
        .map(|v| parse_instant("from", v))
        .transpose()?
        .unwrap_or(to - default_span);
    if from >= to {
        return Err(ApiError::bad(slug, "from: must be before to"));
    }
    Ok((from, to))
}

fn parse_instant(name: &str, value: &str) -> Result<Timestamp, ApiError> {
    instant(name, value, "invalid-range")
}

/// The RFC 3339 instant `value` of the query parameter `name`, or a problem `slug` naming it.
pub(super) fn instant(name: &str, value: &str, slug: &'static str) -> Result<Timestamp, ApiError> {
    chrono::DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|_| {
            ApiError::bad(
                slug,
                format!(
                    "{name}: {:?} is not an RFC 3339 instant such as 2026-11-30T09:00:00Z",
                    truncate(value)
                ),
            )
        })
}
