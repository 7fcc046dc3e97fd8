//! Headroom's REST API. Build the router with [`app`]; serve it with axum.
//!
//! Every error is an RFC 9457 `application/problem+json` body that says what was wrong and how
//! to fix it. Bad input is rejected before anything is written.

pub mod auth;
mod http_metrics;
mod problem;
mod routes;
pub mod server;
mod shed;
pub mod token_cache;

use std::sync::Arc;

use axum::Router;
use headroom_engine::Engine;

pub use problem::{ApiError, Problem};
pub use routes::openapi;

/// Request bodies larger than this are refused with 413 before they are read.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Requests per second each token (or, without authentication, the whole API) may make, with
/// a burst on top; past it the API answers 429 with Retry-After.
pub type RateLimiter = KeyedLimiter<String>;

/// A keyed limiter that refills on the engine's clock ([`LimiterClock`]).
pub type KeyedLimiter<K> = governor::RateLimiter<
    K,
    governor::state::keyed::DashMapStateStore<K>,
    LimiterClock,
    governor::middleware::NoOpMiddleware<governor::nanos::Nanos>,
>;

/// The engine's [`Clock`](headroom_cloud::Clock) as `governor` reads it: time since the limiter
/// was made. The limiters refill in the time the rest of the API keeps — the wall clock's
/// monotonic run in `serve` (as `governor`'s default clock), demo time in `demo`, and a manual
/// clock's in tests, which can then refill a limiter without waiting.
#[derive(Debug, Clone)]
pub struct LimiterClock {
    clock: Arc<dyn headroom_cloud::Clock>,
    origin: headroom_core::Timestamp,
}

impl LimiterClock {
    pub fn new(clock: Arc<dyn headroom_cloud::Clock>) -> LimiterClock {
        let origin = clock.now();
        LimiterClock { clock, origin }
    }
}

impl governor::clock::Clock for LimiterClock {
    type Instant = governor::nanos::Nanos;

    /// A clock set back (a manual one can be) reads as the origin: time since never goes
    /// negative.
    fn now(&self) -> governor::nanos::Nanos {
        let since = (self.clock.now() - self.origin)
            .to_std()
            .unwrap_or_default();
        governor::nanos::Nanos::from(since)
    }
}

/// The limits every request meets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Per token, after it is verified.
    pub requests_per_second: u32,
    pub burst: u32,
    /// Per client address, before any token is looked up: a flood of invented tokens is
    /// limited before it reaches the ledger.
    pub client_requests_per_second: u32,
    pub client_burst: u32,
    /// A request still unanswered after this gets a 503 problem (the handler is dropped).
    pub request_timeout: std::time::Duration,
    /// For read-only requests, a verified token is read from the ledger again after this: the
    /// bound on how long a revocation takes to bite on reads (writes always read the ledger).
    pub token_recheck_interval: std::time::Duration,
    /// While the ledger is down, tokens verified within this long still pass for read-only
    /// requests.
    pub token_outage_grace: std::time::Duration,
    /// Peers whose `X-Forwarded-For` names the client the per-client limit counts (load
    /// balancers); behind none of them the peer address is the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The connection limits [`server::serve`] keeps (see there).
    pub header_read_timeout: std::time::Duration,
    pub idle_timeout: std::time::Duration,
    pub max_connections: u32,
    pub max_connections_per_client: u32,
    /// Requests handled at once; past it a request is answered 503 at once (see [`shed`]).
    pub max_requests_in_flight: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            requests_per_second: 50,
            burst: 100,
            client_requests_per_second: 200,
            client_burst: 400,
            request_timeout: std::time::Duration::from_secs(30),
            token_recheck_interval: std::time::Duration::from_secs(10),
            token_outage_grace: std::time::Duration::from_secs(300),
            trusted_proxies: Vec::new(),
            header_read_timeout: std::time::Duration::from_secs(10),
            idle_timeout: std::time::Duration::from_secs(60),
            max_connections: 10_000,
            max_connections_per_client: 256,
            max_requests_in_flight: 512,
        }
    }
}

/// Client addresses the per-client limiter remembers before it forgets idle ones.
const MAX_TRACKED_CLIENTS: usize = 10_000;

/// What handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    /// Bearer tokens required (the default for `serve`); off only for `demo` on loopback.
    pub require_auth: bool,
    pub limits: Limits,
    pub rate_limiter: Arc<RateLimiter>,
    pub client_limiter: Arc<KeyedLimiter<std::net::IpAddr>>,
    pub token_cache: Arc<token_cache::TokenCache>,
    /// One permit per request in hand, `limits.max_requests_in_flight` in all.
    pub in_flight: Arc<tokio::sync::Semaphore>,
}

fn quota(per_second: u32, burst: u32) -> governor::Quota {
    let nonzero = |n: u32| std::num::NonZeroU32::new(n.max(1)).unwrap_or(std::num::NonZeroU32::MIN);
    governor::Quota::per_second(nonzero(per_second)).allow_burst(nonzero(burst))
}

impl AppState {
    /// The API over `engine`; its rate limiters refill on the engine's clock.
    pub fn new(engine: Arc<Engine>, require_auth: bool, limits: Limits) -> AppState {
        let clock = LimiterClock::new(engine.clock().clone());
        AppState {
            require_auth,
            limits: limits.clone(),
            rate_limiter: Arc::new(governor::RateLimiter::dashmap_with_clock(
                quota(limits.requests_per_second, limits.burst),
                clock.clone(),
            )),
            client_limiter: Arc::new(governor::RateLimiter::dashmap_with_clock(
                quota(limits.client_requests_per_second, limits.client_burst),
                clock,
            )),
            engine,
            token_cache: Arc::new(token_cache::TokenCache::new(
                limits.token_recheck_interval,
                limits.token_outage_grace,
            )),
            in_flight: Arc::new(tokio::sync::Semaphore::new(
                usize::try_from(limits.max_requests_in_flight.max(1)).unwrap_or(usize::MAX),
            )),
        }
    }

    /// Takes one request from a client address's allowance.
    pub(crate) fn admit_client(&self, client: std::net::IpAddr) -> Result<(), std::time::Duration> {
        if self.client_limiter.len() > MAX_TRACKED_CLIENTS {
            self.client_limiter.retain_recent();
        }
        self.client_limiter.check_key(&client).map_err(|not_until| {
            use governor::clock::Clock;
            not_until.wait_time_from(self.client_limiter.clock().now())
        })
    }
}

/// The External Metrics API for the kube-apiserver's aggregation layer, served by `serve` on
/// its own TLS listener that requires the aggregator's client certificate.
pub fn external_metrics_app(state: AppState) -> Router {
    observed(routes::external_metrics_router(state.clone()), state)
}

/// The API router.
pub fn app(state: AppState) -> Router {
    observed(routes::router(state.clone()), state)
}

/// Every request counted and timed, the shed ones too: the in-flight limit sits inside the
/// metrics layer.
fn observed(router: Router, state: AppState) -> Router {
    router
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            shed::when_busy,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state,
            http_metrics::observe,
        ))
}
