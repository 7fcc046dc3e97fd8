//! A run's totals, overall and per tier, and how two pools' totals add up.

/// One tier's totals over a run.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TierTotals {
    pub requests: u64,
    pub within_slo: u64,
    pub shed: u64,
    pub timed_out: u64,
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
