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
//! - **Ramp**: when arrivals grew through four windows in a row, the drain rule on the rate
//!   projected one cold start ahead — demand growing slower than a breach window notices but
//!   faster than a cold start can follow.
//!
//! The pool's `buffer_replicas` ride on the winner: spare ready replicas above demand (not on
//! an idle pool), which serve a rise at once while more climb the ladder.
//!
//! Around them: scale up only after consecutive breaching windows and within a per-period
//! limit; scale in after a stabilisation below a fraction of the thresholds — the ski-rental
//! break-even of getting a replica back, or the whole window when the pool's own rises recur
//! within it (and a release waits the whole window when the cloud refuses every offering: a
//! replica let go in a stockout does not come back); no more than one change of direction per
//! cooldown unless the objective is at risk (a scale-in that left a queue the ready replicas
//! cannot keep up with is undone at once);
//! and hold — neither up nor down — when the signal is missing or stale, or when work waits
//! but nothing departs (a dispatch failure more replicas would not fix). Every decision carries the rule that won, a
//! sentence saying why, and the three-way classification of queue age against utilisation.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::pool::{PoolSpec, ScalingPolicy};

/// Batch occupancy or GPU utilisation at or above which the ready replicas count as working:
/// nothing departing then means long requests, not a dispatch failure.
const DISPATCH_BUSY_SHARE: f64 = 0.5;

/// What a pool's serving layer reports at one instant. Only the queue depth is required.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub received_at: Timestamp,
    /// Tokens waiting (prompt and estimated output, as the serving layer weighs them): a queue
    /// of long prompts is not a queue of short ones. With `token_arrival_rate_tps` and the
    /// pool's `replica_throughput_tps`, the drain rule sizes the pool in tokens.
    #[serde(default)]
    pub queued_tokens: Option<f64>,
    /// Tokens arriving per second over the last window.
    #[serde(default)]
    pub token_arrival_rate_tps: Option<f64>,
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
            queued_tokens: None,
            token_arrival_rate_tps: None,
        }
    }

    /// Whether the sample is at most `max_age` old at `now` (a pool's `signal_max_age`): an
    /// older one says nothing of the pool any more.
    pub fn is_fresh(&self, now: Timestamp, max_age: Duration) -> bool {
        elapsed(self.received_at, now) <= max_age
    }
}

/// The replicas the controller sees, counted separately: only ready ones are capacity.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReplicaCounts {
    /// Launches the cloud has not answered with a running node yet.
    pub requested: u32,
    /// Climbing the cold-start ladder.
    pub starting: u32,
    pub ready: u32,
    pub draining: u32,
    /// Replicas the warm pool would take now if they were released (its room below its
    /// target size): scale-in parks these sooner than it releases the rest.
    #[serde(default)]
    pub parkable: u32,
    /// Warm nodes that could be woken now (they serve after the rungs after their disk).
    #[serde(default)]
    pub warm: u32,
    /// Every offering the pool may launch on was refused by its cloud since it last accepted a
    /// launch (within 15 minutes): a replica released now could not be bought back.
    #[serde(default)]
    pub supply_refused: bool,
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

/// What the controller remembers between activations. Plain data, owned by the caller, who
/// may keep it anywhere (the engine writes it to the ledger after each decision, as JSON, so the
/// next owner of a pool decides as this one would have). A field added later must default
/// (`#[serde(default)]`), so a memory written before it still reads back.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
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
    /// The recent levels scale-in compares with (what the rules wanted plus the margin),
    /// within the stabilisation window, at most [`MAX_LEVELS`].
    pub levels: std::collections::VecDeque<(Timestamp, u32)>,
    /// Whether demand (what the rules want) is in a rise: it climbed a quarter above its
    /// last low, and has not yet fallen a quarter below its high since.
    pub rising: bool,
    pub swing_low: u32,
    pub swing_high: u32,
    /// When demand last fell from a rise.
    pub fell_at: Option<Timestamp>,
    /// When the latest rises began, at most [`MAX_RISES`]: the pool's own burst recurrence.
    pub rises: std::collections::VecDeque<Timestamp>,
    /// Recent arrival rates in thousandths of the pool's unit per second, for the ramp rule,
    /// at most [`MAX_LEVELS`].
    pub arrivals: std::collections::VecDeque<(Timestamp, u64)>,
}

/// What [`ControllerMemory::series_mark`] says of the recent series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesMark {
    levels: (Option<(Timestamp, u32)>, usize),
    arrivals: (Option<(Timestamp, u64)>, usize),
}

/// Rises remembered at most.
pub const MAX_RISES: usize = 8;

/// Gaps between rises, each within the stabilisation window, before bursts count as recurring.
pub const RECURRENCE_GAPS: usize = 3;

/// Windows the ramp rule needs arrivals to grow through, one after another. A step in the
/// rate (a burst) raises at most two windows, the one it starts in and the next; growth through
/// four is a ramp.
pub const RAMP_WINDOWS: usize = 4;

/// Levels remembered at most: an hour of one-second activations.
pub const MAX_LEVELS: usize = 3600;

/// Appends `value` at `now` to a time series, forgetting what is older than `keep` and what is
/// past [`MAX_LEVELS`] entries.
fn remember<T>(
    series: &mut std::collections::VecDeque<(Timestamp, T)>,
    now: Timestamp,
    value: T,
    keep: Duration,
) {
    series.push_back((now, value));
    while series
        .front()
        .is_some_and(|(at, _)| elapsed(*at, now) > keep)
        || series.len() > MAX_LEVELS
    {
        series.pop_front();
    }
}

impl ControllerMemory {
    /// The memory without its recent series (levels and arrivals, which grow every activation):
    /// what changes only when the controller's state does (a window counted, a cooldown begun,
    /// a stabilisation started, a rise). Every field is named, so one added later is kept here
    /// or left out on purpose.
    pub fn state(&self) -> ControllerMemory {
        let ControllerMemory {
            target,
            breach_windows,
            breach_window_at,
            age_windows,
            age_window_at,
            low_since,
            last_scale_down_at,
            last_change,
            scale_ups,
            levels: _,
            rising,
            swing_low,
            swing_high,
            fell_at,
            rises,
            arrivals: _,
        } = self;
        ControllerMemory {
            target: *target,
            breach_windows: *breach_windows,
            breach_window_at: *breach_window_at,
            age_windows: *age_windows,
            age_window_at: *age_window_at,
            low_since: *low_since,
            last_scale_down_at: *last_scale_down_at,
            last_change: *last_change,
            scale_ups: scale_ups.clone(),
            levels: std::collections::VecDeque::new(),
            rising: *rising,
            swing_low: *swing_low,
            swing_high: *swing_high,
            fell_at: *fell_at,
            rises: rises.clone(),
            arrivals: std::collections::VecDeque::new(),
        }
    }

    /// The newest entry and the length of each recent series: they change only by an entry
    /// added (a new instant at the back) or forgotten (a shorter series), so these say whether
    /// the series changed without comparing them whole.
    pub fn series_mark(&self) -> SeriesMark {
        SeriesMark {
            levels: (self.levels.back().copied(), self.levels.len()),
            arrivals: (self.arrivals.back().copied(), self.arrivals.len()),
        }
    }

    /// Records `level` at `now`, forgetting what is older than `keep`.
    fn remember_level(&mut self, now: Timestamp, level: u32, keep: Duration) {
        remember(&mut self.levels, now, level, keep);
    }

    /// Follows what the rules want through its swings: a climb of a quarter (at least one
    /// replica) above the last low starts a rise at `now`, a fall of as much below the high
    /// ends it. Only a rise after a lull of at least `lull` is a new one: shorter lulls are
    /// one burst wobbling, and scale-in would not have let anything go within them anyway.
    fn track_swing(&mut self, wanted: u32, now: Timestamp, lull: Duration) {
        let significant = |x: u32| (x / 4).max(1);
        if self.rising {
            self.swing_high = self.swing_high.max(wanted);
            if wanted.saturating_add(significant(self.swing_high)) <= self.swing_high {
                self.rising = false;
                self.swing_low = wanted;
                self.fell_at = Some(now);
            }
        } else {
            self.swing_low = self.swing_low.min(wanted);
            if wanted >= self.swing_low.saturating_add(significant(self.swing_low)) {
                self.rising = true;
                self.swing_high = wanted;
                if self.fell_at.is_none_or(|fell| elapsed(fell, now) >= lull) {
                    self.rises.push_back(now);
                    if self.rises.len() > MAX_RISES {
                        self.rises.pop_front();
                    }
                }
            }
        }
    }

    /// Records an arrival rate at `now`, forgetting what is older than `keep`.
    fn remember_arrivals(&mut self, now: Timestamp, rate: f64, keep: Duration) {
        let milli = clamp_u64((rate * 1000.0).round());
        remember(&mut self.arrivals, now, milli, keep);
    }

    /// The mean arrival rate in each of the [`RAMP_WINDOWS`] windows of `window` before `now`,
    /// oldest first, once the history spans them all.
    fn arrival_windows(&self, now: Timestamp, window: Duration) -> Option<[f64; RAMP_WINDOWS]> {
        let oldest = elapsed(self.arrivals.front()?.0, now);
        if oldest + window / 4 < window * RAMP_WINDOWS as u32 {
            return None;
        }
        let mut sums = [(0.0, 0u32); RAMP_WINDOWS];
        for (at, milli) in &self.arrivals {
            let age = elapsed(*at, now);
            let index = usize::try_from(age.as_nanos() / window.as_nanos().max(1));
            let Some(slot) = index.ok().and_then(|i| (RAMP_WINDOWS - 1).checked_sub(i)) else {
                continue; // older than the windows
            };
            sums[slot].0 += *milli as f64 / 1000.0;
            sums[slot].1 += 1;
        }
        let mut means = [0.0; RAMP_WINDOWS];
        for (mean, (sum, n)) in means.iter_mut().zip(sums) {
            if n == 0 {
                return None;
            }
            *mean = sum / f64::from(n);
        }
        Some(means)
    }

    /// The two latest gaps between rises, when the last [`RECURRENCE_GAPS`] gaps are each
    /// within `horizon`: bursts that keep recurring, so surplus kept across a gap serves the
    /// next. Three gaps, not one or two: a short run of bursts that ends would otherwise keep
    /// its capacity for the whole window after the last.
    fn recurring_gaps(&self, horizon: Duration) -> Option<(Duration, Duration)> {
        let n = self.rises.len();
        if n <= RECURRENCE_GAPS {
            return None;
        }
        let gap = |i: usize| elapsed(self.rises[i - 1], self.rises[i]);
        let recurring = (n - RECURRENCE_GAPS..n).all(|i| gap(i) <= horizon);
        recurring.then(|| (gap(n - 2), gap(n - 1)))
    }

    /// The highest level within `window` of `now`.
    fn level_over(&self, now: Timestamp, window: Duration) -> u32 {
        self.levels
            .iter()
            .filter(|(at, _)| elapsed(*at, now) <= window)
            .map(|(_, l)| *l)
            .max()
            .unwrap_or(0)
    }
}

/// Which rule set the target.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// `min_replicas` or `min_capacity`.
    Floor,
    Hpa,
    BacklogDrain,
    OldestAge,
    /// Arrivals grew through four windows in a row: sized for the rate projected one cold
    /// start ahead, so replicas land when the demand they were bought for does.
    Ramp,
    /// The pool's own history expects this demand within a lead time
    /// ([`crate::forecast`]): launched ahead of a rise that recurs.
    Forecast,
    /// A declared window (`[[pools.schedule]]`, `POST /v1/pools/{name}/schedules`) raises the
    /// floor: capacity ready for a known event, as KEDA's cron scaler and scheduled actions do.
    Scheduled,
    /// Nothing asked for a change: the target stays.
    Steady,
    /// One replica removed after the stabilisation window.
    ScaleDown,
    /// The controller did not follow the signal; see the hold reason.
    Hold,
}

/// Why the controller is not scaling at all (the HPA's ScalingActive=False, made visible).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScalingHold {
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Desired replicas (ready plus on the way), within the pool's bounds.
    pub target: u32,
    /// What the rules asked for before limits and the max-replicas clamp; the target may be
    /// above it by the pool's `buffer_replicas`.
    pub unclamped: u32,
    pub rule: Rule,
    /// One sentence: the numbers behind the rule that won.
    pub reason: String,
    /// Set when the controller will not scale at all (a scaling hold, not a budget hold).
    #[serde(rename = "hold")]
    pub scaling_hold: Option<ScalingHold>,
    pub limited: Option<Limit>,
    pub classification: Option<Classification>,
    /// Every rule's answer, so a reader sees what lost as well as what won.
    pub proposals: Vec<Proposal>,
    /// Replicas kept above demand (and its margin) while scale-in waits: what waiting costs.
    pub idle_replicas: u32,
    #[serde(skip)]
    pub memory: ControllerMemory,
}

/// One rule's answer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

fn clamp_u64(x: f64) -> u64 {
    if x.is_nan() || x <= 0.0 {
        0
    } else {
        x.min(u64::MAX as f64) as u64
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

/// One activation of the controller for one pool, without a forecast.
pub fn decide(
    pool: &PoolSpec,
    signals: Option<&Signals>,
    counts: ReplicaCounts,
    memory: ControllerMemory,
    now: Timestamp,
) -> Decision {
    decide_with_forecast(pool, signals, counts, memory, None, now)
}

/// A floor a declared window sets now (the engine finds the windows in force, one lead time
/// ahead of their start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledFloor {
    pub replicas: u32,
    /// Which window, and when it ends: the decision's reason.
    pub why: String,
}

/// One activation of the controller for one pool. A `forecast` (what the pool's history
/// expects within a lead time) is one more rule's proposal; it never acts on a missing or stale
/// signal, which holds as always.
pub fn decide_with_forecast(
    pool: &PoolSpec,
    signals: Option<&Signals>,
    counts: ReplicaCounts,
    memory: ControllerMemory,
    forecast: Option<&crate::forecast::Forecast>,
    now: Timestamp,
) -> Decision {
    decide_ahead(pool, signals, counts, memory, forecast, None, now)
}

/// [`decide_with_forecast`] with a declared window's floor, which is a floor like
/// `min_replicas`: it holds even while the signal is missing (a known event does not wait for
/// a metric), never above `max_replicas`.
pub fn decide_ahead(
    pool: &PoolSpec,
    signals: Option<&Signals>,
    counts: ReplicaCounts,
    mut memory: ControllerMemory,
    forecast: Option<&crate::forecast::Forecast>,
    scheduled: Option<&ScheduledFloor>,
    now: Timestamp,
) -> Decision {
    let step = Activation::new(pool, &memory, scheduled, now);
    let s = match step.fresh_signal(signals) {
        Ok(s) => s,
        Err((reason, why)) => {
            // The floor stands while the pool holds: say whose it is.
            let why = match step.scheduled {
                Some(window) => format!("{why}; {}", window.why),
                None => why,
            };
            return step.held(memory, reason, why, None);
        }
    };
    let classification = classify(&pool.scaling, s, counts.ready);
    if let Some(why) = step.dispatch_failure(s, counts) {
        return step.held(memory, ScalingHold::DispatchFailure, why, classification);
    }
    let mut proposals = step.proposals(s, counts, &mut memory);
    // Swings are of measured demand: a forecast must not teach the controller its own rises.
    let measured = proposals.iter().map(|p| p.1).max().unwrap_or(0);
    let lull = step.scale_in_waits(None, false).1;
    memory.track_swing(measured.clamp(step.floor, pool.max_replicas), now, lull);
    proposals.extend(forecast.map(|f| step.forecast_proposal(f)));
    let winner = Winner::largest(&step, proposals, classification);
    let previous = memory.target;
    let mut decision = if winner.wanted > step.current {
        step.scale_up(&winner, s, counts, memory)
    } else {
        step.scale_down(&winner, s, counts, memory)
    };
    // A window that raised the floor raised the target itself, before any rule ran: say so.
    if let Some(window) = step.scheduled
        && decision.target == step.floor
        && decision.target > previous
    {
        decision.rule = Rule::Scheduled;
        decision.reason = format!("{}; target {previous} → {}", window.why, decision.target);
    }
    decision
}

/// What every step of one activation reads: the pool, its bounds, and the instant.
struct Activation<'a> {
    pool: &'a PoolSpec,
    policy: &'a ScalingPolicy,
    /// `min_replicas`, `min_capacity` or a declared window's floor, whichever is highest, never
    /// above `max_replicas`.
    floor: u32,
    /// The declared window's floor, when it is what sets `floor`.
    scheduled: Option<&'a ScheduledFloor>,
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
    /// The rules' answer plus the buffer, within the pool's bounds.
    wanted: u32,
    /// Set when the rules asked for more than `max_replicas`.
    max_limited: Option<Limit>,
    why: String,
    classification: Option<Classification>,
    proposals: Vec<Proposal>,
}

impl Activation<'_> {
    fn new<'a>(
        pool: &'a PoolSpec,
        memory: &ControllerMemory,
        scheduled: Option<&'a ScheduledFloor>,
        now: Timestamp,
    ) -> Activation<'a> {
        let policy = &pool.scaling;
        let configured = pool.min_replicas.max(policy.min_capacity);
        let scheduled = scheduled.filter(|s| s.replicas > configured);
        let floor = scheduled
            .map_or(configured, |s| s.replicas)
            .min(pool.max_replicas);
        Activation {
            pool,
            policy,
            floor,
            scheduled,
            current: memory.target.clamp(floor, pool.max_replicas),
            now,
        }
    }

    /// A decision that does not follow the signal: the target stays and the windows that
    /// lead to a change start over.
    fn held(
        &self,
        memory: ControllerMemory,
        reason: ScalingHold,
        why: String,
        classification: Option<Classification>,
    ) -> Decision {
        // A cooldown only delays: the breaching windows already counted still count when it
        // ends, or a hold every other tick would keep a growing queue from ever scaling up.
        let (breach_windows, breach_window_at) = match reason {
            ScalingHold::DirectionCooldown => (memory.breach_windows, memory.breach_window_at),
            _ => (0, None),
        };
        Decision {
            target: self.current,
            unclamped: self.current,
            rule: Rule::Hold,
            reason: why,
            scaling_hold: Some(reason),
            limited: None,
            classification,
            proposals: Vec::new(),
            idle_replicas: 0,
            memory: ControllerMemory {
                target: self.current,
                breach_windows,
                breach_window_at,
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
    ) -> Result<&'s Signals, (ScalingHold, String)> {
        let current = self.current;
        let Some(s) = signals else {
            let why = format!("no signal has been received; holding at {current}");
            return Err((ScalingHold::SignalMissing, why));
        };
        if !s.is_fresh(self.now, self.policy.signal_max_age) {
            let age = elapsed(s.received_at, self.now);
            let why = format!(
                "the last signal is {}s old (max {}s); holding at {current}",
                age.as_secs(),
                self.policy.signal_max_age.as_secs()
            );
            return Err((ScalingHold::SignalStale, why));
        }
        Ok(s)
    }

    /// Why more replicas would not help, if work waits but (almost) nothing departs while the
    /// ready replicas sit idle. Replicas busy with long requests may finish none within the
    /// exporter's rate window: that is load, and more replicas do help.
    fn dispatch_failure(&self, s: &Signals, counts: ReplicaCounts) -> Option<String> {
        let departures = s.departure_rate_rps?;
        let expected_rps = counts.ready as f64 * self.policy.replica_throughput_rps;
        let busy = [s.batch_occupancy, s.gpu_utilization]
            .into_iter()
            .flatten()
            .any(|use_share| use_share >= DISPATCH_BUSY_SHARE);
        let stalled = s.queue_depth > 0 && counts.ready > 0 && departures < 0.05 * expected_rps;
        (stalled && !busy).then(|| {
            format!(
                "{} requests wait but only {departures:.2}/s depart from {} ready replicas; more replicas would not help, look at dispatch",
                s.queue_depth, counts.ready
            )
        })
    }

    /// Whether the objective is at risk now: the oldest request past its threshold, more
    /// queued than the ready replicas drain within the drain window, or a queue above the
    /// HPA target (one per replica without one) that grows because arrivals outrun what the
    /// ready replicas serve — it only gets older until more capacity lands. Only then may the
    /// direction change twice within a cooldown: a scale-in that left too little is undone
    /// at once, not after the queue has grown for the rest of the cooldown.
    fn slo_at_risk(&self, s: &Signals, counts: ReplicaCounts) -> bool {
        let old = match (self.policy.oldest_age_threshold, s.oldest_age_s) {
            (Some(threshold), Some(age)) => age >= threshold.as_secs_f64(),
            _ => false,
        };
        let serving = f64::from(counts.ready) * throughput(self.policy, s, counts.ready);
        let drainable = serving * self.policy.backlog_drain.as_secs_f64();
        let outrun = s
            .arrival_rate_rps
            .is_some_and(|arrivals| self.queue_outruns(s, counts.ready, arrivals, serving));
        old || s.queue_depth as f64 > drainable || outrun
    }

    /// Whether the queue is past the HPA target (one per ready replica without one) and grows:
    /// `arrivals` above what the ready replicas serve (`serving`, in the same unit).
    fn queue_outruns(&self, s: &Signals, ready: u32, arrivals: f64, serving: f64) -> bool {
        let per_replica = self.policy.target_queue_per_replica.unwrap_or(1.0);
        s.queue_depth as f64 > f64::from(ready.max(1)) * per_replica && arrivals > serving
    }

    /// Whether the target changed in the other direction less than `direction_cooldown` ago.
    fn recent_change(&self, memory: &ControllerMemory, direction: Direction) -> bool {
        memory.last_change.is_some_and(|(at, d)| {
            d != direction && elapsed(at, self.now) < self.policy.direction_cooldown
        })
    }

    /// Up to what the rules want: floors at once, rules after consecutive breaching windows,
    /// never against a recent scale-down, within the per-period limit. A pool at zero replicas
    /// serves nothing until one lands, so its first replica comes at once, whatever the windows
    /// and the cooldown say (scale to zero: the first request wakes a node).
    fn scale_up(
        &self,
        winner: &Winner,
        s: &Signals,
        counts: ReplicaCounts,
        mut memory: ControllerMemory,
    ) -> Decision {
        let (policy, current, why) = (self.policy, self.current, &winner.why);
        memory.low_since = None;
        let from_zero = current == 0 && winner.wanted > 0;
        let rule_driven = winner.wanted > self.floor.max(current);
        if rule_driven {
            count_window(
                &mut memory.breach_windows,
                &mut memory.breach_window_at,
                policy.breach_window,
                self.now,
            );
            if memory.breach_windows < policy.scale_up_breaches {
                let mut reason = format!(
                    "{why}; breach {} of {} windows of {}s before scaling up",
                    memory.breach_windows,
                    policy.scale_up_breaches,
                    policy.breach_window.as_secs()
                );
                let mut target = current;
                if from_zero {
                    target = 1;
                    memory.scale_ups.push((self.now, 1));
                    memory.last_change = Some((self.now, Direction::Up));
                    reason.push_str("; at zero replicas the first comes at once");
                }
                let limited = Some(Limit::BreachWindow);
                return winner.answer(target, winner.rule, reason, limited, memory);
            }
        }
        let against_cooldown = self.recent_change(&memory, Direction::Up);
        let at_risk = self.slo_at_risk(s, counts);
        if !from_zero && !at_risk && against_cooldown {
            let why = format!(
                "{why}; but the pool scaled down less than {}s ago",
                policy.direction_cooldown.as_secs()
            );
            let reason = ScalingHold::DirectionCooldown;
            return self.held(memory, reason, why, winner.classification);
        }
        memory
            .scale_ups
            .retain(|(at, _)| elapsed(*at, self.now) < policy.scale_up_period);
        let used: u32 = memory.scale_ups.iter().map(|(_, n)| n).sum();
        // The period's limit paces buying. With the objective at risk, the pool's own parked
        // nodes come back past it: woken, they serve after the rungs after their disk, and the
        // pool held them minutes ago.
        let wakes = if at_risk { counts.warm } else { 0 };
        let allowed = policy
            .scale_up_limit
            .saturating_sub(used)
            .saturating_add(wakes);
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
        let mut reason = format!("{why}; target {current} → {target}");
        if step > 0 && against_cooldown && !from_zero {
            reason.push_str("; against the direction cooldown, because the objective is at risk");
        }
        winner.answer(target, winner.rule, reason, limited, memory)
    }

    /// Scale-in sized by the surplus. The level is what the rules want plus a safety margin;
    /// replicas above the highest level of the last `park_after` go to the warm pool (as many
    /// as it has room for), those above the highest level of the last `release_after` go
    /// altogether. The waits are the ski-rental break-even: an idle replica is kept as long as
    /// getting it back would cost — a wake for a parked one, a cold start for a released one —
    /// and never longer than `scale_down_stabilization`. Nothing goes while requests are old or
    /// the queue per replica is above its fraction of the target, nor against a recent
    /// scale-up.
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
        let level = self
            .safe_level(winner.wanted)
            .max(self.margin_wanted(s, counts).min(current.max(self.floor)));
        let recurrence = memory.recurring_gaps(policy.scale_down_stabilization);
        let waits = self.scale_in_waits(recurrence, counts.supply_refused);
        memory.remember_level(self.now, level, policy.scale_down_stabilization);
        if level >= current || !self.quiet(s, counts) {
            memory.low_since = None;
            let reason = format!("{why}; target stays {current}");
            return winner.answer(current, Rule::Steady, reason, winner.max_limited, memory);
        }
        let since = *memory.low_since.get_or_insert(self.now);
        let low_for = elapsed(since, self.now);
        // A replica goes only once the surplus has lasted the whole wait, and then only down to
        // the highest level seen within it.
        let level_after = |wait: Duration| {
            if low_for >= wait {
                memory.level_over(self.now, wait).max(self.floor)
            } else {
                current
            }
        };
        let parked_level = level_after(waits.0);
        let released_level = level_after(waits.1);
        let parkable = counts
            .parkable
            .min(released_level.saturating_sub(parked_level));
        let target = released_level.saturating_sub(parkable).max(self.floor);
        let idle = current - level;
        let period_passed = memory
            .last_scale_down_at
            .is_none_or(|at| elapsed(at, self.now) >= policy.scale_down_period);
        if target >= current || !period_passed {
            let reason = match recurrence {
                _ if counts.supply_refused => format!(
                    "{why}; {idle} above demand with a {:.0} % margin for {}s: parked after {}s (a wake to get back), but every offering of the pool was refused since its last launch, so a replica released could not be bought back: released only after the whole {}s window; target stays {current}",
                    policy.scale_down_margin * 100.0,
                    low_for.as_secs(),
                    waits.0.as_secs(),
                    policy.scale_down_stabilization.as_secs()
                ),
                Some(gaps) => format!(
                    "{why}; {idle} above demand with a {:.0} % margin for {}s; {}",
                    policy.scale_down_margin * 100.0,
                    low_for.as_secs(),
                    self.recurrence_costs(idle, gaps)
                ),
                None => format!(
                    "{why}; {idle} above demand with a {:.0} % margin for {}s: parked after {}s (a wake to get back), released after {}s (a cold start); target stays {current}",
                    policy.scale_down_margin * 100.0,
                    low_for.as_secs(),
                    waits.0.as_secs(),
                    waits.1.as_secs()
                ),
            };
            let mut answer = winner.answer(current, Rule::Steady, reason, None, memory);
            answer.idle_replicas = idle;
            return answer;
        }
        if self.recent_change(&memory, Direction::Down) {
            let why = format!(
                "{why}; but the pool scaled up less than {}s ago",
                policy.direction_cooldown.as_secs()
            );
            let reason = ScalingHold::DirectionCooldown;
            return self.held(memory, reason, why, winner.classification);
        }
        memory.last_scale_down_at = Some(self.now);
        memory.last_change = Some((self.now, Direction::Down));
        let parked = parkable.min(current - target);
        let reason = format!(
            "{why}; {idle} above demand with a {:.0} % margin for {}s: target {current} → {target} ({parked} to the warm pool, {} released)",
            policy.scale_down_margin * 100.0,
            low_for.as_secs(),
            current - target - parked
        );
        let mut answer = winner.answer(target, Rule::ScaleDown, reason, None, memory);
        answer.idle_replicas = target.saturating_sub(level);
        answer
    }

    /// What the rules want plus the safety margin (its share of them, rounded down), within the
    /// floor and the current target.
    fn safe_level(&self, wanted: u32) -> u32 {
        let margin = self.policy.scale_down_margin.max(0.0);
        wanted
            .saturating_add(clamp_u32((wanted as f64 * margin).floor()))
            .max(self.floor)
            .min(self.current.max(self.floor))
    }

    /// What the rate rules (HPA, backlog drain) want with the load raised by the scale-down
    /// margin, plus the buffer, within the bounds: a pool whose demand sits on the boundary
    /// between two counts keeps the upper one through a dip smaller than the margin, instead of
    /// letting a replica go and buying it back on the next rise (the margin taken on the count
    /// alone rounds to nothing on a small pool).
    fn margin_wanted(&self, s: &Signals, counts: ReplicaCounts) -> u32 {
        let raise = 1.0 + self.policy.scale_down_margin.max(0.0);
        let raised = Signals {
            queue_depth: clamp_u64((s.queue_depth as f64 * raise).ceil()),
            arrival_rate_rps: s.arrival_rate_rps.map(|r| r * raise),
            queued_tokens: s.queued_tokens.map(|t| t * raise),
            token_arrival_rate_tps: s.token_arrival_rate_tps.map(|t| t * raise),
            ..*s
        };
        let per_replica_rps = throughput(self.policy, s, counts.ready);
        let raw = [
            self.hpa_proposal(&raised, counts),
            self.drain_proposal(&raised, counts, per_replica_rps),
        ]
        .into_iter()
        .flatten()
        .map(|(_, replicas, _)| replicas)
        .max()
        .unwrap_or(0);
        raw.saturating_add(self.buffer_on(raw))
            .clamp(self.floor, self.pool.max_replicas)
    }

    /// The buffer that rides on `raw` replicas of demand: the pool's `buffer_replicas`, never on
    /// an idle pool (one at zero stays at zero).
    fn buffer_on(&self, raw: u32) -> u32 {
        if raw > 0 {
            self.policy.buffer_replicas
        } else {
            0
        }
    }

    /// How long a surplus replica is kept before it is parked warm, and before it is released.
    /// Without a known recurrence, what getting it back costs in time (the ski-rental
    /// break-even), at most the stabilisation window. When the pool's own rises recur within
    /// that window, the whole window: the next rise is expected before it ends, and a replica
    /// let go now would miss it by a wake or a cold start. When every offering of the pool was
    /// refused since its last launch, a release waits the whole window too: a replica let go
    /// in a stockout is not bought back within any ladder (a stockout may last hours); parking
    /// keeps the node and its disk, and waits as usual.
    fn scale_in_waits(
        &self,
        recurrence: Option<(Duration, Duration)>,
        supply_refused: bool,
    ) -> (Duration, Duration) {
        let most = self.policy.scale_down_stabilization;
        if recurrence.is_some() {
            return (most, most);
        }
        let ladder = &self.pool.ladder;
        let park = ladder.from_stopped_total().min(most);
        let release = if supply_refused {
            most
        } else {
            ladder.cold_total().min(most)
        };
        (park, release)
    }

    /// The reason a recurring surplus stays: what each choice is expected to cost, in replica
    /// time, until the next rise.
    fn recurrence_costs(&self, idle: u32, (older, newer): (Duration, Duration)) -> String {
        let expected = older.max(newer);
        let ladder = &self.pool.ladder;
        format!(
            "rises recur (the last gaps {}s and {}s, within the {}s window): keeping {idle} idle until the next costs at most {idle} × {}s of replica time, parking them misses its first {}s (a wake), releasing them its first {}s (a cold start, billed too); kept",
            older.as_secs(),
            newer.as_secs(),
            self.policy.scale_down_stabilization.as_secs(),
            expected.as_secs(),
            ladder.from_stopped_total().as_secs(),
            ladder.cold_total().as_secs()
        )
    }

    /// Whether load is low enough to let replicas go: the oldest request young and the queue
    /// per ready replica small, each against its fraction of the threshold in use.
    fn quiet(&self, s: &Signals, counts: ReplicaCounts) -> bool {
        let fraction = self.policy.scale_down_fraction;
        let hpa_low = self.policy.target_queue_per_replica.is_none_or(|target| {
            (s.queue_depth as f64 / counts.ready.max(1) as f64) < fraction * target
        });
        let age_low = match (self.policy.oldest_age_threshold, s.oldest_age_s) {
            (Some(threshold), Some(age)) => age < fraction * threshold.as_secs_f64(),
            _ => true,
        };
        hpa_low && age_low
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
        let buffer = step.buffer_on(raw);
        let why = if buffer > 0 {
            format!("{why}, plus a buffer of {buffer}")
        } else {
            why
        };
        Winner {
            rule,
            unclamped: raw,
            wanted: raw.saturating_add(buffer).clamp(step.floor, max_replicas),
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
            scaling_hold: None,
            limited,
            classification: self.classification,
            proposals: self.proposals.clone(),
            idle_replicas: 0,
            memory: ControllerMemory { target, ..memory },
        }
    }
}

mod rules;
#[cfg(test)]
mod tests;
