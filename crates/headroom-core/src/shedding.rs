//! Load shedding: what the serving layer should admit, per priority tier, while capacity is
//! short (`GET /v1/pools/{name}/admission`). Not the budget check (`Ledger::place_hold`) nor
//! the recording of a capacity request.
//!
//! Two rules, the better informed one wins:
//!
//! - **Deadline** (when the pool sets a tier's deadline and the signal counts the tier's queue):
//!   a tier is shed only for the part of its backlog that the capacity ready now plus the
//!   capacity on its way (each node counted from its ETA on the ladder) cannot start within the
//!   tier's deadline, after the higher tiers ahead of it; the rest waits. The answer is a queue
//!   cap: admit while fewer than `max_queued` of the tier wait.
//! - **Coverage** (otherwise): when the replicas ready plus those due within the drain objective
//!   cover less than the demand, lower tiers are turned away whole, lowest first.
//!
//! Either way a shed tier is told when to come back, and the answer is recomputed from the same
//! counts every tick, so shedding stops as soon as capacity lands.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Priority;

/// One tier's load, from the signal, and how long its requests stay useful.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TierLoad {
    pub priority: Priority,
    /// Requests of the tier waiting to start.
    pub queued: u64,
    /// Arrivals of the tier per second (0 when the signal does not say).
    pub arrival_rps: f64,
    /// A request of the tier waiting longer than this is no use; `None`: it is never shed by
    /// the deadline rule.
    pub deadline: Option<Duration>,
}

/// What the pool can deliver against what it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct SheddingInput {
    /// Ready replicas demand calls for, before any clamp (max replicas, budget, ceiling).
    pub wanted: u32,
    /// Replicas serving now.
    pub ready: u32,
    /// Replicas expected to be serving within the pool's drain objective.
    pub arriving_in_time: u32,
    /// When the next capacity is expected (or the next retry of a refused offering): how long a
    /// shed client should wait before trying again.
    pub next_capacity_in: Duration,
    /// Requests one replica serves per second.
    pub per_replica_rps: f64,
    /// How long until each node on its way serves, by the pool's ladder.
    pub arriving: Vec<Duration>,
    /// Per-tier load, highest priority first. Empty: the coverage rule applies.
    pub tiers: Vec<TierLoad>,
}

/// Which rule an answer comes from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShedRule {
    /// Ready plus arriving capacity against the tier's deadline.
    Deadline,
    /// Coverage of the demand by capacity due within the drain objective.
    Coverage,
}

/// The answer for one priority tier.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierAdmission {
    pub priority: Priority,
    /// False: shed every arrival of the tier.
    pub admit: bool,
    /// Admit only while fewer than this many of the tier wait: the backlog beyond it cannot
    /// start within the tier's deadline.
    pub max_queued: Option<u64>,
    /// Set when the tier is shed, whole or in part: seconds before a retry has a chance.
    pub retry_after_s: Option<u64>,
    pub rule: ShedRule,
}

impl TierAdmission {
    /// Whether any arrival of the tier may be turned away now.
    pub fn sheds(&self) -> bool {
        !self.admit || self.max_queued.is_some()
    }
}

/// Coverage below which each tier is shed: low (batch) as soon as anything is short, critical
/// only when less than a quarter of the demand can be served.
const SHED_BELOW: [(Priority, f64); 4] = [
    (Priority::Low, 1.0),
    (Priority::Normal, 0.75),
    (Priority::High, 0.5),
    (Priority::Critical, 0.25),
];

/// Share of the demand the pool can serve in time (1 when nothing is wanted).
pub fn coverage(input: &SheddingInput) -> f64 {
    if input.wanted == 0 {
        return 1.0;
    }
    (input.ready + input.arriving_in_time) as f64 / input.wanted as f64
}

/// Admit or shed, per tier, lowest tier first in the answer.
pub fn tier_answers(input: &SheddingInput) -> Vec<TierAdmission> {
    let retry = input.next_capacity_in.as_secs().clamp(1, 900);
    let covered = coverage(input);
    SHED_BELOW
        .iter()
        .map(|(priority, threshold)| {
            let load = input.tiers.iter().find(|t| t.priority == *priority);
            match load {
                Some(load) => by_deadline(input, load, retry),
                _ if !input.tiers.is_empty() => admit(*priority, ShedRule::Deadline),
                _ => {
                    let shed = covered < *threshold;
                    TierAdmission {
                        priority: *priority,
                        admit: !shed,
                        max_queued: None,
                        retry_after_s: shed.then_some(retry),
                        rule: ShedRule::Coverage,
                    }
                }
            }
        })
        .collect()
}

fn admit(priority: Priority, rule: ShedRule) -> TierAdmission {
    TierAdmission {
        priority,
        admit: true,
        max_queued: None,
        retry_after_s: None,
        rule,
    }
}

/// Requests the pool can start within `horizon`: ready replicas all along, each arriving node
/// from its ETA on.
pub fn startable_within(input: &SheddingInput, horizon: Duration) -> f64 {
    let h = horizon.as_secs_f64();
    let arriving: f64 = input
        .arriving
        .iter()
        .map(|eta| (h - eta.as_secs_f64()).max(0.0))
        .sum();
    input.per_replica_rps.max(0.0) * (input.ready as f64 * h + arriving)
}

/// The work of the tiers above `priority` within `horizon_s`: their backlog and their arrivals
/// meanwhile, which the serving layer takes first.
fn higher_tier_work(input: &SheddingInput, priority: Priority, horizon_s: f64) -> f64 {
    input
        .tiers
        .iter()
        .filter(|t| t.priority > priority)
        .map(|t| t.queued as f64 + t.arrival_rps.max(0.0) * horizon_s)
        .sum()
}

/// The deadline rule for one tier.
fn by_deadline(input: &SheddingInput, load: &TierLoad, retry: u64) -> TierAdmission {
    let Some(deadline) = load.deadline else {
        return admit(load.priority, ShedRule::Deadline);
    };
    let h = deadline.as_secs_f64();
    // Of the tier's requests, those that can start within the deadline: what the pool can start
    // meanwhile, less the higher tiers' share.
    let cap =
        (startable_within(input, deadline) - higher_tier_work(input, load.priority, h)).max(0.0);
    let wanted = load.queued as f64 + load.arrival_rps.max(0.0) * h;
    if cap >= wanted {
        return admit(load.priority, ShedRule::Deadline);
    }
    let max_queued = cap.floor() as u64;
    TierAdmission {
        priority: load.priority,
        admit: max_queued > 0,
        max_queued: (max_queued > 0).then_some(max_queued),
        retry_after_s: Some(retry),
        rule: ShedRule::Deadline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coverage_input(wanted: u32, ready: u32, arriving: u32) -> SheddingInput {
        SheddingInput {
            wanted,
            ready,
            arriving_in_time: arriving,
            next_capacity_in: Duration::from_secs(220),
            per_replica_rps: 10.0,
            arriving: Vec::new(),
            tiers: Vec::new(),
        }
    }

    fn shed(wanted: u32, ready: u32, arriving: u32) -> Vec<Priority> {
        tier_answers(&coverage_input(wanted, ready, arriving))
            .into_iter()
            .filter(|t| !t.admit)
            .map(|t| t.priority)
            .collect()
    }

    #[test]
    fn enough_capacity_admits_everyone() {
        assert!(shed(8, 8, 0).is_empty());
        assert!(
            shed(10, 6, 4).is_empty(),
            "capacity arriving in time counts"
        );
        assert!(shed(0, 0, 0).is_empty());
    }

    #[test]
    fn lowest_tier_goes_first_and_interactive_last() {
        assert_eq!(shed(10, 9, 0), [Priority::Low]);
        assert_eq!(shed(10, 6, 0), [Priority::Low, Priority::Normal]);
        assert_eq!(
            shed(10, 4, 0),
            [Priority::Low, Priority::Normal, Priority::High]
        );
        assert_eq!(shed(10, 2, 0).len(), 4);
    }

    #[test]
    fn a_shed_tier_is_told_when_to_retry() {
        let answer = tier_answers(&coverage_input(24, 12, 0));
        assert_eq!(answer[0].retry_after_s, Some(220));
        assert_eq!(answer[3].retry_after_s, None);
    }

    /// seed 001's burst during the cold start: 12 replicas at 10 req/s, 8 nodes landing in
    /// 200 s, interactive at 20 req/s, a batch backlog with a 10-minute deadline.
    fn burst(batch_queued: u64, batch_rps: f64, deadline_s: u64) -> SheddingInput {
        SheddingInput {
            tiers: vec![
                TierLoad {
                    priority: Priority::Critical,
                    queued: 0,
                    arrival_rps: 20.0,
                    deadline: None,
                },
                TierLoad {
                    priority: Priority::Low,
                    queued: batch_queued,
                    arrival_rps: batch_rps,
                    deadline: Some(Duration::from_secs(deadline_s)),
                },
            ],
            arriving: vec![Duration::from_secs(200); 8],
            ..coverage_input(24, 12, 0)
        }
    }

    fn low(answer: &[TierAdmission]) -> TierAdmission {
        answer[0]
    }

    #[test]
    fn capacity_on_its_way_within_the_deadline_sheds_nothing() {
        // Within 600 s: 12 × 600 + 8 × 400 = 10,400 replica-seconds, 104,000 requests; the
        // interactive tier takes 12,000; the batch tier needs 5,000 + 180 × 600 = 113,000.
        let tight = low(&tier_answers(&burst(5_000, 180.0, 600)));
        assert_eq!(tight.rule, ShedRule::Deadline);
        assert_eq!(tight.max_queued, Some(92_000));
        assert!(tight.admit && tight.sheds());
        // The same backlog with the arrivals slowing to 100 req/s: all of it fits.
        let fits = low(&tier_answers(&burst(5_000, 100.0, 600)));
        assert!(fits.admit && !fits.sheds(), "{fits:?}");
        // The coverage rule alone would have shed the whole tier (12 of 24 wanted).
        assert!(!low(&tier_answers(&coverage_input(24, 12, 0))).admit);
    }

    #[test]
    fn a_deadline_shorter_than_the_cold_start_caps_the_queue_at_what_ready_capacity_starts() {
        // 60 s: only the 12 ready replicas count (the 8 land at 200 s): 7,200 startable, less
        // 1,200 interactive.
        let answer = low(&tier_answers(&burst(9_000, 180.0, 60)));
        assert_eq!(answer.max_queued, Some(6_000));
        assert_eq!(answer.retry_after_s, Some(220));
    }

    #[test]
    fn a_tier_without_a_deadline_or_without_load_is_admitted() {
        let answer = tier_answers(&burst(5_000, 180.0, 600));
        let critical = answer.iter().find(|t| t.priority == Priority::Critical);
        assert!(critical.is_some_and(|t| t.admit && !t.sheds()));
        let normal = answer.iter().find(|t| t.priority == Priority::Normal);
        assert!(normal.is_some_and(|t| t.admit && t.rule == ShedRule::Deadline));
    }

    #[test]
    fn nothing_startable_in_time_sheds_the_whole_tier() {
        let mut input = burst(5_000, 180.0, 60);
        input.ready = 1;
        input.arriving.clear();
        let answer = low(&tier_answers(&input));
        assert!(!answer.admit && answer.max_queued.is_none(), "{answer:?}");
    }
}
