//! Load shedding: what the serving layer should admit, per priority tier, while capacity is
//! short (`GET /v1/pools/{name}/admission`). Not the budget check (`Ledger::place_hold`) nor
//! the recording of a capacity request.
//!
//! When the replicas that are ready, plus those that will be ready within the pool's drain
//! objective, cover less than the demand, lower priority tiers are turned away with a
//! `retry_after` so the queue that is left can be served within its objective. Lowest tier first,
//! interactive (critical) last; shedding stops as soon as capacity lands, because the answer is
//! recomputed from the same counts every step.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Priority;

/// What the pool can deliver against what it needs.
#[derive(Debug, Clone, Copy, PartialEq)]
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
}

/// The answer for one priority tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierAdmission {
    pub priority: Priority,
    pub admit: bool,
    /// Set when the tier is shed: seconds before a retry has a chance.
    pub retry_after_s: Option<u64>,
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
    let covered = coverage(input);
    let retry = input.next_capacity_in.as_secs().clamp(1, 900);
    SHED_BELOW
        .iter()
        .map(|(priority, threshold)| {
            let shed = covered < *threshold;
            TierAdmission {
                priority: *priority,
                admit: !shed,
                retry_after_s: shed.then_some(retry),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shed(wanted: u32, ready: u32, arriving: u32) -> Vec<Priority> {
        tier_answers(&SheddingInput {
            wanted,
            ready,
            arriving_in_time: arriving,
            next_capacity_in: Duration::from_secs(220),
        })
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
        let answer = tier_answers(&SheddingInput {
            wanted: 24,
            ready: 12,
            arriving_in_time: 0,
            next_capacity_in: Duration::from_secs(220),
        });
        assert_eq!(answer[0].retry_after_s, Some(220));
        assert_eq!(answer[3].retry_after_s, None);
    }
}
