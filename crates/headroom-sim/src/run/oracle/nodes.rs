//! The oracle's nodes: what can be ready when, and what a schedule of ready replicas costs
//! when every replica is a node that climbed the ladder on an offering that could take it.
//!
//! A schedule is cut into layers: layer `j` serves in every tick where at least `j` replicas
//! are ready. Layers up to `min_replicas` are the floor, ready from the start; the next
//! `warm_pool_size` layers are the warm pool's nodes, parked at the start and woken (the rungs
//! after the disk) whenever their layer serves, parked again after; the layers above launch
//! cold each time they serve. A gap in a layer is bridged — the node kept serving — when that
//! costs less than climbing again. Each layer's climbs and its segments are bought on the
//! cheapest offering that can take them: a launch needs room (capacity) and, for spot, a market
//! at or below the offering's maximum; a spot node is reclaimed two minutes after its market
//! goes above that maximum, and a wave of interruptions reclaims its share of the oracle's spot
//! nodes like every policy's. A node may move to another offering at any tick by launching the
//! new one ahead (make before break), which pays both while the new one climbs.

use headroom_core::{Market, Offering};

use crate::scenario::{FaultKind, Scenario};

/// The cloud as the oracle sees it, per tick.
#[derive(Debug, Clone)]
pub struct Supply {
    ticks: usize,
    floor: u32,
    warm: u32,
    offerings: Vec<OfferingTrack>,
    /// Where the pool was filled before the run (its floor and warm pool).
    home: usize,
    /// The most replicas that can be ready at each tick.
    most: Vec<u32>,
    /// Interruption waves: (tick announced, tick the nodes go, offering, what they take).
    waves: Vec<(usize, usize, usize, Take)>,
}

/// What a wave reclaims of the nodes on its offering when it is announced.
#[derive(Debug, Clone, Copy)]
enum Take {
    /// This share of them (a wave of interruptions).
    Share(f64),
    /// Those above this many (the market's availability fell).
    Above(u32),
}

/// One offering's price and availability, per tick.
#[derive(Debug, Clone)]
struct OfferingTrack {
    gpus: u32,
    /// What a node parked on it pays per hour (its volumes).
    warm_usd_per_hour: f64,
    cold_ticks: usize,
    wake_ticks: usize,
    /// Dollars per node-hour in force.
    price: Vec<f64>,
    /// A node of it may run (spot: until two minutes after the market went above the maximum).
    runnable: Vec<bool>,
    /// A new node may be launched on it (spot: the market at or below the maximum).
    launchable: Vec<bool>,
    capacity: Vec<u32>,
    /// The most nodes of it that may be running (runnable, and the most room any launch up to
    /// then found with the market open: the nodes running were all there at the last one's
    /// launch): what the lower bound may buy at its price.
    room: Vec<u32>,
}

/// The oracle's schedule, costed.
#[derive(Debug, Clone)]
pub struct Costed {
    /// Per tick: each serving layer and its node's GPUs.
    serving: Vec<Vec<(u32, u32)>>,
    /// Per tick: nodes climbing the ladder.
    starting: Vec<u32>,
    /// Per tick: dollars per hour and GPUs paid.
    usd_per_hour: Vec<f64>,
    gpus: Vec<f64>,
}

impl Costed {
    pub fn ticks(&self) -> usize {
        self.serving.len()
    }

    pub fn serving(&self, k: usize) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.serving.get(k).into_iter().flatten().copied()
    }

    pub fn starting(&self, k: usize) -> u32 {
        self.starting.get(k).copied().unwrap_or(0)
    }

    pub fn paying(&self, k: usize) -> (f64, f64) {
        (
            self.usd_per_hour.get(k).copied().unwrap_or(0.0),
            self.gpus.get(k).copied().unwrap_or(0.0),
        )
    }

    pub fn cost_usd(&self, tick_s: f64) -> f64 {
        self.usd_per_hour.iter().sum::<f64>() * tick_s / 3600.0
    }
}

/// A tick's count of the run's ticks, rounded up.
fn ticks_of(seconds: f64, tick_s: f64) -> usize {
    (seconds / tick_s).ceil().max(1.0) as usize
}

impl Supply {
    pub fn of(sc: &Scenario, ticks: usize) -> Supply {
        let tick_s = sc.tick_s;
        let configured: Vec<(&Offering, u32, headroom_core::ColdStartLadder)> = sc
            .primary()
            .spec
            .offerings
            .iter()
            .filter_map(|id| sc.config.offerings.iter().find(|o| &o.offering.id == id))
            .map(|o| (&o.offering, o.sim_capacity, o.sim_ladder))
            .collect();
        let offerings: Vec<OfferingTrack> = configured
            .iter()
            .map(|(o, capacity, ladder)| track(sc, o, *capacity, ladder, ticks))
            .collect();
        let home = (0..offerings.len())
            .filter(|i| offerings[*i].launchable.first().copied().unwrap_or(false))
            .min_by(|a, b| offerings[*a].price[0].total_cmp(&offerings[*b].price[0]))
            .unwrap_or(0);
        let waves = sc
            .faults
            .iter()
            .filter_map(|f| {
                let take = match f.kind {
                    FaultKind::Interrupt(share) => Take::Share(share),
                    FaultKind::Available(n) => Take::Above(n),
                    _ => return None,
                };
                let o = configured.iter().position(|(c, _, _)| c.id == f.offering)?;
                let go = f.at_s + headroom_cloud::sim::INTERRUPTION_NOTICE_S as f64;
                let at = (f.at_s / tick_s).round() as usize;
                Some((at, (go / tick_s).round() as usize, o, take))
            })
            .collect();
        let mut supply = Supply {
            ticks,
            floor: sc.primary().spec.min_replicas,
            warm: sc.primary().spec.warm_pool_size,
            offerings,
            home,
            most: Vec::new(),
            waves,
        };
        supply.most = supply.bounds(sc);
        supply
    }

    /// The most replicas that can be ready at each tick: the floor; the warm pool once a wake
    /// can have finished; anything up to `max_replicas` once a cold start can have.
    fn bounds(&self, sc: &Scenario) -> Vec<u32> {
        let max = sc.primary().spec.max_replicas;
        let cold = self
            .offerings
            .iter()
            .map(|o| o.cold_ticks)
            .min()
            .unwrap_or(0);
        let wake = self
            .offerings
            .get(self.home)
            .map_or(usize::MAX, |o| o.wake_ticks);
        let room: u32 = self
            .offerings
            .iter()
            .map(|o| o.capacity.iter().copied().max().unwrap_or(0))
            .sum();
        (0..self.ticks)
            .map(|k| {
                let mut n = self.floor;
                if k >= wake {
                    n += self.warm;
                }
                if k >= cold {
                    n = n.max(room.min(max));
                }
                n.min(max)
            })
            .collect()
    }

    /// The offerings a node may be running on at tick `k` (no ladder), cheapest first: the
    /// price in force, dollars per node-hour, and the most nodes of it that may be running.
    pub fn open(&self, k: usize) -> Vec<(f64, u32)> {
        let mut open: Vec<(f64, u32)> = self
            .offerings
            .iter()
            .filter_map(|o| {
                let room = o.room.get(k).copied().unwrap_or(0);
                (room > 0).then(|| (o.price[k], room))
            })
            .collect();
        open.sort_by(|a, b| a.0.total_cmp(&b.0));
        open
    }

    /// The offerings the pool could have been filled on before the run (a launch open at the
    /// first tick), cheapest first: the search's home is the first; hindsight may prefer
    /// another, for instance on-demand when the cheap spot market is about to be taken away
    /// sooner than a replacement can climb.
    pub fn homes(&self) -> Vec<usize> {
        let mut homes: Vec<usize> = (0..self.offerings.len())
            .filter(|o| {
                let t = &self.offerings[*o];
                t.launchable.first().copied().unwrap_or(false)
                    && t.capacity.first().copied().unwrap_or(0) > 0
            })
            .collect();
        homes.sort_by(|a, b| self.offerings[*a].price[0].total_cmp(&self.offerings[*b].price[0]));
        homes
    }

    pub fn home(&self) -> usize {
        self.home
    }

    /// The same cloud with the pool filled on offering `home` before the run.
    pub fn filled_on(&self, home: usize) -> Supply {
        Supply {
            home,
            ..self.clone()
        }
    }

    pub fn most_ready(&self, k: usize) -> u32 {
        self.most
            .get(k.min(self.ticks.saturating_sub(1)))
            .copied()
            .unwrap_or(self.floor)
    }

    /// What `ready` (replicas per tick) costs, node by node.
    pub fn cost(&self, ready: &[u32]) -> Costed {
        let ticks = ready.len();
        let mut occupancy = vec![vec![0u32; ticks]; self.offerings.len()];
        let top = ready.iter().copied().max().unwrap_or(0);
        let mut plans: Vec<(u32, IntervalPlan)> = Vec::new();
        for layer in 1..=top.max(self.floor) {
            let on: Vec<bool> = ready.iter().map(|r| *r >= layer).collect();
            let kind = self.kind(layer);
            let mut parked = self.home;
            for (s, e) in self.bridged(&on, kind) {
                let Some(plan) = self.plan_interval(s, e, kind, parked, &occupancy) else {
                    continue;
                };
                parked = plan.last_offering();
                plan.occupy(&mut occupancy, 1);
                plans.push((layer, plan));
            }
        }
        for w in 0..self.waves.len() {
            self.take_wave(w, &mut plans, &mut occupancy);
        }
        let mut costed = Costed {
            serving: vec![Vec::new(); ticks],
            starting: vec![0; ticks],
            usd_per_hour: vec![0.0; ticks],
            gpus: vec![0.0; ticks],
        };
        for (layer, plan) in &plans {
            self.book(*layer, plan, &mut costed);
        }
        self.book_parked(&plans, &mut costed);
        costed
    }

    /// The warm pool's nodes pay their volumes at their home offering's rate in every tick
    /// they neither climb nor serve, parked as a policy's are, up to their last climb or
    /// service: after it the node is released (one never woken is released at the start).
    fn book_parked(&self, plans: &[(u32, IntervalPlan)], costed: &mut Costed) {
        let disk = self.offerings[self.home].warm_usd_per_hour;
        for layer in self.floor + 1..=self.floor + self.warm {
            let mut running = vec![false; self.ticks];
            for (_, plan) in plans.iter().filter(|(l, _)| *l == layer) {
                let mut mark = |from: usize, to: usize| {
                    let to = to.min(self.ticks);
                    if from < to {
                        running[from..to].fill(true);
                    }
                };
                mark(plan.serve_from, plan.end());
                for (_, first, ticks) in &plan.climbs {
                    mark(*first, *first + *ticks);
                }
            }
            let last = running.iter().rposition(|r| *r).unwrap_or(0);
            for (k, _) in running[..last].iter().enumerate().filter(|(_, r)| !**r) {
                costed.usd_per_hour[k] += disk;
            }
        }
    }

    /// A wave reclaims its share of the oracle's nodes on its offering, as it does every
    /// policy's: the ones that lose least (the least service left) go, and each is replaced by a
    /// node launched ahead so it serves from the instant the old one is taken.
    fn take_wave(
        &self,
        w: usize,
        plans: &mut Vec<(u32, IntervalPlan)>,
        occupancy: &mut [Vec<u32>],
    ) {
        let (announced, go, o, take) = self.waves[w];
        if go >= self.ticks {
            return;
        }
        let on_it = occupancy[o].get(announced).copied().unwrap_or(0);
        let (count, may_return) = match take {
            Take::Share(share) => ((f64::from(on_it) * share).round() as usize, true),
            Take::Above(n) => (on_it.saturating_sub(n) as usize, false),
        };
        let mut hit: Vec<usize> = (0..plans.len())
            .filter(|i| plans[*i].1.serving_on(go) == Some(o))
            .collect();
        hit.sort_by_key(|i| plans[*i].1.end());
        for i in hit.into_iter().take(count) {
            let (layer, plan) = &mut plans[i];
            let end = plan.end();
            plan.occupy(occupancy, -1);
            plan.truncate(go);
            plan.occupy(occupancy, 1);
            let layer = *layer;
            // A replacement launched ahead would land on the offering before its count fell;
            // once the market's availability fell, it goes elsewhere (the offering seen as full).
            // When the wave comes sooner after the start than any node can climb, the
            // replacement serves from the first tick a launch at the start can land.
            let seen = if may_return {
                occupancy.to_vec()
            } else {
                let mut seen = occupancy.to_vec();
                seen[o].fill(u32::MAX);
                seen
            };
            let earliest = self.offerings.iter().map(|t| t.cold_ticks).min();
            let rest = self
                .plan_interval(go, end, Layer::Cold, o, &seen)
                .or_else(|| {
                    let from = earliest.filter(|from| (go + 1..end).contains(from))?;
                    self.plan_interval(from, end, Layer::Cold, o, &seen)
                });
            if let Some(rest) = rest {
                rest.occupy(occupancy, 1);
                plans.push((layer, rest));
            }
        }
    }

    fn kind(&self, layer: u32) -> Layer {
        if layer <= self.floor {
            Layer::Floor
        } else if layer <= self.floor + self.warm {
            Layer::Warm
        } else {
            Layer::Cold
        }
    }

    /// A layer's serving intervals `[start, end)` in ticks, gaps bridged where keeping the
    /// node costs fewer ticks than its next climb.
    fn bridged(&self, on: &[bool], kind: Layer) -> Vec<(usize, usize)> {
        if kind == Layer::Floor {
            return vec![(0, on.len())];
        }
        let climb = match kind {
            Layer::Warm => self.offerings[self.home].wake_ticks,
            _ => self
                .offerings
                .iter()
                .map(|o| o.cold_ticks)
                .min()
                .unwrap_or(0),
        };
        let mut intervals: Vec<(usize, usize)> = Vec::new();
        let mut k = 0;
        while k < on.len() {
            if !on[k] {
                k += 1;
                continue;
            }
            let start = k;
            while k < on.len() && on[k] {
                k += 1;
            }
            match intervals.last_mut() {
                Some(last) if start - last.1 <= climb => last.1 = k,
                _ => intervals.push((start, k)),
            }
        }
        intervals
    }
}

/// Which band of the pool a layer is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// Ready from the start, never released.
    Floor,
    /// A warm pool node: parked at the start, woken to serve, parked again.
    Warm,
    /// Launched cold each time it serves.
    Cold,
}

/// One interval of one layer: the offering it serves on at each tick from `serve_from`, and
/// the climbs paid for, each `(offering, first tick, ticks)`.
#[derive(Debug)]
struct IntervalPlan {
    serve_from: usize,
    on: Vec<usize>,
    climbs: Vec<(usize, usize, usize)>,
}

impl IntervalPlan {
    fn last_offering(&self) -> usize {
        self.on.last().copied().unwrap_or(0)
    }

    fn end(&self) -> usize {
        self.serve_from + self.on.len()
    }

    /// The offering the layer serves on at tick `k`, if it serves then.
    fn serving_on(&self, k: usize) -> Option<usize> {
        k.checked_sub(self.serve_from)
            .and_then(|i| self.on.get(i))
            .copied()
    }

    /// Stops serving at tick `k` (the node is taken then); climbs after it are dropped.
    fn truncate(&mut self, k: usize) {
        self.on.truncate(k.saturating_sub(self.serve_from));
        self.climbs.retain(|(_, first, _)| *first < k);
    }

    /// Adds (or removes, with `-1`) the plan's nodes to the per-offering occupancy.
    fn occupy(&self, occupancy: &mut [Vec<u32>], sign: i32) {
        let mut add = |o: usize, k: usize| {
            if let Some(n) = occupancy[o].get_mut(k) {
                *n = n.saturating_add_signed(sign);
            }
        };
        for (i, o) in self.on.iter().enumerate() {
            add(*o, self.serve_from + i);
        }
        for (o, first, ticks) in &self.climbs {
            for k in *first..*first + *ticks {
                add(*o, k);
            }
        }
    }
}

fn track(
    sc: &Scenario,
    o: &Offering,
    capacity: u32,
    ladder: &headroom_core::ColdStartLadder,
    ticks: usize,
) -> OfferingTrack {
    let tick_s = sc.tick_s;
    let max = o.price_usd_per_hour.as_f64_lossy();
    let notice = headroom_cloud::sim::INTERRUPTION_NOTICE_S as f64;
    let mut price = vec![max; ticks];
    let mut runnable = vec![true; ticks];
    let mut launchable = vec![true; ticks];
    let mut cap = vec![capacity; ticks];
    let mut faults: Vec<_> = sc.faults.iter().filter(|f| f.offering == o.id).collect();
    faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let mut above_since: Option<f64> = None;
    let (mut market, mut room) = (max, capacity);
    let mut next = 0;
    for k in 0..ticks {
        let t = k as f64 * tick_s;
        while let Some(f) = faults.get(next).filter(|f| f.at_s <= t + 1e-9) {
            match f.kind {
                FaultKind::SpotPrice(p) if o.market == Market::Spot => {
                    market = p.as_f64_lossy();
                    above_since = match (market > max, above_since) {
                        (true, None) => Some(f.at_s),
                        (true, since) => since,
                        (false, _) => None,
                    };
                }
                FaultKind::Capacity(n) | FaultKind::Available(n) => room = n,
                _ => {}
            }
            next += 1;
        }
        price[k] = market;
        launchable[k] = market <= max + 1e-12;
        runnable[k] = above_since.is_none_or(|since| t < since + notice);
        cap[k] = room;
    }
    let mut most = 0;
    let room = (0..ticks)
        .map(|k| {
            if launchable[k] {
                most = most.max(cap[k]);
            }
            if runnable[k] { most } else { 0 }
        })
        .collect();
    OfferingTrack {
        gpus: o.gpus_per_node,
        warm_usd_per_hour: o.warm_usd_per_hour.as_f64_lossy(),
        cold_ticks: ticks_of(ladder.cold_total().as_secs_f64(), tick_s),
        wake_ticks: ticks_of(ladder.from_stopped_total().as_secs_f64(), tick_s),
        price,
        runnable,
        launchable,
        capacity: cap,
        room,
    }
}

impl Supply {
    /// Whether a node may be launched on offering `o` at tick `k` with `occupancy` in use.
    fn can_launch(&self, o: usize, k: usize, occupancy: &[Vec<u32>]) -> bool {
        let t = &self.offerings[o];
        k < self.ticks && t.launchable[k] && occupancy[o][k] < t.capacity[k]
    }

    /// The cheapest way to serve `[s, e)` in one layer: its first climb (a wake of the parked
    /// node for the warm band, or a cold launch; none for the floor), then per tick stay or
    /// move (make before break), forced when the offering stops being runnable. `None` when no
    /// offering could take it (the layer is left out).
    fn plan_interval(
        &self,
        s: usize,
        e: usize,
        kind: Layer,
        parked: usize,
        occupancy: &[Vec<u32>],
    ) -> Option<IntervalPlan> {
        let n = self.offerings.len();
        let len = e - s;
        let first: Vec<(f64, usize)> = (0..n)
            .map(|o| self.first_climb(s, kind, parked, o, occupancy))
            .collect();
        // cost[i][o]: cheapest to be serving on `o` at tick s + i; from[i][o]: the offering at
        // the tick before, and whether a new node was launched for this one.
        let mut cost = vec![vec![f64::INFINITY; n]; len];
        let mut from: Vec<Vec<(usize, bool)>> = vec![vec![(0, false); n]; len];
        for o in 0..n {
            cost[0][o] = first[o].0;
        }
        for i in 1..len {
            let k = s + i;
            for o in 0..n {
                let t = &self.offerings[o];
                if !t.runnable[k] {
                    continue;
                }
                let mut best = (cost[i - 1][o], (o, false));
                let launched = k
                    .checked_sub(t.cold_ticks)
                    .filter(|at| self.can_launch(o, *at, occupancy));
                if let Some(at) = launched {
                    let climb: f64 = t.price[at..k].iter().sum();
                    for (p, before) in cost[i - 1].iter().enumerate() {
                        let via = before + climb;
                        if via < best.0 {
                            best = (via, (p, true));
                        }
                    }
                }
                if best.0.is_finite() {
                    cost[i][o] = best.0 + t.price[k];
                    from[i][o] = best.1;
                }
            }
        }
        let mut o = (0..n).min_by(|a, b| cost[len - 1][*a].total_cmp(&cost[len - 1][*b]))?;
        if cost[len - 1][o].is_infinite() {
            return None;
        }
        let mut on = vec![o; len];
        let mut climbs = Vec::new();
        for i in (1..len).rev() {
            let (prev, launched) = from[i][o];
            if launched {
                let t = &self.offerings[o];
                climbs.push((o, s + i - t.cold_ticks, t.cold_ticks));
            }
            o = prev;
            on[i - 1] = o;
        }
        let climb = first[on[0]].1;
        if climb > 0 {
            climbs.push((on[0], s - climb, climb));
        }
        Some(IntervalPlan {
            serve_from: s,
            on,
            climbs,
        })
    }

    /// The first climb into serving on `o` at tick `s`: its cost (the climb and the first tick
    /// served; infinite when it cannot be made) and how many ticks it climbs.
    fn first_climb(
        &self,
        s: usize,
        kind: Layer,
        parked: usize,
        o: usize,
        occupancy: &[Vec<u32>],
    ) -> (f64, usize) {
        let t = &self.offerings[o];
        let impossible = (f64::INFINITY, 0);
        if !t.runnable.get(s).copied().unwrap_or(false) {
            return impossible;
        }
        let serve = t.price[s];
        let paid = |ticks: usize| (t.price[s - ticks..s].iter().sum::<f64>() + serve, ticks);
        let cold = match s.checked_sub(t.cold_ticks) {
            Some(at) if self.can_launch(o, at, occupancy) => paid(t.cold_ticks),
            _ => impossible,
        };
        match kind {
            Layer::Floor if o == self.home && s == 0 => (serve, 0),
            Layer::Floor => cold,
            Layer::Warm if o == parked && s >= t.wake_ticks => paid(t.wake_ticks),
            Layer::Warm | Layer::Cold => cold,
        }
    }

    /// Adds an interval's plan to the books.
    fn book(&self, layer: u32, plan: &IntervalPlan, costed: &mut Costed) {
        for (i, o) in plan.on.iter().enumerate() {
            let k = plan.serve_from + i;
            let t = &self.offerings[*o];
            costed.serving[k].push((layer, t.gpus));
            costed.usd_per_hour[k] += t.price[k];
            costed.gpus[k] += t.gpus as f64;
        }
        for (o, first, ticks) in &plan.climbs {
            let t = &self.offerings[*o];
            for k in *first..(*first + *ticks).min(self.ticks) {
                costed.starting[k] += 1;
                costed.usd_per_hour[k] += t.price[k];
                costed.gpus[k] += t.gpus as f64;
            }
        }
    }
}
