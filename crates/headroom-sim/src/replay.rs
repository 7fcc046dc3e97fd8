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
use headroom_core::promotion::{self, CapacityEstimate, CapacityModel, DecisionSpan, Promotion};
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
    /// What the replayed capacity ran and the queueing it avoided against the history
    /// (replica- and GPU-hours, idle GPU-minutes, request-minutes waited), by the fluid model.
    #[serde(flatten)]
    pub capacity: CapacityEstimate,
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
    let mut model = CapacityModel::new(pool, gpus_per_replica, initial);
    let mut steps = Vec::with_capacity(history.len());
    let mut report = ReplayReport {
        pool: pool.name.to_string(),
        from: history.first().map_or_else(Timestamp::default, |s| s.at),
        to: history.last().map_or_else(Timestamp::default, |s| s.at),
        step_s,
        steps: history.len(),
        missing_signal_steps: 0,
        promotion: Promotion::default(),
        capacity: CapacityEstimate::default(),
        minutes_over_age_objective_while_scaling_up: 0.0,
    };
    // The signal each step's decision read, for the promotion tally.
    let mut read: Vec<Option<Signals>> = Vec::with_capacity(history.len());
    let mut previous_target: Option<u32> = None;
    for h in history {
        model.land(h.at);
        if let Some(input) = &h.signal {
            latest = Some(signals_at(input, h.at));
        } else {
            report.missing_signal_steps += 1;
        }
        let counts = ReplicaCounts {
            ready: model.ready(),
            starting: model.starting(),
            ..ReplicaCounts::default()
        };
        let mut decision = controller::decide(pool, latest.as_ref(), counts, memory, h.at);
        memory = std::mem::take(&mut decision.memory);
        let target = decision.target;
        model.follow(target, h.at);
        read.push(latest);
        let (queue, age, arrivals) = match &h.signal {
            Some(s) => (Some(s.queue_depth), s.oldest_age_s, s.arrival_rate_rps),
            None => (None, None, None),
        };
        let adding = previous_target.is_some_and(|before| target > before) || model.starting() > 0;
        if let (Some(age), Some(objective)) = (age, pool.scaling.oldest_age_threshold)
            && age > objective.as_secs_f64()
            && adding
        {
            report.minutes_over_age_objective_while_scaling_up += step_min;
        }
        let modelled = model.account(step_s, queue, arrivals);
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
    report.capacity = model.estimate();
    (steps, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> PoolSpec {
        let config = headroom_config::Config::parse(
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
        assert!(
            report.capacity.gpu_hours > report.capacity.replica_hours,
            "8 GPUs a replica"
        );
        assert_eq!(
            report.capacity.idle_gpu_minutes, None,
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
        assert_eq!(
            report.capacity.history_queue_request_minutes,
            50.0 * 40.0 * 0.25
        );
        let modelled = report.capacity.modelled_queue_request_minutes.unwrap();
        assert!(modelled < 1.0, "2+ replicas at 5/s serve 10/s: {modelled}");
        assert!(report.capacity.avoided_queue_request_minutes.unwrap() > 490.0);
        assert_eq!(report.promotion.direction_changes, 0);
        assert!(report.promotion.ready);
    }
}
