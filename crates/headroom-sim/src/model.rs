//! The serving model: a priority queue with deadlines in front of replicas that batch
//! continuously, in virtual time. Pure and deterministic: no clock, no randomness.

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
    /// The deepest the queue was at the end of any step.
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
    /// (request index, work left).
    active: Vec<(usize, f64)>,
    /// Seconds with at least one request running, since the replica joined.
    busy_s: f64,
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
    queue: Vec<VecDeque<Queued>>,
    replicas: BTreeMap<String, Replica>,
    pub totals: Totals,
    /// Arrivals so far per tier (the exporter's counters).
    arrivals_by_tier: Vec<u64>,
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
            queue: self.queue.clone(),
            replicas: self.replicas.clone(),
            totals: self.totals.clone(),
            arrivals_by_tier: self.arrivals_by_tier.clone(),
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
            queue: vec![VecDeque::new(); tiers],
            replicas: BTreeMap::new(),
            totals: Totals {
                by_tier: vec![TierTotals::default(); tiers],
                ..Totals::default()
            },
            arrivals_by_tier: vec![0; tiers],
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
            self.replicas.entry(id.clone()).or_insert_with(|| Replica {
                gpus: spec.gpus,
                service: spec.service,
                active: Vec::new(),
                busy_s: 0.0,
            });
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

    /// Moves the model from `from` to `to` in steps of at most `step`.
    pub fn advance(&mut self, from: f64, to: f64, step: f64) {
        let mut t = from;
        // Bounded: the number of steps is (to - from) / step.
        while t < to - 1e-12 {
            let end = (t + step).min(to);
            self.step(t, end);
            t = end;
        }
    }

    fn step(&mut self, t0: f64, t1: f64) {
        // Arrivals up to the end of the step join now: waits are measured from their own arrival.
        while let Some(r) = self.requests.get(self.next).filter(|r| r.at_s < t1) {
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
        }
        // Deadlines: the oldest of each tier are at its front.
        for tier in 0..self.queue.len() {
            let Some(Some(deadline)) = self.policy.deadline_s.get(tier).copied() else {
                continue;
            };
            while let Some(&e) = self.queue[tier].front() {
                if t0 - self.requests[e.index].at_s <= deadline {
                    break;
                }
                self.queue[tier].pop_front();
                self.totals.timed_out += 1;
                self.totals.by_tier[tier].timed_out += 1;
                self.count_wait(e, deadline + 1e-6);
            }
        }
        let dt = t1 - t0;
        // Serving reads the queues, not the replicas: take them out for the step rather than
        // copying every id each 100 ms.
        let mut replicas = std::mem::take(&mut self.replicas);
        for rep in replicas.values_mut() {
            self.serve(rep, t0, dt);
            self.totals.ready_gpu_s += dt * rep.gpus as f64;
        }
        self.replicas = replicas;
        self.totals.peak_waiting = self.totals.peak_waiting.max(self.waiting());
    }

    fn fill(&mut self, rep: &mut Replica, now: f64) {
        while rep.active.len() < rep.service.max_batch as usize {
            let Some(e) = self.pop() else { break };
            let wait = now - self.requests[e.index].at_s;
            self.count_wait(e, wait);
            rep.active
                .push((e.index, rep.service.work(&self.requests[e.index])));
        }
    }

    /// Processor sharing within the batch: each of `n` running requests gets
    /// `min(tokens_per_s / n, request_tokens_per_s)`; finished requests free their slot at once.
    fn serve(&mut self, rep: &mut Replica, t0: f64, dt: f64) {
        let mut tau = 0.0;
        self.fill(rep, t0);
        // Bounded: every pass but the last finishes at least one request.
        loop {
            let n = rep.active.len();
            if n == 0 || tau >= dt {
                break;
            }
            let rate = (rep.service.tokens_per_s / n as f64).min(rep.service.request_tokens_per_s);
            let min_left = rep.active.iter().map(|a| a.1).fold(f64::INFINITY, f64::min);
            let need = min_left / rate;
            if tau + need <= dt {
                for a in rep.active.iter_mut() {
                    a.1 -= rate * need;
                }
                tau += need;
                rep.busy_s += need;
                self.totals.busy_gpu_s += need * rep.gpus as f64;
                let before = rep.active.len();
                rep.active.retain(|a| a.1 > 1e-9);
                let done = (before - rep.active.len()) as u64;
                self.totals.served += done;
                self.totals.departures += done;
                self.fill(rep, t0 + tau);
            } else {
                let left = dt - tau;
                for a in rep.active.iter_mut() {
                    a.1 -= rate * left;
                }
                rep.busy_s += left;
                self.totals.busy_gpu_s += left * rep.gpus as f64;
                break;
            }
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
        m.advance(0.0, 10.2, 0.1);
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
        m.advance(0.0, 0.5, 0.1);
        assert_eq!(m.totals.shed, 0, "admission sheds nothing yet");
        m.set_admission(&[shed_low()]);
        m.advance(0.5, 1.0, 0.1);
        assert_eq!(
            m.totals.shed, 0,
            "all ten arrived in the first step, before the answer"
        );
        let mut m = Model::new(&reqs, policy(), true);
        m.set_admission(&[shed_low()]);
        m.advance(0.0, 1.0, 0.1);
        assert_eq!(m.totals.shed, 5, "batch is shed once five wait");
        m.set_ready(&one(service()));
        m.advance(1.0, 1.5, 0.1);
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
        m.advance(0.0, 4.05, 0.1);
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
        big.advance(0.0, 0.1, 0.1);
        small.advance(0.0, 0.1, 0.1);
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
        big.advance(0.1, 3.0, 0.1);
        small.advance(0.1, 3.0, 0.1);
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
        m.advance(0.0, 0.2, 0.1);
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
        m.advance(0.0, 15.0, 0.1);
        let u = meter.read(&m, 15.0);
        assert_eq!(u.len(), 1);
        assert!((u[0].unwrap() - 1.0).abs() < 1e-9, "{u:?}");
        assert_eq!(m.waiting(), 0);
    }
}
