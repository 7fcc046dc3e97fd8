//! A replica and its batch (`Service`, `ReplicaSpec`, processor sharing) and the model's replicas.

use std::collections::BTreeMap;

use crate::arrivals::Request;

use super::Model;
use super::queue::Queued;

/// What one replica can do. A request's work is `output_tokens + input_tokens × input_token_weight`
/// (prefill is much cheaper per token than decode), so a heavy request holds its slot longer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Service {
    pub input_token_weight: f64,
    /// Work per second one replica does with its batch full.
    pub tokens_per_s: f64,
    /// Work per second one request gets at most (decode speed of a single stream).
    pub request_tokens_per_s: f64,
    /// Requests a replica serves at once (batch slots).
    pub max_batch: u32,
}

impl Service {
    pub fn work(&self, r: &Request) -> f64 {
        (r.output_tokens as f64 + r.input_tokens as f64 * self.input_token_weight).max(1.0)
    }

    /// Work per second of one replica at best: a full batch, or as many streams as it has slots.
    pub fn replica_capacity(&self) -> f64 {
        self.tokens_per_s
            .min(self.request_tokens_per_s * self.max_batch as f64)
    }
}

/// One ready replica as a policy reports it: its GPUs (what it costs in GPU-hours) and how fast
/// it serves (the pool's service on the offering it landed on).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplicaSpec {
    pub gpus: u32,
    pub service: Service,
}

#[derive(Debug, Clone)]
pub(super) struct Replica {
    pub(super) gpus: u32,
    pub(super) service: Service,
    /// (request index, work left at `since`).
    pub(super) active: Vec<(usize, f64)>,
    /// Seconds with at least one request running, since the replica joined, up to `since`.
    busy_s: f64,
    /// The instant `active` and `busy_s` are current at: a replica is brought up to date when
    /// its batch changes or an interval ends, not at every event of its pool.
    since: f64,
    /// When its first running request finishes at the batch's current rate; infinite when idle.
    pub(super) done_at: f64,
}

impl Replica {
    fn new(spec: &ReplicaSpec) -> Replica {
        Replica {
            gpus: spec.gpus,
            service: spec.service,
            active: Vec::new(),
            busy_s: 0.0,
            since: 0.0,
            done_at: f64::INFINITY,
        }
    }

    /// Processor sharing within the batch: each of `n` running requests gets
    /// `min(tokens_per_s / n, request_tokens_per_s)`.
    fn rate(&self) -> f64 {
        (self.service.tokens_per_s / self.active.len().max(1) as f64)
            .min(self.service.request_tokens_per_s)
    }

    pub(super) fn least_left(&self) -> f64 {
        self.active
            .iter()
            .map(|a| a.1)
            .fold(f64::INFINITY, f64::min)
    }

    /// Runs the batch to `t`, each running request getting `work` (or what the rate gives over
    /// the time, when `None`). Returns the busy seconds added.
    pub(super) fn run_to(&mut self, t: f64, work: Option<f64>) -> f64 {
        let elapsed = (t - self.since).max(0.0);
        self.since = self.since.max(t);
        if self.active.is_empty() {
            return 0.0;
        }
        let work = work.unwrap_or(self.rate() * elapsed);
        for a in self.active.iter_mut() {
            a.1 -= work;
        }
        self.busy_s += elapsed;
        elapsed
    }

    /// The batch changed: when its first request now finishes.
    pub(super) fn reschedule(&mut self) {
        self.done_at = if self.active.is_empty() {
            f64::INFINITY
        } else {
            self.since + self.least_left() / self.rate()
        };
    }
}

impl Model<'_> {
    /// Batch slots of the ready replicas.
    pub fn slots(&self) -> u64 {
        self.replicas
            .values()
            .map(|r| r.service.max_batch as u64)
            .sum()
    }

    /// Slots that would stay free after every request waiting here started: what a router can
    /// send this pool without making its own traffic wait.
    pub fn spare_slots(&self) -> u64 {
        self.slots()
            .saturating_sub(self.in_service() + self.waiting())
    }

    /// The requests in service (indices into [`Model::requests`]) with the work each has left.
    pub fn in_service_work(&self) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.replicas
            .values()
            .flat_map(|r| r.active.iter().copied())
    }

    pub fn in_service(&self) -> u64 {
        self.replicas.values().map(|r| r.active.len() as u64).sum()
    }

    pub fn ready(&self) -> u32 {
        self.replicas.len() as u32
    }

    /// Replicas up to the last one with a request running, in the order they fill (by id): the
    /// fewest that can stay without sending a running request back to the queue.
    pub fn busy_prefix(&self) -> u32 {
        self.replicas
            .values()
            .rposition(|r| !r.active.is_empty())
            .map_or(0, |i| i as u32 + 1)
    }

    /// Busy seconds so far of each ready replica (the exporter's counter).
    pub fn busy_counters(&self) -> impl Iterator<Item = (&str, f64)> {
        self.replicas.iter().map(|(id, r)| (id.as_str(), r.busy_s))
    }

    /// Makes exactly these replicas ready. Requests on a replica that vanished go back to the
    /// front of their tier, oldest first.
    pub fn set_ready(&mut self, ready: &BTreeMap<String, ReplicaSpec>) {
        self.full = false;
        self.soonest_done = None;
        let gone: Vec<String> = self
            .replicas
            .keys()
            .filter(|id| !ready.contains_key(*id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(r) = self.replicas.remove(&id) {
                let mut back: Vec<usize> = r.active.into_iter().map(|(i, _)| i).collect();
                back.sort_unstable_by(|a, b| b.cmp(a));
                for index in back {
                    let tier = self.tier(index);
                    self.queue[tier].push_front(Queued {
                        index,
                        counted: true,
                    });
                }
            }
        }
        for (id, spec) in ready {
            self.replicas
                .entry(id.clone())
                .or_insert_with(|| Replica::new(spec));
        }
    }
}
