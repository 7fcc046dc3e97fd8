//! `[engine]`: the reconcile loop's pace, holds, cooldowns and the global ceiling. Every duration
//! has a range, and the hold horizon is checked against the loop's pace and the pools' ladders,
//! so no accepted configuration lets a billed node run on without a hold.

use headroom_core::PoolSpec;

use super::raw::RawEngine;
use super::{DAY, EngineSettings, HOUR, OrphanPolicy, Problems, Within};

pub(super) fn engine(raw: &RawEngine, p: &mut Problems) -> EngineSettings {
    let engine = EngineSettings {
        tick: p.duration("engine.tick", &raw.tick, Within::millis(50, 300_000, "1s")),
        hold_horizon: p.duration(
            "engine.hold_horizon",
            &raw.hold_horizon,
            Within::secs(60, 7 * DAY, "1h"),
        ),
        offering_cooldown: p.duration(
            "engine.offering_cooldown",
            &raw.offering_cooldown,
            Within::secs(1, DAY, "3m"),
        ),
        provider_timeout: p.duration(
            "engine.provider_timeout",
            &raw.provider_timeout,
            Within::millis(100, 600_000, "60s"),
        ),
        global_max_nodes: raw.global_max_nodes,
        price_refresh: p.duration(
            "engine.price_refresh",
            &raw.price_refresh,
            // Price history calls are rate-limited.
            Within::secs(10, DAY, "5m").or_off(),
        ),
        quota_cache_ttl: p.duration(
            "engine.quota_cache_ttl",
            &raw.quota_cache_ttl,
            // Quota reads are rate-limited; older counts mislead.
            Within::secs(10, HOUR, "5m").or_off(),
        ),
        orphan_policy: orphan_policy(&raw.orphan_policy, p),
        transient_failure_limit: raw.transient_failure_limit,
        transient_failure_window: p.duration(
            "engine.transient_failure_window",
            &raw.transient_failure_window,
            Within::secs(1, HOUR, "5m"),
        ),
        provider_errors_alert_after: p.duration(
            "engine.provider_errors_alert_after",
            &raw.provider_errors_alert_after,
            Within::secs(1, DAY, "5m"),
        ),
    };
    if !(1..=100).contains(&engine.transient_failure_limit) {
        p.add(
            "engine.transient_failure_limit",
            "must be between 1 and 100",
            "use e.g. 3 (failures of one offering before it is treated as refused)",
        );
    }
    if engine
        .global_max_nodes
        .is_some_and(|n| !(1..=1_000_000).contains(&n))
    {
        p.add(
            "engine.global_max_nodes",
            "must be between 1 and 1000000",
            "raise it, or remove it for no ceiling",
        );
    }
    horizon_covers_a_round(&engine, p);
    engine
}

/// A hold must outlast the renewal that replaces it: renewals lead a lapse by two rounds of the
/// loop (a tick and one cloud call that runs to its timeout), and never by more than half the
/// horizon, so the horizon is at least four rounds.
fn horizon_covers_a_round(engine: &EngineSettings, p: &mut Problems) {
    if [
        "engine.hold_horizon",
        "engine.tick",
        "engine.provider_timeout",
    ]
    .iter()
    .any(|k| p.reported(k))
    {
        return;
    }
    let round = engine.tick.saturating_add(engine.provider_timeout);
    let least = round.saturating_mul(4);
    if engine.hold_horizon < least {
        p.add(
            "engine.hold_horizon",
            format!(
                "{} is shorter than four rounds of the loop (engine.tick + engine.provider_timeout = {}), so a hold could lapse before its renewal",
                humantime::format_duration(engine.hold_horizon),
                humantime::format_duration(round)
            ),
            format!(
                "make it at least {}, or shorten engine.tick or engine.provider_timeout",
                humantime::format_duration(least)
            ),
        );
    }
}

/// A node climbing its ladder is billed: its launch hold must cover the climb with room to
/// spare, so that only a node that overruns its estimates is renewed while it climbs.
pub(super) fn horizon_covers_the_ladders(
    engine: &EngineSettings,
    pools: &[PoolSpec],
    p: &mut Problems,
) {
    if p.reported("engine.hold_horizon") {
        return;
    }
    let Some(longest) = pools.iter().max_by_key(|pool| pool.ladder.cold_total()) else {
        return;
    };
    let least = longest.ladder.cold_total().saturating_mul(2);
    if engine.hold_horizon < least {
        p.add(
            "engine.hold_horizon",
            format!(
                "{} is less than twice pool {}'s cold-start ladder ({}), so its nodes' holds would lapse while they boot",
                humantime::format_duration(engine.hold_horizon),
                longest.name,
                humantime::format_duration(longest.ladder.cold_total())
            ),
            format!(
                "make it at least {}",
                humantime::format_duration(least)
            ),
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
