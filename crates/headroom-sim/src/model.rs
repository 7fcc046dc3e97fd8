//! The serving model: a priority queue with deadlines in front of replicas that batch
//! continuously, in virtual time. Pure and deterministic: no clock, no randomness.
//!
//! Time moves from event to event: an arrival, a completion, a deadline expiry, or the end of
//! the interval the caller asks for. Nothing happens between two events, so a request starts
//! no earlier than it arrives, waits and expiries are exact, and an idle stretch is one jump.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::arrivals::Request;

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

/// One tier's totals over a run.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TierTotals {
    pub requests: u64,
    pub within_slo: u64,
    pub shed: u64,
    pub timed_out: u64,
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

/// Totals over a run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Totals {
    pub requests: u64,
    pub within_slo: u64,
    /// Requests counted as missing their objective (late, timed out or shed).
    pub missed: u64,
    pub shed: u64,
    pub timed_out: u64,
    pub served: u64,
    pub queue_delay_s: f64,
    pub arrivals: u64,
    pub departures: u64,
    /// Replica-seconds a replica was ready, and those in which at least one request ran, in GPUs.
    pub ready_gpu_s: f64,
    pub busy_gpu_s: f64,
    /// The deepest the queue was at any instant, once that instant's expiries, arrivals and
    /// starts were done (requests that start the instant they arrive never count as waiting).
    pub peak_waiting: u64,
    /// Requests that arrived at another pool and were handed to this one (its smaller model).
    pub taken_over: u64,
    /// Per tier, highest priority first.
    pub by_tier: Vec<TierTotals>,
}

impl Totals {
    /// Adds another pool's totals to these (per tier too). A request is counted once: where it
    /// arrived, and where it started. `peak_waiting` is the larger of the two, not the peak of
    /// the sum, which only the run loop sees.
    pub fn add(&mut self, o: &Totals) {
        self.requests += o.requests;
        self.within_slo += o.within_slo;
        self.missed += o.missed;
        self.shed += o.shed;
        self.timed_out += o.timed_out;
        self.served += o.served;
        self.queue_delay_s += o.queue_delay_s;
        self.arrivals += o.arrivals;
        self.departures += o.departures;
        self.ready_gpu_s += o.ready_gpu_s;
        self.busy_gpu_s += o.busy_gpu_s;
        self.peak_waiting = self.peak_waiting.max(o.peak_waiting);
        self.taken_over += o.taken_over;
        if self.by_tier.len() < o.by_tier.len() {
            self.by_tier.resize(o.by_tier.len(), TierTotals::default());
        }
        for (a, b) in self.by_tier.iter_mut().zip(&o.by_tier) {
            a.requests += b.requests;
            a.within_slo += b.within_slo;
            a.shed += b.shed;
            a.timed_out += b.timed_out;
        }
    }
}

/// A request waiting in its tier's queue; `counted` once its wait was measured (a request
/// requeued after its replica vanished is not counted twice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Queued {
    index: usize,
    counted: bool,
}

#[derive(Debug, Clone)]
struct Replica {
    gpus: u32,
    service: Service,
    /// (request index, work left at `since`).
    active: Vec<(usize, f64)>,
    /// Seconds with at least one request running, since the replica joined, up to `since`.
    busy_s: f64,
    /// The instant `active` and `busy_s` are current at: a replica is brought up to date when
    /// its batch changes or an interval ends, not at every event of its pool.
    since: f64,
    /// When its first running request finishes at the batch's current rate; infinite when idle.
    done_at: f64,
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

    fn least_left(&self) -> f64 {
        self.active
            .iter()
            .map(|a| a.1)
            .fold(f64::INFINITY, f64::min)
    }

    /// Runs the batch to `t`, each running request getting `work` (or what the rate gives over
    /// the time, when `None`). Returns the busy seconds added.
    fn run_to(&mut self, t: f64, work: Option<f64>) -> f64 {
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
    fn reschedule(&mut self) {
        self.done_at = if self.active.is_empty() {
            f64::INFINITY
        } else {
            self.since + self.least_left() / self.rate()
        };
    }
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

    /// Arrivals so far per tier, highest priority first.
    pub fn arrivals_by_tier(&self) -> &[u64] {
        &self.arrivals_by_tier
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

    /// Every request of the run, in arrival order.
    pub fn requests(&self) -> &'a [Request] {
        self.requests
    }

    /// The requests in service (indices into [`Model::requests`]) with the work each has left.
    pub fn in_service_work(&self) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.replicas
            .values()
            .flat_map(|r| r.active.iter().copied())
    }

    /// The index of the next request to arrive.
    pub fn next_arrival(&self) -> usize {
        self.next
    }

    pub fn waiting(&self) -> u64 {
        self.queue.iter().map(|q| q.len() as u64).sum()
    }

    pub fn in_service(&self) -> u64 {
        self.replicas.values().map(|r| r.active.len() as u64).sum()
    }

    /// Age of the oldest waiting request at `now`.
    pub fn oldest_age_s(&self, now: f64) -> Option<f64> {
        self.queue
            .iter()
            .filter_map(|q| q.front().map(|e| now - self.requests[e.index].at_s))
            .reduce(f64::max)
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

    /// Applies the latest admission answer, per priority, until the next one.
    pub fn set_admission(&mut self, gates: &[Gate]) {
        self.gates = gates.to_vec();
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

    /// Counts a request's wait once: within its objective or missed.
    fn count_wait(&mut self, e: Queued, wait: f64) {
        if e.counted {
            return;
        }
        let tier = self.tier(e.index);
        self.totals.queue_delay_s += wait.max(0.0);
        if wait <= self.objective(tier) + 1e-9 {
            self.totals.within_slo += 1;
            self.totals.by_tier[tier].within_slo += 1;
        } else {
            self.totals.missed += 1;
        }
    }

    fn pop(&mut self) -> Option<Queued> {
        self.queue.iter_mut().find_map(|q| q.pop_front())
    }

    /// Whether the serving layer sheds an arrival of `tier` now, by the admission answer.
    fn sheds(&self, tier: usize, r: &Request) -> bool {
        if !self.shedding || !self.policy.shed_tiers.contains(&r.tier) {
            return false;
        }
        let Some(priority) = self.policy.priorities.get(tier) else {
            return false;
        };
        let Some(gate) = self.gates.iter().find(|g| &g.priority == priority) else {
            return false;
        };
        let waiting = self.queue[tier].len() as u64;
        match gate.max_queued {
            Some(cap) => waiting >= cap,
            None => !gate.admit && self.policy.shed_depth.is_none_or(|d| self.waiting() >= d),
        }
    }

    /// Moves the model from `from` to `to`, event by event (see [`advance_together`]).
    pub fn advance(&mut self, from: f64, to: f64) {
        advance_together(std::slice::from_mut(self), from, to, |_| false);
    }

    fn deadline(&self, tier: usize) -> Option<f64> {
        self.policy.deadline_s.get(tier).copied().flatten()
    }

    /// Lets go of the requests whose wait reached their tier's deadline by `now` (the client
    /// gave up): the oldest of each tier are at its front.
    fn expire(&mut self, now: f64) {
        for tier in 0..self.queue.len() {
            let Some(deadline) = self.deadline(tier) else {
                continue;
            };
            // Bounded: every pass takes a request out of the queue.
            while let Some(&e) = self.queue[tier].front() {
                // The same sum as `next_event`'s, so the instant it names does expire the request.
                if self.requests[e.index].at_s + deadline > now {
                    break;
                }
                self.queue[tier].pop_front();
                self.totals.timed_out += 1;
                self.totals.by_tier[tier].timed_out += 1;
                self.count_wait(e, deadline + 1e-6);
            }
        }
    }

    /// Takes the arrivals up to `now` one by one: each is shed or queued by the queue as it is
    /// when it arrives, and starts at once on a free slot.
    fn admit(&mut self, now: f64) {
        let requests = self.requests;
        // Bounded: every pass takes the next request.
        while let Some(r) = requests.get(self.next).filter(|r| r.at_s <= now) {
            let index = self.next;
            let tier = self.tier(index);
            self.next += 1;
            if r.pool != self.pool {
                continue;
            }
            self.totals.requests += 1;
            self.totals.arrivals += 1;
            self.totals.by_tier[tier].requests += 1;
            self.arrivals_by_tier[tier] += 1;
            if self.sheds(tier, r) {
                self.totals.shed += 1;
                self.totals.missed += 1;
                self.totals.by_tier[tier].shed += 1;
                continue;
            }
            self.queue[tier].push_back(Queued {
                index,
                counted: false,
            });
            self.start_waiting(now);
        }
        self.next_own = self.next_own.max(self.next);
        // Bounded by the requests: `next_own` only moves forward.
        while requests
            .get(self.next_own)
            .is_some_and(|r| r.pool != self.pool)
        {
            self.next_own += 1;
        }
    }

    /// Starts waiting requests on free slots at `now`: replicas in id order, highest tier first.
    fn start_waiting(&mut self, now: f64) {
        if self.full || self.waiting() == 0 {
            return;
        }
        // Serving reads the queues, not the replicas: take them out rather than copying every id.
        let mut replicas = std::mem::take(&mut self.replicas);
        for rep in replicas.values_mut() {
            if self.waiting() == 0 {
                break;
            }
            let slots = rep.service.max_batch as usize;
            if rep.active.len() >= slots {
                continue;
            }
            // The batch grows: what ran so far ran at the old rate.
            self.totals.busy_gpu_s += rep.run_to(now, None) * rep.gpus as f64;
            // Bounded by the batch's slots.
            while rep.active.len() < slots {
                let Some(e) = self.pop() else { break };
                let wait = now - self.requests[e.index].at_s;
                self.count_wait(e, wait);
                rep.active
                    .push((e.index, rep.service.work(&self.requests[e.index])));
            }
            rep.reschedule();
            self.soonest_done = None;
        }
        self.replicas = replicas;
        // Requests still wait only when every batch was filled.
        self.full = self.waiting() > 0;
    }

    /// The first instant after the last one handled at which something happens here: an arrival
    /// of this pool, a completion, or a deadline expiry; infinite when nothing ever will.
    fn next_event(&mut self) -> f64 {
        let arrival = self
            .requests
            .get(self.next_own)
            .map_or(f64::INFINITY, |r| r.at_s);
        let replicas = &self.replicas;
        let completion = *self.soonest_done.get_or_insert_with(|| {
            replicas
                .values()
                .map(|r| r.done_at)
                .fold(f64::INFINITY, f64::min)
        });
        let expiry = (0..self.queue.len())
            .filter_map(|tier| {
                let front = self.queue[tier].front()?;
                Some(self.requests[front.index].at_s + self.deadline(tier)?)
            })
            .fold(f64::INFINITY, f64::min);
        arrival.min(completion).min(expiry)
    }

    /// Finishes every request due by `t`, each at its own instant; their slots are filled when
    /// the model next settles (at `t`: nothing else happens in between).
    fn complete_until(&mut self, t: f64) {
        // `next_event` found the soonest completion just before; nothing changed since.
        if self.soonest_done.is_some_and(|soonest| t < soonest) {
            return;
        }
        self.soonest_done = None;
        for rep in self.replicas.values_mut() {
            // Bounded: every pass finishes at least one request.
            while rep.done_at <= t {
                // Exactly the least work left: the first request finishes, whatever the rounding.
                let busy = rep.run_to(rep.done_at, Some(rep.least_left()));
                self.totals.busy_gpu_s += busy * rep.gpus as f64;
                let before = rep.active.len();
                rep.active.retain(|a| a.1 > 1e-9);
                let done = (before - rep.active.len()) as u64;
                self.totals.served += done;
                self.totals.departures += done;
                self.full &= done == 0;
                rep.reschedule();
            }
        }
    }

    /// Ends an interval: every replica's work and busy time current at `to`, its ready time paid.
    fn close(&mut self, from: f64, to: f64) {
        for rep in self.replicas.values_mut() {
            self.totals.busy_gpu_s += rep.run_to(to, None) * rep.gpus as f64;
            self.totals.ready_gpu_s += (to - from) * rep.gpus as f64;
        }
    }

    /// Counts the requests still waiting at the end of the run.
    pub fn finish(&mut self, now: f64) {
        let waiting: Vec<Queued> = self.queue.iter().flatten().copied().collect();
        for e in waiting {
            let wait = now - self.requests[e.index].at_s;
            self.count_wait(e, wait);
        }
        // Requests never dispatched because the run ended before they arrived do not exist.
    }
}

/// Moves the models of pools served side by side from `from` to `to`, in lockstep from event to
/// event. At each instant every model lets expired requests go, takes its arrivals and starts
/// what its free slots can take; then `route` may move waiting requests between the models
/// (returning whether it moved any: they start at once where there is room). Time then jumps
/// to the next arrival, completion or expiry of any model, or to `to`. Returns the deepest all
/// their queues were together at any instant.
pub fn advance_together(
    models: &mut [Model<'_>],
    from: f64,
    to: f64,
    mut route: impl FnMut(&mut [Model<'_>]) -> bool,
) -> u64 {
    let mut peak = 0;
    let mut now = from;
    // Bounded: every pass ends at an event of some model or at `to`; a pass that ends where it
    // began finishes or expires a request in the next, and each request arrives, starts,
    // finishes or expires once (again only after `set_ready` sends it back, between calls).
    while now < to {
        for m in models.iter_mut() {
            m.passes += 1;
            m.expire(now);
            m.admit(now);
            m.start_waiting(now);
        }
        if route(models) {
            for m in models.iter_mut() {
                m.start_waiting(now);
            }
        }
        let mut waiting = 0;
        for m in models.iter_mut() {
            let w = m.waiting();
            m.totals.peak_waiting = m.totals.peak_waiting.max(w);
            waiting += w;
        }
        peak = peak.max(waiting);
        let next = models.iter_mut().map(Model::next_event).fold(to, f64::min);
        for m in models.iter_mut() {
            m.complete_until(next);
        }
        now = next;
    }
    for m in models.iter_mut() {
        m.close(from, to);
    }
    peak
}

/// GPU utilisation as the usual exporter reports it: per ready replica, the share of the window
/// in which at least one kernel ran, whatever the queue behind it.
#[derive(Debug, Default)]
pub struct UtilMeter {
    last: BTreeMap<String, (f64, f64)>,
}

impl UtilMeter {
    /// Utilisation of each replica ready now over the time since the last reading, in replica
    /// order; `None` for a replica that joined since (no sample yet, as a fresh pod has none).
    pub fn read(&mut self, model: &Model<'_>, now: f64) -> Vec<Option<f64>> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (id, busy) in model.busy_counters() {
            seen.insert(id.to_string());
            let (busy0, t0) = self.last.get(id).copied().unwrap_or((0.0, f64::NAN));
            if t0.is_finite() && now > t0 {
                out.push(Some(((busy - busy0) / (now - t0)).clamp(0.0, 1.0)));
            } else {
                out.push(None);
            }
            self.last.insert(id.to_string(), (busy, now));
        }
        self.last.retain(|id, _| seen.contains(id));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> Service {
        Service {
            input_token_weight: 0.0,
            tokens_per_s: 250.0,
            request_tokens_per_s: 250.0,
            max_batch: 1,
        }
    }

    /// One ready replica, "a", of one GPU serving at `service`.
    fn one(service: Service) -> BTreeMap<String, ReplicaSpec> {
        BTreeMap::from([("a".to_string(), ReplicaSpec { gpus: 1, service })])
    }

    fn policy() -> QueuePolicy {
        QueuePolicy {
            tiers: vec!["interactive".into(), "batch".into()],
            objective_s: vec![1.0, 60.0],
            deadline_s: vec![None, None],
            shed_tiers: vec![1],
            priorities: vec![
                headroom_core::Priority::Critical,
                headroom_core::Priority::Low,
            ],
            shed_depth: Some(5),
            smaller_model: vec![true, false],
        }
    }

    fn shed_low() -> Gate {
        Gate {
            priority: headroom_core::Priority::Low,
            admit: false,
            max_queued: None,
        }
    }

    fn req(at_s: f64, tier: u8) -> Request {
        Request {
            at_s,
            input_tokens: 0,
            output_tokens: 100,
            tier,
            pool: 0,
        }
    }

    #[test]
    fn one_replica_serves_two_and_a_half_per_second() {
        let reqs: Vec<Request> = (0..100).map(|i| req(i as f64 * 0.1, 0)).collect();
        let mut m = Model::new(&reqs, policy(), false);
        m.set_ready(&one(service()));
        m.advance(0.0, 10.2);
        // 0.4 s each: the 25th ends at 10.0 s, the 26th is in service, the rest waits.
        assert_eq!(m.totals.served, 25);
        assert_eq!(m.in_service(), 1);
        assert_eq!(m.waiting(), 74);
    }

    #[test]
    fn interactive_goes_first_and_batch_is_shed_when_deep() {
        let mut reqs: Vec<Request> = (0..10).map(|_| req(0.0, 1)).collect();
        reqs.push(req(0.0, 0));
        let mut m = Model::new(&reqs, policy(), true);
        m.advance(0.0, 0.5);
        assert_eq!(m.totals.shed, 0, "admission sheds nothing yet");
        m.set_admission(&[shed_low()]);
        m.advance(0.5, 1.0);
        assert_eq!(
            m.totals.shed, 0,
            "all ten arrived in the first step, before the answer"
        );
        let mut m = Model::new(&reqs, policy(), true);
        m.set_admission(&[shed_low()]);
        m.advance(0.0, 1.0);
        assert_eq!(m.totals.shed, 5, "batch is shed once five wait");
        m.set_ready(&one(service()));
        m.advance(1.0, 1.5);
        // The interactive request jumped the five waiting batch requests; it waited exactly its
        // 1 s objective, and the first batch request started at 1.4 s, well within 60 s.
        assert_eq!(m.totals.served, 1);
        assert_eq!(m.totals.within_slo, 2);
        assert_eq!(m.waiting(), 4);
    }

    #[test]
    fn each_replica_serves_at_its_own_speed() {
        // One replica at 250 tokens/s and one twice as fast, one request at a time each: the
        // fast one finishes a 100-token request every 0.2 s, the slow one every 0.4 s.
        let reqs: Vec<Request> = (0..60).map(|_| req(0.0, 0)).collect();
        let fast = Service {
            tokens_per_s: 500.0,
            request_tokens_per_s: 500.0,
            ..service()
        };
        let mut m = Model::new(&reqs, policy(), false);
        m.set_ready(&BTreeMap::from([
            (
                "fast".to_string(),
                ReplicaSpec {
                    gpus: 1,
                    service: fast,
                },
            ),
            (
                "slow".to_string(),
                ReplicaSpec {
                    gpus: 1,
                    service: service(),
                },
            ),
        ]));
        // Just past 4 s, so the requests due at exactly 4 s have finished.
        m.advance(0.0, 4.05);
        assert_eq!(m.totals.served, 20 + 10);
    }

    #[test]
    fn a_pool_hands_only_the_eligible_tiers_to_another_and_each_request_counts_once() {
        // Three interactive and three batch requests arrive at pool 0, which has no replica; pool
        // 1 (its smaller model) has one replica with two batch slots and traffic of its own.
        let mut reqs: Vec<Request> = (0..3).map(|_| req(0.0, 0)).collect();
        reqs.extend((0..3).map(|_| req(0.0, 1)));
        reqs.push(Request {
            pool: 1,
            ..req(0.0, 0)
        });
        let two_slots = Service {
            max_batch: 2,
            tokens_per_s: 500.0,
            ..service()
        };
        let mut big = Model::new(&reqs, policy(), false);
        let mut small = Model::new(&reqs, policy(), false).at_pool(1);
        small.set_ready(&one(two_slots));
        big.advance(0.0, 0.1);
        small.advance(0.0, 0.1);
        assert_eq!(
            (big.waiting(), small.waiting(), small.in_service()),
            (6, 0, 1)
        );
        // Its own request runs: one slot is spare.
        assert_eq!(small.spare_slots(), 1);
        let handed = big.hand_over(&[true, false], small.spare_slots());
        assert_eq!(handed.len(), 1);
        small.take_over(handed);
        // Batch is never handed over, however many slots are spare.
        let handed = big.hand_over(&[true, false], 10);
        assert_eq!(
            handed.len(),
            2,
            "the two interactive requests left, not batch"
        );
        small.take_over(handed);
        big.advance(0.1, 3.0);
        small.advance(0.1, 3.0);
        assert_eq!(big.waiting(), 3, "batch waits for the large model");
        assert_eq!(small.totals.served, 4);
        assert_eq!(small.totals.taken_over, 3);
        // Arrivals are counted where they arrived, starts where they started: once each.
        assert_eq!(big.totals.requests + small.totals.requests, 7);
        assert_eq!(big.totals.by_tier[0].requests, 3);
        assert_eq!(small.totals.by_tier[0].within_slo, 1 + 3);
    }

    #[test]
    fn a_vanished_replica_gives_its_work_back() {
        let reqs = vec![req(0.0, 0)];
        let mut m = Model::new(&reqs, policy(), false);
        m.set_ready(&one(service()));
        m.advance(0.0, 0.2);
        assert_eq!(m.in_service(), 1);
        m.set_ready(&BTreeMap::new());
        assert_eq!(m.waiting(), 1);
        assert_eq!(m.in_service(), 0);
    }

    #[test]
    fn utilisation_is_busy_time_not_queue_depth() {
        // A single slow request keeps the replica "100 % utilised" with nothing queued.
        let reqs = vec![Request {
            output_tokens: 10_000,
            ..req(0.0, 0)
        }];
        let svc = Service {
            request_tokens_per_s: 50.0,
            max_batch: 32,
            ..service()
        };
        let mut m = Model::new(&reqs, policy(), false);
        m.set_ready(&one(svc));
        let mut meter = UtilMeter::default();
        meter.read(&m, 0.0);
        m.advance(0.0, 15.0);
        let u = meter.read(&m, 15.0);
        assert_eq!(u.len(), 1);
        assert!((u[0].unwrap() - 1.0).abs() < 1e-9, "{u:?}");
        assert_eq!(m.waiting(), 0);
    }

    /// A one-slot replica serving in arrival order: each request starts when it arrives or when
    /// the one before it finishes, whichever is later (Lindley's recursion). Returns the total
    /// wait and how many waited within `objective`.
    fn lindley(reqs: &[Request], seconds_per_request: f64, objective: f64) -> (f64, u64) {
        let (mut free_at, mut total, mut within) = (f64::NEG_INFINITY, 0.0, 0);
        for r in reqs {
            let start = free_at.max(r.at_s);
            total += start - r.at_s;
            within += u64::from(start - r.at_s <= objective + 1e-9);
            free_at = start + seconds_per_request;
        }
        (total, within)
    }

    /// `n` random requests over `span` seconds: tiers, sizes and gaps (some on whole 100 ms).
    fn random_requests(rng: &mut fastrand::Rng, n: usize, span: f64) -> Vec<Request> {
        let mut at: Vec<f64> = (0..n)
            .map(|_| {
                let t = rng.f64() * span;
                // One in ten where the old step boundaries were, several at one instant.
                if rng.u8(0..10) == 0 {
                    (t * 10.0).round() / 10.0
                } else {
                    t
                }
            })
            .collect();
        at.sort_by(f64::total_cmp);
        at.into_iter()
            .map(|at_s| Request {
                at_s,
                input_tokens: rng.u32(0..400),
                output_tokens: rng.u32(1..300),
                tier: rng.u8(0..2),
                pool: 0,
            })
            .collect()
    }

    #[test]
    fn a_lone_request_finishes_exactly_work_over_rate_after_it_arrives() {
        // 100 tokens at 250 tokens/s: 0.4 s from its arrival at 0.37 s, not from a step start.
        let reqs = vec![req(0.37, 0)];
        let mut m = Model::new(&reqs, policy(), false);
        m.set_ready(&one(service()));
        m.advance(0.0, 0.5);
        let left: Vec<f64> = m.in_service_work().map(|(_, w)| w).collect();
        assert_eq!(left.len(), 1);
        assert!((left[0] - (100.0 - 250.0 * 0.13)).abs() < 1e-9, "{left:?}");
        m.advance(0.5, 0.77 - 1e-6);
        assert_eq!(m.totals.served, 0);
        m.advance(0.77 - 1e-6, 0.77 + 1e-6);
        assert_eq!(m.totals.served, 1);
        assert_eq!(m.totals.queue_delay_s, 0.0);
        let busy: Vec<f64> = m.busy_counters().map(|(_, b)| b).collect();
        assert!((busy[0] - 0.4).abs() < 1e-9, "{busy:?}");
    }

    #[test]
    fn a_deadline_expires_at_arrival_plus_deadline() {
        let policy = QueuePolicy {
            deadline_s: vec![Some(2.5), None],
            ..policy()
        };
        let reqs = vec![req(0.33, 0)];
        let mut m = Model::new(&reqs, policy, false);
        m.advance(0.0, 2.83 - 1e-6);
        assert_eq!((m.totals.timed_out, m.waiting()), (0, 1));
        m.advance(2.83 - 1e-6, 2.83 + 1e-6);
        assert_eq!((m.totals.timed_out, m.waiting()), (1, 0));
        assert_eq!(m.totals.missed, 1);
    }

    #[test]
    fn one_slot_waits_are_exact_and_never_negative() {
        // Property: on one slot in arrival order (one tier, one size) the model's waits are
        // Lindley's, for random arrivals; a request served before it arrived would show a wait
        // shorter than the recursion's (its negative wait counted as 0).
        for seed in 0..200 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let reqs: Vec<Request> = random_requests(&mut rng, 60, 20.0)
                .into_iter()
                .map(|r| req(r.at_s, 0))
                .collect();
            let mut m = Model::new(&reqs, policy(), false);
            m.set_ready(&one(service()));
            // The run loop's way: one call a tick.
            for tick in 0..60 {
                m.advance(f64::from(tick), f64::from(tick + 1));
            }
            let (total, within) = lindley(&reqs, 0.4, 1.0);
            assert_eq!(m.totals.served, 60, "seed {seed}");
            assert!(
                (m.totals.queue_delay_s - total).abs() < 1e-6,
                "seed {seed}: {} against {total}",
                m.totals.queue_delay_s
            );
            assert_eq!(m.totals.within_slo, within, "seed {seed}");
        }
    }

    #[test]
    fn how_the_caller_splits_an_interval_changes_nothing() {
        // Property: random requests, tiers, deadlines, a shedding gate and batches of three;
        // 0 → 30 s in one call against the same in random pieces.
        let policy = QueuePolicy {
            deadline_s: vec![Some(4.0), Some(9.0)],
            shed_depth: None,
            ..policy()
        };
        let svc = Service {
            input_token_weight: 0.1,
            tokens_per_s: 600.0,
            request_tokens_per_s: 250.0,
            max_batch: 3,
        };
        let ready = BTreeMap::from([
            (
                "a".to_string(),
                ReplicaSpec {
                    gpus: 1,
                    service: svc,
                },
            ),
            (
                "b".to_string(),
                ReplicaSpec {
                    gpus: 2,
                    service: svc,
                },
            ),
        ]);
        let gate = Gate {
            max_queued: Some(6),
            ..shed_low()
        };
        let mut shed = 0;
        for seed in 0..200 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let reqs = random_requests(&mut rng, 150, 25.0);
            let run = |cuts: &[f64]| {
                let mut m = Model::new(&reqs, policy.clone(), true);
                m.set_ready(&ready);
                m.set_admission(&[gate]);
                let mut from = 0.0;
                for &to in cuts.iter().chain(&[30.0]) {
                    m.advance(from, to);
                    from = to;
                }
                m.finish(30.0);
                m.totals
            };
            let mut cuts: Vec<f64> = (0..rng.usize(1..20)).map(|_| rng.f64() * 30.0).collect();
            // Some cuts on arrivals: an arrival at a boundary belongs to the next call.
            cuts.extend(reqs.iter().step_by(40).map(|r| r.at_s));
            cuts.sort_by(f64::total_cmp);
            let (a, b) = (run(&[]), run(&cuts));
            let counts = |t: &Totals| {
                (
                    t.requests,
                    t.within_slo,
                    t.missed,
                    t.shed,
                    t.timed_out,
                    t.served,
                    t.peak_waiting,
                    t.by_tier.clone(),
                )
            };
            assert_eq!(counts(&a), counts(&b), "seed {seed}, cuts {cuts:?}");
            for (x, y) in [
                (a.queue_delay_s, b.queue_delay_s),
                (a.busy_gpu_s, b.busy_gpu_s),
                (a.ready_gpu_s, b.ready_gpu_s),
            ] {
                assert!((x - y).abs() < 1e-6, "seed {seed}: {x} against {y}");
            }
            shed += a.shed;
        }
        assert!(shed > 0, "the gate never shed: the property missed a rule");
    }

    #[test]
    fn an_idle_stretch_is_one_jump() {
        // Two requests a day apart: the model stops at each arrival and completion, not every
        // 100 ms of the 86,400 s between them.
        let reqs = vec![req(10.0, 0), req(86_410.0, 0)];
        let mut m = Model::new(&reqs, policy(), false);
        m.set_ready(&one(service()));
        m.advance(0.0, 90_000.0);
        assert_eq!(m.totals.served, 2);
        assert!(m.passes <= 6, "{} passes", m.passes);
        assert!((m.totals.busy_gpu_s - 0.8).abs() < 1e-9);
        assert_eq!(m.totals.ready_gpu_s, 90_000.0);
    }
}
