//! Runs a scenario under each policy in virtual time and measures what users feel and pay.
//!
//! Every policy meets the same requests, the same serving model and its own copy of the same
//! simulated cloud (same offerings, ladder, capacity, faults and seed). `headroom` is the real
//! [`Engine`] — controller, planner, governor, executor and a SQLite ledger — ticked on a
//! [`ManualClock`] with signals pushed from the model, exactly as `headroom demo` drives it. The
//! baselines drive [`SimCloud`] directly as a cluster autoscaler would: one node per replica,
//! the cheapest allowed offering first, the next one after a refusal.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::{
    Clock, CloudError, CloudProvider, Instance, InstanceId, InstancePhase, LaunchSpec, ManualClock,
    OwnershipTags, SimCloud,
};
use headroom_core::{NodeState, Offering, OfferingId, Timestamp};
use headroom_engine::{Config, Engine, SignalInput, sim_cloud_for};
use headroom_ledger::{Ledger, SqliteLedger};
use serde::Serialize;

use crate::arrivals::Request;
use crate::error::SimError;
use crate::model::{Model, UtilMeter};
use crate::scenario::{Fault, FaultKind, Scenario};

/// The policies a run compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    Headroom,
    HpaUtilization,
    HpaQueue,
    Static,
    Oracle,
}

impl Policy {
    pub const ALL: [Policy; 5] = [
        Policy::Headroom,
        Policy::HpaUtilization,
        Policy::HpaQueue,
        Policy::Static,
        Policy::Oracle,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Headroom => "headroom",
            Policy::HpaUtilization => "hpa-utilization",
            Policy::HpaQueue => "hpa-queue",
            Policy::Static => "static",
            Policy::Oracle => "oracle",
        }
    }

    pub fn parse(s: &str) -> Result<Policy, SimError> {
        Policy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| SimError::UnknownPolicy(s.to_string()))
    }
}

/// One policy's results, in the shape `headroom simulate` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyReport {
    pub policy: String,
    pub requests_total: u64,
    pub requests_within_slo: u64,
    pub slo_attainment: f64,
    pub queue_delay_minutes: f64,
    pub shed: u64,
    pub gpu_hours: f64,
    pub idle_gpu_hours: f64,
    pub cost_usd: f64,
    pub cost_vs_oracle: f64,
    pub refusals: BTreeMap<String, u64>,
    pub fallbacks: BTreeMap<String, u64>,
    pub scale_direction_changes: u32,
    pub peak_queue_depth: u64,
    pub peak_ready_replicas: u32,
}

/// One tick of one policy, for `--timeseries` and `--plot`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub queue_depth: u64,
    pub desired: u32,
    pub ready: u32,
    pub starting: u32,
    pub cost_usd: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OracleCost {
    pub cost_usd: f64,
}

/// Everything a run produced. `wall_time_s` and `simulated_requests_per_s` are filled in by the
/// caller, which may read the wall clock; nothing here does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub policies: Vec<PolicyReport>,
    pub oracle: OracleCost,
    pub wall_time_s: f64,
    pub simulated_requests_per_s: f64,
    #[serde(skip)]
    pub series: Vec<(String, Vec<Sample>)>,
}

impl Report {
    /// Requests simulated over all policies (what `simulated_requests_per_s` divides).
    pub fn simulated_requests(&self) -> u64 {
        self.policies.iter().map(|p| p.requests_total).sum()
    }
}

/// Where virtual time starts. Fixed, so runs replay exactly.
fn epoch() -> Timestamp {
    chrono::DateTime::from_timestamp(1_767_225_600, 0).unwrap_or_default()
}

fn at(t_s: f64) -> Timestamp {
    epoch() + chrono::Duration::milliseconds((t_s * 1000.0).round() as i64)
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// The run's requests: the trace if given, else the scenario's synthetic streams.
pub fn requests_for(sc: &Scenario, trace: Option<Vec<Request>>, seed: u64) -> (Vec<Request>, f64) {
    match trace {
        Some(reqs) => {
            // A trace runs to its last arrival, plus a minute to drain.
            let end = reqs.last().map_or(0.0, |r| r.at_s);
            let duration = ((end + 60.0) / sc.tick_s).ceil() * sc.tick_s;
            (reqs, duration)
        }
        None => (
            crate::arrivals::generate(&sc.streams, sc.duration_s, seed),
            sc.duration_s,
        ),
    }
}

/// Runs `policies` on the scenario. `seed` overrides the scenario's.
pub async fn run(
    sc: &Scenario,
    trace: Option<Vec<Request>>,
    policies: &[Policy],
    seed: Option<u64>,
) -> Result<Report, SimError> {
    let seed = seed.unwrap_or(sc.seed);
    let (requests, duration_s) = requests_for(sc, trace, seed);
    let oracle = OraclePlan::new(sc, &requests, duration_s);
    let oracle_cost = oracle.cost_usd();
    let mut reports = Vec::new();
    let mut series = Vec::new();
    for &policy in policies {
        let (mut report, samples) =
            run_policy(sc, &requests, duration_s, policy, seed, &oracle).await?;
        report.cost_vs_oracle = if oracle_cost > 0.0 {
            round6(report.cost_usd / oracle_cost)
        } else {
            0.0
        };
        reports.push(report);
        series.push((policy.as_str().to_string(), samples));
    }
    Ok(Report {
        scenario: sc.name.clone(),
        seed,
        policies: reports,
        oracle: OracleCost {
            cost_usd: round6(oracle_cost),
        },
        wall_time_s: 0.0,
        simulated_requests_per_s: 0.0,
        series,
    })
}

/// A launch or a cloud refusal of one, for counting fallbacks.
#[derive(Debug, Clone)]
struct LaunchRecord {
    t_s: f64,
    offering: OfferingId,
    refused: bool,
}

/// What a policy's control step leaves for the model and the books.
struct Control {
    desired: u32,
    starting: u32,
    ready: BTreeMap<String, u32>,
    /// Priorities Headroom's admission answer sheds now (baselines have no shedder).
    shed: Vec<headroom_core::Priority>,
}

enum Driver {
    Engine(Box<EngineDriver>),
    Hpa(Box<Hpa>, Fleet),
    Static(Fleet),
    Oracle,
}

async fn run_policy(
    sc: &Scenario,
    requests: &[Request],
    duration_s: f64,
    policy: Policy,
    seed: u64,
    oracle: &OraclePlan,
) -> Result<(PolicyReport, Vec<Sample>), SimError> {
    let clock = Arc::new(ManualClock::new(epoch()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let mut config = sc.config.clone();
    config.sim.seed = seed;
    config.sim.state_file = None;
    let cloud = Arc::new(sim_cloud_for(&config, dyn_clock.clone()));
    let prices: HashMap<OfferingId, Offering> = config
        .offerings
        .iter()
        .map(|o| (o.offering.id.clone(), o.offering.clone()))
        .collect();

    let mut driver = match policy {
        Policy::Headroom => Driver::Engine(Box::new(
            EngineDriver::start(sc, &config, cloud.clone(), clock.clone(), requests).await?,
        )),
        Policy::HpaUtilization | Policy::HpaQueue => {
            let mut fleet = Fleet::new(sc, cloud.clone(), policy);
            fleet.fill(sc.pool.min_replicas, &clock).await;
            Driver::Hpa(Box::new(Hpa::new(sc, policy)), fleet)
        }
        Policy::Static => {
            let mut fleet = Fleet::new(sc, cloud.clone(), policy);
            fleet.fill(sc.pool.min_replicas, &clock).await;
            Driver::Static(fleet)
        }
        Policy::Oracle => Driver::Oracle,
    };
    // Virtual time restarts at the epoch once the pool is filled, so every policy's t = 0 is the
    // same instant of the traffic.
    let offset = clock.now() - epoch();
    let now_at = |t: f64| at(t) + offset;

    let shedding = policy == Policy::Headroom;
    let mut model = Model::new(requests, sc.service, sc.queue.clone(), shedding);
    let mut samples = Vec::new();
    let mut faults: VecDeque<&Fault> = sc.faults.iter().collect();
    let (mut cost, mut gpu_s) = (0.0_f64, 0.0_f64);
    let mut desired_series = Vec::new();
    let mut peak_ready = 0u32;
    let mut t = 0.0_f64;
    let ticks = (duration_s / sc.tick_s).round() as u64;
    for _ in 0..ticks {
        if policy != Policy::Oracle {
            while let Some(f) = faults.front().filter(|f| f.at_s <= t + 1e-9) {
                apply_fault(&cloud, f, now_at(t)).await;
                faults.pop_front();
            }
        }
        let control = match &mut driver {
            Driver::Engine(e) => e.control(sc, &model, t).await?,
            Driver::Hpa(hpa, fleet) => {
                if hpa.due(t) {
                    let unready = fleet.counts().1;
                    hpa.sync(t, &model, unready);
                }
                fleet.reconcile(hpa.spec, t).await;
                fleet.control(hpa.spec)
            }
            Driver::Static(fleet) => {
                fleet.reconcile(sc.pool.min_replicas, t).await;
                fleet.control(sc.pool.min_replicas)
            }
            Driver::Oracle => oracle.control(t),
        };
        model.set_ready(&control.ready);
        model.set_shed(&control.shed);
        model.advance(t, t + sc.tick_s, sc.step_s);
        // Pay for what ran during the tick: booting and ready nodes (stopped warm nodes cost
        // only their disks, which the simulated cloud does not price).
        let hours = sc.tick_s / 3600.0;
        match &driver {
            Driver::Oracle => {
                let (c, g) = oracle.paid(t);
                cost += c * hours;
                gpu_s += g * sc.tick_s;
            }
            _ => {
                for i in running(&cloud, &sc.pool.name.to_string()) {
                    if let Some(o) = prices.get(&i.offering) {
                        // Spot bills at the market price, whatever a policy believed it would.
                        let price = cloud
                            .spot_price(&i.offering)
                            .unwrap_or(o.price_usd_per_hour);
                        cost += price.as_f64_lossy() * hours;
                        gpu_s += o.gpus_per_node as f64 * sc.tick_s;
                    }
                }
            }
        }
        clock.advance(Duration::from_secs_f64(sc.tick_s));
        t += sc.tick_s;
        peak_ready = peak_ready.max(model.ready());
        desired_series.push(control.desired);
        samples.push(Sample {
            t_s: round6(t),
            queue_depth: model.waiting(),
            desired: control.desired,
            ready: model.ready(),
            starting: control.starting,
            cost_usd: round6(cost),
        });
    }
    model.finish(t);

    let (refusals, log) = match &driver {
        Driver::Engine(e) => {
            e.books(now_at(0.0), now_at(t), &sc.pool.name.to_string())
                .await?
        }
        Driver::Hpa(_, fleet) | Driver::Static(fleet) => {
            (fleet.refusals.clone(), fleet.log.clone())
        }
        Driver::Oracle => (BTreeMap::new(), Vec::new()),
    };
    let cooldown = sc.config.engine.offering_cooldown.as_secs_f64();
    let totals = model.totals;
    let report = PolicyReport {
        policy: policy.as_str().to_string(),
        requests_total: totals.requests,
        requests_within_slo: totals.within_slo,
        slo_attainment: if totals.requests > 0 {
            round6(totals.within_slo as f64 / totals.requests as f64)
        } else {
            1.0
        },
        queue_delay_minutes: round6(totals.queue_delay_s / 60.0),
        shed: totals.shed,
        gpu_hours: round6(gpu_s / 3600.0),
        idle_gpu_hours: round6(((gpu_s - totals.busy_gpu_s) / 3600.0).max(0.0)),
        cost_usd: round6(cost),
        cost_vs_oracle: 0.0,
        refusals,
        fallbacks: match &driver {
            // Headroom's planner names each fallback itself; the baselines' are inferred.
            Driver::Engine(e) => e.engine.metrics().fallbacks_of(sc.pool.name.as_str()),
            _ => fallbacks(&log, &prices, cooldown),
        },
        scale_direction_changes: direction_changes(&desired_series),
        peak_queue_depth: totals.peak_waiting,
        peak_ready_replicas: peak_ready,
    };
    Ok((report, samples))
}

/// Instances of the pool that are paid for: launched and not stopped or gone.
fn running(cloud: &SimCloud, pool: &str) -> Vec<Instance> {
    cloud
        .all_instances()
        .into_iter()
        .filter(|i| i.tags.pool == pool)
        .filter(|i| {
            matches!(
                i.phase,
                InstancePhase::Pending | InstancePhase::Booting(_) | InstancePhase::Ready
            )
        })
        .collect()
}

async fn apply_fault(cloud: &SimCloud, f: &Fault, now: Timestamp) {
    match f.kind {
        FaultKind::Capacity(n) => cloud.set_capacity(&f.offering, n),
        FaultKind::LaunchErrors(class, n) => cloud.inject_launch_fault(&f.offering, class, n),
        FaultKind::SpotPrice(price) => cloud.set_spot_price(&f.offering, price),
        FaultKind::Interrupt(share) => {
            // The wave is announced now and reclaims after the usual notice, as on AWS: every
            // policy sees the instances go at the same instant; Headroom also sees the notice.
            let live = cloud
                .all_instances()
                .into_iter()
                .filter(|i| i.offering == f.offering)
                .filter(|i| {
                    matches!(
                        i.phase,
                        InstancePhase::Pending | InstancePhase::Booting(_) | InstancePhase::Ready
                    )
                })
                .count();
            let n = (live as f64 * share).round() as u32;
            let reclaim_at =
                now + chrono::Duration::seconds(headroom_cloud::sim::INTERRUPTION_NOTICE_S);
            cloud.interrupt(&f.offering, n, reclaim_at);
        }
    }
}

/// Launches that landed on another offering within `cooldown` of a cloud refusal, by the biggest
/// thing that changed: region, then instance type, then zone (or market, when only that did).
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
        let kind = if from.region != to.region {
            "region"
        } else if from.instance_type != to.instance_type {
            "instance_type"
        } else if from.zone != to.zone {
            "zone"
        } else {
            "market"
        };
        *out.entry(kind.to_string()).or_insert(0) += 1;
    }
    out
}

fn direction_changes(desired: &[u32]) -> u32 {
    let mut last = 0i8;
    let mut changes = 0;
    for w in desired.windows(2) {
        let d = match w[1].cmp(&w[0]) {
            std::cmp::Ordering::Greater => 1,
            std::cmp::Ordering::Less => -1,
            std::cmp::Ordering::Equal => continue,
        };
        if last != 0 && d != last {
            changes += 1;
        }
        last = d;
    }
    changes
}

/// Arrivals and departures over a sliding window, as an exporter's `rate()` reports them.
#[derive(Debug, Default)]
struct Rates {
    window: VecDeque<(f64, u64, u64)>,
}

/// The window exporters' rates are computed over.
const RATE_WINDOW_S: f64 = 10.0;

impl Rates {
    fn read(&mut self, t: f64, arrivals: u64, departures: u64) -> (f64, f64) {
        self.window.push_back((t, arrivals, departures));
        while self
            .window
            .front()
            .is_some_and(|(t0, _, _)| t - t0 > RATE_WINDOW_S + 1e-9)
        {
            self.window.pop_front();
        }
        match self.window.front() {
            Some(&(t0, a0, d0)) if t > t0 => (
                (arrivals - a0) as f64 / (t - t0),
                (departures - d0) as f64 / (t - t0),
            ),
            _ => (0.0, 0.0),
        }
    }
}

/// The real engine, its ledger (a temporary SQLite file) and the signals it is fed.
struct EngineDriver {
    engine: Arc<Engine>,
    ledger: Arc<SqliteLedger>,
    _dir: tempfile::TempDir,
    meter: UtilMeter,
    rates: Rates,
}

fn engine_err(e: impl std::fmt::Display) -> SimError {
    SimError::Engine(e.to_string())
}

impl EngineDriver {
    async fn start(
        sc: &Scenario,
        config: &Config,
        cloud: Arc<SimCloud>,
        clock: Arc<ManualClock>,
        requests: &[Request],
    ) -> Result<EngineDriver, SimError> {
        let dir =
            tempfile::tempdir().map_err(|e| SimError::Io(format!("temporary ledger: {e}")))?;
        let ledger = Arc::new(
            SqliteLedger::open_path(&dir.path().join("sim-ledger.db"))
                .await
                .map_err(engine_err)?,
        );
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let engine = Engine::new(Arc::new(config.clone()), ledger.clone(), cloud, dyn_clock);
        // The arrival rate the run opens with, so the pool is filled for it.
        let opening = requests
            .iter()
            .take_while(|r| r.at_s < RATE_WINDOW_S)
            .count() as f64
            / RATE_WINDOW_S;
        // Fill the pool to its floor and warm pool before the traffic starts, skipping through
        // the cold-start ladder as `headroom demo` does.
        for _ in 0..60 {
            engine.push_signal(
                &sc.pool.name,
                SignalInput {
                    queue_depth: 0,
                    arrival_rate_rps: Some(opening),
                    ..SignalInput::default()
                },
            );
            engine.tick().await.map_err(engine_err)?;
            let filled = engine.pool_status(&sc.pool.name).is_some_and(|s| {
                s.ready >= s.min_replicas
                    && s.warm >= s.warm_pool_size
                    && s.requested + s.starting == 0
            });
            if filled {
                break;
            }
            clock.advance(Duration::from_secs(30));
        }
        Ok(EngineDriver {
            engine,
            ledger,
            _dir: dir,
            meter: UtilMeter::default(),
            rates: Rates::default(),
        })
    }

    async fn control(
        &mut self,
        sc: &Scenario,
        model: &Model<'_>,
        t: f64,
    ) -> Result<Control, SimError> {
        let (arrivals, departures) =
            self.rates
                .read(t, model.totals.arrivals, model.totals.departures);
        let utils: Vec<f64> = self.meter.read(model, t).into_iter().flatten().collect();
        let ready = model.ready();
        self.engine.push_signal(
            &sc.pool.name,
            SignalInput {
                queue_depth: model.waiting(),
                oldest_age_s: model.oldest_age_s(t),
                arrival_rate_rps: Some(arrivals),
                departure_rate_rps: (t >= RATE_WINDOW_S).then_some(departures),
                batch_occupancy: (ready > 0).then(|| {
                    model.in_service() as f64 / (ready as f64 * sc.service.max_batch as f64)
                }),
                gpu_utilization: (!utils.is_empty())
                    .then(|| utils.iter().sum::<f64>() / utils.len() as f64),
                ..SignalInput::default()
            },
        );
        self.engine.tick().await.map_err(engine_err)?;
        let status = self.engine.pool_status(&sc.pool.name);
        let ready: BTreeMap<String, u32> = self
            .ledger
            .live_nodes()
            .await
            .map_err(engine_err)?
            .into_iter()
            .filter(|e| e.pool == sc.pool.name && e.state == NodeState::Serving)
            .filter_map(|e| e.instance.map(|i| (i, e.gpus)))
            .collect();
        Ok(Control {
            desired: status.as_ref().map_or(0, |s| s.desired),
            starting: status.as_ref().map_or(0, |s| s.requested + s.starting),
            shed: status.map_or_else(Vec::new, |s| {
                s.admission
                    .iter()
                    .filter(|t| !t.admit)
                    .map(|t| t.priority)
                    .collect()
            }),
            ready,
        })
    }

    /// Refusals by reason and the launch log, from the ledger, for the run's window.
    async fn books(
        &self,
        from: Timestamp,
        to: Timestamp,
        pool: &str,
    ) -> Result<(BTreeMap<String, u64>, Vec<LaunchRecord>), SimError> {
        let mut refusals = BTreeMap::new();
        for r in self
            .ledger
            .refusals_between(from, to + chrono::Duration::seconds(1))
            .await
            .map_err(engine_err)?
        {
            *refusals.entry(r.reason.code()).or_insert(0) += r.replicas as u64;
        }
        let log = self
            .ledger
            .node_events()
            .await
            .map_err(engine_err)?
            .into_iter()
            .filter(|e| e.pool.to_string() == pool && e.at >= from)
            .filter(|e| {
                e.state == NodeState::Launching
                    || (e.state == NodeState::Refused
                        && e.reason.as_deref() != Some("offering_removed"))
            })
            .map(|e| LaunchRecord {
                t_s: (e.at - from).num_milliseconds() as f64 / 1000.0,
                offering: e.offering,
                refused: e.state == NodeState::Refused,
            })
            .collect();
        Ok((refusals, log))
    }
}

/// A baseline's node layer: one node per replica, as a cluster autoscaler provisions them for
/// pending pods. The cheapest allowed offering first; after a capacity, quota or price refusal,
/// the next one, and the refused one is skipped for the engine's offering cooldown (the cluster
/// autoscaler's backoff). Interrupted or vanished nodes are replaced (the ReplicaSet's pods go
/// pending again).
struct Fleet {
    cloud: Arc<SimCloud>,
    order: Vec<Offering>,
    cooldown_s: f64,
    backoff: HashMap<OfferingId, f64>,
    nodes: Vec<InstanceId>,
    phases: HashMap<InstanceId, (InstancePhase, u32)>,
    seq: u64,
    name: &'static str,
    pool: String,
    refusals: BTreeMap<String, u64>,
    log: Vec<LaunchRecord>,
}

impl Fleet {
    fn new(sc: &Scenario, cloud: Arc<SimCloud>, policy: Policy) -> Fleet {
        let mut order: Vec<Offering> = sc
            .pool
            .offerings
            .iter()
            .filter_map(|id| sc.config.offering(id).cloned())
            .collect();
        order.sort_by_key(|o| o.price_usd_per_hour);
        Fleet {
            cloud,
            order,
            cooldown_s: sc.config.engine.offering_cooldown.as_secs_f64(),
            backoff: HashMap::new(),
            nodes: Vec::new(),
            phases: HashMap::new(),
            seq: 0,
            name: policy.as_str(),
            pool: sc.pool.name.to_string(),
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
        let gpus = |o: &OfferingId| {
            self.order
                .iter()
                .find(|x| &x.id == o)
                .map_or(1, |x| x.gpus_per_node)
        };
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
            let spec = LaunchSpec {
                offering: offering.clone(),
                client_token: format!("{}-{}", self.name, self.seq),
                tags: OwnershipTags {
                    cluster: self.name.to_string(),
                    pool: self.pool.clone(),
                    node: format!("{}-{}", self.name, self.seq),
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
        Control {
            desired,
            starting: unready,
            ready: self
                .nodes
                .iter()
                .filter_map(|id| match self.phases.get(id) {
                    Some((InstancePhase::Ready, gpus)) => Some((id.0.clone(), *gpus)),
                    _ => None,
                })
                .collect(),
            shed: Vec::new(),
        }
    }
}

/// The Kubernetes HPA with its default behaviour: a sync every 15 s; `ceil(current × metric /
/// target)` unless within the 10 % tolerance; scale-up of at most max(100 %, 4 pods) per sync;
/// scale-down to the highest recommendation of the last 300 s.
struct Hpa {
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

impl Hpa {
    fn new(sc: &Scenario, policy: Policy) -> Hpa {
        Hpa {
            policy,
            spec: sc.pool.min_replicas,
            min: sc.pool.min_replicas,
            max: sc.pool.max_replicas,
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

    fn due(&mut self, t: f64) -> bool {
        if t == 0.0 {
            // Start the exporter's window with the run.
            return true;
        }
        t + 1e-9 >= self.next_sync
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

/// The oracle: demand known in advance. Per bucket as long as the tightest SLO objective, the
/// replicas whose full-batch throughput carries the work arriving in it; then, layer by layer
/// (the k-th replica), gaps shorter than the cold start are bridged (keeping a node is cheaper
/// than climbing the ladder again) and every other start is launched one cold start ahead, so
/// it pays the ladder. All at the cheapest allowed offering, with no stockouts. A lower bound
/// on cost for the same serving model, not a schedule a controller could follow.
#[derive(Debug)]
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

    fn control(&self, t: f64) -> Control {
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
    fn paid(&self, t: f64) -> (f64, f64) {
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

    #[test]
    fn direction_changes_count_flips_only() {
        assert_eq!(direction_changes(&[8, 8, 12, 20, 20, 19, 18, 20]), 2);
        assert_eq!(direction_changes(&[8, 9, 10]), 0);
    }
}
