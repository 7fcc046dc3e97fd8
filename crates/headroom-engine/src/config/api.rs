//! `[api]`: the limits every connection and request meets.

use std::time::Duration;

use super::raw::RawApi;
use super::{ApiSettings, Problems};

/// Inclusive ranges of the durations: below them every request fails or every connection is cut
/// (a `request_timeout` of 1 ns answers every request 503); above them a bound stops bounding (a
/// `token_recheck_interval` of years keeps a revoked token readable for years).
const REQUEST_TIMEOUT: (Duration, Duration) = (secs(1), secs(600));
const TOKEN_RECHECK: (Duration, Duration) = (secs(1), secs(300));
const TOKEN_OUTAGE_GRACE_MAX: Duration = secs(86_400);
const HEADER_READ_TIMEOUT: (Duration, Duration) = (secs(1), secs(300));
const IDLE_TIMEOUT: (Duration, Duration) = (secs(1), secs(3_600));
/// Connections at once, before the descriptor limit `serve` reads at start clamps it.
const MAX_CONNECTIONS: u32 = 1_000_000;

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `value` when it lies in `range`, else one problem naming the range (and the default then).
fn within(
    p: &mut Problems,
    key: &str,
    value: Duration,
    (min, max): (Duration, Duration),
    default: Duration,
) -> Duration {
    if (min..=max).contains(&value) {
        return value;
    }
    let show = |d: Duration| humantime::format_duration(d).to_string();
    p.add(
        key,
        format!("{} is outside {}..={}", show(value), show(min), show(max)),
        format!(
            "use a duration in that range, e.g. \"{}\" (the default)",
            show(default)
        ),
    );
    default
}

pub(super) fn api(raw: &RawApi, p: &mut Problems) -> ApiSettings {
    let mut duration = |field: &str, value: &Option<String>, default: u64, range| {
        let default = Duration::from_secs(default);
        match value {
            // An unparsable value is reported by `Problems::duration` alone.
            Some(t) => match p.duration(field, t) {
                Duration::ZERO if humantime::parse_duration(t).is_err() => default,
                d => within(p, field, d, range, default),
            },
            None => default,
        }
    };
    let request_timeout = duration(
        "api.request_timeout",
        &raw.request_timeout,
        30,
        REQUEST_TIMEOUT,
    );
    let token_recheck_interval = duration(
        "api.token_recheck_interval",
        &raw.token_recheck_interval,
        10,
        TOKEN_RECHECK,
    );
    let token_outage_grace = duration(
        "api.token_outage_grace",
        &raw.token_outage_grace,
        300,
        (Duration::ZERO, TOKEN_OUTAGE_GRACE_MAX),
    );
    let header_read_timeout = duration(
        "api.header_read_timeout",
        &raw.header_read_timeout,
        10,
        HEADER_READ_TIMEOUT,
    );
    let idle_timeout = duration("api.idle_timeout", &raw.idle_timeout, 60, IDLE_TIMEOUT);
    let trusted_proxies = raw
        .trusted_proxies
        .iter()
        .filter_map(|text| {
            let parsed = text
                .parse::<ipnet::IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
            if parsed.is_err() {
                p.add(
                    "api.trusted_proxies",
                    format!("{text:?} is not an address or a CIDR block"),
                    "use e.g. [\"10.0.0.0/8\", \"192.0.2.10\"]",
                );
            }
            parsed.ok()
        })
        .collect();
    let api = ApiSettings {
        requests_per_second: raw.requests_per_second.unwrap_or(50),
        burst: raw.burst.unwrap_or(100),
        client_requests_per_second: raw.client_requests_per_second.unwrap_or(200),
        client_burst: raw.client_burst.unwrap_or(400),
        request_timeout,
        token_recheck_interval,
        token_outage_grace,
        header_read_timeout,
        idle_timeout,
        max_connections: raw.max_connections.unwrap_or(10_000),
        max_connections_per_client: raw.max_connections_per_client.unwrap_or(256),
        trusted_proxies,
    };
    if api.requests_per_second == 0 || api.burst == 0 {
        p.add(
            "api.requests_per_second",
            "the rate and the burst must be at least 1",
            "use e.g. 50 and 100",
        );
    }
    if api.client_requests_per_second == 0 || api.client_burst == 0 {
        p.add(
            "api.client_requests_per_second",
            "the per-client rate and burst must be at least 1",
            "use e.g. 200 and 400",
        );
    }
    if !(1..=MAX_CONNECTIONS).contains(&api.max_connections) {
        p.add(
            "api.max_connections",
            format!("{} is outside 1..={MAX_CONNECTIONS}", api.max_connections),
            "use e.g. 10000 (serve lowers it below its file-descriptor limit)",
        );
    }
    if !(1..=api.max_connections.max(1)).contains(&api.max_connections_per_client) {
        p.add(
            "api.max_connections_per_client",
            format!(
                "{} is outside 1..=api.max_connections ({})",
                api.max_connections_per_client, api.max_connections
            ),
            "use e.g. 256",
        );
    }
    if api.token_outage_grace < api.token_recheck_interval {
        p.add(
            "api.token_outage_grace",
            "must be at least api.token_recheck_interval",
            "use e.g. \"5m\" (read-only requests pass on a cached token for this long while the ledger is down)",
        );
    }
    api
}
