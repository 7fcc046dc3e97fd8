//! `[api]`: the limits every connection and request meets. Below their ranges every request
//! fails or every connection is cut (a `request_timeout` of 1 ns answers every request 503);
//! above them a bound stops bounding (a `token_recheck_interval` of years keeps a revoked token
//! readable for years).

use std::time::Duration;

use super::raw::RawApi;
use super::{ApiSettings, DAY, HOUR, Problems, Within};

/// Connections at once, before the descriptor limit `serve` reads at start clamps it.
const MAX_CONNECTIONS: u32 = 1_000_000;
/// Requests per second (and bursts) a limit may allow.
const MAX_RATE: u32 = 1_000_000;
/// Requests handled at once: each holds memory and, most of them, a ledger connection's turn,
/// so past a hundred thousand the limit no longer bounds anything.
const MAX_REQUESTS_IN_FLIGHT: u32 = 100_000;

pub(super) fn api(raw: &RawApi, p: &mut Problems) -> ApiSettings {
    let mut duration = |field: &str, value: &Option<String>, default: u64, within| match value {
        Some(t) => p.duration(field, t, within),
        None => Duration::from_secs(default),
    };
    let request_timeout = duration(
        "api.request_timeout",
        &raw.request_timeout,
        30,
        Within::secs(1, 600, "30s"),
    );
    // The revocation bound for reads: a cached token is checked again at least every 5 minutes.
    let token_recheck_interval = duration(
        "api.token_recheck_interval",
        &raw.token_recheck_interval,
        10,
        Within::secs(1, 300, "10s"),
    );
    let token_outage_grace = duration(
        "api.token_outage_grace",
        &raw.token_outage_grace,
        300,
        Within::secs(1, DAY, "5m"),
    );
    let header_read_timeout = duration(
        "api.header_read_timeout",
        &raw.header_read_timeout,
        10,
        Within::secs(1, 300, "10s"),
    );
    let idle_timeout = duration(
        "api.idle_timeout",
        &raw.idle_timeout,
        60,
        Within::secs(1, HOUR, "60s"),
    );
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
        max_requests_in_flight: raw.max_requests_in_flight.unwrap_or(512),
        trusted_proxies,
    };
    for (key, value, example) in [
        ("api.requests_per_second", api.requests_per_second, 50),
        ("api.burst", api.burst, 100),
        (
            "api.client_requests_per_second",
            api.client_requests_per_second,
            200,
        ),
        ("api.client_burst", api.client_burst, 400),
    ] {
        if !(1..=MAX_RATE).contains(&value) {
            p.add(
                key,
                format!("{value} is outside 1..={MAX_RATE}"),
                format!("use e.g. {example}"),
            );
        }
    }
    if !(1..=MAX_CONNECTIONS).contains(&api.max_connections) {
        p.add(
            "api.max_connections",
            format!("{} is outside 1..={MAX_CONNECTIONS}", api.max_connections),
            "use e.g. 10000 (serve lowers it below its file-descriptor limit)",
        );
    }
    if !p.reported("api.max_connections")
        && !(1..=api.max_connections).contains(&api.max_connections_per_client)
    {
        p.add(
            "api.max_connections_per_client",
            format!(
                "{} is outside 1..=api.max_connections ({})",
                api.max_connections_per_client, api.max_connections
            ),
            "use e.g. 256",
        );
    }
    if !(1..=MAX_REQUESTS_IN_FLIGHT).contains(&api.max_requests_in_flight) {
        p.add(
            "api.max_requests_in_flight",
            format!(
                "{} is outside 1..={MAX_REQUESTS_IN_FLIGHT}",
                api.max_requests_in_flight
            ),
            "use e.g. 512",
        );
    }
    let either = ["api.token_outage_grace", "api.token_recheck_interval"];
    if !either.iter().any(|k| p.reported(k)) && api.token_outage_grace < api.token_recheck_interval
    {
        p.add(
            "api.token_outage_grace",
            "must be at least api.token_recheck_interval",
            "use e.g. \"5m\" (read-only requests pass on a cached token for this long while the ledger is down)",
        );
    }
    api
}
