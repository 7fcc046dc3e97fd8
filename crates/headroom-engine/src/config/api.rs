//! `[api]`: the limits every request meets.

use std::time::Duration;

use super::raw::RawApi;
use super::{ApiSettings, Problems};

pub(super) fn api(raw: &RawApi, p: &mut Problems) -> ApiSettings {
    let api = ApiSettings {
        requests_per_second: raw.requests_per_second.unwrap_or(50),
        burst: raw.burst.unwrap_or(100),
        request_timeout: match &raw.request_timeout {
            Some(t) => p.duration("api.request_timeout", t),
            None => Duration::from_secs(30),
        },
    };
    if api.requests_per_second == 0 || api.burst == 0 {
        p.add(
            "api.requests_per_second",
            "the rate and the burst must be at least 1",
            "use e.g. 50 and 100",
        );
    }
    if api.request_timeout.is_zero() {
        p.add(
            "api.request_timeout",
            "must be more than zero",
            "use e.g. \"30s\"",
        );
    }
    api
}
