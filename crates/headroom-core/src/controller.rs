//! The scaling controller: signals in, desired ready replicas out.
//!
//! This first version sizes the pool from arrival rate and backlog (the queue-drain rule of the
//! background notes: `ceil(arrivals / per-replica throughput) + ceil(backlog / drain window /
//! per-replica throughput)`), scales up at once, scales down one replica per stabilisation
//! window, and holds — never scales — when the signal is missing or stale. The richer controller
//! (oldest-age thresholds, breach windows, readiness-aware counting) replaces
//! [`desired_replicas`] behind the same inputs.

use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::pool::{PoolSpec, ScalingPolicy};

/// What the pool's queue looked like at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueueSignal {
    /// Requests waiting for a batch slot.
    pub queue_depth: u64,
    /// Arrivals per second over the last window.
    pub arrival_rate_rps: f64,
    /// When the sample was received (stamped by the receiver, not the sender).
    pub received_at: Timestamp,
}

/// What the controller remembers between activations. Plain data, owned by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ControllerMemory {
    /// The target the controller last settled on.
    pub target: u32,
    /// Since when the computed desired count has been below `target`.
    pub below_since: Option<Timestamp>,
}

/// Why the controller did not follow the signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    /// No signal has ever been received for this pool.
    SignalMissing,
    /// The last signal is older than the policy's `signal_max_age`.
    SignalStale,
}

/// The controller's answer for one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Desired ready replicas, within the pool's min and max.
    pub target: u32,
    /// What the signal alone asks for, before clamping to max (above max = unmet demand).
    pub unclamped: u32,
    /// Set when the pool is holding instead of scaling.
    pub hold: Option<HoldReason>,
    pub memory: ControllerMemory,
}

/// Replicas the signal calls for, before any hysteresis or clamping.
pub fn replicas_for_signal(policy: &ScalingPolicy, signal: &QueueSignal) -> u32 {
    let per_replica = policy.replica_throughput_rps.max(f64::MIN_POSITIVE);
    let steady = (signal.arrival_rate_rps.max(0.0) / per_replica).ceil();
    let drain_s = policy.backlog_drain.as_secs_f64().max(1.0);
    let backlog = (signal.queue_depth as f64 / drain_s / per_replica).ceil();
    (steady + backlog).min(u32::MAX as f64) as u32
}

/// One activation of the controller for one pool.
pub fn desired_replicas(
    pool: &PoolSpec,
    signal: Option<&QueueSignal>,
    memory: ControllerMemory,
    now: Timestamp,
) -> Decision {
    let floor = pool.min_replicas;
    let current = memory.target.clamp(floor, pool.max_replicas);
    let hold = |reason| Decision {
        target: current,
        unclamped: current,
        hold: Some(reason),
        memory: ControllerMemory {
            target: current,
            below_since: None,
        },
    };
    let Some(signal) = signal else {
        return hold(HoldReason::SignalMissing);
    };
    let age = (now - signal.received_at).to_std().unwrap_or_default();
    if age > pool.scaling.signal_max_age {
        return hold(HoldReason::SignalStale);
    }

    let unclamped = replicas_for_signal(&pool.scaling, signal);
    let wanted = unclamped.clamp(floor, pool.max_replicas);
    let (target, below_since) = if wanted >= current {
        // Being late is a user-visible outage: scale up at once.
        (wanted, None)
    } else {
        // Being early means climbing the ladder again: remove one replica per window.
        let since = memory.below_since.unwrap_or(now);
        let waited = (now - since).to_std().unwrap_or_default();
        if waited >= pool.scaling.scale_down_stabilization {
            (current - 1, Some(now))
        } else {
            (current, Some(since))
        }
    };
    let below_since = if target > wanted { below_since } else { None };
    Decision {
        target,
        unclamped,
        hold: None,
        memory: ControllerMemory {
            target,
            below_since,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::pool::ColdStartLadder;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pool(min: u32, max: u32) -> PoolSpec {
        PoolSpec {
            name: "p".parse().unwrap(),
            account: "a".parse().unwrap(),
            offerings: vec![],
            min_replicas: min,
            max_replicas: max,
            max_scale_up_per_step: 4,
            warm_pool_size: 0,
            ladder: ColdStartLadder {
                node_acquisition: Duration::from_secs(60),
                image_pull: Duration::from_secs(30),
                weight_load: Duration::from_secs(60),
                compile: Duration::from_secs(30),
                warmup: Duration::from_secs(10),
            },
            scaling: ScalingPolicy {
                replica_throughput_rps: 2.5,
                backlog_drain: Duration::from_secs(60),
                scale_down_stabilization: Duration::from_secs(600),
                signal_max_age: Duration::from_secs(30),
            },
        }
    }

    fn signal(depth: u64, rps: f64, received_at: Timestamp) -> QueueSignal {
        QueueSignal {
            queue_depth: depth,
            arrival_rate_rps: rps,
            received_at,
        }
    }

    /// Seed 000's worked example: 8 workers at 2.5 req/s serve 20 req/s; a 30 s burst at 32 req/s
    /// leaves 360 queued; draining it within 60 s needs three more workers, so eleven.
    #[test]
    fn seed_000_backlog_needs_three_more_workers() {
        let now = at("2026-01-01T09:00:30Z");
        let decision = desired_replicas(
            &pool(1, 50),
            Some(&signal(360, 20.0, now)),
            ControllerMemory {
                target: 8,
                below_since: None,
            },
            now,
        );
        assert_eq!(decision.target, 11);
        assert_eq!(decision.hold, None);
    }

    #[test]
    fn missing_or_stale_signal_holds_the_pool() {
        let now = at("2026-01-01T09:00:00Z");
        let memory = ControllerMemory {
            target: 8,
            below_since: None,
        };
        let missing = desired_replicas(&pool(1, 50), None, memory, now);
        assert_eq!(
            (missing.target, missing.hold),
            (8, Some(HoldReason::SignalMissing))
        );
        let old = signal(10_000, 500.0, at("2026-01-01T08:59:00Z"));
        let stale = desired_replicas(&pool(1, 50), Some(&old), memory, now);
        assert_eq!(
            (stale.target, stale.hold),
            (8, Some(HoldReason::SignalStale))
        );
    }

    #[test]
    fn scales_up_at_once_and_down_one_per_window() {
        let p = pool(2, 50);
        let t0 = at("2026-01-01T09:00:00Z");
        let up = desired_replicas(
            &p,
            Some(&signal(0, 50.0, t0)),
            ControllerMemory::default(),
            t0,
        );
        assert_eq!(up.target, 20);

        // Demand drops to zero: nothing happens for ten minutes...
        let mut memory = up.memory;
        for minute in 1..10 {
            let now = t0 + chrono::Duration::minutes(minute);
            let d = desired_replicas(&p, Some(&signal(0, 0.0, now)), memory, now);
            assert_eq!(d.target, 20, "scaled down after {minute} min");
            memory = d.memory;
        }
        // ...then one replica goes, and the next only after another window.
        let now = t0 + chrono::Duration::minutes(11);
        let d = desired_replicas(&p, Some(&signal(0, 0.0, now)), memory, now);
        assert_eq!(d.target, 19);
        let now2 = now + chrono::Duration::minutes(1);
        let d2 = desired_replicas(&p, Some(&signal(0, 0.0, now2)), d.memory, now2);
        assert_eq!(d2.target, 19);
    }

    #[test]
    fn clamps_to_max_and_reports_unmet_demand() {
        let now = at("2026-01-01T09:00:00Z");
        let d = desired_replicas(
            &pool(1, 10),
            Some(&signal(0, 200.0, now)),
            ControllerMemory::default(),
            now,
        );
        assert_eq!((d.target, d.unclamped), (10, 80));
    }
}
