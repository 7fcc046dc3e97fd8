//! Bearer tokens bound to accounts and scopes.
//!
//! A token reads `hr_<id>_<secret>`; the ledger keeps the id, the SHA-256 of the secret, the
//! accounts it acts for and its scopes. Requests for another account's resources answer as if
//! they did not exist (404), so a token cannot even learn what other teams run.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use headroom_core::{AccountName, Timestamp};
use headroom_ledger::ApiToken;
use sha2::{Digest, Sha256};

use crate::AppState;
use crate::problem::{ApiError, RateLimit};
use crate::token_cache::Lookup;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Create, read and cancel capacity requests.
    Capacity,
    /// Read budgets, reports, pool ledgers, decisions and alerts.
    Reports,
    /// Set budgets.
    Budgets,
    /// Push pool signals.
    Signals,
    /// Read `/metrics`.
    Metrics,
    /// Everything, for every account.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 6] = [
        Scope::Capacity,
        Scope::Reports,
        Scope::Budgets,
        Scope::Signals,
        Scope::Metrics,
        Scope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Capacity => "capacity",
            Scope::Reports => "reports",
            Scope::Budgets => "budgets",
            Scope::Signals => "signals",
            Scope::Metrics => "metrics",
            Scope::Admin => "admin",
        }
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Scope, String> {
        Scope::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a scope; use capacity, reports, budgets, signals, metrics or admin"))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who is calling, once authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub token_id: Option<String>,
    /// `None` is every account.
    pub accounts: Option<BTreeSet<String>>,
    pub scopes: BTreeSet<Scope>,
}

impl Principal {
    /// The caller when authentication is off (`demo`, on loopback): everything.
    pub fn open() -> Principal {
        Principal {
            token_id: None,
            accounts: None,
            scopes: Scope::ALL.into_iter().collect(),
        }
    }

    /// The kube-apiserver's aggregation layer on the External Metrics listener, authenticated by
    /// its client certificate there: every account's metrics, nothing else.
    pub fn metrics_reader() -> Principal {
        Principal {
            token_id: None,
            accounts: None,
            scopes: [Scope::Metrics].into_iter().collect(),
        }
    }

    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope)
    }

    /// Requires `scope`, or answers 403 naming it.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.has(scope) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!(
                "this token lacks the {scope} scope; create one with `headroom token create --scope {scope}`"
            )))
        }
    }

    pub fn acts_for(&self, account: &AccountName) -> bool {
        self.accounts
            .as_ref()
            .is_none_or(|a| a.contains(account.as_str()))
    }
}

fn sha256_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Compares two equal-length strings without stopping at the first difference.
fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// A new token: the text to hand out once, and the record to store.
#[allow(clippy::disallowed_methods)] // a token's secret must be unguessable, never seeded
pub fn new_token(accounts: &[String], scopes: &[Scope], now: Timestamp) -> (String, ApiToken) {
    let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let secret = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let record = ApiToken {
        id: id.clone(),
        secret_sha256: sha256_hex(&secret),
        accounts: accounts.to_vec(),
        scopes: scopes.iter().map(|s| s.as_str().to_string()).collect(),
        created_at: now,
        revoked_at: None,
    };
    (format!("hr_{id}_{secret}"), record)
}

/// Checks a presented token: a read-only request against the cache while its verification is
/// fresh, a write always against the ledger, so a revocation refuses writes at once and reads
/// within `api.token_recheck_interval`. When the ledger cannot answer, a read-only request may
/// pass on a verification within the outage grace (see [`crate::token_cache`]); a write never
/// does.
pub async fn verify(
    state: &AppState,
    presented: &str,
    read_only: bool,
) -> Result<Principal, ApiError> {
    let unauthorized = || {
        ApiError::Unauthorized(
            "the bearer token is not valid; ask for a new one with `headroom token create`".into(),
        )
    };
    let rest = presented.strip_prefix("hr_").ok_or_else(unauthorized)?;
    let (id, secret) = rest.split_once('_').ok_or_else(unauthorized)?;
    if id.len() != 12 || !id.chars().all(|c| c.is_ascii_hexdigit()) || secret.len() > 128 {
        return Err(unauthorized());
    }
    let now = state.engine.clock().now();
    let token = match state.token_cache.lookup(id, now) {
        Lookup::Fresh(token) if read_only => token,
        cached => match state.engine.ledger().token(id).await {
            Ok(token) => {
                state.token_cache.record(id, token.as_ref(), now);
                token.ok_or_else(unauthorized)?
            }
            Err(e) => match cached {
                Lookup::Stale(token) if read_only => token,
                _ => return Err(e.into()),
            },
        },
    };
    if !constant_time_eq(&sha256_hex(secret), &token.secret_sha256) {
        return Err(unauthorized());
    }
    if token.revoked_at.is_some() {
        return Err(ApiError::Unauthorized("this token was revoked".into()));
    }
    let all = token.accounts.iter().any(|a| a == "*");
    Ok(Principal {
        token_id: Some(token.id),
        accounts: (!all).then(|| token.accounts.iter().cloned().collect()),
        scopes: token.scopes.iter().filter_map(|s| s.parse().ok()).collect(),
    })
}

/// The client a request comes from: the peer, or, when the peer is a trusted proxy, the
/// nearest address in `X-Forwarded-For` that is not one (each proxy appends the address it
/// heard from, so only the hops our own proxies appended can be believed).
fn client_address(
    peer: std::net::IpAddr,
    headers: &axum::http::HeaderMap,
    trusted: &[ipnet::IpNet],
) -> std::net::IpAddr {
    let is_trusted = |ip: &std::net::IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .collect();
    let mut client = peer;
    for hop in hops.into_iter().rev() {
        let Ok(ip) = hop.trim().parse::<std::net::IpAddr>() else {
            break;
        };
        client = ip;
        if !is_trusted(&ip) {
            break;
        }
    }
    client
}

/// Paths anyone may call: probes.
fn is_public(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/openapi.json")
}

/// The middleware: puts a [`Principal`] in the request, or answers 401.
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    if is_public(request.uri().path()) {
        request.extensions_mut().insert(Principal::open());
        return next.run(request).await;
    }
    // Per client before anything else: a flood of bad tokens never reaches the ledger. A
    // request with no peer address (an in-process caller) has no client to limit.
    let client = request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| client_address(c.0.ip(), request.headers(), &state.limits.trusted_proxies));
    if let Some(client) = client
        && let Err(wait) = state.admit_client(client)
    {
        return ApiError::RateLimited {
            retry_after_s: wait.as_secs().max(1),
            limit: RateLimit::Client,
        }
        .into_response();
    }
    if !state.require_auth {
        if let Err(limited) = rate_limit(&state, "open", RateLimit::Open) {
            return limited.into_response();
        }
        request.extensions_mut().insert(Principal::open());
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .map(str::to_string);
    let Some(presented) = presented else {
        return ApiError::Unauthorized(
            "send `Authorization: Bearer <token>`; `headroom token create` makes one".into(),
        )
        .into_response();
    };
    let read_only = request.method().is_safe();
    match verify(&state, &presented, read_only).await {
        Ok(principal) => {
            if let Err(limited) = rate_limit(
                &state,
                principal.token_id.as_deref().unwrap_or(""),
                RateLimit::Token,
            ) {
                return limited.into_response();
            }
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

/// Takes one request from `key`'s allowance, or says when to come back.
fn rate_limit(state: &AppState, key: &str, limit: RateLimit) -> Result<(), ApiError> {
    use governor::clock::Clock;
    match state.rate_limiter.check_key(&key.to_string()) {
        Ok(()) => Ok(()),
        Err(not_until) => {
            let wait = not_until.wait_time_from(state.rate_limiter.clock().now());
            Err(ApiError::RateLimited {
                retry_after_s: wait.as_secs().max(1),
                limit,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_is_the_peer_unless_a_trusted_proxy_forwarded_it() {
        let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let forwarded = |v: &str| {
            let mut h = axum::http::HeaderMap::new();
            h.insert("x-forwarded-for", v.parse().unwrap());
            h
        };
        let none = axum::http::HeaderMap::new();
        // A peer we do not trust: its header is whatever it wants to say, so it is ignored.
        assert_eq!(
            client_address(ip("203.0.113.9"), &forwarded("198.51.100.1"), &trusted),
            ip("203.0.113.9")
        );
        // Behind our balancer: the address it heard from.
        assert_eq!(
            client_address(ip("10.0.0.5"), &forwarded("198.51.100.1"), &trusted),
            ip("198.51.100.1")
        );
        // A client that forges a hop before ours is still counted as itself.
        assert_eq!(
            client_address(
                ip("10.0.0.5"),
                &forwarded("1.2.3.4, 198.51.100.1, 10.0.0.7"),
                &trusted
            ),
            ip("198.51.100.1")
        );
        assert_eq!(
            client_address(ip("10.0.0.5"), &none, &trusted),
            ip("10.0.0.5")
        );
        assert_eq!(
            client_address(ip("10.0.0.5"), &forwarded("garbage"), &trusted),
            ip("10.0.0.5")
        );
    }

    #[test]
    fn tokens_are_stored_as_hashes() {
        let now = "2026-11-30T09:00:00Z".parse().unwrap();
        let (text, record) = new_token(&["ml".into()], &[Scope::Capacity], now);
        assert!(text.starts_with(&format!("hr_{}_", record.id)));
        let secret = text.rsplit('_').next().unwrap();
        assert!(!record.secret_sha256.contains(secret));
        assert_eq!(record.secret_sha256, sha256_hex(secret));
        assert!(
            constant_time_eq("abc", "abc")
                && !constant_time_eq("abc", "abd")
                && !constant_time_eq("a", "ab")
        );
    }
}
