//! A certified lower bound on what serving the run's requests within their objectives costs: a
//! relaxation that no schedule starting the same requests within their objectives can beat,
//! whatever its ladder, packing or foresight. The argument is in `scenarios/README.md`.
//!
//! The relaxation is a linear program per pool, in ticks: `y[k]` nodes paid at tick `k` on the
//! offerings a node could run on then, never fewer than `min_replicas`; each request's work,
//! in node-seconds on its fastest offering, done anywhere between its arrival and the latest it
//! could finish having started within its objective at the slowest per-request rate; a request
//! of a `smaller_model` tier may be done by the fallback pool instead. Its optimum needs no
//! solver: any multipliers of its dual give a lower bound (weak duality), so the bound is
//! certified by construction, and the multipliers are only searched for a good one.
//!
//! Each offering also has a most nodes it can run then (its room, at most `max_replicas`). The
//! dual, per pool `p` and tick `k`, for any `λ[p][k] ≥ 0` (`P_o`: offering `o`'s price per
//! node-second, `L_o` its room, `F` the floor, `P_F` the price of the floor's last node when
//! the cheapest are bought first, `μ = max(0, P_F − λ)`):
//!
//! ```text
//! D(λ) = Σ_i share_i · min over eligible p of size_ip · min_{k in window_ip} λ[p][k]
//!      + Σ_p Σ_k tick · (F · μ − Σ_o L_o · max(0, λ + μ − P_o))
//! ```
//!
//! For a policy that started only `n` requests within their objectives, the `n` smallest
//! request terms stand in for the first sum: that is below the dual of whichever `n` it served.

use crate::arrivals::Request;
use crate::scenario::Scenario;

use super::oracle::nodes::Supply;

/// Subgradient steps the multipliers take in search of a better bound.
const ASCENT_STEPS: usize = 40;

/// The bound's multipliers tried and what each certifies.
#[derive(Debug, Clone)]
pub struct Bound {
    certified: Vec<Certified>,
}

/// What one multiplier vector certifies: the pools' floor term and, cheapest first, the
/// requests' terms summed (`prefix[n]`: the `n` cheapest).
#[derive(Debug, Clone)]
struct Certified {
    floor_usd: f64,
    prefix: Vec<f64>,
}

impl Certified {
    fn within(&self, n: u64) -> f64 {
        let n = (n as usize).min(self.prefix.len() - 1);
        self.floor_usd + self.prefix[n]
    }
}

/// One pool's side of the relaxation.
struct PoolLp {
    floor: f64,
    /// Per tick, the offerings a node may run on, cheapest first: dollars per node-second and
    /// the most nodes of it that may run then (empty: no node can run).
    open: Vec<Vec<(f64, f64)>>,
    /// The most any multiplier of the pool needs to be, where no node can run (any value is
    /// allowed there: nothing can be bought).
    cap: f64,
}

impl PoolLp {
    /// The dual's floor and capacity term at tick `k` for multiplier `l`, per second: the floor
    /// bought at the price of its last node (`μ`, as high as the floor's nodes cost), less what
    /// nodes cheaper than `l + μ` could do beyond it (each offering's room is all it has).
    fn supply_value(&self, k: usize, l: f64) -> f64 {
        let open = &self.open[k];
        let mu = (self.floor_price(k) - l).max(0.0);
        let over: f64 = open
            .iter()
            .map(|(p, room)| room * (l + mu - p).max(0.0))
            .sum();
        self.floor_nodes(k) * mu - over
    }

    /// Nodes the floor can hold at tick `k`: `min_replicas`, or all the room there is.
    fn floor_nodes(&self, k: usize) -> f64 {
        self.floor
            .min(self.open[k].iter().map(|(_, room)| room).sum())
    }

    /// The price of the floor's last node at tick `k`, cheapest offerings first.
    fn floor_price(&self, k: usize) -> f64 {
        let need = self.floor_nodes(k);
        let mut had = 0.0;
        for (p, room) in &self.open[k] {
            had += room;
            if need > 0.0 && had >= need {
                return *p;
            }
        }
        0.0
    }

    /// The supply term's slopes in `l` at tick `k`, negated, from below and from above: the
    /// nodes that `l` pays for (they differ at a price, the term's kinks).
    fn nodes_at(&self, k: usize, l: f64) -> (f64, f64) {
        let floor_price = self.floor_price(k);
        let room = |keep: &dyn Fn(f64) -> bool| -> f64 {
            self.open[k]
                .iter()
                .filter(|(p, _)| keep(*p))
                .map(|(_, room)| room)
                .sum()
        };
        let below = if l <= floor_price {
            self.floor_nodes(k)
        } else {
            room(&|p| p < l)
        };
        let above = if l < floor_price {
            self.floor_nodes(k)
        } else {
            room(&|p| p <= l)
        };
        (below, above)
    }
}

/// One request's claim on one pool: node-seconds of work, the share of it that must be done
/// within the run, and the ticks it may be done in.
#[derive(Debug, Clone, Copy)]
struct Claim {
    pool: usize,
    size_s: f64,
    share: f64,
    first: usize,
    last: usize,
}

impl Bound {
    /// The bound for `requests` over `duration_s` on the scenario's pools and cloud.
    pub fn new(sc: &Scenario, requests: &[Request], duration_s: f64) -> Bound {
        let tick_s = sc.tick_s;
        let ticks = (duration_s / tick_s).round().max(1.0) as usize;
        let pools: Vec<PoolLp> = (0..sc.pools.len())
            .map(|p| {
                let supply = Supply::of(&sc.alone(p), ticks);
                let most = f64::from(sc.pools[p].spec.max_replicas);
                let open: Vec<Vec<(f64, f64)>> = (0..ticks)
                    .map(|k| {
                        supply
                            .open(k)
                            .into_iter()
                            .map(|(usd_h, room)| (usd_h / 3600.0, f64::from(room).min(most)))
                            .collect()
                    })
                    .collect();
                let cap = open.iter().flatten().map(|(p, _)| *p).fold(0.0, f64::max);
                PoolLp {
                    floor: f64::from(sc.pools[p].spec.min_replicas),
                    open,
                    cap,
                }
            })
            .collect();
        let claims: Vec<Vec<Claim>> = requests.iter().map(|r| claims(sc, r, ticks)).collect();
        let mut certified = vec![
            certify(&pools, &claims, &ones(&pools), tick_s),
            certify(&pools, &claims, &zeros(&pools), tick_s),
        ];
        // Held at the cheapest price the ascent settles the floor against the work; let up to
        // the dearest it also prices the cheap offerings' limited room. Either may end higher.
        certified.push(ascend(&pools, &claims, tick_s, false));
        certified.push(ascend(&pools, &claims, tick_s, true));
        Bound { certified }
    }

    /// The bound for serving every request within its objective.
    pub fn full_usd(&self) -> f64 {
        self.within(u64::MAX)
    }

    /// The bound for any schedule that starts `n` requests within their objectives: the best
    /// any multiplier vector certifies.
    pub fn within(&self, n: u64) -> f64 {
        self.certified
            .iter()
            .map(|c| c.within(n))
            .fold(0.0, f64::max)
    }
}

/// The pools a request may be served by, each with its claim: its own, and its pool's smaller
/// model when its tier may go there.
fn claims(sc: &Scenario, r: &Request, ticks: usize) -> Vec<Claim> {
    let own = r.pool as usize;
    let mut pools = vec![own];
    let handed = sc
        .queue
        .smaller_model
        .get(r.tier as usize)
        .copied()
        .unwrap_or(false);
    if let Some(f) = sc
        .pools
        .get(own)
        .and_then(|p| p.fallback)
        .filter(|_| handed)
    {
        pools.push(f);
    }
    let objective = sc
        .queue
        .objective_s
        .get(r.tier as usize)
        .copied()
        .unwrap_or(f64::INFINITY);
    let end_s = ticks as f64 * sc.tick_s;
    pools
        .into_iter()
        .filter_map(|p| {
            let pool = sc.pools.get(p)?;
            let services = pool
                .spec
                .offerings
                .iter()
                .map(|o| pool.service_on(o))
                .chain([pool.service]);
            // The fastest offering's node-seconds, and the slowest a started request may run:
            // both in the schedule's favour.
            let (mut size_s, mut slowest) = (f64::INFINITY, f64::INFINITY);
            for s in services {
                size_s = size_s.min(s.work(r) / s.replica_capacity().max(f64::MIN_POSITIVE));
                let per_request = (s.tokens_per_s / f64::from(s.max_batch.max(1)))
                    .min(s.request_tokens_per_s)
                    .max(f64::MIN_POSITIVE);
                slowest = slowest.min(per_request / s.work(r));
            }
            // Started by `at + objective`, at least `slowest` of it done per second from then.
            let latest_start = r.at_s + objective;
            let share = ((end_s - latest_start) * slowest).clamp(0.0, 1.0);
            if !share.is_finite() || share <= 0.0 || r.at_s >= end_s {
                return None;
            }
            let finish = latest_start + 1.0 / slowest;
            let first = (r.at_s / sc.tick_s).floor() as usize;
            let last = ((finish / sc.tick_s).floor() as usize).min(ticks - 1);
            Some(Claim {
                pool: p,
                size_s,
                share,
                first: first.min(last),
                last,
            })
        })
        .collect()
}

/// Each tick's cheapest price (the cap where nothing runs).
fn ones(pools: &[PoolLp]) -> Vec<Vec<f64>> {
    pools
        .iter()
        .map(|p| {
            p.open
                .iter()
                .map(|o| o.first().map_or(p.cap, |(price, _)| *price))
                .collect()
        })
        .collect()
}

fn zeros(pools: &[PoolLp]) -> Vec<Vec<f64>> {
    pools.iter().map(|p| vec![0.0; p.open.len()]).collect()
}

/// Range minima over one pool's multipliers, with where each is reached.
struct MinTable {
    levels: Vec<Vec<(f64, usize)>>,
}

impl MinTable {
    fn new(values: &[f64]) -> MinTable {
        let mut levels = vec![values.iter().copied().zip(0..).collect::<Vec<_>>()];
        let mut width = 1;
        // Bounded: each level halves what is left, log2(ticks) levels.
        while width * 2 <= values.len() {
            let prev = &levels[levels.len() - 1];
            let next = (0..=values.len() - width * 2)
                .map(|i| least(prev[i], prev[i + width]))
                .collect();
            levels.push(next);
            width *= 2;
        }
        MinTable { levels }
    }

    /// The least value in `[first, last]` and its tick.
    fn min(&self, first: usize, last: usize) -> (f64, usize) {
        let len = last - first + 1;
        let level = (usize::BITS - 1 - len.leading_zeros()) as usize;
        let row = &self.levels[level];
        least(row[first], row[last + 1 - (1 << level)])
    }
}

fn least(a: (f64, usize), b: (f64, usize)) -> (f64, usize) {
    if b.0 < a.0 { b } else { a }
}

/// Each request's term under `lambda` and, per pool and tick, the node-seconds the cheapest
/// choice puts there (the dual's subgradient, less the floor).
fn terms(
    pools: &[PoolLp],
    claims: &[Vec<Claim>],
    lambda: &[Vec<f64>],
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let tables: Vec<MinTable> = lambda.iter().map(|l| MinTable::new(l)).collect();
    let mut load: Vec<Vec<f64>> = pools.iter().map(|p| vec![0.0; p.open.len()]).collect();
    let terms = claims
        .iter()
        .map(|cs| {
            let best = cs
                .iter()
                .map(|c| {
                    let (l, k) = tables[c.pool].min(c.first, c.last);
                    (c.share * c.size_s * l, c, k)
                })
                .min_by(|a, b| a.0.total_cmp(&b.0));
            match best {
                Some((term, c, k)) => {
                    load[c.pool][k] += c.share * c.size_s;
                    term
                }
                None => 0.0,
            }
        })
        .collect();
    (terms, load)
}

/// What `lambda` certifies (any non-negative multipliers do).
fn certify(pools: &[PoolLp], claims: &[Vec<Claim>], lambda: &[Vec<f64>], tick_s: f64) -> Certified {
    let (mut terms, _) = terms(pools, claims, lambda);
    terms.sort_by(f64::total_cmp);
    let mut prefix = Vec::with_capacity(terms.len() + 1);
    let mut sum = 0.0;
    prefix.push(0.0);
    for t in terms {
        sum += t;
        prefix.push(sum);
    }
    Certified {
        floor_usd: floor_usd(pools, lambda, tick_s),
        prefix,
    }
}

/// The dual's supply term: per tick, the floor at its nodes' prices less what the multipliers
/// charge the work for the capacity it brings anyway, and less what cheap but limited room
/// would do at the multipliers' price.
fn floor_usd(pools: &[PoolLp], lambda: &[Vec<f64>], tick_s: f64) -> f64 {
    pools
        .iter()
        .zip(lambda)
        .map(|(p, l)| {
            l.iter()
                .enumerate()
                .map(|(k, l)| tick_s * p.supply_value(k, *l))
                .sum::<f64>()
        })
        .sum()
}

/// Projected subgradient ascent on the dual from the cheapest prices: a tick whose cheapest
/// work is more than the nodes its multiplier pays for can do raises it (up to the cheapest or,
/// `past_cheapest`, the dearest open price), one with less lowers it. Returns the best vector's certificate for serving
/// every request.
fn ascend(pools: &[PoolLp], claims: &[Vec<Claim>], tick_s: f64, past_cheapest: bool) -> Certified {
    let mut lambda = ones(pools);
    let mut best = (f64::NEG_INFINITY, lambda.clone());
    for step in 0..ASCENT_STEPS {
        let (terms, load) = terms(pools, claims, &lambda);
        let value = terms.iter().sum::<f64>() + floor_usd(pools, &lambda, tick_s);
        if value > best.0 {
            best = (value, lambda.clone());
        }
        let rate = 0.5 / ((step + 1) as f64).sqrt();
        for ((p, l), load) in pools.iter().zip(lambda.iter_mut()).zip(&load) {
            let room = p.floor.max(1.0) * tick_s;
            for (k, l) in l.iter_mut().enumerate() {
                let (Some((cheapest, _)), Some((dearest, _))) =
                    (p.open[k].first(), p.open[k].last())
                else {
                    continue;
                };
                // Up while the work is more than the nodes a rise pays for can do, down while
                // it is less than those a fall saves; at rest in between.
                let (below, above) = p.nodes_at(k, *l);
                let gradient = if load[k] > above * tick_s {
                    (load[k] - above * tick_s) / room
                } else {
                    (load[k] - below * tick_s).min(0.0) / room
                };
                let ceiling = if past_cheapest { *dearest } else { *cheapest };
                *l = (*l + rate * cheapest * gradient.clamp(-1.0, 1.0)).clamp(0.0, ceiling);
            }
        }
    }
    certify(pools, claims, &best.1, tick_s)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::model::{Model, ReplicaSpec};

    const PRICE_USD_PER_HOUR: f64 = 3.6;
    /// A second offering at half the price with room for one node, when there is one.
    const CHEAP_USD_PER_HOUR: f64 = 1.8;
    const MAX_REPLICAS: u32 = 3;

    /// Four one-minute ticks, one on-demand offering (and, with `cheap`, one at half the price
    /// with room for a single node), a replica of two slots at 100 units/s (50 for a request
    /// alone), a 20 s objective.
    fn tiny(floor: u32, cheap: bool) -> Scenario {
        let (cheap_offering, cheap_id) = if cheap {
            (
                format!(
                    r#"
[[headroom.offerings]]
id = "use1-cheap"
provider = "sim"
region = "us-east-1"
zone = "use1-az2"
instance_type = "g6.xlarge"
market = "on-demand"
price_usd_per_hour = "{CHEAP_USD_PER_HOUR}"
gpus = 1
sim_capacity = 1
"#
                ),
                "\"use1-cheap\", ",
            )
        } else {
            (String::new(), "")
        };
        let text = format!(
            r#"
name = "tiny"
description = "exhaustive"
duration = "4m"
tick = "60s"
step = "1s"
seed = 0

[service]
tokens_per_s = 100
request_tokens_per_s = 50
max_batch = 2
input_token_weight = 0.0

[[tiers]]
name = "interactive"
objective = "20s"

[[traffic]]
tier = "interactive"
process = "uniform"
rate = 1
input_tokens = 0
output_tokens = 100

[headroom]
cluster_id = "tiny"

[[headroom.offerings]]
id = "use1-od"
provider = "sim"
region = "us-east-1"
zone = "use1-az1"
instance_type = "g6.xlarge"
market = "on-demand"
price_usd_per_hour = "{PRICE_USD_PER_HOUR}"
gpus = 1
sim_capacity = 8
{cheap_offering}
[[headroom.pools]]
name = "tiny"
account = "test"
offerings = [{cheap_id}"use1-od"]
min_replicas = {floor}
max_replicas = {MAX_REPLICAS}
warm_pool_size = 0
[headroom.pools.ladder]
node_acquisition = "30s"
image_pull = "10s"
weight_load = "10s"
compile = "5s"
warmup = "5s"
[headroom.pools.scaling]
replica_throughput_rps = 1.0
backlog_drain = "60s"
breach_window = "5s"
scale_up_breaches = 2
"#
        );
        crate::scenario::parse(&text, "tiny.toml").unwrap()
    }

    /// Every schedule of 0..=3 replicas per tick that never withdraws a running request (a
    /// replica stays while it or one after it is busy) and keeps the floor: its cost and the
    /// requests it starts within their objectives.
    fn every_schedule(
        sc: &Scenario,
        requests: &[Request],
        floor: u32,
        cheap: bool,
    ) -> Vec<(f64, u64)> {
        let ticks = 4;
        let choices = MAX_REPLICAS + 1 - floor;
        let spec = ReplicaSpec {
            gpus: 1,
            service: sc.primary().service,
        };
        (0..choices.pow(ticks))
            .map(|code| {
                let mut model = Model::new(requests, sc.queue.clone(), false);
                let mut cost = 0.0;
                for k in 0..ticks {
                    let chosen = floor + code / choices.pow(k) % choices;
                    let n = chosen.max(model.busy_prefix());
                    let ready: BTreeMap<String, ReplicaSpec> =
                        (0..n).map(|j| (format!("r{j}"), spec)).collect();
                    model.set_ready(&ready);
                    let t = f64::from(k) * sc.tick_s;
                    model.advance(t, t + sc.tick_s);
                    // The cheap offering's one node first: the least any schedule pays.
                    let on_cheap = if cheap { n.min(1) } else { 0 };
                    let usd_per_hour = f64::from(on_cheap) * CHEAP_USD_PER_HOUR
                        + f64::from(n - on_cheap) * PRICE_USD_PER_HOUR;
                    cost += usd_per_hour * sc.tick_s / 3600.0;
                }
                model.finish(f64::from(ticks) * sc.tick_s);
                (cost, model.totals.within_slo)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]

        /// On tiny instances, no schedule at all costs less than the bound for the requests it
        /// starts within their objectives, and the bound for full service is at least the floor.
        #[test]
        fn no_schedule_beats_the_bound(
            floor in 0u32..=1,
            cheap in any::<bool>(),
            mut arrivals in prop::collection::vec((0u32..230, 20u32..4000), 1..6),
        ) {
            arrivals.sort_unstable();
            let requests: Vec<Request> = arrivals
                .iter()
                .map(|(at, tokens)| Request {
                    at_s: f64::from(*at),
                    input_tokens: 0,
                    output_tokens: *tokens,
                    tier: 0,
                    pool: 0,
                })
                .collect();
            let sc = tiny(floor, cheap);
            let bound = Bound::new(&sc, &requests, sc.duration_s);
            let price = if cheap { CHEAP_USD_PER_HOUR } else { PRICE_USD_PER_HOUR };
            let floor_usd = f64::from(floor) * price * 4.0 / 60.0;
            prop_assert!(bound.full_usd() >= floor_usd - 1e-9);
            for (cost, within) in every_schedule(&sc, &requests, floor, cheap) {
                prop_assert!(
                    cost >= bound.within(within) - 1e-9,
                    "a schedule starting {} in time costs {} < bound {}",
                    within, cost, bound.within(within)
                );
            }
        }
    }

    /// The bound is not the floor alone: work above what the floor can do is priced.
    #[test]
    fn work_above_the_floor_is_priced() {
        let sc = tiny(0, false);
        // Twelve requests of 4,000 units at once: 480 node-seconds at 100 units/s.
        let requests: Vec<Request> = (0..12)
            .map(|_| Request {
                at_s: 0.0,
                input_tokens: 0,
                output_tokens: 4000,
                tier: 0,
                pool: 0,
            })
            .collect();
        let bound = Bound::new(&sc, &requests, sc.duration_s);
        let work_usd = 480.0 * PRICE_USD_PER_HOUR / 3600.0;
        assert!(
            (bound.full_usd() - work_usd).abs() < 1e-6,
            "{}",
            bound.full_usd()
        );
        assert!((bound.within(6) - work_usd / 2.0).abs() < 1e-6);
        // With room for one node at half the price, only 120 node-seconds (that node over the
        // two ticks their windows span) may be cheap: above the cheap price for everything.
        let sc = tiny(0, true);
        let bound = Bound::new(&sc, &requests, sc.duration_s);
        let all_cheap = 480.0 * CHEAP_USD_PER_HOUR / 3600.0;
        assert!(bound.full_usd() > all_cheap * 1.05, "{}", bound.full_usd());
        assert!(bound.full_usd() <= work_usd + 1e-9, "{}", bound.full_usd());
    }
}
