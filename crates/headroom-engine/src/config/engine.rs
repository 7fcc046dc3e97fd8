//! `[engine]`: the reconcile loop's pace, holds, cooldowns and the global ceiling.

use std::time::Duration;

use super::raw::RawEngine;
use super::{EngineSettings, OrphanPolicy, Problems};

pub(super) fn engine(raw: &RawEngine, p: &mut Problems) -> EngineSettings {
    let engine = EngineSettings {
        tick: p.duration("engine.tick", &raw.tick),
        hold_horizon: p.duration("engine.hold_horizon", &raw.hold_horizon),
        offering_cooldown: p.duration("engine.offering_cooldown", &raw.offering_cooldown),
        provider_timeout: p.duration("engine.provider_timeout", &raw.provider_timeout),
        global_max_nodes: raw.global_max_nodes,
        price_refresh: p.duration("engine.price_refresh", &raw.price_refresh),
        quota_cache_ttl: p.duration("engine.quota_cache_ttl", &raw.quota_cache_ttl),
        orphan_policy: orphan_policy(&raw.orphan_policy, p),
        transient_failure_limit: raw.transient_failure_limit,
        transient_failure_window: p.duration(
            "engine.transient_failure_window",
            &raw.transient_failure_window,
        ),
        provider_errors_alert_after: p.duration(
            "engine.provider_errors_alert_after",
            &raw.provider_errors_alert_after,
        ),
    };
    transient_bounds(&engine, p);
    if !engine.price_refresh.is_zero() && engine.price_refresh < Duration::from_secs(10) {
        p.add(
            "engine.price_refresh",
            "must be at least 10s (price history calls are rate-limited)",
            "use e.g. \"5m\", or \"0s\" to keep the configured prices",
        );
    }
    let ttl = engine.quota_cache_ttl;
    if !ttl.is_zero() && !(Duration::from_secs(10)..=Duration::from_secs(3600)).contains(&ttl) {
        p.add(
            "engine.quota_cache_ttl",
            "must be between 10s and 1h (quota reads are rate-limited; older counts mislead)",
            "use e.g. \"5m\", or \"0s\" to skip the quota preflight",
        );
    }
    if engine.global_max_nodes == Some(0) {
        p.add(
            "engine.global_max_nodes",
            "must be at least 1",
            "raise it, or remove it for no ceiling",
        );
    }
    if engine.tick < Duration::from_millis(50) || engine.tick > Duration::from_secs(300) {
        p.add(
            "engine.tick",
            "must be between 50ms and 5m",
            "use e.g. \"1s\"",
        );
    }
    engine
}

/// The bound on transient launch failures: a limit of a few, within a window of ticks.
fn transient_bounds(engine: &EngineSettings, p: &mut Problems) {
    if !(1..=100).contains(&engine.transient_failure_limit) {
        p.add(
            "engine.transient_failure_limit",
            "must be between 1 and 100",
            "use e.g. 3 (failures of one offering before it is treated as refused)",
        );
    }
    let window = engine.transient_failure_window;
    if window < Duration::from_secs(1) || window > Duration::from_secs(3600) {
        p.add(
            "engine.transient_failure_window",
            "must be between 1s and 1h",
            "use e.g. \"5m\"",
        );
    }
    let after = engine.provider_errors_alert_after;
    if after < Duration::from_secs(1) || after > Duration::from_secs(24 * 3600) {
        p.add(
            "engine.provider_errors_alert_after",
            "must be between 1s and 24h",
            "use e.g. \"5m\"",
        );
    }
}

fn orphan_policy(text: &str, p: &mut Problems) -> OrphanPolicy {
    match text {
        "terminate" => OrphanPolicy::Terminate,
        "report" => OrphanPolicy::Report,
        other => {
            p.add(
                "engine.orphan_policy",
                format!("{other:?} is not a policy"),
                "write \"terminate\" or \"report\"",
            );
            OrphanPolicy::Terminate
        }
    }
}
