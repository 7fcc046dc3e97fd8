//! The queue: its policy, admission gates, waiting requests per tier and their hand-over.

use super::Model;

/// Per tier, highest priority first.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePolicy {
    pub tiers: Vec<String>,
    /// A request meets the SLO when its queue wait is at most this.
    pub objective_s: Vec<f64>,
    /// A request still waiting after this gives up (client timeout); `None`: waits forever.
    pub deadline_s: Vec<Option<f64>>,
    /// Tiers the serving layer may shed: their arrivals are rejected while Headroom's admission
    /// answer sheds the tier's priority (and, if `shed_depth` is set, the queue is that deep).
    pub shed_tiers: Vec<u8>,
    /// The admission priority of each tier (what `GET /v1/pools/{name}/admission` answers by).
    pub priorities: Vec<headroom_core::Priority>,
    pub shed_depth: Option<u64>,
    /// Per tier: whether a pool's smaller-model fallback may serve it while Headroom hands the
    /// pool's demand over (`[[tiers]] smaller_model`).
    pub smaller_model: Vec<bool>,
}

/// What the serving layer admits of one priority tier, from the policy's admission answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    pub priority: headroom_core::Priority,
    /// False: every arrival of the tier is shed (while the queue is at least `shed_depth`,
    /// when the scenario sets one).
    pub admit: bool,
    /// Admitted, but only while fewer than this many of the tier wait: the part of the backlog
    /// beyond it could not be served within the tier's deadline.
    pub max_queued: Option<u64>,
}

/// A request waiting in its tier's queue; `counted` once its wait was measured (a request
/// requeued after its replica vanished is not counted twice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Queued {
    pub(super) index: usize,
    pub(super) counted: bool,
}

/// Requests one pool's queue handed to another's (see [`Model::hand_over`]).
#[derive(Debug, Default)]
pub struct HandedOver(Vec<(usize, Queued)>);

impl HandedOver {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Model<'_> {
    /// Takes up to `n` waiting requests of the tiers `eligible` marks (highest tier first, oldest
    /// first within a tier) out of this pool's queue, for another pool to serve.
    pub fn hand_over(&mut self, eligible: &[bool], n: u64) -> HandedOver {
        let mut out = Vec::new();
        for (tier, q) in self.queue.iter_mut().enumerate() {
            if !eligible.get(tier).copied().unwrap_or(false) {
                continue;
            }
            while (out.len() as u64) < n {
                let Some(e) = q.pop_front() else { break };
                out.push((tier, e));
            }
        }
        HandedOver(out)
    }

    /// Queues requests another pool handed over, behind this pool's own of the same tier. Their
    /// arrival was counted where they arrived; their wait is counted where they start.
    pub fn take_over(&mut self, handed: HandedOver) {
        for (tier, e) in handed.0 {
            let tier = tier.min(self.queue.len() - 1);
            self.totals.taken_over += 1;
            self.queue[tier].push_back(e);
        }
    }

    /// Requests waiting in each tier, highest priority first.
    pub fn waiting_by_tier(&self) -> impl Iterator<Item = u64> + '_ {
        self.queue.iter().map(|q| q.len() as u64)
    }

    /// Waiting requests, not yet counted, whose wait at `now` is already past their objective:
    /// misses the model will count when they start.
    pub fn overdue(&self, now: f64) -> u64 {
        self.queue
            .iter()
            .enumerate()
            .map(|(tier, q)| {
                let objective = self.objective(tier);
                // Oldest first: count from the front while the wait is past the objective.
                q.iter()
                    .take_while(|e| now - self.requests[e.index].at_s > objective + 1e-9)
                    .filter(|e| !e.counted)
                    .count() as u64
            })
            .sum()
    }

    /// The requests waiting to start (indices into [`Model::requests`]), highest tier first,
    /// oldest first within a tier.
    pub fn queued_indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.queue.iter().flat_map(|q| q.iter().map(|e| e.index))
    }

    pub fn waiting(&self) -> u64 {
        self.queue.iter().map(|q| q.len() as u64).sum()
    }

    /// Age of the oldest waiting request at `now`.
    pub fn oldest_age_s(&self, now: f64) -> Option<f64> {
        self.queue
            .iter()
            .filter_map(|q| q.front().map(|e| now - self.requests[e.index].at_s))
            .reduce(f64::max)
    }

    /// Applies the latest admission answer, per priority, until the next one.
    pub fn set_admission(&mut self, gates: &[Gate]) {
        self.gates = gates.to_vec();
    }
}
