//! The scaling controller: signals in, desired replicas out, with the reason.
//!
//! Three rules each propose a replica count, and the largest wins:
//! - **HPA**: `ceil(ready × metric / target)` where the metric is waiting requests per ready
//!   replica; a usage ratio within the tolerance of 1 changes nothing. Starting replicas count
//!   toward the target (capacity on the way) but not toward the average (not ready).
//! - **Backlog drain** (the background notes' rule): `ceil(arrivals / throughput) +
//!   ceil(backlog / drain window / throughput)`, with the throughput measured from departures
//!   while the replicas are saturated.
//! - **Oldest age**: when the oldest eligible request has waited past its threshold while
//!   arrivals exceed departures for two consecutive windows, add what the excess needs.
//!
//! Around them: scale up only after consecutive breaching windows and within a per-period
//! limit; scale down one replica per period, only after a long stabilisation below a fraction of
//! the thresholds; no more than one change of direction per cooldown; and hold — neither up nor
//! down — when the signal is missing or stale, or when work waits but nothing departs (a
//! dispatch failure more replicas would not fix). Every decision carries the rule that won, a
//! sentence saying why, and the three-way classification of queue age against utilisation.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::pool::{PoolSpec, ScalingPolicy};

/// What a pool's serving layer reports at one instant. Only the queue depth is required.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Signals {
    /// Requests waiting for a batch slot.
    pub queue_depth: u64,
    /// Age of the oldest eligible request, in seconds.
    pub oldest_age_s: Option<f64>,
    /// Arrivals per second over the last window.
    pub arrival_rate_rps: Option<f64>,
    /// Successful completions per second over the last window.
    pub departure_rate_rps: Option<f64>,
    pub error_rate_rps: Option<f64>,
    /// Share of batch slots in use, 0 to 1.
    pub batch_occupancy: Option<f64>,
    /// Share of time a kernel ran, 0 to 1, as the usual exporter reports it.
    pub gpu_utilization: Option<f64>,
    /// When the sample was received (stamped by the receiver, not the sender).
    pub received_at: Timestamp,
}

impl Signals {
    /// A sample with only a queue depth and an arrival rate.
    pub fn queue(queue_depth: u64, arrival_rate_rps: f64, received_at: Timestamp) -> Signals {
        Signals {
            queue_depth,
            oldest_age_s: None,
            arrival_rate_rps: Some(arrival_rate_rps),
            departure_rate_rps: None,
            error_rate_rps: None,
            batch_occupancy: None,
            gpu_utilization: None,
            received_at,
        }
    }
}

/// The replicas the controller sees, counted separately: only ready ones are capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReplicaCounts {
    /// Launches the cloud has not answered with a running node yet.
    pub requested: u32,
    /// Climbing the cold-start ladder.
    pub starting: u32,
    pub ready: u32,
    pub draining: u32,
}

impl ReplicaCounts {
    /// Ready plus on the way: what a new target is compared with.
    pub fn provisioned(&self) -> u32 {
        self.requested + self.starting + self.ready
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Up,
    Down,
}

/// What the controller remembers between activations. Plain data, owned by the caller.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ControllerMemory {
    /// The target the controller last settled on.
    pub target: u32,
    /// Consecutive windows in which the rules asked for more, and when the last one began.
    pub breach_windows: u32,
    pub breach_window_at: Option<Timestamp>,
    /// Consecutive windows with the oldest age past its threshold and arrivals above departures.
    pub age_windows: u32,
    pub age_window_at: Option<Timestamp>,
    /// Since when load has been low enough to scale down, and when the last replica went.
    pub low_since: Option<Timestamp>,
    pub last_scale_down_at: Option<Timestamp>,
    /// The last change of target and its direction.
    pub last_change: Option<(Timestamp, Direction)>,
    /// Scale-ups within the current period: bounded by `scale_up_limit` entries.
    pub scale_ups: Vec<(Timestamp, u32)>,
}

/// Which rule set the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// `min_replicas` or `min_capacity`.
    Floor,
    Hpa,
    BacklogDrain,
    OldestAge,
    /// Nothing asked for a change: the target stays.
    Steady,
    /// One replica removed after the stabilisation window.
    ScaleDown,
    /// The controller did not follow the signal; see the hold reason.
    Hold,
}

/// Why the controller is not scaling at all (the HPA's ScalingActive=False, made visible).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    /// No signal has ever been received for this pool.
    SignalMissing,
    /// The last signal is older than the policy's `signal_max_age`.
    SignalStale,
    /// Work waits but nothing departs: more replicas would not help; look at dispatch.
    DispatchFailure,
    /// The direction changed less than `direction_cooldown` ago.
    DirectionCooldown,
}

/// Why the target is below what the rules asked for (the HPA's ScalingLimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// Waiting for the next consecutive breaching window.
    BreachWindow,
    /// `scale_up_limit` replicas were already added this period.
    ScaleUpPeriod,
    MaxReplicas,
}

/// The three-way reading of queue age against utilisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Classification {
    /// Age high, utilisation high: genuine capacity pressure.
    CapacityPressure,
    /// Age high, utilisation low: dispatch, CPU, dependency, batching or metric problem.
    DispatchOrDependency,
    /// Age low, utilisation high: efficient operation.
    Healthy,
    /// Age low, utilisation low.
    Idle,
}

/// The controller's answer for one pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Desired replicas (ready plus on the way), within the pool's bounds.
    pub target: u32,
    /// What the rules asked for before limits and the max-replicas clamp.
    pub unclamped: u32,
    pub rule: Rule,
    /// One sentence: the numbers behind the rule that won.
    pub reason: String,
    pub hold: Option<HoldReason>,
    pub limited: Option<Limit>,
    pub classification: Option<Classification>,
    /// Every rule's answer, so a reader sees what lost as well as what won.
    pub proposals: Vec<Proposal>,
    #[serde(skip)]
    pub memory: ControllerMemory,
}

/// One rule's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Proposal {
    pub rule: Rule,
    pub replicas: u32,
}

/// The HPA rule: `ceil(current × metric / target)`, unchanged within the tolerance.
pub fn hpa_rule(current: u32, metric: f64, target: f64, tolerance: f64) -> u32 {
    if !(target > 0.0 && metric.is_finite()) {
        return current;
    }
    let ratio = metric / target;
    // The epsilon keeps 1.1 against 1.0 inside a 0.1 tolerance despite binary fractions.
    if (ratio - 1.0).abs() <= tolerance + 1e-9 {
        return current;
    }
    clamp_u32((current as f64 * ratio).ceil())
}

/// The backlog-drain rule: replicas for the arrivals plus replicas to drain the backlog in time.
pub fn drain_rule(arrival_rps: f64, backlog: f64, drain: Duration, per_replica_rps: f64) -> u32 {
    let per_replica = per_replica_rps.max(f64::MIN_POSITIVE);
    let steady = (arrival_rps.max(0.0) / per_replica).ceil();
    let extra = (backlog.max(0.0) / drain.as_secs_f64().max(1.0) / per_replica).ceil();
    clamp_u32(steady + extra)
}

fn clamp_u32(x: f64) -> u32 {
    if x.is_nan() || x <= 0.0 {
        0
    } else {
        x.min(u32::MAX as f64) as u32
    }
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    (now - since).to_std().unwrap_or_default()
}

/// Counts a window that meets a condition: a new window opens once the last is `window` old.
fn count_window(count: &mut u32, at: &mut Option<Timestamp>, window: Duration, now: Timestamp) {
    if at.is_none_or(|t| elapsed(t, now) >= window) {
        *count = count.saturating_add(1);
        *at = Some(now);
    }
}

/// Successful throughput per ready replica: measured from departures while the replicas are
/// saturated (work waits), otherwise the configured figure.
fn throughput(policy: &ScalingPolicy, signals: &Signals, ready: u32) -> f64 {
    match signals.departure_rate_rps {
        Some(departures) if signals.queue_depth > 0 && ready > 0 && departures > 0.0 => {
            departures / ready as f64
        }
        _ => policy.replica_throughput_rps,
    }
}

fn classify(policy: &ScalingPolicy, s: &Signals, ready: u32) -> Option<Classification> {
    let utilization = s.gpu_utilization?;
    let age_high = match (policy.oldest_age_threshold, s.oldest_age_s) {
        (Some(threshold), Some(age)) => age >= threshold.as_secs_f64(),
        _ => match policy.target_queue_per_replica {
            Some(target) => s.queue_depth as f64 / ready.max(1) as f64 > target,
            None => s.queue_depth > 0,
        },
    };
    Some(match (age_high, utilization >= policy.utilization_high) {
        (true, true) => Classification::CapacityPressure,
        (true, false) => Classification::DispatchOrDependency,
        (false, true) => Classification::Healthy,
        (false, false) => Classification::Idle,
    })
}

/// One activation of the controller for one pool.
pub fn decide(
    pool: &PoolSpec,
    signals: Option<&Signals>,
    counts: ReplicaCounts,
    mut memory: ControllerMemory,
    now: Timestamp,
) -> Decision {
    let step = Activation::new(pool, &memory, now);
    let s = match step.fresh_signal(signals) {
        Ok(s) => s,
        Err((reason, why)) => return step.held(memory, reason, why, None),
    };
    let classification = classify(&pool.scaling, s, counts.ready);
    if let Some(why) = step.dispatch_failure(s, counts) {
        return step.held(memory, HoldReason::DispatchFailure, why, classification);
    }
    let proposals = step.proposals(s, counts, &mut memory);
    let winner = Winner::largest(&step, proposals, classification);
    if winner.wanted > step.current {
        step.scale_up(&winner, memory)
    } else {
        step.scale_down(&winner, s, counts, memory)
    }
}

/// What every step of one activation reads: the pool, its bounds, and the instant.
struct Activation<'a> {
    pool: &'a PoolSpec,
    policy: &'a ScalingPolicy,
    /// `min_replicas` or `min_capacity`, whichever is higher, never above `max_replicas`.
    floor: u32,
    /// The last target, within the bounds as they are now.
    current: u32,
    now: Timestamp,
}

/// Each rule's proposal with the sentence behind it.
type Candidate = (Rule, u32, String);

/// The rule that won and what every answer past the holds carries.
struct Winner {
    rule: Rule,
    /// What the rules asked for before limits and the max-replicas clamp.
    unclamped: u32,
    /// The rules' answer within the pool's bounds.
    wanted: u32,
    /// Set when the rules asked for more than `max_replicas`.
    max_limited: Option<Limit>,
    why: String,
    classification: Option<Classification>,
    proposals: Vec<Proposal>,
}

impl Activation<'_> {
    fn new<'a>(pool: &'a PoolSpec, memory: &ControllerMemory, now: Timestamp) -> Activation<'a> {
        let policy = &pool.scaling;
        let floor = pool
            .min_replicas
            .max(policy.min_capacity)
            .min(pool.max_replicas);
        Activation {
            pool,
            policy,
            floor,
            current: memory.target.clamp(floor, pool.max_replicas),
            now,
        }
    }

    /// A decision that does not follow the signal: the target stays and the windows that
    /// lead to a change start over.
    fn held(
        &self,
        memory: ControllerMemory,
        reason: HoldReason,
        why: String,
        classification: Option<Classification>,
    ) -> Decision {
        Decision {
            target: self.current,
            unclamped: self.current,
            rule: Rule::Hold,
            reason: why,
            hold: Some(reason),
            limited: None,
            classification,
            proposals: Vec::new(),
            memory: ControllerMemory {
                target: self.current,
                breach_windows: 0,
                breach_window_at: None,
                low_since: None,
                ..memory
            },
        }
    }

    /// The signal to act on, or why there is none: never received, or older than
    /// `signal_max_age`.
    fn fresh_signal<'s>(
        &self,
        signals: Option<&'s Signals>,
    ) -> Result<&'s Signals, (HoldReason, String)> {
        let current = self.current;
        let Some(s) = signals else {
            let why = format!("no signal has been received; holding at {current}");
            return Err((HoldReason::SignalMissing, why));
        };
        let age = elapsed(s.received_at, self.now);
        if age > self.policy.signal_max_age {
            let why = format!(
                "the last signal is {}s old (max {}s); holding at {current}",
                age.as_secs(),
                self.policy.signal_max_age.as_secs()
            );
            return Err((HoldReason::SignalStale, why));
        }
        Ok(s)
    }

    /// Why more replicas would not help, if work waits but (almost) nothing departs.
    fn dispatch_failure(&self, s: &Signals, counts: ReplicaCounts) -> Option<String> {
        let departures = s.departure_rate_rps?;
        let expected_rps = counts.ready as f64 * self.policy.replica_throughput_rps;
        (s.queue_depth > 0 && counts.ready > 0 && departures < 0.05 * expected_rps).then(|| {
            format!(
                "{} requests wait but only {departures:.2}/s depart from {} ready replicas; more replicas would not help, look at dispatch",
                s.queue_depth, counts.ready
            )
        })
    }

    /// Every rule's proposal, the floor first; the oldest-age rule counts its windows in
    /// `memory`.
    fn proposals(
        &self,
        s: &Signals,
        counts: ReplicaCounts,
        memory: &mut ControllerMemory,
    ) -> Vec<Candidate> {
        let floor_why = format!(
            "min_replicas {} / min_capacity {}",
            self.pool.min_replicas, self.policy.min_capacity
        );
        let per_replica_rps = throughput(self.policy, s, counts.ready);
        [
            Some((Rule::Floor, self.floor, floor_why)),
            self.hpa_proposal(s, counts),
            self.drain_proposal(s, counts, per_replica_rps),
            self.oldest_age_proposal(s, per_replica_rps, memory),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn hpa_proposal(&self, s: &Signals, counts: ReplicaCounts) -> Option<Candidate> {
        let target = self.policy.target_queue_per_replica?;
        let desired = if counts.ready == 0 {
            clamp_u32((s.queue_depth as f64 / target).ceil())
        } else {
            let metric = s.queue_depth as f64 / counts.ready as f64;
            hpa_rule(counts.ready, metric, target, self.policy.tolerance)
        };
        let why = format!(
            "{} waiting over {} ready replicas against a target of {target} per replica gives {desired}",
            s.queue_depth, counts.ready
        );
        Some((Rule::Hpa, desired, why))
    }

    fn drain_proposal(
        &self,
        s: &Signals,
        counts: ReplicaCounts,
        per_replica_rps: f64,
    ) -> Option<Candidate> {
        let arrivals = s.arrival_rate_rps?;
        // Less than one waiting request per ready replica while departures keep up with arrivals
        // is noise (a poisoned or just-arrived request), not a backlog to buy replicas for.
        let keeping_up = s.departure_rate_rps.is_some_and(|d| d >= arrivals);
        let backlog = if keeping_up && s.queue_depth < counts.ready as u64 {
            0.0
        } else {
            s.queue_depth as f64
        };
        let drain = self.policy.backlog_drain;
        let desired = drain_rule(arrivals, backlog, drain, per_replica_rps);
        let why = format!(
            "{arrivals:.1} req/s at {per_replica_rps:.2} req/s per replica plus {} queued drained within {}s gives {desired}",
            s.queue_depth,
            drain.as_secs()
        );
        Some((Rule::BacklogDrain, desired, why))
    }

    /// Proposes only from the second consecutive window with the oldest age past its threshold
    /// and arrivals above departures; any other window starts the count over.
    fn oldest_age_proposal(
        &self,
        s: &Signals,
        per_replica_rps: f64,
        memory: &mut ControllerMemory,
    ) -> Option<Candidate> {
        let policy = self.policy;
        let breach = match (
            policy.oldest_age_threshold,
            s.oldest_age_s,
            s.arrival_rate_rps,
            s.departure_rate_rps,
        ) {
            (Some(threshold), Some(age), Some(arrivals), Some(departures)) => {
                (age > threshold.as_secs_f64() && arrivals > departures)
                    .then_some((age, arrivals, departures))
            }
            _ => None,
        };
        let Some((age, arrivals, departures)) = breach else {
            memory.age_windows = 0;
            memory.age_window_at = None;
            return None;
        };
        count_window(
            &mut memory.age_windows,
            &mut memory.age_window_at,
            policy.breach_window,
            self.now,
        );
        if memory.age_windows < 2 {
            return None;
        }
        let extra = clamp_u32(((arrivals - departures) / per_replica_rps).ceil()).max(1);
        let why = format!(
            "the oldest request waited {age:.1}s (threshold {}s) while {arrivals:.1} req/s arrived and {departures:.1} departed, two windows running: {extra} more",
            policy.oldest_age_threshold.map_or(0, |t| t.as_secs())
        );
        Some((Rule::OldestAge, self.current.saturating_add(extra), why))
    }

    /// Whether the target changed in the other direction less than `direction_cooldown` ago.
    fn recent_change(&self, memory: &ControllerMemory, direction: Direction) -> bool {
        memory.last_change.is_some_and(|(at, d)| {
            d != direction && elapsed(at, self.now) < self.policy.direction_cooldown
        })
    }

    /// Up to what the rules want: floors at once, rules after consecutive breaching windows,
    /// never against a recent scale-down, within the per-period limit.
    fn scale_up(&self, winner: &Winner, mut memory: ControllerMemory) -> Decision {
        let (policy, current, why) = (self.policy, self.current, &winner.why);
        memory.low_since = None;
        let rule_driven = winner.wanted > self.floor.max(current);
        if rule_driven {
            count_window(
                &mut memory.breach_windows,
                &mut memory.breach_window_at,
                policy.breach_window,
                self.now,
            );
            if memory.breach_windows < policy.scale_up_breaches {
                let reason = format!(
                    "{why}; breach {} of {} windows of {}s before scaling up",
                    memory.breach_windows,
                    policy.scale_up_breaches,
                    policy.breach_window.as_secs()
                );
                let limited = Some(Limit::BreachWindow);
                return winner.answer(current, winner.rule, reason, limited, memory);
            }
        }
        if self.recent_change(&memory, Direction::Up) {
            let why = format!(
                "{why}; but the pool scaled down less than {}s ago",
                policy.direction_cooldown.as_secs()
            );
            let reason = HoldReason::DirectionCooldown;
            return self.held(memory, reason, why, winner.classification);
        }
        memory
            .scale_ups
            .retain(|(at, _)| elapsed(*at, self.now) < policy.scale_up_period);
        let used: u32 = memory.scale_ups.iter().map(|(_, n)| n).sum();
        let allowed = policy.scale_up_limit.saturating_sub(used);
        let step = (winner.wanted - current).min(allowed);
        let limited = if step < winner.wanted - current {
            Some(Limit::ScaleUpPeriod)
        } else {
            winner.max_limited
        };
        let target = current + step;
        if step > 0 {
            memory.scale_ups.push((self.now, step));
            memory.last_change = Some((self.now, Direction::Up));
        }
        let memory = ControllerMemory {
            breach_windows: 0,
            breach_window_at: None,
            ..memory
        };
        let reason = format!("{why}; target {current} → {target}");
        winner.answer(target, winner.rule, reason, limited, memory)
    }

    /// One replica down, once load has stayed below a fraction of every threshold in use for
    /// the stabilisation window and a period has passed since the last one went, never against a
    /// recent scale-up; otherwise the target stays.
    fn scale_down(
        &self,
        winner: &Winner,
        s: &Signals,
        counts: ReplicaCounts,
        mut memory: ControllerMemory,
    ) -> Decision {
        let (policy, current, why) = (self.policy, self.current, &winner.why);
        memory.breach_windows = 0;
        memory.breach_window_at = None;
        let fraction = policy.scale_down_fraction;
        let hpa_low = policy.target_queue_per_replica.is_none_or(|target| {
            (s.queue_depth as f64 / counts.ready.max(1) as f64) < fraction * target
        });
        let age_low = match (policy.oldest_age_threshold, s.oldest_age_s) {
            (Some(threshold), Some(age)) => age < fraction * threshold.as_secs_f64(),
            _ => true,
        };
        if !(winner.wanted < current && hpa_low && age_low) {
            memory.low_since = None;
            let reason = format!("{why}; target stays {current}");
            return winner.answer(current, Rule::Steady, reason, winner.max_limited, memory);
        }
        let since = *memory.low_since.get_or_insert(self.now);
        let stabilized = elapsed(since, self.now) >= policy.scale_down_stabilization;
        let period_passed = memory
            .last_scale_down_at
            .is_none_or(|at| elapsed(at, self.now) >= policy.scale_down_period);
        if !(stabilized && period_passed) {
            let reason = format!(
                "{why}; low for {}s of the {}s stabilisation window, target stays {current}",
                elapsed(since, self.now).as_secs(),
                policy.scale_down_stabilization.as_secs()
            );
            return winner.answer(current, Rule::Steady, reason, None, memory);
        }
        if self.recent_change(&memory, Direction::Down) {
            let why = format!(
                "{why}; but the pool scaled up less than {}s ago",
                policy.direction_cooldown.as_secs()
            );
            let reason = HoldReason::DirectionCooldown;
            return self.held(memory, reason, why, winner.classification);
        }
        let target = current - 1;
        memory.last_scale_down_at = Some(self.now);
        memory.last_change = Some((self.now, Direction::Down));
        let reason = format!(
            "{why}; low for {}s, one replica goes: target {current} → {target}",
            elapsed(since, self.now).as_secs()
        );
        winner.answer(target, Rule::ScaleDown, reason, None, memory)
    }
}

impl Winner {
    /// The largest proposal wins; on a tie the earlier (more basic) rule names it.
    fn largest(
        step: &Activation<'_>,
        proposals: Vec<Candidate>,
        classification: Option<Classification>,
    ) -> Winner {
        let answers: Vec<Proposal> = proposals
            .iter()
            .map(|(rule, replicas, _)| Proposal {
                rule: *rule,
                replicas: *replicas,
            })
            .collect();
        let (rule, raw, why) = proposals
            .into_iter()
            .fold(None::<Candidate>, |best, p| match best {
                Some(b) if b.1 >= p.1 => Some(b),
                _ => Some(p),
            })
            .unwrap_or((Rule::Floor, step.floor, String::new()));
        let max_replicas = step.pool.max_replicas;
        Winner {
            rule,
            unclamped: raw,
            wanted: raw.clamp(step.floor, max_replicas),
            max_limited: (raw > max_replicas).then_some(Limit::MaxReplicas),
            why,
            classification,
            proposals: answers,
        }
    }

    fn answer(
        &self,
        target: u32,
        rule: Rule,
        reason: String,
        limited: Option<Limit>,
        memory: ControllerMemory,
    ) -> Decision {
        Decision {
            target,
            unclamped: self.unclamped,
            rule,
            reason,
            hold: None,
            limited,
            classification: self.classification,
            proposals: self.proposals.clone(),
            memory: ControllerMemory { target, ..memory },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::ColdStartLadder;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn t0() -> Timestamp {
        at("2026-11-30T09:00:00Z")
    }

    fn secs(n: i64) -> Timestamp {
        t0() + chrono::Duration::seconds(n)
    }

    fn pool(min: u32, max: u32, scaling: ScalingPolicy) -> PoolSpec {
        PoolSpec {
            name: "p".parse().unwrap(),
            account: "a".parse().unwrap(),
            offerings: vec![],
            min_replicas: min,
            max_replicas: max,
            max_scale_up_per_step: 100,
            warm_pool_size: 0,
            ladder: ColdStartLadder {
                node_acquisition: Duration::from_secs(60),
                image_pull: Duration::from_secs(30),
                weight_load: Duration::from_secs(60),
                compile: Duration::from_secs(30),
                warmup: Duration::from_secs(10),
            },
            scaling,
            supply: crate::pool::SupplyPolicy::default(),
        }
    }

    /// Immediate policy: one breach scales up, no direction cooldown.
    fn quick(policy: ScalingPolicy) -> ScalingPolicy {
        ScalingPolicy {
            scale_up_breaches: 1,
            direction_cooldown: Duration::ZERO,
            ..policy
        }
    }

    fn ready(n: u32) -> ReplicaCounts {
        ReplicaCounts {
            ready: n,
            ..ReplicaCounts::default()
        }
    }

    fn memory(target: u32) -> ControllerMemory {
        ControllerMemory {
            target,
            ..ControllerMemory::default()
        }
    }

    /// Seed 000: 8 workers at 2.5 req/s serve 20 req/s; a 30 s burst at 32 req/s leaves 360
    /// queued; draining it within 60 s needs three more workers, so eleven.
    #[test]
    fn seed_000_backlog_needs_three_more_workers() {
        let p = pool(
            1,
            50,
            quick(ScalingPolicy {
                replica_throughput_rps: 2.5,
                ..ScalingPolicy::default()
            }),
        );
        let d = decide(
            &p,
            Some(&Signals::queue(360, 20.0, t0())),
            ready(8),
            memory(8),
            t0(),
        );
        assert_eq!((d.target, d.rule), (11, Rule::BacklogDrain));
        assert_eq!(drain_rule(20.0, 360.0, Duration::from_secs(60), 2.5) - 8, 3);
    }

    /// Seed 004 (the HPA notes): 4 replicas averaging 8 waiting against a target of 4 → 8;
    /// against 1 → 32; a metric of 1.1 against 1 → no change (tolerance 0.1).
    #[test]
    fn hpa_rule_reproduces_the_worked_numbers() {
        assert_eq!(hpa_rule(4, 8.0, 4.0, 0.1), 8);
        assert_eq!(hpa_rule(4, 8.0, 1.0, 0.1), 32);
        assert_eq!(hpa_rule(4, 1.1, 1.0, 0.1), 4);
        let hpa = |target| {
            let p = pool(
                1,
                100,
                quick(ScalingPolicy {
                    target_queue_per_replica: Some(target),
                    ..ScalingPolicy::default()
                }),
            );
            let s = Signals {
                arrival_rate_rps: None,
                ..Signals::queue(32, 0.0, t0())
            };
            decide(&p, Some(&s), ready(4), memory(4), t0())
        };
        assert_eq!((hpa(4.0).target, hpa(4.0).rule), (8, Rule::Hpa));
        assert_eq!(hpa(1.0).target, 32);
    }

    #[test]
    fn starting_replicas_count_as_capacity_on_the_way() {
        // 4 ready with 8 waiting each against 4: the rule wants 8. Four more are already
        // starting (target 8): nothing new is asked for.
        let p = pool(
            1,
            100,
            quick(ScalingPolicy {
                target_queue_per_replica: Some(4.0),
                ..ScalingPolicy::default()
            }),
        );
        let s = Signals {
            arrival_rate_rps: None,
            ..Signals::queue(32, 0.0, t0())
        };
        let counts = ReplicaCounts {
            starting: 4,
            ready: 4,
            ..ReplicaCounts::default()
        };
        let d = decide(&p, Some(&s), counts, memory(8), t0());
        assert_eq!((d.target, d.rule), (8, Rule::Steady));
    }

    #[test]
    fn missing_or_stale_signals_hold_the_pool() {
        let p = pool(1, 50, ScalingPolicy::default());
        let missing = decide(&p, None, ready(8), memory(8), t0());
        assert_eq!(
            (missing.target, missing.hold),
            (8, Some(HoldReason::SignalMissing))
        );
        let old = Signals::queue(10_000, 500.0, secs(-60));
        let stale = decide(&p, Some(&old), ready(8), memory(8), t0());
        assert_eq!(
            (stale.target, stale.hold),
            (8, Some(HoldReason::SignalStale))
        );
        // Also never down: an idle but stale signal keeps 8.
        let idle = Signals::queue(0, 0.0, secs(-60));
        assert_eq!(decide(&p, Some(&idle), ready(8), memory(8), t0()).target, 8);
    }

    #[test]
    fn scale_up_waits_for_two_breaching_windows() {
        let p = pool(
            1,
            50,
            ScalingPolicy {
                replica_throughput_rps: 10.0,
                ..ScalingPolicy::default()
            },
        );
        let burst = |t| Signals::queue(40, 200.0, t);
        let first = decide(&p, Some(&burst(t0())), ready(8), memory(8), t0());
        assert_eq!(
            (first.target, first.limited),
            (8, Some(Limit::BreachWindow))
        );
        let early = decide(&p, Some(&burst(secs(5))), ready(8), first.memory, secs(5));
        assert_eq!(early.target, 8, "still inside the first window");
        let second = decide(&p, Some(&burst(secs(15))), ready(8), early.memory, secs(15));
        assert_eq!((second.target, second.rule), (21, Rule::BacklogDrain));
    }

    #[test]
    fn a_two_per_minute_limit_is_respected() {
        let p = pool(
            1,
            50,
            quick(ScalingPolicy {
                replica_throughput_rps: 10.0,
                scale_up_limit: 2,
                scale_up_period: Duration::from_secs(60),
                ..ScalingPolicy::default()
            }),
        );
        let mut m = memory(8);
        let mut targets = vec![];
        for t in [0, 10, 20, 59, 60, 61, 121] {
            let d = decide(
                &p,
                Some(&Signals::queue(40, 200.0, secs(t))),
                ready(8),
                m,
                secs(t),
            );
            targets.push(d.target);
            m = d.memory;
        }
        assert_eq!(targets, [10, 10, 10, 10, 12, 12, 14]);
    }

    #[test]
    fn scale_down_waits_out_the_stabilisation_then_goes_one_per_period() {
        let p = pool(
            2,
            50,
            quick(ScalingPolicy {
                replica_throughput_rps: 10.0,
                scale_down_stabilization: Duration::from_secs(600),
                scale_down_period: Duration::from_secs(60),
                ..ScalingPolicy::default()
            }),
        );
        let mut m = memory(20);
        let mut target_at = std::collections::BTreeMap::new();
        for t in (0..=780).step_by(30) {
            let d = decide(
                &p,
                Some(&Signals::queue(0, 20.0, secs(t))),
                ready(20),
                m,
                secs(t),
            );
            target_at.insert(t, d.target);
            m = d.memory;
        }
        assert_eq!(target_at[&570], 20, "nothing within ten minutes");
        assert_eq!(target_at[&600], 19);
        assert_eq!(target_at[&630], 19, "one per minute");
        assert_eq!(target_at[&660], 18);
        assert_eq!(target_at[&780], 16);
    }

    #[test]
    fn oldest_age_scales_out_after_two_windows_but_a_poisoned_request_does_not() {
        let p = pool(
            1,
            50,
            quick(ScalingPolicy {
                oldest_age_threshold: Some(Duration::from_secs(5)),
                replica_throughput_rps: 2.5,
                ..ScalingPolicy::default()
            }),
        );
        let signals = |age, arrivals, departures, t| Signals {
            queue_depth: 2,
            oldest_age_s: Some(age),
            arrival_rate_rps: Some(arrivals),
            departure_rate_rps: Some(departures),
            ..Signals::queue(2, arrivals, t)
        };
        // A poisoned request: very old, tiny queue, departures keep up with arrivals.
        let mut m = memory(8);
        for t in [0, 15, 30, 45] {
            let d = decide(
                &p,
                Some(&signals(120.0, 20.0, 20.0, secs(t))),
                ready(8),
                m,
                secs(t),
            );
            assert_eq!(
                d.target, 8,
                "a poisoned request must not scale the pool out"
            );
            m = d.memory;
        }
        // Real pressure: arrivals exceed departures; the age rule answers from the second window.
        let age_answer = |d: &Decision| {
            d.proposals
                .iter()
                .find(|p| p.rule == Rule::OldestAge)
                .map(|p| p.replicas)
        };
        let first = decide(
            &p,
            Some(&signals(8.0, 30.0, 20.0, t0())),
            ready(8),
            memory(8),
            t0(),
        );
        assert_eq!(age_answer(&first), None);
        let m = ControllerMemory {
            target: 8,
            ..first.memory
        };
        let second = decide(
            &p,
            Some(&signals(9.0, 30.0, 20.0, secs(15))),
            ready(8),
            m,
            secs(15),
        );
        // 10 req/s more than departs, at 2.5 per replica: four more than the target of 8.
        assert_eq!(age_answer(&second), Some(12));
    }

    #[test]
    fn work_waiting_with_nothing_departing_is_a_failure_not_a_scale_up() {
        let p = pool(
            1,
            50,
            quick(ScalingPolicy {
                replica_throughput_rps: 2.5,
                ..ScalingPolicy::default()
            }),
        );
        let s = Signals {
            departure_rate_rps: Some(0.0),
            gpu_utilization: Some(0.05),
            ..Signals::queue(500, 20.0, t0())
        };
        let d = decide(&p, Some(&s), ready(8), memory(8), t0());
        assert_eq!((d.target, d.hold), (8, Some(HoldReason::DispatchFailure)));
        assert_eq!(d.classification, Some(Classification::DispatchOrDependency));
    }

    #[test]
    fn classification_reads_age_against_utilisation() {
        let p = pool(
            1,
            50,
            quick(ScalingPolicy {
                oldest_age_threshold: Some(Duration::from_secs(5)),
                replica_throughput_rps: 2.5,
                ..ScalingPolicy::default()
            }),
        );
        let class = |age, util| {
            let s = Signals {
                oldest_age_s: Some(age),
                gpu_utilization: Some(util),
                ..Signals::queue(0, 20.0, t0())
            };
            decide(&p, Some(&s), ready(8), memory(8), t0()).classification
        };
        assert_eq!(class(9.0, 0.95), Some(Classification::CapacityPressure));
        assert_eq!(class(9.0, 0.20), Some(Classification::DispatchOrDependency));
        assert_eq!(class(0.5, 0.95), Some(Classification::Healthy));
        assert_eq!(class(0.5, 0.10), Some(Classification::Idle));
    }

    #[test]
    fn one_change_of_direction_per_cooldown() {
        let p = pool(
            2,
            50,
            ScalingPolicy {
                replica_throughput_rps: 10.0,
                scale_up_breaches: 1,
                scale_down_stabilization: Duration::ZERO,
                scale_down_period: Duration::ZERO,
                direction_cooldown: Duration::from_secs(120),
                ..ScalingPolicy::default()
            },
        );
        let down = decide(
            &p,
            Some(&Signals::queue(0, 20.0, t0())),
            ready(10),
            memory(10),
            t0(),
        );
        assert_eq!(down.target, 9);
        let up = decide(
            &p,
            Some(&Signals::queue(0, 150.0, secs(30))),
            ready(9),
            down.memory,
            secs(30),
        );
        assert_eq!(
            (up.target, up.hold),
            (9, Some(HoldReason::DirectionCooldown))
        );
        let later = decide(
            &p,
            Some(&Signals::queue(0, 150.0, secs(130))),
            ready(9),
            up.memory,
            secs(130),
        );
        assert_eq!(later.target, 15);
    }

    #[test]
    fn clamps_to_max_and_reports_unmet_demand() {
        let p = pool(
            1,
            10,
            quick(ScalingPolicy {
                replica_throughput_rps: 2.5,
                ..ScalingPolicy::default()
            }),
        );
        let d = decide(
            &p,
            Some(&Signals::queue(0, 200.0, t0())),
            ready(1),
            memory(1),
            t0(),
        );
        assert_eq!(
            (d.target, d.unclamped, d.limited),
            (10, 80, Some(Limit::MaxReplicas))
        );
    }

    #[test]
    fn measured_throughput_replaces_the_configured_one_under_saturation() {
        // Configured 2.5/s, but 8 saturated replicas complete only 8/s: 1/s each.
        let p = pool(
            1,
            100,
            quick(ScalingPolicy {
                replica_throughput_rps: 2.5,
                ..ScalingPolicy::default()
            }),
        );
        let s = Signals {
            departure_rate_rps: Some(8.0),
            ..Signals::queue(60, 10.0, t0())
        };
        let d = decide(&p, Some(&s), ready(8), memory(8), t0());
        assert_eq!(
            d.target, 11,
            "10/s at 1/s each plus 60 queued over 60 s: {}",
            d.reason
        );
    }
}
