//! The background notes' promotion rules, tallied over a run of decisions: before a pool leaves
//! shadow mode its controller must not change direction more than once per cooldown (unless the
//! objective was at risk) and must never scale up on a missing metric. The same tally reads a
//! replay of history (`headroom replay`) and a live shadow pool's decision log
//! (`GET /v1/pools/{name}/shadow-report`).

use std::cmp::Ordering;
use std::collections::VecDeque;

use serde::Serialize;

use crate::Timestamp;
use crate::controller::Signals;
use crate::pool::{PoolSpec, ScalingPolicy};

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
        let fresh = d.signal.filter(|s| s.is_fresh(d.at, policy.signal_max_age));
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

/// What a run of targets would have run and served, by the fluid model (`CapacityModel`): the
/// price of staying ahead (idle GPU-minutes) against the queueing it avoids.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CapacityEstimate {
    /// Replica-hours and GPU-hours the targets' capacity ran (ready and starting).
    pub replica_hours: f64,
    pub gpu_hours: f64,
    /// GPU-minutes of ready capacity above what the recorded arrivals needed while the
    /// modelled queue was empty. Absent when a span had no arrival rate (the model cannot run).
    pub idle_gpu_minutes: Option<f64>,
    /// Request-minutes of waiting the signals recorded (the integral of their queue depth).
    pub history_queue_request_minutes: f64,
    /// Request-minutes of waiting under the targets' capacity (the fluid model), and what that
    /// avoids against the record (negative: the targets would have queued more).
    pub modelled_queue_request_minutes: Option<f64>,
    pub avoided_queue_request_minutes: Option<f64>,
}

/// A fluid model of a pool following a run of targets: a launch serves one cold start after it
/// is asked for, a release takes the newest launch still on its ladder first, then a ready
/// replica; each ready replica serves the pool's `replica_throughput_rps`, and the recorded
/// arrivals queue when they exceed it. Pure: the caller walks time and feeds it what was
/// recorded.
#[derive(Debug, Clone)]
pub struct CapacityModel {
    cold_start: chrono::Duration,
    throughput_rps: f64,
    gpus_per_replica: u32,
    ready: u32,
    /// When each launch still on its ladder serves, oldest first.
    launches: VecDeque<Timestamp>,
    queue: f64,
    estimate: CapacityEstimate,
    idle_gpu_minutes: Option<f64>,
    modelled_minutes: Option<f64>,
}

impl CapacityModel {
    /// The pool with `ready` replicas serving and none on the way.
    pub fn new(pool: &PoolSpec, gpus_per_replica: u32, ready: u32) -> CapacityModel {
        CapacityModel {
            cold_start: chrono::Duration::from_std(pool.ladder.cold_total()).unwrap_or_default(),
            throughput_rps: pool.scaling.replica_throughput_rps,
            gpus_per_replica,
            ready,
            launches: VecDeque::new(),
            queue: 0.0,
            estimate: CapacityEstimate::default(),
            idle_gpu_minutes: Some(0.0),
            modelled_minutes: Some(0.0),
        }
    }

    /// Launches that have climbed their ladder by `now` serve.
    pub fn land(&mut self, now: Timestamp) {
        while self.launches.front().is_some_and(|serves| *serves <= now) {
            self.launches.pop_front();
            self.ready += 1;
        }
    }

    pub fn ready(&self) -> u32 {
        self.ready
    }

    /// Launches still on their ladder.
    pub fn starting(&self) -> u32 {
        u32::try_from(self.launches.len()).unwrap_or(u32::MAX)
    }

    /// Moves toward `target` at `now`: launches for a rise, releases for a fall (the newest
    /// launch on its ladder first, then ready replicas).
    pub fn follow(&mut self, target: u32, now: Timestamp) {
        let provisioned = self.ready.saturating_add(self.starting());
        if target > provisioned {
            let serves = now + self.cold_start;
            self.launches
                .extend(std::iter::repeat_n(serves, (target - provisioned) as usize));
            return;
        }
        let mut surplus = provisioned - target;
        while surplus > 0 && self.launches.pop_back().is_some() {
            surplus -= 1;
        }
        self.ready -= surplus.min(self.ready);
    }

    /// Accounts `span_s` seconds as they stand, against the recorded queue depth and arrival
    /// rate; returns the modelled queue, or `None` without an arrival rate.
    pub fn account(
        &mut self,
        span_s: f64,
        recorded_queue: Option<u64>,
        arrival_rps: Option<f64>,
    ) -> Option<f64> {
        let span_min = span_s / 60.0;
        let running = f64::from(self.ready.saturating_add(self.starting()));
        self.estimate.replica_hours += running * span_s / 3600.0;
        self.estimate.history_queue_request_minutes +=
            recorded_queue.unwrap_or(0) as f64 * span_min;
        let throughput = self.throughput_rps;
        match arrival_rps {
            Some(rate) if throughput > 0.0 => {
                let capacity = f64::from(self.ready) * throughput;
                self.queue = (self.queue + (rate - capacity) * span_s).max(0.0);
                if self.queue == 0.0
                    && let Some(idle) = self.idle_gpu_minutes.as_mut()
                {
                    let spare = (capacity - rate).max(0.0) / throughput;
                    *idle += spare * f64::from(self.gpus_per_replica) * span_min;
                }
                if let Some(total) = self.modelled_minutes.as_mut() {
                    *total += self.queue * span_min;
                }
                Some(self.queue)
            }
            _ => {
                // Without the arrivals the fluid model cannot run: no estimate for the range.
                self.idle_gpu_minutes = None;
                self.modelled_minutes = None;
                None
            }
        }
    }

    /// The totals so far.
    pub fn estimate(&self) -> CapacityEstimate {
        let mut e = self.estimate.clone();
        e.gpu_hours = e.replica_hours * f64::from(self.gpus_per_replica);
        e.idle_gpu_minutes = self.idle_gpu_minutes;
        e.modelled_queue_request_minutes = self.modelled_minutes;
        e.avoided_queue_request_minutes = self
            .modelled_minutes
            .map(|m| e.history_queue_request_minutes - m);
        e
    }
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

    /// Two replicas serve 30 req/s worth 3 while two more climb a one-minute ladder: the modelled
    /// queue grows 10 a second for a minute and drains as fast once they land; then 20 req/s on
    /// four leaves two idle.
    #[test]
    fn the_capacity_model_queues_until_launches_land_then_counts_idle_gpus() {
        let sec = std::time::Duration::from_secs;
        let pool = PoolSpec {
            name: "p".parse().unwrap(),
            account: "a".parse().unwrap(),
            offerings: vec![],
            min_replicas: 0,
            max_replicas: 10,
            max_scale_up_per_step: 10,
            warm_pool_size: 0,
            ladder: crate::pool::ColdStartLadder {
                node_acquisition: sec(60),
                image_pull: sec(0),
                weight_load: sec(0),
                compile: sec(0),
                warmup: sec(0),
            },
            scaling: ScalingPolicy {
                replica_throughput_rps: 10.0,
                ..ScalingPolicy::default()
            },
            supply: crate::pool::SupplyPolicy::default(),
        };
        let mut m = CapacityModel::new(&pool, 8, 2);
        m.follow(4, t(0));
        assert_eq!((m.ready(), m.starting()), (2, 2));
        let mut peak = 0.0f64;
        for s in 0..180 {
            m.land(t(s));
            let rate = if s < 120 { 30.0 } else { 20.0 };
            peak = peak.max(m.account(1.0, Some(100), Some(rate)).unwrap());
        }
        assert_eq!((m.ready(), m.starting()), (4, 0));
        assert_eq!(peak, 600.0);
        let e = m.estimate();
        assert!(
            (e.replica_hours - 4.0 * 180.0 / 3600.0).abs() < 1e-9,
            "{e:?}"
        );
        assert!((e.gpu_hours - 8.0 * e.replica_hours).abs() < 1e-9, "{e:?}");
        assert!(
            (e.history_queue_request_minutes - 300.0).abs() < 1e-9,
            "{e:?}"
        );
        // The triangle 0 → 600 → 0 over two minutes: 600 request-minutes, within a step.
        let modelled = e.modelled_queue_request_minutes.unwrap();
        assert!((modelled - 600.0).abs() < 11.0, "{modelled}");
        let avoided = e.avoided_queue_request_minutes.unwrap();
        assert!((avoided - (300.0 - modelled)).abs() < 1e-9, "{avoided}");
        // The last minute (and the step the queue emptied on): two spare replicas of 8 GPUs.
        let idle = e.idle_gpu_minutes.unwrap();
        assert!((16.0..=16.6).contains(&idle), "{idle}");

        // A release takes the launch still climbing first, then a ready replica.
        m.follow(6, t(180));
        m.follow(3, t(181));
        assert_eq!((m.ready(), m.starting()), (3, 0));
        // A span without arrivals leaves no estimate of the queue or the idle capacity.
        assert_eq!(m.account(1.0, None, None), None);
        let e = m.estimate();
        assert_eq!(
            (e.idle_gpu_minutes, e.avoided_queue_request_minutes),
            (None, None)
        );
    }
}
