//! The baselines users run today: the Kubernetes HPA (on GPU utilisation, or on queue depth as
//! an external metric) over a cluster autoscaler, static capacity, and what a careful team runs:
//! KEDA on queue depth over Karpenter with an overprovisioning buffer, and EC2 Auto Scaling's
//! predictive scaling under a reactive HPA. They drive [`SimCloud`] directly as a cluster
//! autoscaler would: one node per replica, reserved capacity then the cheapest allowed offering first, the next one
//! after a refusal.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::{
    CloudError, CloudProvider, Instance, InstanceId, InstancePhase, LaunchSpec, ManualClock,
    OwnershipTags, SimCloud,
};
use headroom_core::{Market, Offering, OfferingId};

use super::Policy;
use super::driver::{Books, Control, PolicyDriver, cloud_paying, ready_replicas};
use crate::error::SimError;
use crate::model::{Model, UtilMeter};
use crate::scenario::{Scenario, SimPool};

/// A launch or a cloud refusal of one, for counting fallbacks.
#[derive(Debug, Clone)]
struct LaunchRecord {
    t_s: f64,
    offering: OfferingId,
    refused: bool,
}

/// Karpenter's unavailable-offerings cache: an offering that refused a launch is not tried again
/// for 3 minutes.
const KARPENTER_REFUSAL_CACHE_S: f64 = 180.0;
/// `consolidateAfter` with `WhenEmpty`: a node with no pod is terminated after 30 s empty.
const KARPENTER_CONSOLIDATE_AFTER_S: f64 = 30.0;

/// What Karpenter's node layer adds to the cluster autoscaler's.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Karpenter {
    /// Pause pods (lowest priority, one node each) that real pods preempt at once.
    buffer: u32,
    consolidate_after_s: f64,
}

/// A baseline's node layer: one node per replica, as a cluster autoscaler provisions them for
/// pending pods. The cheapest allowed offering first; after a capacity, quota or price refusal,
/// the next one, and the refused one is skipped for the engine's offering cooldown (the cluster
/// autoscaler's backoff; Karpenter's 3-minute cache). Interrupted or vanished nodes are replaced
/// (the ReplicaSet's pods go pending again).
struct Fleet {
    cloud: Arc<SimCloud>,
    /// Karpenter's buffer and consolidation; none for the cluster autoscaler (nodes scaled in
    /// are terminated at once).
    karpenter: Option<Karpenter>,
    /// Karpenter: when each empty node emptied.
    empty_since: HashMap<InstanceId, f64>,
    order: Vec<Offering>,
    offerings: HashMap<OfferingId, Offering>,
    cooldown_s: f64,
    backoff: HashMap<OfferingId, f64>,
    nodes: Vec<InstanceId>,
    phases: HashMap<InstanceId, (InstancePhase, u32)>,
    seq: u64,
    name: &'static str,
    pool: SimPool,
    refusals: BTreeMap<String, u64>,
    log: Vec<LaunchRecord>,
}

impl Fleet {
    fn new(sc: &Scenario, pool: &SimPool, cloud: Arc<SimCloud>, policy: Policy) -> Fleet {
        let mut order: Vec<Offering> = pool
            .spec
            .offerings
            .iter()
            .filter_map(|id| sc.config.offering(id).cloned())
            .collect();
        // A node autoscaler (the cluster autoscaler, Karpenter) adds nodes to one cluster on one
        // cloud: the baselines keep to the cloud of the pool's first offering.
        let home = order.first().map(|o| o.provider);
        order.retain(|o| Some(o.provider) == home);
        // Reserved capacity first, as Karpenter and an open EC2 capacity reservation do: it is
        // paid for whether used or not. Then the cheapest.
        order.sort_by_key(|o| (o.market != Market::Reserved, o.price_usd_per_hour));
        let karpenter = (policy == Policy::KedaKarpenter).then_some(Karpenter {
            buffer: sc.hpa.overprovision,
            consolidate_after_s: KARPENTER_CONSOLIDATE_AFTER_S,
        });
        Fleet {
            cloud,
            karpenter,
            empty_since: HashMap::new(),
            order,
            offerings: super::offerings_of(&sc.config),
            cooldown_s: if karpenter.is_some() {
                KARPENTER_REFUSAL_CACHE_S
            } else {
                sc.config.engine.offering_cooldown.as_secs_f64()
            },
            backoff: HashMap::new(),
            nodes: Vec::new(),
            phases: HashMap::new(),
            seq: 0,
            name: policy.as_str(),
            pool: pool.clone(),
            refusals: BTreeMap::new(),
            log: Vec::new(),
        }
    }

    /// Pause pods holding a node each, beside the real ones.
    fn buffer(&self) -> u32 {
        self.karpenter.map_or(0, |k| k.buffer)
    }

    /// Launches `n` nodes (and the buffer's) and skips time until they are ready (before the run
    /// starts).
    async fn fill(&mut self, n: u32, clock: &ManualClock) {
        self.reconcile(n, -1.0).await;
        for _ in 0..60 {
            self.refresh();
            if self.counts().0 >= n + self.buffer() {
                break;
            }
            clock.advance(Duration::from_secs(30));
        }
        self.refusals.clear();
        self.log.clear();
    }

    fn refresh(&mut self) {
        let by_id: HashMap<InstanceId, Instance> = self
            .cloud
            .instances_in_play()
            .into_iter()
            .map(|i| (i.id.clone(), i))
            .collect();
        let gpus = |o: &OfferingId| self.offerings.get(o).map_or(1, |x| x.gpus_per_node);
        self.phases = self
            .nodes
            .iter()
            .filter_map(|id| {
                by_id
                    .get(id)
                    .map(|i| (id.clone(), (i.phase, gpus(&i.offering))))
            })
            .collect();
        // Gone (interrupted, terminated): the pod is pending again and needs a new node.
        self.nodes.retain(|id| {
            self.phases.get(id).is_some_and(|(p, _)| {
                !matches!(p, InstancePhase::Terminated | InstancePhase::Interrupted)
            })
        });
    }

    /// (ready, not yet ready) nodes.
    fn counts(&self) -> (u32, u32) {
        let ready = self
            .nodes
            .iter()
            .filter(|id| matches!(self.phases.get(*id), Some((InstancePhase::Ready, _))))
            .count() as u32;
        (ready, self.nodes.len() as u32 - ready)
    }

    async fn reconcile(&mut self, want: u32, t: f64) {
        if let Some(k) = self.karpenter {
            return self.reconcile_karpenter(want, t, k).await;
        }
        self.refresh();
        let have = self.nodes.len() as u32;
        if have > want {
            // Remove nodes that are not ready yet first (the newest), then the newest ready ones.
            let mut order: Vec<InstanceId> = self.nodes.clone();
            order.sort_by_key(|id| {
                let ready = matches!(self.phases.get(id), Some((InstancePhase::Ready, _)));
                (ready, std::cmp::Reverse(id.clone()))
            });
            for id in order.into_iter().take((have - want) as usize) {
                let _ = self.cloud.terminate(&id).await;
                self.nodes.retain(|n| n != &id);
            }
        }
        for _ in have..want {
            if !self.launch_one(t).await {
                break;
            }
        }
        self.refresh();
    }

    /// Karpenter: `want` pods and the buffer's pause pods bind to nodes, ready ones first (a real
    /// pod preempts a pause pod on a ready node at once, and the pause pod goes pending); the
    /// nodes left empty are terminated once empty for `consolidate_after_s`; pending pods get
    /// new nodes.
    async fn reconcile_karpenter(&mut self, want: u32, t: f64, k: Karpenter) {
        self.refresh();
        let pods = want + k.buffer;
        let empty: Vec<InstanceId> = self
            .by_readiness()
            .into_iter()
            .skip(pods as usize)
            .collect();
        self.empty_since.retain(|id, _| empty.contains(id));
        for id in &empty {
            self.empty_since.entry(id.clone()).or_insert(t);
        }
        for id in consolidated(&self.empty_since, t, k.consolidate_after_s) {
            let _ = self.cloud.terminate(&id).await;
            self.nodes.retain(|n| n != &id);
            self.empty_since.remove(&id);
        }
        for _ in self.nodes.len() as u32..pods {
            if !self.launch_one(t).await {
                break;
            }
        }
        self.refresh();
    }

    /// The nodes, ready ones first, each group in launch order: the order pods fill them.
    fn by_readiness(&self) -> Vec<InstanceId> {
        let mut order = self.nodes.clone();
        order.sort_by_key(|id| !matches!(self.phases.get(id), Some((InstancePhase::Ready, _))));
        order
    }

    async fn launch_one(&mut self, t: f64) -> bool {
        for offering in self.order.clone() {
            if self
                .backoff
                .get(&offering.id)
                .is_some_and(|until| *until > t)
            {
                continue;
            }
            self.seq += 1;
            // The pool in the token: every pool's fleet counts from 1 on one cloud, and a
            // repeated token is the same launch (the cloud would hand back another pool's node).
            let node = format!("{}-{}-{}", self.name, self.pool.spec.name, self.seq);
            let spec = LaunchSpec {
                offering: offering.clone(),
                client_token: node.clone(),
                tags: OwnershipTags {
                    cluster: self.name.to_string(),
                    pool: self.pool.spec.name.to_string(),
                    node,
                    request: None,
                },
                user_data: None,
            };
            match self.cloud.launch(&spec).await {
                Ok(i) => {
                    self.nodes.push(i.id);
                    self.log.push(LaunchRecord {
                        t_s: t,
                        offering: offering.id.clone(),
                        refused: false,
                    });
                    return true;
                }
                Err(e) => {
                    let class = e.class();
                    *self
                        .refusals
                        .entry(format!("cloud_{}", class.as_str()))
                        .or_insert(0) += 1;
                    if let CloudError::Refused { .. } = e
                        && class.falls_back()
                    {
                        self.log.push(LaunchRecord {
                            t_s: t,
                            offering: offering.id.clone(),
                            refused: true,
                        });
                        self.backoff
                            .insert(offering.id.clone(), t + self.cooldown_s);
                        continue;
                    }
                    return false;
                }
            }
        }
        false
    }

    fn control(&self, desired: u32) -> Control {
        let (_, unready) = self.counts();
        // Real pods on the first ready nodes; the rest hold pause pods or nothing.
        let serving = self
            .nodes
            .iter()
            .filter_map(|id| match self.phases.get(id) {
                Some((InstancePhase::Ready, gpus)) => Some((id.0.clone(), *gpus)),
                _ => None,
            })
            .take(desired as usize);
        Control {
            desired,
            starting: unready,
            ready: ready_replicas(&self.cloud, &self.pool, serving),
            admission: Vec::new(),
            // A cluster autoscaler has no smaller-model fallback.
            handed_to_fallback: 0,
        }
    }

    fn paying(&self) -> (f64, f64) {
        cloud_paying(&self.cloud, self.pool.spec.name.as_str(), &self.offerings)
    }

    /// Adds this fleet's refusals and fallbacks to `books`.
    fn add_books(&self, books: &mut Books) {
        for (reason, n) in &self.refusals {
            *books.refusals.entry(reason.clone()).or_insert(0) += n;
        }
        for (kind, n) in fallbacks(&self.log, &self.offerings, self.cooldown_s) {
            *books.fallbacks.entry(kind).or_insert(0) += n;
        }
    }
}

/// The empty nodes due for consolidation at `t`: empty since at least `after_s` ago.
fn consolidated(empty_since: &HashMap<InstanceId, f64>, t: f64, after_s: f64) -> Vec<InstanceId> {
    let mut due: Vec<InstanceId> = empty_since
        .iter()
        .filter(|(_, since)| t - **since + 1e-9 >= after_s)
        .map(|(id, _)| id.clone())
        .collect();
    // Sorted: the order nodes go in must not depend on a hash map's.
    due.sort();
    due
}

/// The books of every pool's fleet together.
fn books_of<'a>(fleets: impl Iterator<Item = &'a Fleet>) -> Books {
    let mut books = Books::default();
    for fleet in fleets {
        fleet.add_books(&mut books);
    }
    books
}

/// Launches that landed on another offering within `cooldown` of a cloud refusal, by the biggest
/// thing that changed of region, instance type and zone, and market too when it changed.
fn fallbacks(
    log: &[LaunchRecord],
    offerings: &HashMap<OfferingId, Offering>,
    cooldown_s: f64,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for launch in log.iter().filter(|l| !l.refused) {
        let refused = log.iter().rev().find(|r| {
            r.refused
                && r.offering != launch.offering
                && r.t_s <= launch.t_s + 1e-9
                && launch.t_s - r.t_s <= cooldown_s
        });
        let (Some(r), Some(to)) = (refused, offerings.get(&launch.offering)) else {
            continue;
        };
        let Some(from) = offerings.get(&r.offering) else {
            continue;
        };
        let place = if from.region != to.region {
            Some("region")
        } else if from.instance_type != to.instance_type {
            Some("instance_type")
        } else if from.zone != to.zone {
            Some("zone")
        } else {
            None
        };
        // As the engine counts them: the place, and the market too when it changed.
        let market = (from.market != to.market || place.is_none()).then_some("market");
        for kind in place.into_iter().chain(market) {
            *out.entry(kind.to_string()).or_insert(0) += 1;
        }
    }
    out
}

/// Static capacity: each pool's floor, always.
pub struct StaticDriver {
    /// Per simulated pool: its fleet and its floor.
    fleets: Vec<(Fleet, u32)>,
}

impl StaticDriver {
    pub async fn start(sc: &Scenario, cloud: Arc<SimCloud>, clock: &ManualClock) -> StaticDriver {
        let mut fleets = Vec::new();
        for pool in &sc.pools {
            let mut fleet = Fleet::new(sc, pool, cloud.clone(), Policy::Static);
            fleet.fill(pool.spec.min_replicas, clock).await;
            fleets.push((fleet, pool.spec.min_replicas));
        }
        StaticDriver { fleets }
    }
}

impl PolicyDriver for StaticDriver {
    fn cloud(&self) -> Option<&SimCloud> {
        self.fleets.first().map(|(f, _)| f.cloud.as_ref())
    }

    async fn control(
        &mut self,
        _sc: &Scenario,
        t: f64,
        _models: &[Model<'_>],
    ) -> Result<Vec<Control>, SimError> {
        let mut out = Vec::new();
        for (fleet, replicas) in &mut self.fleets {
            fleet.reconcile(*replicas, t).await;
            out.push(fleet.control(*replicas));
        }
        Ok(out)
    }

    fn paying(&self, _t: f64) -> Vec<(f64, f64)> {
        self.fleets.iter().map(|(f, _)| f.paying()).collect()
    }

    async fn books(&self, _end_s: f64) -> Result<Books, SimError> {
        Ok(books_of(self.fleets.iter().map(|(f, _)| f)))
    }
}

/// The Kubernetes HPA with its default behaviour, one per simulated pool, each on its own
/// pool's metric. `keda-karpenter` is the queue HPA (KEDA feeds the HPA; no scale-up
/// stabilisation, the 300 s scale-down window) over Karpenter's node layer; `predictive` is the
/// queue HPA whose floor a seasonal forecast raises.
pub struct HpaDriver {
    pools: Vec<Hpa>,
}

/// One pool's HPA: a sync every 15 s; `ceil(current × metric / target)` unless within the 10 %
/// tolerance; scale-up of at most max(100 %, 4 pods) per sync; scale-down to the highest
/// recommendation of the last 300 s.
struct Hpa {
    fleet: Fleet,
    policy: Policy,
    spec: u32,
    min: u32,
    max: u32,
    target: f64,
    tolerance: f64,
    sync_s: f64,
    down_window_s: f64,
    next_sync: f64,
    recommendations: VecDeque<(f64, u32)>,
    meter: UtilMeter,
    /// `predictive`: the forecast that sets the minimum.
    forecast: Option<Forecast>,
}

impl HpaDriver {
    pub async fn start(
        sc: &Scenario,
        cloud: Arc<SimCloud>,
        clock: &ManualClock,
        policy: Policy,
    ) -> HpaDriver {
        let mut pools = Vec::new();
        for (i, pool) in sc.pools.iter().enumerate() {
            let mut hpa = Hpa::start(sc, pool, cloud.clone(), clock, policy).await;
            if policy == Policy::Predictive {
                hpa.forecast = Some(Forecast::new(sc, pool, i as u8));
            }
            pools.push(hpa);
        }
        HpaDriver { pools }
    }
}

impl Hpa {
    async fn start(
        sc: &Scenario,
        pool: &SimPool,
        cloud: Arc<SimCloud>,
        clock: &ManualClock,
        policy: Policy,
    ) -> Hpa {
        let mut fleet = Fleet::new(sc, pool, cloud, policy);
        fleet.fill(pool.spec.min_replicas, clock).await;
        Hpa {
            fleet,
            policy,
            spec: pool.spec.min_replicas,
            min: pool.spec.min_replicas,
            max: pool.spec.max_replicas,
            target: if policy == Policy::HpaUtilization {
                sc.hpa.target_utilization
            } else {
                sc.hpa.target_queue_per_pod
            },
            tolerance: sc.hpa.tolerance,
            sync_s: sc.hpa.sync.as_secs_f64(),
            down_window_s: sc.hpa.scale_down_stabilization.as_secs_f64(),
            // The first sync reads a full window.
            next_sync: sc.hpa.sync.as_secs_f64(),
            recommendations: VecDeque::new(),
            meter: UtilMeter::default(),
            forecast: None,
        }
    }
    fn due(&self, t: f64) -> bool {
        // At t = 0 the exporter's window starts with the run.
        t == 0.0 || t + 1e-9 >= self.next_sync
    }

    fn sync(&mut self, t: f64, model: &Model<'_>, unready: u32) {
        let utils = self.meter.read(model, t);
        if t + 1e-9 < self.next_sync {
            return;
        }
        self.next_sync = t + self.sync_s;
        let current = self.spec;
        let desired = match self.policy {
            Policy::HpaUtilization => {
                utilization_replicas(current, &utils, unready, self.target, self.tolerance)
            }
            _ => {
                // An External metric with an AverageValue target: the total over the target.
                let usage = model.waiting() as f64;
                let ratio = usage / (self.target * current.max(1) as f64);
                if (ratio - 1.0).abs() <= self.tolerance {
                    current
                } else {
                    (usage / self.target).ceil() as u32
                }
            }
        };
        self.recommendations.push_back((t, desired));
        while self
            .recommendations
            .front()
            .is_some_and(|(at, _)| t - at > self.down_window_s)
        {
            self.recommendations.pop_front();
        }
        let next = if desired > current {
            desired.min((current * 2).max(current + 4))
        } else {
            let stabilized = self
                .recommendations
                .iter()
                .map(|r| r.1)
                .max()
                .unwrap_or(desired);
            stabilized.min(current)
        };
        self.spec = next.clamp(self.min, self.max);
    }
}

impl PolicyDriver for HpaDriver {
    fn cloud(&self) -> Option<&SimCloud> {
        self.pools.first().map(|h| h.fleet.cloud.as_ref())
    }

    async fn control(
        &mut self,
        _sc: &Scenario,
        t: f64,
        models: &[Model<'_>],
    ) -> Result<Vec<Control>, SimError> {
        let mut out = Vec::new();
        for (hpa, model) in self.pools.iter_mut().zip(models) {
            if hpa.due(t) {
                let unready = hpa.fleet.counts().1;
                hpa.sync(t, model, unready);
            }
            if let Some(forecast) = &mut hpa.forecast {
                // Predictive scaling sets the minimum; the reactive HPA adds to it.
                forecast.observe(model);
                let floor = forecast.replicas_at(t);
                hpa.spec = hpa.spec.max(floor.min(hpa.max));
            }
            hpa.fleet.reconcile(hpa.spec, t).await;
            out.push(hpa.fleet.control(hpa.spec));
        }
        Ok(out)
    }

    fn paying(&self, _t: f64) -> Vec<(f64, f64)> {
        self.pools.iter().map(|h| h.fleet.paying()).collect()
    }

    async fn books(&self, _end_s: f64) -> Result<Books, SimError> {
        Ok(books_of(self.pools.iter().map(|h| &h.fleet)))
    }
}

/// How a forecast looks back: a (compressed) day of `day_s` in 24 hours, a week of seven days.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Season {
    pub day_s: f64,
}

impl Season {
    pub fn hour_s(self) -> f64 {
        self.day_s / 24.0
    }

    /// The hour whose load forecasts instant `at_s`, seen at `now_s`: the same hour a week
    /// earlier when the run holds it, else a day earlier; none until that hour is over. A run
    /// shorter than a day has no history: its forecast is always none.
    pub fn source_hour(self, at_s: f64, now_s: f64) -> Option<usize> {
        let hour = self.hour_s();
        let over = (now_s / hour).floor();
        [7.0 * self.day_s, self.day_s]
            .into_iter()
            .map(|lag| at_s - lag)
            .filter(|s| *s >= 0.0)
            .map(|s| (s / hour).floor())
            .find(|k| *k < over)
            .map(|k| k as usize)
    }
}

/// Replicas that serve `work` arriving over an hour of `hour_s`, each doing `replica_work_per_s`
/// at most, at the `target` utilisation (the target tracking policy's).
pub fn forecast_replicas(work: f64, hour_s: f64, replica_work_per_s: f64, target: f64) -> u32 {
    let load = work / hour_s / (replica_work_per_s * target);
    if load.is_finite() && load > 0.0 {
        load.ceil() as u32
    } else {
        0
    }
}

/// EC2 Auto Scaling predictive scaling over one pool: the work that arrived per hour, and the
/// capacity the same hour a day (or a week) earlier needed, launched one cold start ahead.
struct Forecast {
    season: Season,
    /// The pool's cold start: how far ahead capacity is launched (the scheduling buffer).
    lead_s: f64,
    pool: u8,
    service: crate::model::Service,
    target: f64,
    /// Work that arrived in each hour so far.
    work: Vec<f64>,
    /// Requests of the run read so far.
    seen: usize,
}

impl Forecast {
    fn new(sc: &Scenario, pool: &SimPool, index: u8) -> Forecast {
        Forecast {
            season: Season {
                day_s: sc.hpa.day.as_secs_f64(),
            },
            lead_s: pool.spec.ladder.cold_total().as_secs_f64(),
            pool: index,
            service: pool.service,
            target: sc.hpa.target_utilization,
            work: Vec::new(),
            seen: 0,
        }
    }

    /// Records the work of the pool's requests that arrived since the last look.
    fn observe(&mut self, model: &Model<'_>) {
        let hour = self.season.hour_s();
        let upto = model.next_arrival();
        for r in &model.requests()[self.seen.min(upto)..upto] {
            if r.pool != self.pool {
                continue;
            }
            let k = (r.at_s / hour).floor().max(0.0) as usize;
            if self.work.len() <= k {
                self.work.resize(k + 1, 0.0);
            }
            self.work[k] += self.service.work(r);
        }
        self.seen = upto;
    }

    /// The minimum the forecast sets at `t`: what the hour one cold start ahead needed a day
    /// (or a week) before; 0 without history.
    fn replicas_at(&self, t: f64) -> u32 {
        self.season.source_hour(t + self.lead_s, t).map_or(0, |k| {
            forecast_replicas(
                self.work.get(k).copied().unwrap_or(0.0),
                self.season.hour_s(),
                self.service.replica_capacity(),
                self.target,
            )
        })
    }
}

/// The HPA's resource-metric algorithm: the average over ready pods with a sample; when scaling
/// up, pods not ready yet and pods without a sample count as 0 %, when scaling down pods without
/// a sample count as 100 %; no change if that flips the direction or lands within tolerance.
pub fn utilization_replicas(
    current: u32,
    ready_samples: &[Option<f64>],
    unready: u32,
    target: f64,
    tolerance: f64,
) -> u32 {
    let samples: Vec<f64> = ready_samples.iter().flatten().copied().collect();
    let missing = (ready_samples.len() - samples.len()) as u32;
    if samples.is_empty() {
        return current;
    }
    let sum: f64 = samples.iter().sum();
    let ratio = sum / samples.len() as f64 / target;
    let up_with_unready = unready > 0 && ratio > 1.0;
    if !up_with_unready && missing == 0 {
        if (ratio - 1.0).abs() <= tolerance {
            return current;
        }
        return (ratio * samples.len() as f64).ceil() as u32;
    }
    let mut n = samples.len() as f64 + missing as f64;
    let mut new_sum = sum;
    if ratio < 1.0 {
        new_sum += missing as f64;
    }
    if up_with_unready {
        n += unready as f64;
    }
    let new_ratio = new_sum / n / target;
    if (new_ratio - 1.0).abs() <= tolerance
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return current;
    }
    let replicas = (new_ratio * n).ceil() as u32;
    if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
        return current;
    }
    replicas
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrivals::Request;
    use headroom_core::ErrorClass;

    /// A fleet of `policy` on a fresh cloud of the `stockout-fallback` scenario (three offerings)
    /// with a buffer of `buffer` pause pods, and its clock.
    fn fleet(policy: Policy, buffer: u32) -> (Fleet, Arc<ManualClock>) {
        let mut sc = crate::scenario::load("stockout-fallback").unwrap();
        sc.hpa.overprovision = buffer;
        let clock = Arc::new(ManualClock::new(super::super::epoch()));
        let cloud = Arc::new(headroom_engine::sim_cloud_for(&sc.config, clock.clone()));
        (Fleet::new(&sc, &sc.pools[0], cloud, policy), clock)
    }

    /// The offering each of the fleet's nodes runs on, in launch order.
    fn offerings_of_nodes(f: &Fleet) -> Vec<OfferingId> {
        let all = f.cloud.all_instances();
        f.nodes
            .iter()
            .filter_map(|id| all.iter().find(|i| &i.id == id))
            .map(|i| i.offering.clone())
            .collect()
    }

    #[tokio::test]
    async fn karpenter_skips_a_refused_offering_for_three_minutes_then_tries_it_again() {
        let (mut f, _clock) = fleet(Policy::KedaKarpenter, 0);
        let (cheapest, next) = (f.order[0].id.clone(), f.order[1].id.clone());
        f.cloud
            .inject_launch_fault(&cheapest, ErrorClass::Capacity, 1);
        f.reconcile(1, 10.0).await;
        assert_eq!(offerings_of_nodes(&f), std::slice::from_ref(&next));
        // 179 s after the refusal the cheapest is not tried (it would launch now): the next is.
        f.reconcile(2, 189.0).await;
        assert_eq!(offerings_of_nodes(&f), [next.clone(), next.clone()]);
        assert_eq!(f.refusals.values().sum::<u64>(), 1);
        // Three minutes on, it is tried again and takes the launch.
        f.reconcile(3, 190.0).await;
        assert_eq!(offerings_of_nodes(&f), [next.clone(), next, cheapest]);
    }

    #[tokio::test]
    async fn karpenter_terminates_an_empty_node_after_30_s_and_reuses_it_before() {
        let (mut f, clock) = fleet(Policy::KedaKarpenter, 0);
        f.reconcile(3, 0.0).await;
        clock.advance(Duration::from_secs(300));
        f.reconcile(3, 300.0).await;
        assert_eq!(f.counts(), (3, 0));
        // Scaled in to one pod: two nodes empty, kept (and paid) for now.
        f.reconcile(1, 310.0).await;
        assert_eq!(f.counts(), (3, 0));
        assert_eq!(f.control(1).ready.len(), 1, "only pods serve");
        // A pod back within the window lands on an empty node at once: no launch.
        f.reconcile(2, 320.0).await;
        assert_eq!(f.counts(), (3, 0));
        f.reconcile(1, 330.0).await;
        // The node empty since 310 s goes at 340 s; the one empty since 330 s stays until 360 s.
        f.reconcile(1, 339.0).await;
        assert_eq!(f.counts(), (3, 0));
        f.reconcile(1, 340.0).await;
        assert_eq!(f.counts(), (2, 0));
        f.reconcile(1, 360.0).await;
        assert_eq!(f.counts(), (1, 0));
        assert_eq!(f.control(1).ready.len(), 1);
    }

    #[tokio::test]
    async fn the_overprovisioning_buffer_is_ready_capacity_when_a_burst_starts() {
        let (mut karpenter, k_clock) = fleet(Policy::KedaKarpenter, 2);
        karpenter.fill(2, &k_clock).await;
        assert_eq!(karpenter.counts(), (4, 0), "two pods and two pause pods");
        assert_eq!(karpenter.control(2).ready.len(), 2);
        // The burst asks for four: two preempt the pause pods and serve now; the buffer relaunches.
        karpenter.reconcile(4, 0.0).await;
        let c = karpenter.control(4);
        assert_eq!((c.ready.len(), c.starting), (4, 2));

        let (mut autoscaler, a_clock) = fleet(Policy::HpaQueue, 2);
        autoscaler.fill(2, &a_clock).await;
        autoscaler.reconcile(4, 0.0).await;
        let c = autoscaler.control(4);
        assert_eq!((c.ready.len(), c.starting), (2, 2), "a cold start away");
    }

    #[test]
    fn the_forecast_looks_a_week_back_when_the_run_holds_it_else_a_day_and_never_ahead() {
        let season = Season { day_s: 240.0 };
        assert_eq!(season.hour_s(), 10.0);
        // The same hour a day earlier.
        assert_eq!(season.source_hour(250.0, 245.0), Some(1));
        // Less than a day into the run: no history.
        assert_eq!(season.source_hour(235.0, 100.0), None);
        // A week in: the same hour a week earlier (not the day before).
        assert_eq!(season.source_hour(1700.0, 1690.0), Some(2));
        // An hour not over yet is no forecast (a lead longer than the day).
        let short = Season { day_s: 24.0 };
        assert_eq!(short.source_hour(40.0, 20.0), Some(16));
        assert_eq!(short.source_hour(50.0, 20.0), None);
        // 7000 work over a 10 s hour at 100 a replica and 70 %: 10 replicas.
        assert_eq!(forecast_replicas(7000.0, 10.0, 100.0, 0.7), 10);
        assert_eq!(forecast_replicas(0.0, 10.0, 100.0, 0.7), 0);
    }

    #[test]
    fn predictive_scaling_launches_ahead_of_a_rise_seen_the_day_before() {
        let mut sc = crate::scenario::load("stockout-fallback").unwrap();
        sc.hpa.day = Duration::from_secs(2400);
        let pool = sc.pools[0].clone();
        // Day 0: a rise in hour 10 (1000–1100 s) only.
        let requests: Vec<Request> = (0..2000)
            .map(|i| Request {
                at_s: 1000.0 + f64::from(i) * 0.05,
                input_tokens: 500,
                output_tokens: 100,
                tier: 0,
                pool: 0,
            })
            .collect();
        let mut model = Model::new(&requests, sc.queue.clone(), false);
        let mut forecast = Forecast::new(&sc, &pool, 0);
        let lead = forecast.lead_s;
        assert!(lead > 0.0 && lead < 2400.0 - 200.0, "{lead}");
        let work: f64 = requests.iter().map(|r| pool.service.work(r)).sum();
        let expected = forecast_replicas(
            work,
            100.0,
            pool.service.replica_capacity(),
            sc.hpa.target_utilization,
        );
        assert!(expected > 2, "{expected}");
        let mut now = 0.0;
        let mut at = |t: f64| {
            model.advance(now, t);
            now = t;
            forecast.observe(&model);
            forecast.replicas_at(t)
        };
        // Day 0 has no history, even one cold start before the rise.
        assert_eq!(at(1000.0 - lead), 0);
        // Day 1: nothing an hour and a cold start before; the rise's replicas one cold start before.
        assert_eq!(at(3300.0 - lead), 0);
        assert_eq!(at(3400.0 - lead), expected);
        assert_eq!(at(3500.0 - lead), 0);
    }

    #[test]
    fn utilisation_hpa_counts_unready_pods_as_idle_when_scaling_up() {
        // Eight saturated pods and nothing starting: 8 × 1.0 / 0.7 → 12.
        let busy = vec![Some(1.0); 8];
        assert_eq!(utilization_replicas(8, &busy, 0, 0.7, 0.1), 12);
        // The four asked for are booting: they count as 0 %, so 12 × (8/12) / 0.7 → 12 again.
        assert_eq!(utilization_replicas(12, &busy, 4, 0.7, 0.1), 12);
        // Within tolerance: no change.
        let ok = vec![Some(0.72); 8];
        assert_eq!(utilization_replicas(8, &ok, 0, 0.7, 0.1), 8);
    }
}
