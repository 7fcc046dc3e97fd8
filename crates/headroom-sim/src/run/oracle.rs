//! The oracle: demand known in advance.

use super::driver::{Books, Control, PolicyDriver};
use crate::arrivals::Request;
use crate::error::SimError;
use crate::model::Model;
use crate::scenario::{FaultKind, Scenario};
use headroom_cloud::SimCloud;
use headroom_core::Offering;

/// The oracle: demand known in advance. Per bucket as long as the tightest SLO objective, the
/// replicas whose full-batch throughput carries the work arriving in it; then, layer by layer
/// (the k-th replica), gaps shorter than the cold start are bridged (keeping a node is cheaper
/// than climbing the ladder again) and every other start is launched one cold start ahead, so
/// it pays the ladder. All at the cheapest allowed offering, with no stockouts. A lower bound
/// on cost for the same serving model, not a schedule a controller could follow.
#[derive(Debug, Clone)]
pub struct OraclePlan {
    tick_s: f64,
    /// Per tick: ready replicas, and nodes paid for (ready plus booting ahead).
    ready: Vec<u32>,
    paid: Vec<u32>,
    /// Per tick, the price per node-hour of the cheapest offering then.
    price: Vec<f64>,
    gpus: u32,
}

impl OraclePlan {
    pub fn new(sc: &Scenario, requests: &[Request], duration_s: f64) -> OraclePlan {
        let ticks = (duration_s / sc.tick_s).round().max(1.0) as usize;
        let objective = sc
            .queue
            .objective_s
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let per_bucket = ((objective / sc.tick_s).floor() as usize).max(1);
        let bucket_s = per_bucket as f64 * sc.tick_s;
        let buckets = ticks.div_ceil(per_bucket);
        let mut work = vec![0.0; buckets];
        for r in requests {
            let b = ((r.at_s / bucket_s) as usize).min(buckets - 1);
            work[b] += sc.service.work(r);
        }
        let capacity = sc.service.replica_capacity() * bucket_s;
        let need: Vec<u32> = (0..ticks)
            .map(|k| (work[k / per_bucket] / capacity).ceil() as u32)
            .collect();
        let offerings: Vec<&Offering> = sc
            .pool
            .offerings
            .iter()
            .filter_map(|id| sc.config.offering(id))
            .collect();
        // Per tick, the cheapest offering a launch could buy then: spot at its market price,
        // and not while the market is above the most the pool pays.
        let cheapest_at = |t: f64| {
            offerings
                .iter()
                .filter_map(|o| {
                    let market = sc
                        .faults
                        .iter()
                        .filter(|f| f.offering == o.id && f.at_s <= t + 1e-9)
                        .filter_map(|f| match f.kind {
                            FaultKind::SpotPrice(p) => Some(p),
                            _ => None,
                        })
                        .next_back();
                    match market {
                        Some(p) if p > o.price_usd_per_hour => None,
                        Some(p) => Some((p, o.gpus_per_node)),
                        None => Some((o.price_usd_per_hour, o.gpus_per_node)),
                    }
                })
                .min_by_key(|(p, _)| *p)
        };
        let price: Vec<f64> = (0..ticks)
            .map(|k| cheapest_at(k as f64 * sc.tick_s).map_or(0.0, |(p, _)| p.as_f64_lossy()))
            .collect();
        let gpus = cheapest_at(0.0).map_or(1, |(_, g)| g);
        let ladder_ticks = (sc.pool.ladder.cold_total().as_secs_f64() / sc.tick_s).ceil() as usize;
        let mut ready = vec![0u32; ticks];
        let mut paid = vec![0u32; ticks];
        let top = need.iter().copied().max().unwrap_or(0);
        for level in 1..=top {
            let mut on: Vec<bool> = need.iter().map(|n| *n >= level).collect();
            // Bridge gaps shorter than the ladder.
            let mut last_on: Option<usize> = None;
            for k in 0..ticks {
                if on[k] {
                    if let Some(l) = last_on
                        && k - l - 1 > 0
                        && k - l - 1 < ladder_ticks
                    {
                        on[(l + 1)..k].iter_mut().for_each(|x| *x = true);
                    }
                    last_on = Some(k);
                }
            }
            for k in 0..ticks {
                if on[k] {
                    ready[k] += 1;
                    paid[k] += 1;
                    if k > 0 && !on[k - 1] {
                        for p in paid[k.saturating_sub(ladder_ticks)..k].iter_mut() {
                            *p += 1;
                        }
                    }
                }
            }
        }
        OraclePlan {
            tick_s: sc.tick_s,
            ready,
            paid,
            price,
            gpus,
        }
    }

    fn index(&self, t: f64) -> usize {
        ((t / self.tick_s).round() as usize).min(self.ready.len().saturating_sub(1))
    }

    fn control_at(&self, t: f64) -> Control {
        let n = self.ready.get(self.index(t)).copied().unwrap_or(0);
        Control {
            desired: n,
            starting: self.paid[self.index(t)] - n,
            ready: (0..n)
                .map(|k| (format!("oracle-{k:04}"), self.gpus))
                .collect(),
            shed: Vec::new(),
        }
    }

    /// (price per hour, GPUs) paid for during the tick at `t`.
    fn paid_at(&self, t: f64) -> (f64, f64) {
        let k = self.index(t);
        let n = self.paid.get(k).copied().unwrap_or(0) as f64;
        (
            n * self.price.get(k).copied().unwrap_or(0.0),
            n * self.gpus as f64,
        )
    }

    pub fn cost_usd(&self) -> f64 {
        self.paid
            .iter()
            .zip(&self.price)
            .map(|(n, price)| *n as f64 * price * self.tick_s / 3600.0)
            .sum()
    }
}

impl PolicyDriver for OraclePlan {
    fn cloud(&self) -> Option<&SimCloud> {
        None
    }

    async fn control(&mut self, t: f64, _model: &Model<'_>) -> Result<Control, SimError> {
        Ok(self.control_at(t))
    }

    fn paying(&self, t: f64) -> (f64, f64) {
        self.paid_at(t)
    }

    async fn books(&self, _end_s: f64) -> Result<Books, SimError> {
        Ok(Books::default())
    }
}
