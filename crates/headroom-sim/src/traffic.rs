//! Arrivals and the admission queue.

use serde::Serialize;

/// A step burst: `base_rps`, rising linearly to `peak_rps` over `ramp_s` starting at `start_s`,
/// held for `hold_s`, then back to `base_rps` at once (the batch job ends).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BurstProfile {
    pub base_rps: f64,
    pub peak_rps: f64,
    pub start_s: f64,
    pub ramp_s: f64,
    pub hold_s: f64,
}

impl BurstProfile {
    /// Seed 001's timeline: 20 → 200 requests per second within ten seconds.
    pub fn seed_001(start_s: f64, hold_s: f64) -> BurstProfile {
        BurstProfile {
            base_rps: 20.0,
            peak_rps: 200.0,
            start_s,
            ramp_s: 10.0,
            hold_s,
        }
    }

    /// A steady load.
    pub fn constant(rps: f64) -> BurstProfile {
        BurstProfile {
            base_rps: rps,
            peak_rps: rps,
            start_s: 0.0,
            ramp_s: 0.0,
            hold_s: 0.0,
        }
    }

    /// Arrival rate at `t_s` seconds into the run.
    pub fn rps_at(&self, t_s: f64) -> f64 {
        let into = t_s - self.start_s;
        if into < 0.0 || into >= self.ramp_s + self.hold_s {
            self.base_rps
        } else if into < self.ramp_s {
            self.base_rps + (self.peak_rps - self.base_rps) * into / self.ramp_s
        } else {
            self.peak_rps
        }
    }
}

/// A fluid model of the admission queue: arrivals join, ready replicas drain it at their
/// throughput. Deterministic, so a run replays exactly.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QueueModel {
    /// Requests waiting (fractional in the fluid model; reported rounded).
    pub waiting: f64,
    pub arrived_total: f64,
    pub served_total: f64,
}

impl QueueModel {
    /// Advances `dt_s` seconds at `rps` arrivals with `ready` replicas of `replica_rps` each.
    pub fn step(&mut self, dt_s: f64, rps: f64, ready: u32, replica_rps: f64) {
        if dt_s <= 0.0 {
            return;
        }
        let arrivals = rps.max(0.0) * dt_s;
        let capacity = ready as f64 * replica_rps.max(0.0) * dt_s;
        let served = (self.waiting + arrivals).min(capacity);
        self.waiting = self.waiting + arrivals - served;
        self.arrived_total += arrivals;
        self.served_total += served;
    }

    pub fn depth(&self) -> u64 {
        self.waiting.round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_ramps_holds_and_ends() {
        let b = BurstProfile::seed_001(30.0, 300.0);
        assert_eq!(b.rps_at(0.0), 20.0);
        assert_eq!(b.rps_at(35.0), 110.0);
        assert_eq!(b.rps_at(100.0), 200.0);
        assert_eq!(b.rps_at(341.0), 20.0);
    }

    /// Seed 000: eight workers at 2.5 req/s facing 32 req/s for 30 s queue 360 requests.
    #[test]
    fn seed_000_backlog_builds_to_360() {
        let mut q = QueueModel::default();
        for _ in 0..30 {
            q.step(1.0, 32.0, 8, 2.5);
        }
        assert_eq!(q.depth(), 360);
        // Eleven workers at 20 req/s arrivals drain it within a minute.
        for _ in 0..60 {
            q.step(1.0, 20.0, 11, 2.5);
        }
        assert_eq!(q.depth(), 0);
    }
}
