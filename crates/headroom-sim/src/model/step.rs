//! The model's step from event to event: one pool (`Model::advance`) or all (`advance_together`).

use crate::arrivals::Request;

use super::Model;
use super::queue::Queued;

impl Model<'_> {
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
