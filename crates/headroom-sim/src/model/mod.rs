//! The serving model: a priority queue with deadlines in front of replicas that batch
//! continuously, in virtual time. Pure and deterministic: no clock, no randomness.
//!
//! Time moves from event to event: an arrival, a completion, a deadline expiry, or the end of
//! the interval the caller asks for. Nothing happens between two events, so a request starts
//! no earlier than it arrives, waits and expiries are exact, and an idle stretch is one jump.

use std::collections::{BTreeMap, VecDeque};

use crate::arrivals::Request;

mod meter;
mod queue;
mod replica;
mod step;
#[cfg(test)]
mod tests;
mod totals;

pub use meter::UtilMeter;
pub use queue::{Gate, HandedOver, QueuePolicy};
pub use replica::{ReplicaSpec, Service};
pub use step::advance_together;
pub use totals::{TierTotals, Totals};

use queue::Queued;
use replica::Replica;

/// The queue and the replicas of one pool under one policy.
#[derive(Debug)]
pub struct Model<'a> {
    requests: &'a [Request],
    /// The simulated pool whose arrivals this model takes (`Request::pool`).
    pool: u8,
    policy: QueuePolicy,
    shedding: bool,
    /// The admission answer in force, per priority.
    gates: Vec<Gate>,
    next: usize,
    /// The index of this pool's next arrival, at or after `next`: other pools' requests are
    /// passed over once, not at every event.
    next_own: usize,
    queue: Vec<VecDeque<Queued>>,
    replicas: BTreeMap<String, Replica>,
    pub totals: Totals,
    /// Arrivals so far per tier (the exporter's counters).
    arrivals_by_tier: Vec<u64>,
    /// Instants the model has stopped at so far: what a run costs, idle time included.
    passes: u64,
    /// Every replica's batch was full when requests last stayed waiting, and none has finished
    /// or joined since: starting waiting requests would find no slot (dense traffic queues
    /// every arrival, and each would otherwise look through every replica).
    full: bool,
    /// The soonest completion of any replica, while no batch has changed since it was found.
    soonest_done: Option<f64>,
}

/// A model is cloned by the oracle's search, once per probe: everything in it is small but the
/// queue, and the requests are borrowed.
impl Clone for Model<'_> {
    fn clone(&self) -> Self {
        Model {
            requests: self.requests,
            pool: self.pool,
            policy: self.policy.clone(),
            shedding: self.shedding,
            gates: self.gates.clone(),
            next: self.next,
            next_own: self.next_own,
            queue: self.queue.clone(),
            replicas: self.replicas.clone(),
            totals: self.totals.clone(),
            arrivals_by_tier: self.arrivals_by_tier.clone(),
            passes: self.passes,
            full: self.full,
            soonest_done: self.soonest_done,
        }
    }
}

impl<'a> Model<'a> {
    /// `shedding`: whether this policy has an admission shedder (Headroom's design does). How
    /// fast it serves is each replica's own ([`ReplicaSpec`]).
    pub fn new(requests: &'a [Request], policy: QueuePolicy, shedding: bool) -> Self {
        let tiers = policy.tiers.len().max(1);
        Model {
            requests,
            pool: 0,
            policy,
            shedding,
            gates: Vec::new(),
            next: 0,
            next_own: 0,
            queue: vec![VecDeque::new(); tiers],
            replicas: BTreeMap::new(),
            totals: Totals {
                by_tier: vec![TierTotals::default(); tiers],
                ..Totals::default()
            },
            arrivals_by_tier: vec![0; tiers],
            passes: 0,
            full: false,
            soonest_done: None,
        }
    }

    /// The model of simulated pool `pool`: it takes only that pool's arrivals.
    pub fn at_pool(mut self, pool: u8) -> Self {
        self.pool = pool;
        self
    }

    /// Arrivals so far per tier, highest priority first.
    pub fn arrivals_by_tier(&self) -> &[u64] {
        &self.arrivals_by_tier
    }

    /// Every request of the run, in arrival order.
    pub fn requests(&self) -> &'a [Request] {
        self.requests
    }

    /// The index of the next request to arrive.
    pub fn next_arrival(&self) -> usize {
        self.next
    }

    fn tier(&self, i: usize) -> usize {
        (self.requests[i].tier as usize).min(self.queue.len() - 1)
    }

    fn objective(&self, tier: usize) -> f64 {
        self.policy
            .objective_s
            .get(tier)
            .copied()
            .unwrap_or(f64::INFINITY)
    }
}
