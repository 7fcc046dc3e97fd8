//! The background notes' promotion rules, tallied over a run of decisions: before a pool leaves
//! shadow mode its controller must not change direction more than once per cooldown (unless the
//! objective was at risk) and must never scale up on a missing metric. The same tally reads a
//! replay of history (`headroom replay`) and a live shadow pool's decision log
//! (`GET /v1/pools/{name}/shadow-report`).

use std::cmp::Ordering;

use serde::Serialize;

use crate::Timestamp;
use crate::controller::Signals;
use crate::pool::ScalingPolicy;

/// One decision as the tally reads it: in force from `at` until `until`.
#[derive(Debug, Clone, Copy)]
pub struct DecisionSpan<'a> {
    pub at: Timestamp,
    pub until: Timestamp,
    pub target: u32,
    pub held: bool,
    /// The signal the decision read, if any.
    pub signal: Option<&'a Signals>,
}

/// The tally.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Promotion {
    /// Minutes the decisions cover.
    pub minutes: f64,
    /// Changes of the target's direction (up after down, or down after up).
    pub direction_changes: u32,
    pub direction_changes_per_hour: f64,
    /// Of those, changes sooner than `direction_cooldown` after the previous one.
    pub changes_within_cooldown: u32,
    /// Scale-ups decided with no signal, or one older than `signal_max_age`.
    pub scale_ups_on_missing_signal: u32,
    /// Minutes the controller held (a missing or stale signal, a dispatch failure).
    pub held_minutes: f64,
    /// Minutes the oldest request was past the pool's age objective, as the last fresh signal
    /// said (a stale one says nothing).
    pub minutes_over_age_objective: f64,
    /// Whether both rules held; `blockers` says which did not.
    pub ready: bool,
    pub blockers: Vec<String>,
}

fn minutes(from: Timestamp, to: Timestamp) -> f64 {
    ((to - from).num_milliseconds().max(0) as f64) / 60_000.0
}

/// Tallies `decisions` (in time order) against `policy`.
pub fn tally<'a>(
    policy: &ScalingPolicy,
    decisions: impl IntoIterator<Item = DecisionSpan<'a>>,
) -> Promotion {
    let mut p = Promotion::default();
    let mut previous_target: Option<u32> = None;
    let mut last_change: Option<(Ordering, Timestamp)> = None;
    for d in decisions {
        let span = minutes(d.at, d.until);
        p.minutes += span;
        if d.held {
            p.held_minutes += span;
        }
        let fresh = d.signal.filter(|s| {
            (d.at - s.received_at).to_std().unwrap_or_default() <= policy.signal_max_age
        });
        if let (Some(age), Some(objective)) = (
            fresh.and_then(|s| s.oldest_age_s),
            policy.oldest_age_threshold,
        ) && age > objective.as_secs_f64()
        {
            p.minutes_over_age_objective += span;
        }
        let fresh = fresh.is_some();
        if let Some(before) = previous_target {
            let direction = d.target.cmp(&before);
            if direction != Ordering::Equal {
                if direction == Ordering::Greater && !fresh {
                    p.scale_ups_on_missing_signal += 1;
                }
                if let Some((last, when)) = last_change
                    && last != direction
                {
                    p.direction_changes += 1;
                    if (d.at - when).to_std().unwrap_or_default() < policy.direction_cooldown {
                        p.changes_within_cooldown += 1;
                    }
                }
                last_change = Some((direction, d.at));
            }
        }
        previous_target = Some(d.target);
    }
    if p.minutes > 0.0 {
        p.direction_changes_per_hour = f64::from(p.direction_changes) * 60.0 / p.minutes;
    }
    if p.changes_within_cooldown > 0 {
        p.blockers.push(format!(
            "{} direction changes inside the {}s cooldown",
            p.changes_within_cooldown,
            policy.direction_cooldown.as_secs()
        ));
    }
    if p.scale_ups_on_missing_signal > 0 {
        p.blockers.push(format!(
            "{} scale-ups on a missing signal",
            p.scale_ups_on_missing_signal
        ));
    }
    p.ready = p.blockers.is_empty();
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        "2026-12-01T09:00:00Z".parse::<Timestamp>().unwrap() + chrono::Duration::seconds(s)
    }

    #[test]
    fn reversals_inside_a_cooldown_and_blind_scale_ups_block_promotion() {
        let policy = ScalingPolicy {
            direction_cooldown: std::time::Duration::from_secs(60),
            signal_max_age: std::time::Duration::from_secs(30),
            oldest_age_threshold: Some(std::time::Duration::from_secs(10)),
            ..ScalingPolicy::default()
        };
        let fresh = |at: i64, age: f64| Signals {
            oldest_age_s: Some(age),
            ..Signals::queue(5, 1.0, t(at))
        };
        let (s0, s1, s2) = (fresh(0, 0.0), fresh(30, 20.0), fresh(60, 0.0));
        let spans = [
            (0, 30, 2, false, Some(&s0)),
            (30, 60, 4, false, Some(&s1)),   // up
            (60, 90, 3, false, Some(&s2)),   // down 30 s after the up: inside the cooldown
            (90, 200, 3, true, Some(&s2)),   // held, the signal stale
            (200, 260, 5, false, Some(&s2)), // up on a stale signal, 110 s after the last change
        ]
        .map(|(at, until, target, held, signal)| DecisionSpan {
            at: t(at),
            until: t(until),
            target,
            held,
            signal,
        });
        let p = tally(&policy, spans);
        assert_eq!(p.minutes, 260.0 / 60.0);
        assert_eq!((p.direction_changes, p.changes_within_cooldown), (2, 1));
        assert_eq!(p.scale_ups_on_missing_signal, 1);
        assert_eq!(p.held_minutes, 110.0 / 60.0);
        assert_eq!(p.minutes_over_age_objective, 0.5);
        assert!(!p.ready);
        assert_eq!(p.blockers.len(), 2, "{:?}", p.blockers);
        let calm = tally(&policy, spans.into_iter().take(2));
        assert!(calm.ready, "{calm:?}");
    }
}
