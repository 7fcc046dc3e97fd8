//! The rules that propose a replica count (the floor, the HPA rule, backlog drain, oldest
//! age) and the lead-time cap that bounds them, in the unit the pool is sized in.

use super::*;

/// The queue in the unit the pool is sized in: tokens where the pool sets
/// `replica_throughput_tps` and the signal counts tokens, requests otherwise.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Work {
    unit: &'static str,
    arrivals: f64,
    backlog: f64,
    per_replica: f64,
}

impl Work {
    fn of(policy: &ScalingPolicy, s: &Signals, per_replica_rps: f64) -> Option<Work> {
        if let (Some(tps), Some(queued), Some(rate)) = (
            policy.replica_throughput_tps,
            s.queued_tokens,
            s.token_arrival_rate_tps,
        ) {
            return Some(Work {
                unit: "tok",
                arrivals: rate,
                backlog: queued,
                per_replica: tps,
            });
        }
        Some(Work {
            unit: "req",
            arrivals: s.arrival_rate_rps?,
            backlog: s.queue_depth as f64,
            per_replica: per_replica_rps,
        })
    }
}

impl Activation<'_> {
    /// Every rule's proposal, the floor first; the oldest-age rule counts its windows in
    /// `memory`.
    pub(super) fn proposals(
        &self,
        s: &Signals,
        counts: ReplicaCounts,
        memory: &mut ControllerMemory,
    ) -> Vec<Candidate> {
        let floor = match self.scheduled {
            Some(window) => (Rule::Scheduled, self.floor, window.why.clone()),
            None => (
                Rule::Floor,
                self.floor,
                format!(
                    "min_replicas {} / min_capacity {}",
                    self.pool.min_replicas, self.policy.min_capacity
                ),
            ),
        };
        let per_replica_rps = throughput(self.policy, s, counts.ready);
        let proposals: Vec<Candidate> = [
            Some(floor),
            self.hpa_proposal(s, counts),
            self.drain_proposal(s, counts, per_replica_rps),
            self.oldest_age_proposal(s, per_replica_rps, memory),
            self.ramp_proposal(s, counts, per_replica_rps, memory),
        ]
        .into_iter()
        .flatten()
        .collect();
        match self.lead_time_cap(s, counts, per_replica_rps, memory) {
            Some((cap, why)) => proposals
                .into_iter()
                .map(|(rule, n, reason)| match rule {
                    // The ramp rule sizes for the arrivals when its replicas land: the cap's
                    // own argument, on the projected rate.
                    Rule::Floor | Rule::Scheduled | Rule::Ramp => (rule, n, reason),
                    _ if n > cap => (rule, cap, format!("{reason}; but {why}: {cap}")),
                    _ => (rule, n, reason),
                })
                .collect(),
            None => proposals,
        }
    }

    /// No rule buys more replicas than the arrivals need (at the target utilisation) plus what
    /// drains the backlog within the time a new replica takes to serve — a woken warm node the
    /// rungs after its disk, a new one the whole ladder. A replica that lands after the
    /// backlog it was bought for is gone is idle for minutes: a spike of seconds that asks the
    /// queue rule for fifty replicas gets the few that drain it in time. Arrivals that still
    /// rise under a growing queue are taken at the rate they will have when the replicas land.
    pub(super) fn lead_time_cap(
        &self,
        s: &Signals,
        counts: ReplicaCounts,
        per_replica_rps: f64,
        memory: &ControllerMemory,
    ) -> Option<(u32, String)> {
        let mut work = Work::of(self.policy, s, per_replica_rps)?;
        let ladder = &self.pool.ladder;
        let lead = if counts.warm > 0 {
            ladder.from_stopped_total()
        } else {
            ladder.cold_total()
        };
        let utilization = self.policy.target_utilization.clamp(0.1, 1.0);
        // A queue that outruns the ready replicas while arrivals rise steadily through four
        // breach windows is a burst on its way up: the replicas bought now land on the rate of
        // then, projected along the rise (at most twice the rate now, as the ramp rule does).
        // Without the queue a rise is what the target utilisation's margin absorbs; a step
        // (a spike) is no rise to extrapolate.
        let now_rate = work.arrivals;
        let serving_now = f64::from(counts.ready) * work.per_replica;
        let window = self.policy.breach_window;
        let rising = self
            .queue_outruns(s, counts.ready, now_rate, serving_now)
            .then(|| memory.arrival_windows(self.now, window))
            .flatten()
            .and_then(|means| steady_growth(&means, window));
        if let Some(slope) = rising {
            work.arrivals = (now_rate + slope * lead.as_secs_f64()).min(2.0 * now_rate);
        }
        // What the queue grows by until then, when arrivals outrun the replicas serving
        // meanwhile: a queue that keeps growing is no spike, and the replicas that land must
        // drain that growth within the drain window as well. The ready ones serve throughout,
        // those starting for about half of it (they land somewhere within one lead time),
        // those only requested hardly at all: counting every one bought would miss a ramp,
        // counting only the ready ones would buy again what is already on its way.
        let serving =
            (f64::from(counts.ready) + f64::from(counts.starting) / 2.0) * work.per_replica;
        // Along a rise the queue grows at the mean of the rate now and the rate then.
        let mean_arrivals = (now_rate + work.arrivals) / 2.0;
        let growth = (mean_arrivals - serving).max(0.0) * lead.as_secs_f64();
        let drain = self.policy.backlog_drain.as_secs_f64().max(1.0);
        let cap = drain_rule(
            work.arrivals / utilization,
            work.backlog + growth * lead.as_secs_f64() / drain,
            lead,
            work.per_replica,
        );
        let grows = if growth > 0.0 {
            format!(
                ", {growth:.0} {unit} more queued by then drained within {}s",
                self.policy.backlog_drain.as_secs(),
                unit = work.unit
            )
        } else {
            String::new()
        };
        let rate = match rising {
            Some(slope) => format!(
                "{:.1} {unit}/s rising {slope:.2} a second to {:.1}",
                now_rate,
                work.arrivals,
                unit = work.unit
            ),
            None => format!("{:.1}", work.arrivals),
        };
        Some((
            cap,
            format!(
                "a new replica serves in {}s: {rate} {unit}/s and {:.0} {unit} queued drained by then{grows} need",
                lead.as_secs(),
                work.backlog,
                unit = work.unit,
            ),
        ))
    }

    pub(super) fn hpa_proposal(&self, s: &Signals, counts: ReplicaCounts) -> Option<Candidate> {
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

    pub(super) fn drain_proposal(
        &self,
        s: &Signals,
        counts: ReplicaCounts,
        per_replica_rps: f64,
    ) -> Option<Candidate> {
        let work = Work::of(self.policy, s, per_replica_rps)?;
        // Less than one waiting request per ready replica while departures keep up with arrivals
        // is noise (a poisoned or just-arrived request), not a backlog to buy replicas for.
        let keeping_up = s
            .departure_rate_rps
            .is_some_and(|d| s.arrival_rate_rps.is_some_and(|a| d >= a));
        let backlog = if keeping_up && s.queue_depth < counts.ready as u64 {
            0.0
        } else {
            work.backlog
        };
        let drain = self.policy.backlog_drain;
        // A pool run at full throughput has no room for the next second's variance: size the
        // steady part for the target utilisation.
        let utilization = self.policy.target_utilization.clamp(0.1, 1.0);
        let desired = drain_rule(
            work.arrivals / utilization,
            backlog,
            drain,
            work.per_replica,
        );
        let why = format!(
            "{:.1} {unit}/s at {:.2} {unit}/s per replica and {:.0} % utilisation plus {:.0} {unit} queued drained within {}s gives {desired}",
            work.arrivals,
            work.per_replica,
            utilization * 100.0,
            work.backlog,
            drain.as_secs(),
            unit = work.unit,
        );
        Some((Rule::BacklogDrain, desired, why))
    }

    /// Proposes only from the second consecutive window with the oldest age past its threshold
    /// and arrivals above departures; any other window starts the count over.
    pub(super) fn oldest_age_proposal(
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

    /// Proposes when arrivals grew through [`RAMP_WINDOWS`] windows in a row, by a tenth at
    /// least overall: the
    /// drain rule on the rate projected one lead time ahead (a wake when warm nodes wait, a
    /// cold start otherwise) along the growth measured over the windows.
    pub(super) fn ramp_proposal(
        &self,
        s: &Signals,
        counts: ReplicaCounts,
        per_replica_rps: f64,
        memory: &mut ControllerMemory,
    ) -> Option<Candidate> {
        let work = Work::of(self.policy, s, per_replica_rps)?;
        let window = ramp_window(self.policy);
        let span = RAMP_WINDOWS as u32;
        memory.remember_arrivals(self.now, work.arrivals, window * span);
        let means = memory.arrival_windows(self.now, window)?;
        let (first, last) = (means[0], means[RAMP_WINDOWS - 1]);
        let growth = steady_growth(&means, window)?;
        let ladder = &self.pool.ladder;
        let lead = if counts.warm > 0 {
            ladder.from_stopped_total()
        } else {
            ladder.cold_total()
        };
        // Extrapolated a lead time ahead, but no further than the trend has been seen (a
        // few minutes of growth say little of ten minutes on), and never past twice the rate
        // now.
        let now_rate = work.arrivals.max(last);
        let ahead = lead.min(window * (span - 1));
        let projected = (now_rate + growth * ahead.as_secs_f64()).min(2.0 * now_rate);
        // At full throughput: the target utilisation's margin already absorbs growth up to it,
        // so the rule buys only what the projected rate needs beyond that margin.
        let desired = drain_rule(
            projected,
            work.backlog,
            self.policy.backlog_drain,
            work.per_replica,
        );
        let why = format!(
            "arrivals grew from {first:.1} to {last:.1} {unit}/s through {RAMP_WINDOWS} windows of {}s: {projected:.1} {unit}/s projected {}s ahead (a new replica serves in {}s) gives {desired}",
            window.as_secs(),
            ahead.as_secs(),
            lead.as_secs(),
            unit = work.unit,
        );
        Some((Rule::Ramp, desired, why))
    }
}

impl Activation<'_> {
    /// The forecast's proposal: the replicas the history expects, named with when and why.
    pub(super) fn forecast_proposal(&self, f: &crate::forecast::Forecast) -> Candidate {
        let recurrence = match f.recurrence {
            crate::forecast::Recurrence::Daily => "at this time on two of the last three days",
            crate::forecast::Recurrence::Weekly => {
                "at this time of the week on each of the last two weeks"
            }
        };
        let why = format!(
            "the pool's history expects {} replicas from {} ({recurrence}), within the lead time of a new replica",
            f.replicas,
            f.expected_at.format("%H:%M UTC")
        );
        (Rule::Forecast, f.replicas, why)
    }
}

/// The growth per second through consecutive windows' mean arrival rates, when it is growth
/// in every window, by a tenth overall, and steady: a step in the rate seen through a rolling
/// average (traffic that starts, a burst, a spike) grows in one or two windows and hardly in
/// the others, and is no trend to extrapolate.
fn steady_growth(means: &[f64; RAMP_WINDOWS], window: Duration) -> Option<f64> {
    let (first, last) = (means[0], means[RAMP_WINDOWS - 1]);
    let steps = means.windows(2).map(|w| w[1] - w[0]);
    let (smallest, largest) = steps.fold((f64::INFINITY, 0.0_f64), |(lo, hi), s| {
        (lo.min(s), hi.max(s))
    });
    let steady = smallest > 0.0 && last >= 1.1 * first && smallest * 3.0 >= largest;
    let span = (RAMP_WINDOWS - 1) as f64 * window.as_secs_f64();
    steady.then(|| (last - first) / span.max(f64::MIN_POSITIVE))
}

/// The ramp rule's window: four breach windows, at least a minute, so a burst of seconds is
/// not a ramp.
fn ramp_window(policy: &ScalingPolicy) -> Duration {
    (policy.breach_window * 4).max(Duration::from_secs(60))
}
