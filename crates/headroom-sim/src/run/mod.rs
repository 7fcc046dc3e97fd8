//! Runs a scenario under each policy in virtual time and measures what users feel and pay.
//!
//! Every policy meets the same requests, the same serving model and its own copy of the same
//! simulated cloud (same offerings, ladder, capacity, faults and seed). `headroom` is the real
//! [`Engine`](headroom_engine::Engine) — controller, planner, governor, executor and a SQLite
//! ledger — ticked on a [`ManualClock`] with signals pushed from the model, exactly as
//! `headroom demo` drives it. The baselines drive [`SimCloud`] directly as a cluster autoscaler
//! would: one node per replica, the cheapest allowed offering first, the next one after a
//! refusal.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::{Clock, ManualClock, SimCloud};
use headroom_config::Config;
use headroom_core::{Offering, OfferingId, Timestamp};
use headroom_engine::sim_cloud_for;
use serde::Serialize;

use crate::arrivals::Request;
use crate::error::SimError;
use crate::model::{Model, Totals};
use crate::scenario::{Fault, FaultKind, Scenario};

mod baselines;
mod bound;
mod driver;
mod engine_driver;
mod oracle;

pub use baselines::utilization_replicas;
pub use bound::Bound;
use driver::PolicyDriver;
pub use oracle::Oracle;

/// The policies a run compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    Headroom,
    HpaUtilization,
    HpaQueue,
    KedaKarpenter,
    Predictive,
    Static,
    Oracle,
}

impl Policy {
    pub const ALL: [Policy; 7] = [
        Policy::Headroom,
        Policy::HpaUtilization,
        Policy::HpaQueue,
        Policy::KedaKarpenter,
        Policy::Predictive,
        Policy::Static,
        Policy::Oracle,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Headroom => "headroom",
            Policy::HpaUtilization => "hpa-utilization",
            Policy::HpaQueue => "hpa-queue",
            Policy::KedaKarpenter => "keda-karpenter",
            Policy::Predictive => "predictive",
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

/// One tier's results under one policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierReport {
    pub tier: String,
    pub requests: u64,
    pub within_slo: u64,
    pub slo_attainment: f64,
    pub shed: u64,
    pub timed_out: u64,
}

/// One simulated pool's share of a policy's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolReport {
    pub pool: String,
    /// Requests that arrived at this pool.
    pub requests: u64,
    /// Requests this pool's replicas served, its own and those handed to it.
    pub served: u64,
    /// Requests that arrived at another pool and were handed to this one, its smaller model.
    pub taken_over: u64,
    pub shed: u64,
    pub gpu_hours: f64,
    pub cost_usd: f64,
    pub peak_ready_replicas: u32,
}

/// One policy's results, in the shape `headroom simulate` prints. Totals are over every
/// simulated pool; `pools` has each one's share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyReport {
    pub policy: String,
    pub requests_total: u64,
    pub requests_within_slo: u64,
    /// Requests that started within their tier's objective, over all requests (a shed or
    /// timed-out request misses).
    pub slo_attainment: f64,
    /// The same per tier, highest priority first.
    pub tiers: Vec<TierReport>,
    pub queue_delay_minutes: f64,
    pub shed: u64,
    pub gpu_hours: f64,
    pub idle_gpu_hours: f64,
    /// Everything paid, the idle part of reservations included.
    pub cost_usd: f64,
    /// What reservations cost while no node ran on them (in `cost_usd`).
    pub reservation_idle_usd: f64,
    /// The certified lower bound for starting as many requests within their objectives as
    /// this policy did (see [`Bound`]).
    pub bound_usd: f64,
    /// Cost over `bound_usd`: at least 1 for every policy.
    pub cost_vs_bound: f64,
    /// Cost over the hindsight planner's (the `oracle` policy), a schedule not a bound.
    pub cost_vs_hindsight: f64,
    pub refusals: BTreeMap<String, u64>,
    pub fallbacks: BTreeMap<String, u64>,
    pub scale_direction_changes: u32,
    pub peak_queue_depth: u64,
    pub peak_ready_replicas: u32,
    pub pools: Vec<PoolReport>,
    /// Headroom's decision log over the run (`--decisions`), oldest first per pool; empty for
    /// the other policies.
    #[serde(skip)]
    pub decisions: Vec<serde_json::Value>,
}

impl PolicyReport {
    /// The SLO attainment of the highest priority tier (the whole run's with one tier).
    pub fn top_tier_slo(&self) -> f64 {
        self.tiers
            .first()
            .map_or(self.slo_attainment, |t| t.slo_attainment)
    }
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

/// The certified lower bound for serving every request within its objective.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BoundCost {
    pub cost_usd: f64,
}

/// The hindsight planner (the `oracle` policy): what its schedule costs and, when it ran, the
/// policies that served at least as well (SLO attainment) for less.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hindsight {
    pub cost_usd: f64,
    pub beaten_by: Vec<String>,
}

/// Everything a run produced. `wall_time_s` and `simulated_requests_per_s` are filled in by the
/// caller, which may read the wall clock; nothing here does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub policies: Vec<PolicyReport>,
    pub bound: BoundCost,
    pub hindsight: Hindsight,
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
    run_keeping_ledger(sc, trace, policies, seed, None).await
}

/// [`run`], with Headroom's ledger kept in the new SQLite file `ledger` (for `headroom report`
/// on a simulated history) instead of a temporary one.
pub async fn run_keeping_ledger(
    sc: &Scenario,
    trace: Option<Vec<Request>>,
    policies: &[Policy],
    seed: Option<u64>,
    ledger: Option<&std::path::Path>,
) -> Result<Report, SimError> {
    let seed = seed.unwrap_or(sc.seed);
    let (requests, duration_s) = requests_for(sc, trace, seed);
    let requests: Arc<[Request]> = requests.into();
    // Each policy replays on its own clock, cloud and ledger, so they need not take turns:
    // Headroom's (the real engine, the longest) runs on a thread of its own while this one
    // plans the hindsight, computes the bound and replays the others. Same results, sooner.
    let headroom = policies
        .contains(&Policy::Headroom)
        .then(|| headroom_apart(sc, &requests, duration_s, seed, ledger));
    let oracle = Oracle::new(sc, &requests, duration_s);
    let oracle_cost = oracle.cost_usd();
    let bound = Bound::new(sc, &requests, duration_s);
    let mut runs = HashMap::new();
    for &policy in policies.iter().filter(|&&p| p != Policy::Headroom) {
        let run = run_policy(
            sc,
            &requests,
            duration_s,
            policy,
            seed,
            Some(&oracle),
            ledger,
        )
        .await?;
        runs.insert(policy, run);
    }
    if let Some(headroom) = headroom {
        let run = headroom.await.unwrap_or_else(|_| {
            Err(SimError::Engine(
                "the thread replaying Headroom ended without a result".into(),
            ))
        })?;
        runs.insert(Policy::Headroom, run);
    }
    let mut reports = Vec::new();
    let mut series = Vec::new();
    for &policy in policies {
        let Some((mut report, samples)) = runs.remove(&policy) else {
            continue;
        };
        report.bound_usd = round6(bound.within(report.requests_within_slo));
        report.cost_vs_bound = ratio(report.cost_usd, report.bound_usd);
        report.cost_vs_hindsight = ratio(report.cost_usd, oracle_cost);
        reports.push(report);
        series.push((policy.as_str().to_string(), samples));
    }
    let beaten_by = beaten_by(&reports);
    Ok(Report {
        scenario: sc.name.clone(),
        seed,
        policies: reports,
        bound: BoundCost {
            cost_usd: round6(bound.full_usd()),
        },
        hindsight: Hindsight {
            cost_usd: round6(oracle_cost),
            beaten_by,
        },
        wall_time_s: 0.0,
        simulated_requests_per_s: 0.0,
        series,
    })
}

/// Replays Headroom on a thread of its own, with its own runtime and the caller's log
/// subscriber (the simulator silences the engine's logs); the answer comes back on the channel.
fn headroom_apart(
    sc: &Scenario,
    requests: &Arc<[Request]>,
    duration_s: f64,
    seed: u64,
    ledger: Option<&std::path::Path>,
) -> tokio::sync::oneshot::Receiver<Result<(PolicyReport, Vec<Sample>), SimError>> {
    let (sc, requests) = (sc.clone(), requests.clone());
    let ledger = ledger.map(std::path::Path::to_path_buf);
    let logs = tracing::dispatcher::get_default(Clone::clone);
    let (answer, answered) = tokio::sync::oneshot::channel();
    let replay = move || {
        let run = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SimError::Io(format!("a runtime for the Headroom replay: {e}")))
            .and_then(|runtime| {
                tracing::dispatcher::with_default(&logs, || {
                    runtime.block_on(run_policy(
                        &sc,
                        &requests,
                        duration_s,
                        Policy::Headroom,
                        seed,
                        None,
                        ledger.as_deref(),
                    ))
                })
            });
        // The caller went away only if it failed itself: nobody to tell.
        let _ = answer.send(run);
    };
    if let Err(e) = std::thread::Builder::new()
        .name("sim-headroom".into())
        .spawn(replay)
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let _ = answer.send(Err(SimError::Io(format!(
            "a thread for the Headroom replay: {e}"
        ))));
        return answered;
    }
    answered
}

/// `cost / base`, or 0 when there is no base to compare with.
fn ratio(cost: f64, base: f64) -> f64 {
    if base > 0.0 { round6(cost / base) } else { 0.0 }
}

/// The policies that served at least as well as the hindsight planner (SLO attainment) for
/// less; empty when it did not run.
fn beaten_by(reports: &[PolicyReport]) -> Vec<String> {
    let Some(hindsight) = reports.iter().find(|p| p.policy == Policy::Oracle.as_str()) else {
        return Vec::new();
    };
    reports
        .iter()
        .filter(|p| p.policy != hindsight.policy)
        .filter(|p| p.slo_attainment >= hindsight.slo_attainment)
        .filter(|p| p.cost_usd < hindsight.cost_usd * (1.0 - 1e-9))
        .map(|p| p.policy.clone())
        .collect()
}

/// The offerings of a configuration by id.
fn offerings_of(config: &Config) -> HashMap<OfferingId, Offering> {
    config
        .offerings
        .iter()
        .map(|o| (o.offering.id.clone(), o.offering.clone()))
        .collect()
}

fn duration(t_s: f64) -> chrono::Duration {
    chrono::Duration::milliseconds((t_s * 1000.0).round() as i64)
}

/// One policy on its own copy of the scenario's cloud: the driver is chosen here, once.
async fn run_policy(
    sc: &Scenario,
    requests: &[Request],
    duration_s: f64,
    policy: Policy,
    seed: u64,
    oracle: Option<&Oracle>,
    ledger: Option<&std::path::Path>,
) -> Result<(PolicyReport, Vec<Sample>), SimError> {
    let clock = Arc::new(ManualClock::new(epoch()));
    let mut config = sc.config.clone();
    config.sim.seed = seed;
    config.sim.state_file = None;
    let cloud = Arc::new(sim_cloud_for(&config, clock.clone()));
    let run = Run {
        sc,
        requests,
        duration_s,
        policy,
        clock: clock.clone(),
    };
    match policy {
        Policy::Headroom => {
            let driver =
                engine_driver::EngineDriver::start(sc, &config, cloud, clock.clone(), ledger)
                    .await?;
            run.with(driver).await
        }
        Policy::HpaUtilization | Policy::HpaQueue | Policy::KedaKarpenter | Policy::Predictive => {
            let driver = baselines::HpaDriver::start(sc, cloud, &clock, policy).await;
            run.with(driver).await
        }
        Policy::Static => {
            let driver = baselines::StaticDriver::start(sc, cloud, &clock).await;
            run.with(driver).await
        }
        Policy::Oracle => match oracle {
            Some(oracle) => run.with(oracle.clone()).await,
            None => Err(SimError::Engine(
                "the hindsight planner was not planned".into(),
            )),
        },
    }
}

/// What one policy's run shares with every other: the scenario, its requests, the clock.
struct Run<'a> {
    sc: &'a Scenario,
    requests: &'a [Request],
    duration_s: f64,
    policy: Policy,
    clock: Arc<ManualClock>,
}

impl Run<'_> {
    /// The loop: faults, the policy's control step, the models, the bill; tick by tick.
    async fn with<D: PolicyDriver>(
        self,
        mut driver: D,
    ) -> Result<(PolicyReport, Vec<Sample>), SimError> {
        let sc = self.sc;
        // Virtual time restarts at the epoch once the pools are filled, so every policy's t = 0
        // is the same instant of the traffic.
        let offset = self.clock.now() - epoch();
        let mut models: Vec<Model> = (0..sc.pools.len())
            .map(|i| Model::new(self.requests, sc.queue.clone(), driver.sheds()).at_pool(i as u8))
            .collect();
        let mut samples = Vec::new();
        let mut faults: VecDeque<&Fault> = sc.faults.iter().collect();
        let mut books = vec![PoolBook::default(); sc.pools.len()];
        let (mut cost, mut gpu_s, mut reservation_idle) = (0.0_f64, 0.0_f64, 0.0_f64);
        let mut desired_series = Vec::new();
        let (mut peak_ready, mut peak_waiting) = (0u32, 0u64);
        let mut t = 0.0_f64;
        let ticks = (self.duration_s / sc.tick_s).round() as u64;
        let hours = sc.tick_s / 3600.0;
        for _ in 0..ticks {
            if let Some(cloud) = driver.cloud() {
                while let Some(f) = faults.front().filter(|f| f.at_s <= t + 1e-9) {
                    apply_fault(cloud, f, at(t) + offset);
                    faults.pop_front();
                }
            }
            let controls = driver.control(sc, t, &models).await?;
            for (model, control) in models.iter_mut().zip(&controls) {
                model.set_ready(&control.ready);
                model.set_admission(&control.admission);
            }
            peak_waiting = peak_waiting.max(advance_together(
                sc,
                &mut models,
                &controls,
                t,
                t + sc.tick_s,
            ));
            for (book, (usd_per_hour, gpus)) in books.iter_mut().zip(driver.paying(t)) {
                book.cost += usd_per_hour * hours;
                book.gpu_s += gpus * sc.tick_s;
                cost += usd_per_hour * hours;
                gpu_s += gpus * sc.tick_s;
            }
            if let Some(cloud) = driver.cloud() {
                for (pool, usd_per_hour) in reservations_idle(sc, cloud, t) {
                    books[pool].cost += usd_per_hour * hours;
                    cost += usd_per_hour * hours;
                    reservation_idle += usd_per_hour * hours;
                }
            }
            self.clock.advance(Duration::from_secs_f64(sc.tick_s));
            t += sc.tick_s;
            for (book, model) in books.iter_mut().zip(&models) {
                book.peak_ready = book.peak_ready.max(model.ready());
            }
            let ready: u32 = models.iter().map(Model::ready).sum();
            let desired: u32 = controls.iter().map(|c| c.desired).sum();
            peak_ready = peak_ready.max(ready);
            desired_series.push(desired);
            samples.push(Sample {
                t_s: round6(t),
                queue_depth: models.iter().map(Model::waiting).sum(),
                desired,
                ready,
                starting: controls.iter().map(|c| c.starting).sum(),
                cost_usd: round6(cost),
            });
        }
        let mut totals = Totals::default();
        for model in &mut models {
            model.finish(t);
            totals.add(&model.totals);
        }
        let books_of_run = driver.books(t).await?;
        let report = PolicyReport {
            policy: self.policy.as_str().to_string(),
            requests_total: totals.requests,
            requests_within_slo: totals.within_slo,
            slo_attainment: attainment(totals.within_slo, totals.requests),
            tiers: sc
                .queue
                .tiers
                .iter()
                .zip(&totals.by_tier)
                .map(|(name, t)| TierReport {
                    tier: name.clone(),
                    requests: t.requests,
                    within_slo: t.within_slo,
                    slo_attainment: attainment(t.within_slo, t.requests),
                    shed: t.shed,
                    timed_out: t.timed_out,
                })
                .collect(),
            queue_delay_minutes: round6(totals.queue_delay_s / 60.0),
            shed: totals.shed,
            gpu_hours: round6(gpu_s / 3600.0),
            idle_gpu_hours: round6(((gpu_s - totals.busy_gpu_s) / 3600.0).max(0.0)),
            cost_usd: round6(cost),
            reservation_idle_usd: round6(reservation_idle),
            bound_usd: 0.0,
            cost_vs_bound: 0.0,
            cost_vs_hindsight: 0.0,
            refusals: books_of_run.refusals,
            fallbacks: books_of_run.fallbacks,
            scale_direction_changes: direction_changes(&desired_series),
            peak_queue_depth: peak_waiting,
            peak_ready_replicas: peak_ready,
            pools: sc
                .pools
                .iter()
                .zip(&models)
                .zip(&books)
                .map(|((pool, model), book)| PoolReport {
                    pool: pool.spec.name.to_string(),
                    requests: model.totals.requests,
                    served: model.totals.served,
                    taken_over: model.totals.taken_over,
                    shed: model.totals.shed,
                    gpu_hours: round6(book.gpu_s / 3600.0),
                    cost_usd: round6(book.cost),
                    peak_ready_replicas: book.peak_ready,
                })
                .collect(),
            decisions: books_of_run.decisions,
        };
        Ok((report, samples))
    }
}

/// What each reservation in force at `t` costs an hour for its nodes that no instance runs on,
/// charged to the first pool that lists it.
fn reservations_idle(sc: &Scenario, cloud: &SimCloud, t: f64) -> Vec<(usize, f64)> {
    // Every tick of every run passes here: read the cloud only when there is something to price.
    if sc.reservations.is_empty() {
        return Vec::new();
    }
    let live = cloud.instances_in_play();
    sc.reservations
        .iter()
        .filter(|r| r.ends_s.is_none_or(|end| t < end))
        .filter_map(|r| {
            let pool = sc
                .pools
                .iter()
                .position(|p| p.spec.offerings.contains(&r.offering))?;
            let used = live
                .iter()
                .filter(|i| i.offering == r.offering)
                .filter(|i| i.phase.is_running())
                .count() as u32;
            let idle = r.nodes.saturating_sub(used);
            Some((pool, idle as f64 * r.usd_per_node_hour))
        })
        .collect()
}

/// One pool's bill and peak over a run.
#[derive(Debug, Clone, Copy, Default)]
struct PoolBook {
    cost: f64,
    gpu_s: f64,
    peak_ready: u32,
}

/// Moves every pool's model through one tick, in lockstep from event to event; at each event
/// the serving layer sends waiting requests of a pool that hands demand to its smaller model to
/// that pool's spare slots. Returns the deepest all the queues were together at any instant.
fn advance_together(
    sc: &Scenario,
    models: &mut [Model<'_>],
    controls: &[driver::Control],
    from: f64,
    to: f64,
) -> u64 {
    crate::model::advance_together(models, from, to, |models| {
        let mut moved = false;
        for (i, pool) in sc.pools.iter().enumerate() {
            let Some(j) = pool.fallback else { continue };
            if controls[i].handed_to_fallback == 0 || i == j {
                continue;
            }
            let spare = models[j].spare_slots();
            if spare > 0 {
                let handed = models[i].hand_over(&sc.queue.smaller_model, spare);
                moved |= !handed.is_empty();
                models[j].take_over(handed);
            }
        }
        moved
    })
}

/// Within the SLO over all (1 when there was nothing to serve).
fn attainment(within: u64, total: u64) -> f64 {
    if total > 0 {
        round6(within as f64 / total as f64)
    } else {
        1.0
    }
}

fn apply_fault(cloud: &SimCloud, f: &Fault, now: Timestamp) {
    match f.kind {
        FaultKind::Capacity(n) => cloud.set_capacity(&f.offering, n),
        FaultKind::LaunchErrors(class, n) => cloud.inject_launch_fault(&f.offering, class, n),
        FaultKind::SpotPrice(price) => cloud.set_spot_price(&f.offering, price),
        // A wave is announced now and reclaims after the usual notice, as on AWS: every policy
        // sees the instances go at the same instant; Headroom also sees the notice.
        FaultKind::Interrupt(share) => {
            let n = (live_on(cloud, &f.offering) as f64 * share).round() as u32;
            cloud.interrupt(&f.offering, n, reclaim_at(now));
        }
        FaultKind::Available(n) => {
            cloud.set_capacity(&f.offering, n);
            let above = (live_on(cloud, &f.offering) as u32).saturating_sub(n);
            cloud.interrupt(&f.offering, above, reclaim_at(now));
        }
    }
}

/// Instances of `offering` that run or are on their way.
fn live_on(cloud: &SimCloud, offering: &OfferingId) -> usize {
    cloud
        .instances_in_play()
        .into_iter()
        .filter(|i| &i.offering == offering)
        .filter(|i| i.phase.is_running())
        .count()
}

/// When a wave announced at `now` reclaims: after the usual notice.
fn reclaim_at(now: Timestamp) -> Timestamp {
    now + chrono::Duration::seconds(headroom_cloud::sim::INTERRUPTION_NOTICE_S)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn report(policy: Policy, slo_attainment: f64, cost_usd: f64) -> PolicyReport {
        PolicyReport {
            policy: policy.as_str().to_string(),
            requests_total: 0,
            requests_within_slo: 0,
            slo_attainment,
            tiers: Vec::new(),
            queue_delay_minutes: 0.0,
            shed: 0,
            gpu_hours: 0.0,
            idle_gpu_hours: 0.0,
            cost_usd,
            reservation_idle_usd: 0.0,
            bound_usd: 0.0,
            cost_vs_bound: 0.0,
            cost_vs_hindsight: 0.0,
            refusals: BTreeMap::new(),
            fallbacks: BTreeMap::new(),
            scale_direction_changes: 0,
            peak_queue_depth: 0,
            peak_ready_replicas: 0,
            pools: Vec::new(),
            decisions: Vec::new(),
        }
    }

    #[test]
    fn the_hindsight_planner_is_beaten_only_by_as_good_for_less() {
        let reports = [
            report(Policy::Headroom, 0.99, 9.0),
            report(Policy::HpaUtilization, 0.98, 11.0),
            report(Policy::Static, 0.50, 2.0),
            report(Policy::HpaQueue, 0.99, 10.0),
            report(Policy::Oracle, 0.98, 10.0),
        ];
        // Static is cheaper but serves less; hpa-queue serves better at the same cost.
        assert_eq!(beaten_by(&reports), vec!["headroom".to_string()]);
        assert!(
            beaten_by(&reports[..4]).is_empty(),
            "no planner, no verdict"
        );
    }

    #[test]
    fn direction_changes_count_flips_only() {
        assert_eq!(direction_changes(&[8, 8, 12, 20, 20, 19, 18, 20]), 2);
        assert_eq!(direction_changes(&[8, 9, 10]), 0);
    }
}
