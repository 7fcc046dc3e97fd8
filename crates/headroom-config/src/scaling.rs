//! `[pools.scaling]`: the controller's rules and their limits; every key but
//! `replica_throughput_rps` has a default.

use std::time::Duration;

use headroom_core::pool::ScalingPolicy;

use super::raw::RawScaling;
use super::{DAY, HOUR, Problems, Within};

pub(super) fn scaling(key: &str, s: &RawScaling, p: &mut Problems) -> ScalingPolicy {
    let d = ScalingPolicy::default();
    let mut duration = |name: &str, value: &Option<String>, default: Duration, within| match value {
        Some(text) => p.duration(&format!("{key}.{name}"), text, within),
        None => default,
    };
    let policy = ScalingPolicy {
        target_queue_per_replica: s.target_queue_per_replica,
        tolerance: s.tolerance.unwrap_or(d.tolerance),
        oldest_age_threshold: s.oldest_age_threshold.as_ref().map(|_| {
            duration(
                "oldest_age_threshold",
                &s.oldest_age_threshold,
                Duration::ZERO,
                Within::secs(1, HOUR, "30s"),
            )
        }),
        replica_throughput_rps: s.replica_throughput_rps,
        replica_throughput_tps: s.replica_throughput_tps,
        backlog_drain: duration(
            "backlog_drain",
            &s.backlog_drain,
            d.backlog_drain,
            Within::secs(1, HOUR, "60s"),
        ),
        target_utilization: s.target_utilization.unwrap_or(d.target_utilization),
        scale_up_breaches: s.scale_up_breaches.unwrap_or(d.scale_up_breaches),
        breach_window: duration(
            "breach_window",
            &s.breach_window,
            d.breach_window,
            Within::secs(0, 600, "15s"),
        ),
        scale_up_limit: s.scale_up_limit.unwrap_or(d.scale_up_limit),
        scale_up_period: duration(
            "scale_up_period",
            &s.scale_up_period,
            d.scale_up_period,
            Within::secs(1, HOUR, "60s"),
        ),
        scale_down_stabilization: duration(
            "scale_down_stabilization",
            &s.scale_down_stabilization,
            d.scale_down_stabilization,
            Within::secs(0, DAY, "10m"),
        ),
        scale_down_fraction: s.scale_down_fraction.unwrap_or(d.scale_down_fraction),
        scale_down_margin: s.scale_down_margin.unwrap_or(d.scale_down_margin),
        scale_down_period: duration(
            "scale_down_period",
            &s.scale_down_period,
            d.scale_down_period,
            Within::secs(0, DAY, "60s"),
        ),
        direction_cooldown: duration(
            "direction_cooldown",
            &s.direction_cooldown,
            d.direction_cooldown,
            Within::secs(0, HOUR, "60s"),
        ),
        min_capacity: s.min_capacity.unwrap_or(d.min_capacity),
        buffer_replicas: s.buffer_replicas.unwrap_or(d.buffer_replicas),
        utilization_high: s.utilization_high.unwrap_or(d.utilization_high),
        signal_max_age: duration(
            "signal_max_age",
            &s.signal_max_age,
            d.signal_max_age,
            Within::secs(1, HOUR, "30s"),
        ),
        shadow: s.shadow,
        forecast: s.forecast.unwrap_or(d.forecast),
        shed_deadlines: [None; 4],
    };
    let mut policy = policy;
    for (tier, text) in &s.shed_deadlines {
        let field = format!("{key}.shed_deadlines.{tier}");
        match headroom_core::Priority::parse(tier) {
            Ok(priority) => {
                let deadline = p.duration(&field, text, Within::secs(1, DAY, "3m"));
                policy.shed_deadlines[priority as usize] = Some(deadline);
            }
            Err(_) => p.add(
                &field,
                format!("{tier:?} is not a priority tier"),
                "use low, normal, high or critical",
            ),
        }
    }
    check(key, &policy, p);
    policy
}

/// The numbers serde cannot check: positive rates, fractions, and counts of at least one.
fn check(key: &str, policy: &ScalingPolicy, p: &mut Problems) {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    let fraction = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
    if !positive(policy.replica_throughput_rps) {
        p.add(
            &format!("{key}.replica_throughput_rps"),
            "must be a positive number",
            "measure successful requests per second per ready replica, e.g. 2.5",
        );
    }
    if policy.replica_throughput_tps.is_some_and(|t| !positive(t)) {
        p.add(
            &format!("{key}.replica_throughput_tps"),
            "must be a positive number",
            "measure tokens per second per ready replica for the request mix, e.g. 2400",
        );
    }
    if policy
        .target_queue_per_replica
        .is_some_and(|t| !positive(t))
    {
        p.add(
            &format!("{key}.target_queue_per_replica"),
            "must be a positive number",
            "use e.g. 2 waiting requests per ready replica",
        );
    }
    if !fraction(policy.tolerance) {
        p.add(
            &format!("{key}.tolerance"),
            "must be between 0 and 1",
            "use e.g. 0.1",
        );
    }
    if !fraction(policy.scale_down_fraction) {
        p.add(
            &format!("{key}.scale_down_fraction"),
            "must be between 0 and 1",
            "use e.g. 0.2",
        );
    }
    if !(policy.target_utilization.is_finite()
        && policy.target_utilization > 0.0
        && policy.target_utilization <= 1.0)
    {
        p.add(
            &format!("{key}.target_utilization"),
            "must be above 0 and at most 1",
            "use e.g. 0.9 to serve arrivals at 90 % of the replicas' throughput",
        );
    }
    if !fraction(policy.scale_down_margin) {
        p.add(
            &format!("{key}.scale_down_margin"),
            "must be between 0 and 1",
            "use e.g. 0.1 to keep a tenth above demand when scaling in",
        );
    }
    if !fraction(policy.utilization_high) {
        p.add(
            &format!("{key}.utilization_high"),
            "must be between 0 and 1",
            "use e.g. 0.7",
        );
    }
    if !(1..=100).contains(&policy.scale_up_breaches) {
        p.add(
            &format!("{key}.scale_up_breaches"),
            "must be between 1 and 100",
            "use 1 to scale up on the first breach, or e.g. 2",
        );
    }
    if !(1..=10_000).contains(&policy.scale_up_limit) {
        p.add(
            &format!("{key}.scale_up_limit"),
            "must be between 1 and 10000",
            "allow at least one replica per scale_up_period",
        );
    }
}
