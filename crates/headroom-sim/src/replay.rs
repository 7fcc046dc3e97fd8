//! The shadow experiment on history: a pool's recorded signals, step by step in virtual time,
//! through the real controller, with a capacity model (a launch serves one cold start after it is
//! decided, a release is immediate), and the report the background notes ask for before a pool
//! is promoted from shadow mode: direction changes per cooldown, scale-ups on a missing metric,
//! idle GPU-minutes added against queueing avoided, minutes over the age objective.
//!
//! Pure: the history comes in (from Prometheus, read by the binary), decisions and the report go
//! out. The replay is open-loop, as shadow mode is: the controller sees the queue the history
//! recorded under the capacity that really ran, not the queue its own decisions would have made.
//! The queueing it would have avoided is estimated with a fluid model of the history's arrivals
//! against the replayed capacity.

use std::time::Duration;

use headroom_core::controller::{
    self, ControllerMemory, ReplicaCounts, Rule, ScalingHold, Signals,
};
use headroom_core::promotion::{self, DecisionSpan, Promotion};
use headroom_core::{PoolSpec, Timestamp};
use headroom_engine::SignalInput;
use serde::Serialize;

/// One step of the history: what the pool's signal was then (`None`: no queue depth recorded).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryStep {
    pub at: Timestamp,
    pub signal: Option<SignalInput>,
}

/// One step of the replay, as written to the decisions file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayStep {
    pub at: Timestamp,
    /// The history had a signal at this step.
    pub signal: bool,
    pub queue_depth: Option<u64>,
    pub oldest_age_s: Option<f64>,
    pub arrival_rate_rps: Option<f64>,
    /// The replayed capacity the decision saw (as the live decision log's `replicas`): serving,
    /// and launched but not yet through the cold start. The step's own launches count from the
    /// next step.
    pub ready: u32,
    pub starting: u32,
    pub target: u32,
    pub rule: Rule,
    pub hold: Option<ScalingHold>,
    pub reason: String,
    /// The queue a fluid model of the history's arrivals against the replayed capacity gives.
    pub modelled_queue: Option<f64>,
}

/// What the replay says about promoting the policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    pub pool: String,
    pub from: Timestamp,
    pub to: Timestamp,
    pub step_s: f64,
    pub steps: usize,
    /// Steps with no signal in the history.
    pub missing_signal_steps: usize,
    /// The promotion rules' tally over the replayed decisions (direction changes, scale-ups on a
    /// missing signal, held minutes, minutes over the age objective, the verdict).
    #[serde(flatten)]
    pub promotion: Promotion,
    /// Replica-hours and GPU-hours the replayed capacity ran (ready and starting).
    pub replica_hours: f64,
    pub gpu_hours: f64,
    /// GPU-minutes of ready capacity above what the history's arrivals needed while the modelled
    /// queue was empty (the price of staying ahead).
    pub idle_gpu_minutes: Option<f64>,
    /// Request-minutes of waiting in the history (the integral of its queue) and under the
    /// replayed capacity (the fluid model), and their difference: queueing avoided.
    pub history_queue_request_minutes: f64,
    pub modelled_queue_request_minutes: Option<f64>,
    pub avoided_queue_request_minutes: Option<f64>,
    /// Of the minutes over the age objective, those in which the replay was adding capacity.
    pub minutes_over_age_objective_while_scaling_up: f64,
}

fn signals_at(input: &SignalInput, at: Timestamp) -> Signals {
    Signals {
        queue_depth: input.queue_depth,
        oldest_age_s: input.oldest_age_s,
        arrival_rate_rps: input.arrival_rate_rps,
        departure_rate_rps: input.departure_rate_rps,
        error_rate_rps: input.error_rate_rps,
        batch_occupancy: input.batch_occupancy,
        gpu_utilization: input.gpu_utilization,
        received_at: at,
        queued_tokens: input.queued_tokens,
        token_arrival_rate_tps: input.token_arrival_rate_tps,
    }
}

/// Replays `history` (in time order, one step apart) for `pool`, whose replicas have
/// `gpus_per_replica` GPUs each.
pub fn replay(
    pool: &PoolSpec,
    history: &[HistoryStep],
    step: Duration,
    gpus_per_replica: u32,
) -> (Vec<ReplayStep>, ReplayReport) {
    let cold_start = chrono::Duration::from_std(pool.ladder.cold_total()).unwrap_or_default();
    let step_s = step.as_secs_f64();
    let step_min = step_s / 60.0;
    let throughput = pool.scaling.replica_throughput_rps;
    let mut latest: Option<Signals> = None;
    // The pool as it stood at the first step: sized for the arrivals recorded then (its floor
    // without them), so the replay does not open with a cold start the history never had.
    let initial = history
        .first()
        .and_then(|h| h.signal.as_ref()?.arrival_rate_rps)
        .filter(|_| throughput > 0.0)
        .map_or(pool.min_replicas, |rate| {
            let needed = (rate / (throughput * pool.scaling.target_utilization)).ceil();
            (needed.min(f64::from(pool.max_replicas)) as u32).max(pool.min_replicas)
        });
    let mut memory = ControllerMemory {
        target: initial,
        ..ControllerMemory::default()
    };
    let mut ready = initial;
    // When each launch still on its ladder serves, oldest first.
    let mut launches: std::collections::VecDeque<Timestamp> = Default::default();
    let mut steps = Vec::with_capacity(history.len());
    let mut modelled_queue = 0.0f64;
    let mut idle_gpu_minutes = Some(0.0f64);
    let mut modelled_minutes = Some(0.0f64);
    let mut report = ReplayReport {
        pool: pool.name.to_string(),
        from: history.first().map_or_else(Timestamp::default, |s| s.at),
        to: history.last().map_or_else(Timestamp::default, |s| s.at),
        step_s,
        steps: history.len(),
        missing_signal_steps: 0,
        promotion: Promotion::default(),
        replica_hours: 0.0,
        gpu_hours: 0.0,
        idle_gpu_minutes: None,
        history_queue_request_minutes: 0.0,
        modelled_queue_request_minutes: None,
        avoided_queue_request_minutes: None,
        minutes_over_age_objective_while_scaling_up: 0.0,
    };
    // The signal each step's decision read, for the promotion tally.
    let mut read: Vec<Option<Signals>> = Vec::with_capacity(history.len());
    let mut previous_target: Option<u32> = None;
    for h in history {
        while launches.front().is_some_and(|serves| *serves <= h.at) {
            launches.pop_front();
            ready += 1;
        }
        if let Some(input) = &h.signal {
            latest = Some(signals_at(input, h.at));
        } else {
            report.missing_signal_steps += 1;
        }
        let counts = ReplicaCounts {
            ready,
            starting: u32::try_from(launches.len()).unwrap_or(u32::MAX),
            ..ReplicaCounts::default()
        };
        let mut decision = controller::decide(pool, latest.as_ref(), counts, memory, h.at);
        memory = std::mem::take(&mut decision.memory);
        let target = decision.target;
        let provisioned = ready + u32::try_from(launches.len()).unwrap_or(u32::MAX);
        if target > provisioned {
            for _ in provisioned..target {
                launches.push_back(h.at + cold_start);
            }
        } else {
            // Releases: launches still on their ladder first (newest first), then serving ones.
            let mut surplus = provisioned - target;
            while surplus > 0 && launches.pop_back().is_some() {
                surplus -= 1;
            }
            ready -= surplus.min(ready);
        }
        read.push(latest);
        let running = ready + u32::try_from(launches.len()).unwrap_or(u32::MAX);
        report.replica_hours += f64::from(running) * step_s / 3600.0;
        let (queue, age, arrivals) = match &h.signal {
            Some(s) => (Some(s.queue_depth), s.oldest_age_s, s.arrival_rate_rps),
            None => (None, None, None),
        };
        report.history_queue_request_minutes += queue.unwrap_or(0) as f64 * step_min;
        let adding = previous_target.is_some_and(|before| target > before) || !launches.is_empty();
        if let (Some(age), Some(objective)) = (age, pool.scaling.oldest_age_threshold)
            && age > objective.as_secs_f64()
            && adding
        {
            report.minutes_over_age_objective_while_scaling_up += step_min;
        }
        let modelled = match arrivals {
            Some(rate) if throughput > 0.0 => {
                let capacity = f64::from(ready) * throughput;
                modelled_queue = (modelled_queue + (rate - capacity) * step_s).max(0.0);
                if modelled_queue == 0.0
                    && let Some(idle) = idle_gpu_minutes.as_mut()
                {
                    let spare = (capacity - rate).max(0.0) / throughput;
                    *idle += spare * f64::from(gpus_per_replica) * step_min;
                }
                if let Some(total) = modelled_minutes.as_mut() {
                    *total += modelled_queue * step_min;
                }
                Some(modelled_queue)
            }
            _ => {
                // Without the arrivals the fluid model cannot run: no estimate for the range.
                idle_gpu_minutes = None;
                modelled_minutes = None;
                None
            }
        };
        steps.push(ReplayStep {
            at: h.at,
            signal: h.signal.is_some(),
            queue_depth: queue,
            oldest_age_s: age,
            arrival_rate_rps: arrivals,
            ready: counts.ready,
            starting: counts.starting,
            target,
            rule: decision.rule,
            hold: decision.scaling_hold,
            reason: decision.reason,
            modelled_queue: modelled,
        });
        previous_target = Some(target);
    }
    report.gpu_hours = report.replica_hours * f64::from(gpus_per_replica);
    let step_chrono = chrono::Duration::from_std(step).unwrap_or_default();
    report.promotion = promotion::tally(
        &pool.scaling,
        steps.iter().zip(&read).map(|(s, signal)| DecisionSpan {
            at: s.at,
            until: s.at + step_chrono,
            target: s.target,
            held: s.hold.is_some(),
            // A step with no signal of its own decided on an older one (or none).
            signal: signal.as_ref(),
        }),
    );
    report.idle_gpu_minutes = idle_gpu_minutes;
    report.modelled_queue_request_minutes = modelled_minutes;
    report.avoided_queue_request_minutes =
        modelled_minutes.map(|m| report.history_queue_request_minutes - m);
    (steps, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> PoolSpec {
        let config = headroom_engine::Config::parse(
            r#"
cluster_id = "replay"
[[offerings]]
id = "od"
provider = "sim"
region = "us-east-1"
zone = "use1-az1"
instance_type = "p5.48xlarge"
market = "on-demand"
price_usd_per_hour = "55.04"
gpus = 8
[[pools]]
name = "llm"
account = "ml"
offerings = ["od"]
min_replicas = 1
max_replicas = 20
[pools.ladder]
node_acquisition = "60s"
image_pull = "45s"
weight_load = "90s"
compile = "30s"
warmup = "15s"
[pools.scaling]
replica_throughput_rps = 5.0
target_utilization = 1.0
oldest_age_threshold = "30s"
"#,
            "replay-test",
        )
        .unwrap();
        config.pools[0].clone()
    }

    fn at(minute: i64) -> Timestamp {
        "2026-12-01T08:00:00Z".parse::<Timestamp>().unwrap()
            + chrono::Duration::seconds(minute * 15)
    }

    fn signal(queue: u64, arrivals: f64) -> Option<SignalInput> {
        Some(SignalInput {
            queue_depth: queue,
            arrival_rate_rps: Some(arrivals),
            oldest_age_s: Some(if queue > 0 { 40.0 } else { 0.0 }),
            ..SignalInput::default()
        })
    }

    #[test]
    fn a_rise_is_met_one_cold_start_later_and_a_gap_never_scales_up() {
        let p = pool();
        let mut history: Vec<HistoryStep> = (0..20)
            .map(|i| HistoryStep {
                at: at(i),
                signal: signal(0, 10.0),
            })
            .collect();
        // Arrivals triple with a queue for two minutes, then the metric goes missing for 5
        // minutes (longer than signal_max_age), then comes back quiet.
        history.extend((20..28).map(|i| HistoryStep {
            at: at(i),
            signal: signal(200, 30.0),
        }));
        history.extend((28..48).map(|i| HistoryStep {
            at: at(i),
            signal: None,
        }));
        history.extend((48..80).map(|i| HistoryStep {
            at: at(i),
            signal: signal(0, 10.0),
        }));
        let (steps, report) = replay(&p, &history, Duration::from_secs(15), 8);
        assert_eq!(steps.len(), 80);
        assert_eq!(steps[0].target, 2, "10/s at 5/s");
        assert!(steps[21].target > 2, "{:?}", steps[21]);
        assert!(
            steps[22].starting > 0 && steps[22].ready == 2,
            "a launch is not capacity yet: {:?}",
            steps[22]
        );
        let cold = p.ladder.cold_total().as_secs() / 15;
        let served = &steps[21 + cold as usize];
        assert!(served.ready > 2 && served.starting == 0, "{served:?}");
        assert_eq!(report.promotion.scale_ups_on_missing_signal, 0);
        assert!(
            report.promotion.held_minutes > 0.0,
            "held while the metric was missing"
        );
        assert!(steps[40].hold.is_some(), "{:?}", steps[40]);
        assert_eq!(report.missing_signal_steps, 20);
        // Two minutes of recorded ages over 30 s, and the last of them for as long as it stays
        // fresh (signal_max_age, 30 s) once the metric goes missing.
        assert_eq!(report.promotion.minutes_over_age_objective, 2.5);
        assert!(report.gpu_hours > report.replica_hours, "8 GPUs a replica");
        assert_eq!(
            report.idle_gpu_minutes, None,
            "no arrivals while the metric was missing"
        );
    }

    #[test]
    fn the_fluid_model_counts_queueing_the_replayed_capacity_avoids() {
        let p = pool();
        // A steady 10/s with a recorded queue of 50 that never drains: the history ran short.
        let history: Vec<HistoryStep> = (0..40)
            .map(|i| HistoryStep {
                at: at(i),
                signal: signal(50, 10.0),
            })
            .collect();
        let (_, report) = replay(&p, &history, Duration::from_secs(15), 1);
        assert_eq!(report.history_queue_request_minutes, 50.0 * 40.0 * 0.25);
        let modelled = report.modelled_queue_request_minutes.unwrap();
        assert!(modelled < 1.0, "2+ replicas at 5/s serve 10/s: {modelled}");
        assert!(report.avoided_queue_request_minutes.unwrap() > 490.0);
        assert_eq!(report.promotion.direction_changes, 0);
        assert!(report.promotion.ready);
    }
}
