//! Cursor pagination, the same on every list: `?limit=N` (1 to [`MAX_LIMIT`], default
//! [`DEFAULT_LIMIT`]) and `?cursor=…`, the `next_cursor` of the page before.
//!
//! Each list is ordered by a documented key that is unique per item (a name, an id, a ledger
//! sequence number, a creation instant and an id), and a cursor holds the key of the last item
//! a page returned: the next page is the items strictly after it. So a walk returns every item
//! that exists throughout it exactly once, whatever is added or removed meanwhile, and an item
//! added during a walk at most once.
//!
//! A cursor is opaque to clients: base64url of the list it belongs to (its name and whatever
//! fixes its contents: the pool, the filters, the range) and the key, with a digest. A cursor
//! that does not decode, whose digest does not match, or that belongs to another list is
//! refused (400), never silently read as "from the start". Cursors are not secrets and carry no
//! authority: every page applies the token's tenancy and the filters again, so a forged cursor
//! can only move where a walk starts in what the token may see anyway.

use std::collections::BTreeMap;

use axum::http::{HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::Digest;

use crate::problem::ApiError;

/// Items a page holds when `limit` is not given.
pub(super) const DEFAULT_LIMIT: u32 = 100;

/// The most items a page holds; a larger `limit` is refused, not clamped.
pub(super) const MAX_LIMIT: u32 = 500;

/// The two query parameters every list takes, for the document.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(dead_code, reason = "the fields are read by the derive only")]
pub(super) struct PageParams {
    /// Items per page, 1 to 500 (default 100). Anything else, 0, a negative or a non-numeric
    /// value included, is a 400 problem.
    #[param(minimum = 1, maximum = 500, default = 100)]
    limit: Option<u32>,
    /// Where the page starts: the `next_cursor` of the page before (also in its `Link` header
    /// with `rel="next"`). Opaque; bound to this list and its filters, so a cursor that was
    /// altered or came from another list or query is a 400 problem. Absent, the first page.
    cursor: Option<String>,
}

/// The page a request asks for: how many items, after which key.
#[derive(Debug)]
pub(super) struct PageRequest<K> {
    pub limit: u32,
    /// The key of the previous page's last item; `None` on the first page.
    pub after: Option<K>,
}

/// What a cursor carries: the list it belongs to and the last key it returned.
#[derive(Serialize, serde::Deserialize)]
struct Payload<K> {
    list: String,
    after: K,
}

/// Bytes of SHA-256 kept to catch a cursor that was altered or cut short.
const DIGEST_BYTES: usize = 8;

fn digest(payload: &[u8]) -> [u8; DIGEST_BYTES] {
    let full = sha2::Sha256::new()
        .chain_update(b"headroom-cursor-v1\0")
        .chain_update(payload)
        .finalize();
    let mut out = [0; DIGEST_BYTES];
    out.copy_from_slice(&full[..DIGEST_BYTES]);
    out
}

/// A cursor for `list` that starts after `key`.
pub(super) fn cursor<K: Serialize>(list: &str, key: &K) -> String {
    let payload = serde_json::to_vec(&Payload {
        list: list.to_string(),
        after: key,
    })
    .unwrap_or_default();
    let mut bytes = payload.clone();
    bytes.extend_from_slice(&digest(&payload));
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn bad_cursor(detail: &str) -> ApiError {
    ApiError::bad(
        "invalid-cursor",
        format!(
            "cursor: {detail}; send the next_cursor of this list's previous page unchanged, or leave cursor out to start at the first page"
        ),
    )
}

/// The key a cursor holds, if it is one this server gave for `list`.
fn decode<K: DeserializeOwned>(list: &str, text: &str) -> Result<K, ApiError> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| bad_cursor("not a cursor this API gave"))?;
    if bytes.len() <= DIGEST_BYTES {
        return Err(bad_cursor("not a cursor this API gave"));
    }
    let (payload, check) = bytes.split_at(bytes.len() - DIGEST_BYTES);
    if digest(payload) != check {
        return Err(bad_cursor("altered or cut short"));
    }
    let payload: Payload<K> = serde_json::from_slice(payload)
        .map_err(|_| bad_cursor("made for another list or by another version"))?;
    if payload.list != list {
        return Err(bad_cursor(
            "made for another list or another query (a cursor keeps the list, the pool and the filters it was made with)",
        ));
    }
    Ok(payload.after)
}

/// A list's query string as a map, refused (400) when it does not parse or names a parameter
/// not in `known` (so a misspelt `limt` is not silently ignored).
pub(super) fn query(
    query: super::input::QueryParams,
    known: &[&str],
) -> Result<BTreeMap<String, String>, ApiError> {
    let axum::extract::Query(params) = query.map_err(|_| {
        ApiError::bad(
            "invalid-query",
            format!(
                "the query string is malformed; this endpoint takes {}",
                known.join(", ")
            ),
        )
    })?;
    only_known(&params, known, "invalid-query")?;
    Ok(params)
}

/// Refuses a query parameter not in `known`.
pub(super) fn only_known(
    params: &BTreeMap<String, String>,
    known: &[&str],
    slug: &'static str,
) -> Result<(), ApiError> {
    if let Some(unknown) = params.keys().find(|k| !known.contains(&k.as_str())) {
        let shown: String = unknown.chars().take(64).collect();
        return Err(ApiError::bad(
            slug,
            format!(
                "unknown query parameter {shown:?}; this endpoint takes {}",
                known.join(", ")
            ),
        ));
    }
    Ok(())
}

/// The page `params` ask for of `list`: `limit` checked against its range, `cursor` decoded and
/// checked to be `list`'s.
pub(super) fn read<K: DeserializeOwned>(
    params: &BTreeMap<String, String>,
    list: &str,
) -> Result<PageRequest<K>, ApiError> {
    let limit = match params.get("limit") {
        None => DEFAULT_LIMIT,
        Some(raw) => raw
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                let shown: String = raw.chars().take(32).collect();
                ApiError::bad(
                    "invalid-limit",
                    format!(
                        "limit: must be a whole number from 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT}), got {shown:?}"
                    ),
                )
            })?,
    };
    let after = params
        .get("cursor")
        .map(|text| decode(list, text))
        .transpose()?;
    Ok(PageRequest { limit, after })
}

/// A page of an in-memory list: the items after the cursor's key in key order, at most
/// `limit`, and the key the next page starts after when more follow.
pub(super) fn of<T, K: Ord>(
    mut items: Vec<T>,
    key: impl Fn(&T) -> K,
    page: &PageRequest<K>,
) -> (Vec<T>, Option<K>) {
    items.sort_by_key(|item| key(item));
    if let Some(after) = &page.after {
        items.retain(|item| key(item) > *after);
    }
    let more = items.len() > page.limit as usize;
    items.truncate(page.limit as usize);
    let next = if more { items.last().map(&key) } else { None };
    (items, next)
}

/// The next page's URL: this request's path and query with `cursor` replaced.
fn next_link(uri: &Uri, params: &BTreeMap<String, String>, next_cursor: &str) -> String {
    let mut pairs: Vec<(&str, &str)> = params
        .iter()
        .filter(|(k, _)| k.as_str() != "cursor")
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    pairs.push(("cursor", next_cursor));
    let query = serde_urlencoded::to_string(&pairs).unwrap_or_default();
    format!("{}?{query}", uri.path())
}

/// `body` as JSON, with `Link: <…>; rel="next"` (RFC 8288) when a next page exists.
pub(super) fn answer<T: Serialize>(
    body: T,
    uri: &Uri,
    params: &BTreeMap<String, String>,
    next_cursor: Option<&str>,
) -> Response {
    let mut response = axum::Json(body).into_response();
    if let Some(next) = next_cursor
        && let Ok(value) =
            HeaderValue::from_str(&format!("<{}>; rel=\"next\"", next_link(uri, params, next)))
    {
        response.headers_mut().insert(header::LINK, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_cursor_round_trips_only_on_its_own_list() {
        let text = cursor("pools", &"llama".to_string());
        let page: PageRequest<String> = read(&params(&[("cursor", &text)]), "pools").unwrap();
        assert_eq!(page.after.as_deref(), Some("llama"));
        assert_eq!(page.limit, DEFAULT_LIMIT);
        assert!(read::<String>(&params(&[("cursor", &text)]), "offerings").is_err());
        // One character changed anywhere is caught by the digest (or the encoding).
        for i in 0..text.len() {
            let mut altered = text.clone().into_bytes();
            altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(altered).unwrap();
            if altered != text {
                assert!(
                    read::<String>(&params(&[("cursor", &altered)]), "pools").is_err(),
                    "{altered}"
                );
            }
        }
        assert!(read::<String>(&params(&[("cursor", &text[..text.len() - 2])]), "pools").is_err());
    }

    #[test]
    fn limits_outside_the_range_are_refused() {
        for bad in ["0", "-1", "501", "ten", "1.5", "", "99999999999"] {
            assert!(
                read::<String>(&params(&[("limit", bad)]), "pools").is_err(),
                "{bad}"
            );
        }
        for good in ["1", "500"] {
            assert!(read::<String>(&params(&[("limit", good)]), "pools").is_ok());
        }
    }

    #[test]
    fn pages_of_a_list_cover_it_once() {
        let items: Vec<u32> = (0..23).rev().collect();
        let mut seen = Vec::new();
        let mut page = PageRequest {
            limit: 5,
            after: None,
        };
        loop {
            let (items, next) = of(items.clone(), |n| *n, &page);
            seen.extend(items);
            match next {
                Some(after) => page.after = Some(after),
                None => break,
            }
        }
        assert_eq!(seen, (0..23).collect::<Vec<_>>());
    }
}
