//! Verified tokens, remembered briefly so that the ledger is not read on every request and a
//! ledger outage does not take read-only status down with it.
//!
//! Two bounds say what a cached answer may cost:
//! - `recheck_interval`: a token verified longer ago than this is read from the ledger again,
//!   so a revocation takes effect within it;
//! - `outage_grace`: while the ledger cannot be read, a token verified within this long still
//!   passes, for read-only requests only (nothing is written on a stale answer).
//!
//! Only tokens the ledger confirmed are cached, so a flood of invented tokens cannot fill it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use headroom_core::Timestamp;
use headroom_ledger::ApiToken;

/// At most this many tokens are remembered; past it the oldest verification is forgotten.
pub const MAX_CACHED_TOKENS: usize = 10_000;

#[derive(Debug)]
pub struct TokenCache {
    recheck_interval: chrono::Duration,
    outage_grace: chrono::Duration,
    entries: Mutex<HashMap<String, Cached>>,
}

#[derive(Debug, Clone)]
struct Cached {
    token: ApiToken,
    verified_at: Timestamp,
}

/// What the cache knows of a token id at an instant.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// Verified within the recheck interval: use it without asking the ledger.
    Fresh(ApiToken),
    /// Verified within the outage grace only: usable for a read-only request when the ledger
    /// cannot answer.
    Stale(ApiToken),
    Unknown,
}

impl TokenCache {
    pub fn new(recheck_interval: Duration, outage_grace: Duration) -> TokenCache {
        let span = |d: Duration| chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
        TokenCache {
            recheck_interval: span(recheck_interval),
            outage_grace: span(outage_grace.max(recheck_interval)),
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn lookup(&self, id: &str, now: Timestamp) -> Lookup {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(id) {
            Some(c) if now - c.verified_at < self.recheck_interval => {
                Lookup::Fresh(c.token.clone())
            }
            Some(c) if now - c.verified_at < self.outage_grace => Lookup::Stale(c.token.clone()),
            _ => Lookup::Unknown,
        }
    }

    /// Remembers what the ledger said of `id` now: a token to trust, or none (revoked,
    /// deleted) to forget.
    pub fn record(&self, id: &str, token: Option<&ApiToken>, now: Timestamp) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let Some(token) = token.filter(|t| t.revoked_at.is_none()) else {
            entries.remove(id);
            return;
        };
        if entries.len() >= MAX_CACHED_TOKENS && !entries.contains_key(id) {
            let oldest = entries
                .iter()
                .min_by_key(|(_, c)| c.verified_at)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                entries.remove(&oldest);
            }
        }
        entries.insert(
            id.to_string(),
            Cached {
                token: token.clone(),
                verified_at: now,
            },
        );
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: &str, at: Timestamp) -> ApiToken {
        ApiToken {
            id: id.into(),
            secret_sha256: "00".into(),
            accounts: vec!["ml".into()],
            scopes: vec!["reports".into()],
            created_at: at,
            revoked_at: None,
        }
    }

    #[test]
    fn a_verification_is_fresh_then_stale_then_forgotten() {
        let t0: Timestamp = "2026-12-02T09:00:00Z".parse().unwrap();
        let cache = TokenCache::new(Duration::from_secs(10), Duration::from_secs(300));
        cache.record("a", Some(&token("a", t0)), t0);
        let at = |s: i64| t0 + chrono::Duration::seconds(s);
        assert!(matches!(cache.lookup("a", at(9)), Lookup::Fresh(_)));
        assert!(matches!(cache.lookup("a", at(10)), Lookup::Stale(_)));
        assert!(matches!(cache.lookup("a", at(299)), Lookup::Stale(_)));
        assert_eq!(cache.lookup("a", at(300)), Lookup::Unknown);
        assert_eq!(cache.lookup("b", at(0)), Lookup::Unknown);
    }

    #[test]
    fn a_revoked_token_is_forgotten_and_the_cache_stays_bounded() {
        let t0: Timestamp = "2026-12-02T09:00:00Z".parse().unwrap();
        let cache = TokenCache::new(Duration::from_secs(10), Duration::from_secs(300));
        let mut revoked = token("a", t0);
        cache.record("a", Some(&revoked), t0);
        revoked.revoked_at = Some(t0);
        cache.record("a", Some(&revoked), t0);
        assert_eq!(cache.lookup("a", t0), Lookup::Unknown);
        for i in 0..MAX_CACHED_TOKENS + 5 {
            let id = format!("{i:012}");
            let at = t0 + chrono::Duration::milliseconds(i as i64);
            cache.record(&id, Some(&token(&id, at)), at);
        }
        assert_eq!(cache.len(), MAX_CACHED_TOKENS);
        assert_eq!(cache.lookup(&format!("{:012}", 0), t0), Lookup::Unknown);
    }
}
