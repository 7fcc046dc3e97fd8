//! `[api]`: the limits every request meets.

use std::time::Duration;

use super::raw::RawApi;
use super::{ApiSettings, DAY, Problems, Within};

pub(super) fn api(raw: &RawApi, p: &mut Problems) -> ApiSettings {
    let mut duration = |field: &str, value: &Option<String>, default: u64, within| match value {
        Some(t) => p.duration(field, t, within),
        None => Duration::from_secs(default),
    };
    let request_timeout = duration(
        "api.request_timeout",
        &raw.request_timeout,
        30,
        Within::millis(100, 600_000, "30s"),
    );
    // The revocation bound: a cached token is checked again at least every 5 minutes.
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
