//! The baselines users run today: the Kubernetes HPA (on GPU utilisation, or on queue depth as
//! an external metric) over a cluster autoscaler, and static capacity. They drive [`SimCloud`]
//! directly as a cluster autoscaler would: one node per replica, the cheapest allowed offering
//! first, the next one after a refusal.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::{
    CloudError, CloudProvider, Instance, InstanceId, InstancePhase, LaunchSpec, ManualClock,
    OwnershipTags, SimCloud,
};
use headroom_core::{Offering, OfferingId};

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

/// A baseline's node layer: one node per replica, as a cluster autoscaler provisions them for
/// pending pods. The cheapest allowed offering first; after a capacity, quota or price refusal,
/// the next one, and the refused one is skipped for the engine's offering cooldown (the cluster
/// autoscaler's backoff). Interrupted or vanished nodes are replaced (the ReplicaSet's pods go
/// pending again).
struct Fleet {
    cloud: Arc<SimCloud>,
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
        order.sort_by_key(|o| o.price_usd_per_hour);
        Fleet {
            cloud,
            order,
            offerings: super::offerings_of(&sc.config),
            cooldown_s: sc.config.engine.offering_cooldown.as_secs_f64(),
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

    /// Launches `n` nodes and skips time until they are ready (before the run starts).
    async fn fill(&mut self, n: u32, clock: &ManualClock) {
        self.reconcile(n, -1.0).await;
        for _ in 0..60 {
            self.refresh();
            if self.counts().0 >= n {
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
            .all_instances()
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
            // The pool in the token: with one token per policy, a second pool's first launch
            // was answered with the first pool's node (idempotency), so it served unpaid.
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
        let serving = self
            .nodes
            .iter()
            .filter_map(|id| match self.phases.get(id) {
                Some((InstancePhase::Ready, gpus)) => Some((id.0.clone(), *gpus)),
                _ => None,
            });
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
/// pool's metric.
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
}

impl HpaDriver {
    pub async fn start(
        sc: &Scenario,
        cloud: Arc<SimCloud>,
        clock: &ManualClock,
        policy: Policy,
    ) -> HpaDriver {
        let mut pools = Vec::new();
        for pool in &sc.pools {
            pools.push(Hpa::start(sc, pool, cloud.clone(), clock, policy).await);
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
