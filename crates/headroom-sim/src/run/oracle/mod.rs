//! The oracle: the cheapest schedule that serves as well as any policy could, found by search
//! on the same serving model every policy is measured by.
//!
//! It knows the future but obeys what every policy obeys: it starts from the pool filled (the
//! floor ready, the warm pool parked), never runs below `min_replicas` nor above
//! `max_replicas`, and a replica serves only once its node has climbed the ladder — a cold
//! start for a new node, the rungs after the disk for a warm one — paid all the way up, on an
//! offering that can take the launch then, at the price in force.
//!
//! The search, tick by tick: the fewest ready replicas such that
//!
//! 1. simulating the tick on the model, no request misses its objective that more capacity
//!    (up to what could be ready by then) would have kept within it, and
//! 2. the work still due — each waiting, running or future request by its objective plus its
//!    own service time — fits in this tick's capacity plus the most capacity that can be ready
//!    in each later tick (so holding back now never strands a deadline when capacity is bounded
//!    later, as during a cold start).
//!
//! Replicas come and go as late and as early as the deadlines allow, and batches run full. The
//! schedule is then cut into layers (the k-th replica) and costed node by node in [`nodes`]:
//! each layer's gaps are bridged when keeping the node is cheaper than climbing again, and each
//! climb and each segment is bought on the cheapest offering that can take it.

pub(super) mod nodes;

use std::collections::BTreeMap;

use headroom_cloud::SimCloud;

use super::driver::{Books, Control, PolicyDriver};
use crate::arrivals::Request;
use crate::error::SimError;
use crate::model::{Gate, Model, ReplicaSpec, Service};
use crate::scenario::Scenario;

pub use nodes::Costed;

/// The oracle's schedule, per simulated pool, and what it costs. Each pool is planned alone on
/// the requests that arrive at it: the oracle hands nothing to a smaller model.
#[derive(Debug, Clone)]
pub struct Oracle {
    pools: Vec<PoolPlan>,
}

/// One pool's schedule, per tick.
#[derive(Debug, Clone)]
struct PoolPlan {
    tick_s: f64,
    costed: Costed,
    /// Per tick, what its serving layer admits of each sheddable tier.
    gates: Vec<Vec<Gate>>,
}

/// Ticks of lookahead the work-due check looks at, at most.
const MAX_LOOKAHEAD_TICKS: usize = 4096;

impl Oracle {
    /// Plans the scenario's run on `requests` over `duration_s`.
    pub fn new(sc: &Scenario, requests: &[Request], duration_s: f64) -> Oracle {
        let pools = (0..sc.pools.len())
            .map(|i| {
                let own: Vec<Request> = requests
                    .iter()
                    .filter(|r| r.pool as usize == i)
                    .map(|r| Request { pool: 0, ..*r })
                    .collect();
                PoolPlan::new(&sc.alone(i), &own, duration_s)
            })
            .collect();
        Oracle { pools }
    }

    pub fn cost_usd(&self) -> f64 {
        self.pools.iter().map(PoolPlan::cost_usd).sum()
    }
}

impl PoolPlan {
    fn new(sc: &Scenario, requests: &[Request], duration_s: f64) -> PoolPlan {
        let tick_s = sc.tick_s;
        let ticks = (duration_s / tick_s).round().max(1.0) as usize;
        let supply = nodes::Supply::of(sc, ticks);
        let (ready, gates) = search(sc, requests, ticks, &supply);
        let plan = |supply: &nodes::Supply, ready: &[u32]| PoolPlan {
            tick_s,
            costed: supply.cost(ready),
            gates: gates.clone(),
        };
        // The search's schedule, costed with the pool filled where hindsight serves it best:
        // the most requests within their objectives, then the least money.
        let costed = |supply: nodes::Supply| {
            let searched = plan(&supply, &ready);
            let served = searched.within_slo(sc, requests);
            (supply, searched, served)
        };
        let mut homes = supply.homes();
        homes.retain(|home| *home != supply.home());
        let alternatives: Vec<nodes::Supply> = homes
            .into_iter()
            .map(|home| supply.filled_on(home))
            .collect();
        let (supply, searched, served) =
            alternatives
                .into_iter()
                .map(costed)
                .fold(costed(supply), |best, other| {
                    let better = other.2 > best.2
                        || (other.2 == best.2 && other.1.cost_usd() < best.1.cost_usd());
                    if better { other } else { best }
                });
        // The search keeps a request within its objective at any price: a replica for a tick
        // is a layer that climbs the ladder. The smallest cap on the schedule that still serves
        // as many is cheaper whenever those layers were not needed (found by bisection: serving
        // grows with the cap; a cap is only taken once it is checked to serve as many).
        let capped = |cap: u32| -> Vec<u32> { ready.iter().map(|r| (*r).min(cap)).collect() };
        let floor = sc.primary().spec.min_replicas;
        let (mut lo, mut hi) = (floor, ready.iter().copied().max().unwrap_or(floor));
        let mut best = searched;
        // Bounded: the interval halves each pass.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let tried = plan(&supply, &capped(mid));
            if tried.within_slo(sc, requests) >= served {
                hi = mid;
                if tried.cost_usd() < best.cost_usd() {
                    best = tried;
                }
            } else {
                lo = mid + 1;
            }
        }
        best
    }

    /// Requests the plan starts within their objectives, replayed on the model exactly as the
    /// run loop will.
    fn within_slo(&self, sc: &Scenario, requests: &[Request]) -> u64 {
        let mut model = Model::new(requests, sc.queue.clone(), true);
        let ticks = self.costed.ticks();
        for k in 0..ticks {
            let t = k as f64 * self.tick_s;
            let control = self.control(t, sc.primary().service);
            model.set_ready(&control.ready);
            model.set_admission(&control.admission);
            model.advance(t, t + self.tick_s);
        }
        model.finish(ticks as f64 * self.tick_s);
        model.totals.within_slo
    }

    fn index(&self, t: f64) -> usize {
        ((t / self.tick_s).round() as usize).min(self.costed.ticks().saturating_sub(1))
    }

    fn cost_usd(&self) -> f64 {
        self.costed.cost_usd(self.tick_s)
    }

    fn control(&self, t: f64, service: Service) -> Control {
        let k = self.index(t);
        let ready: BTreeMap<String, ReplicaSpec> = self
            .costed
            .serving(k)
            .map(|(layer, gpus)| (format!("oracle-{layer:04}"), ReplicaSpec { gpus, service }))
            .collect();
        Control {
            desired: ready.len() as u32,
            starting: self.costed.starting(k),
            ready,
            admission: self.gates.get(k).cloned().unwrap_or_default(),
            handed_to_fallback: 0,
        }
    }
}

impl PolicyDriver for Oracle {
    /// The oracle's serving layer sheds too: what not even the most capacity could start
    /// within its objective (it would miss anyway, and delay the rest).
    fn sheds(&self) -> bool {
        true
    }

    fn cloud(&self) -> Option<&SimCloud> {
        None
    }

    async fn control(
        &mut self,
        sc: &Scenario,
        t: f64,
        _models: &[Model<'_>],
    ) -> Result<Vec<Control>, SimError> {
        Ok(self
            .pools
            .iter()
            .zip(&sc.pools)
            .map(|(plan, pool)| plan.control(t, pool.service))
            .collect())
    }

    fn paying(&self, t: f64) -> Vec<(f64, f64)> {
        self.pools
            .iter()
            .map(|plan| plan.costed.paying(plan.index(t)))
            .collect()
    }

    async fn books(&self, _end_s: f64) -> Result<Books, SimError> {
        Ok(Books::default())
    }
}

/// The fewest ready replicas per tick (see the module's doc), between the floor and what can be
/// ready by then, and the gates its serving layer sheds by.
fn search(
    sc: &Scenario,
    requests: &[Request],
    ticks: usize,
    supply: &nodes::Supply,
) -> (Vec<u32>, Vec<Vec<Gate>>) {
    let tick_s = sc.tick_s;
    let due = Due::new(sc, requests, ticks);
    let shedder = Shedder::new(sc, requests);
    let mut model = Model::new(requests, sc.queue.clone(), true);
    let floor = sc.primary().spec.min_replicas;
    let mut ready = Vec::with_capacity(ticks);
    let mut gates = Vec::with_capacity(ticks);
    for k in 0..ticks {
        let t = k as f64 * tick_s;
        let gate = shedder.gates(&model, k, supply);
        model.set_admission(&gate);
        gates.push(gate);
        let most = supply.most_ready(k).max(floor);
        // A busy replica stays: dropping it sends its requests back to start over.
        let least = due
            .replicas_needed(&model, k, supply)
            .max(model.busy_prefix())
            .clamp(floor, most);
        let before = violations(&model, t);
        let probe = |r: u32| {
            let mut probe = model.clone();
            probe.set_ready(&replicas(r, sc.primary().service));
            probe.advance(t, t + tick_s);
            let v = violations(&probe, t + tick_s);
            (probe, v)
        };
        // The fewest replicas that miss no more than the most capacity would: when even that
        // cannot keep a request within its objective, more is no use.
        let (mut r, mut stepped) = (least, probe(least));
        if stepped.1 > before && least < most {
            let top = probe(most);
            if top.1 < stepped.1 {
                let (mut lo, mut hi) = (least, most);
                let mut best = top;
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    let tried = probe(mid);
                    if tried.1 <= best.1 {
                        hi = mid;
                        best = tried;
                    } else {
                        lo = mid;
                    }
                }
                r = hi;
                stepped = best;
            }
        }
        let stepped = stepped.0;
        model = stepped;
        ready.push(r);
    }
    (ready, gates)
}

/// Requests counted as missed (not the shed: the shedder's gate is set before the tick, so
/// capacity cannot change it), and those waiting past their objective that will be.
fn violations(model: &Model<'_>, now: f64) -> u64 {
    model.totals.missed - model.totals.shed + model.overdue(now)
}

/// `n` replicas of one GPU each at `service`, named by layer, as the model sees them.
fn replicas(n: u32, service: Service) -> BTreeMap<String, ReplicaSpec> {
    let spec = ReplicaSpec { gpus: 1, service };
    (0..n).map(|j| (format!("oracle-{j:04}"), spec)).collect()
}

/// When each request's work is due: its objective, plus its own service time in a full batch.
struct Due {
    tick_s: f64,
    /// Per request, the tick by whose end its work must be done.
    due_tick: Vec<usize>,
    work: Vec<f64>,
    /// Work one replica does per tick with its batch full.
    per_replica: f64,
    lookahead: usize,
}

impl Due {
    fn new(sc: &Scenario, requests: &[Request], ticks: usize) -> Due {
        let slot_rate =
            sc.primary().service.tokens_per_s / sc.primary().service.max_batch.max(1) as f64;
        let objective = |tier: u8| {
            sc.queue
                .objective_s
                .get(tier as usize)
                .copied()
                .unwrap_or(f64::INFINITY)
        };
        let work: Vec<f64> = requests
            .iter()
            .map(|r| sc.primary().service.work(r))
            .collect();
        let due_tick = requests
            .iter()
            .zip(&work)
            .map(|(r, w)| {
                let due_s = r.at_s + objective(r.tier) + w / slot_rate.max(f64::MIN_POSITIVE);
                ((due_s / sc.tick_s).floor().max(0.0) as usize).min(ticks + MAX_LOOKAHEAD_TICKS)
            })
            .collect();
        let longest = sc
            .queue
            .objective_s
            .iter()
            .copied()
            .filter(|o| o.is_finite())
            .fold(0.0, f64::max);
        Due {
            tick_s: sc.tick_s,
            due_tick,
            work,
            per_replica: sc.primary().service.replica_capacity() * sc.tick_s,
            lookahead: ((longest / sc.tick_s).ceil() as usize + 4).min(MAX_LOOKAHEAD_TICKS),
        }
    }

    /// The replicas this tick must run so that, with the most capacity every later tick can
    /// have, every request's work is done by its due tick.
    fn replicas_needed(&self, model: &Model<'_>, k: usize, supply: &nodes::Supply) -> u32 {
        let horizon = self.lookahead;
        let mut due = vec![0.0; horizon + 1];
        // Work due past the horizon is the later ticks' business: the horizon is longer than any
        // objective, so what is due then arrives later.
        let mut add = |tick: usize, w: f64| {
            let h = tick.saturating_sub(k);
            if h <= horizon {
                due[h] += w;
            }
        };
        for (i, left) in model.in_service_work() {
            add(self.due_tick[i], left);
        }
        for i in model.queued_indices() {
            add(self.due_tick[i], self.work[i]);
        }
        let end = (k + horizon + 1) as f64 * self.tick_s;
        let first = model.next_arrival();
        for (i, r) in model.requests()[first..].iter().enumerate() {
            if r.at_s >= end {
                break;
            }
            add(self.due_tick[first + i], self.work[first + i]);
        }
        let mut need: f64 = 0.0;
        let (mut cumulative, mut later) = (0.0, 0.0);
        for (h, w) in due.iter().enumerate() {
            cumulative += w;
            if h > 0 {
                later += supply.most_ready(k + h) as f64 * self.per_replica;
            }
            need = need.max(cumulative - later);
        }
        (need / self.per_replica.max(f64::MIN_POSITIVE))
            .ceil()
            .max(0.0) as u32
    }
}

/// The share of its most throughput the oracle's shedder plans with.
const SHED_MARGIN: f64 = 0.9;

/// The oracle's shedder: an arrival of a sheddable tier is turned away when the tier already
/// has waiting as many as the most capacity could start within its objective, after the higher
/// tiers (whose arrivals it knows).
struct Shedder {
    tick_s: f64,
    /// Per sheddable tier: (tier, priority, objective in ticks).
    tiers: Vec<(usize, headroom_core::Priority, usize)>,
    /// Requests one replica starts per tick with its batch full, for the mean request.
    per_replica: f64,
    /// Arrival times per tier, for counting the higher tiers' arrivals within a horizon.
    arrivals: Vec<Vec<f64>>,
}

impl Shedder {
    fn new(sc: &Scenario, requests: &[Request]) -> Shedder {
        let tiers_n = sc.queue.tiers.len().max(1);
        let mut arrivals = vec![Vec::new(); tiers_n];
        for r in requests {
            arrivals[(r.tier as usize).min(tiers_n - 1)].push(r.at_s);
        }
        let mean_work = requests
            .iter()
            .map(|r| sc.primary().service.work(r))
            .sum::<f64>()
            / requests.len().max(1) as f64;
        let tiers = sc
            .queue
            .shed_tiers
            .iter()
            .filter_map(|t| {
                let tier = *t as usize;
                let priority = *sc.queue.priorities.get(tier)?;
                let objective = *sc.queue.objective_s.get(tier)?;
                objective
                    .is_finite()
                    .then(|| (tier, priority, (objective / sc.tick_s).floor() as usize))
            })
            .collect();
        Shedder {
            tick_s: sc.tick_s,
            tiers,
            // A queue capped at exactly what full throughput starts in time leaves the last
            // admitted at its objective's edge, where the batch's variance tips it over.
            per_replica: SHED_MARGIN * sc.primary().service.replica_capacity() / mean_work.max(1.0)
                * sc.tick_s,
            arrivals,
        }
    }

    fn gates(&self, model: &Model<'_>, k: usize, supply: &nodes::Supply) -> Vec<Gate> {
        let waiting: Vec<u64> = model.waiting_by_tier().collect();
        let t = k as f64 * self.tick_s;
        self.tiers
            .iter()
            .map(|&(tier, priority, horizon)| {
                let startable: f64 = (k..k + horizon.max(1))
                    .map(|j| supply.most_ready(j) as f64 * self.per_replica)
                    .sum();
                let end = t + horizon as f64 * self.tick_s;
                let ahead: f64 = (0..tier)
                    .map(|h| {
                        let arriving = self.arrivals[h].partition_point(|a| *a < end)
                            - self.arrivals[h].partition_point(|a| *a < t);
                        (waiting.get(h).copied().unwrap_or(0) + arriving as u64) as f64
                    })
                    .sum();
                Gate {
                    priority,
                    admit: true,
                    max_queued: Some((startable - ahead).max(0.0).floor() as u64),
                }
            })
            .collect()
    }
}
