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

use headroom_cloud::{Clock, InstancePhase, ManualClock, SimCloud};
use headroom_core::{Offering, OfferingId, Timestamp};
use headroom_engine::{Config, sim_cloud_for};
use serde::Serialize;

use crate::arrivals::Request;
use crate::error::SimError;
use crate::model::Model;
use crate::scenario::{Fault, FaultKind, Scenario};

mod baselines;
mod driver;
mod engine_driver;
mod oracle;

pub use baselines::utilization_replicas;
use driver::PolicyDriver;
pub use oracle::Oracle;

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

/// One policy's results, in the shape `headroom simulate` prints.
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
    let oracle = Oracle::new(sc, &requests, duration_s);
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
    oracle: &Oracle,
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
                engine_driver::EngineDriver::start(sc, &config, cloud, clock.clone()).await?;
            run.with(driver).await
        }
        Policy::HpaUtilization | Policy::HpaQueue => {
            let driver = baselines::HpaDriver::start(sc, cloud, &clock, policy).await;
            run.with(driver).await
        }
        Policy::Static => {
            let driver = baselines::StaticDriver::start(sc, cloud, &clock).await;
            run.with(driver).await
        }
        Policy::Oracle => run.with(oracle.clone()).await,
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
    /// The loop: faults, the policy's control step, the model, the bill; tick by tick.
    async fn with<D: PolicyDriver>(
        self,
        mut driver: D,
    ) -> Result<(PolicyReport, Vec<Sample>), SimError> {
        let sc = self.sc;
        // Virtual time restarts at the epoch once the pool is filled, so every policy's t = 0 is
        // the same instant of the traffic.
        let offset = self.clock.now() - epoch();
        let mut model = Model::new(self.requests, sc.service, sc.queue.clone(), driver.sheds());
        let mut samples = Vec::new();
        let mut faults: VecDeque<&Fault> = sc.faults.iter().collect();
        let (mut cost, mut gpu_s) = (0.0_f64, 0.0_f64);
        let mut desired_series = Vec::new();
        let mut peak_ready = 0u32;
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
            let control = driver.control(t, &model).await?;
            model.set_ready(&control.ready);
            model.set_admission(&control.admission);
            model.advance(t, t + sc.tick_s, sc.step_s);
            let (usd_per_hour, gpus) = driver.paying(t);
            cost += usd_per_hour * hours;
            gpu_s += gpus * sc.tick_s;
            self.clock.advance(Duration::from_secs_f64(sc.tick_s));
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
        let books = driver.books(t).await?;
        let totals = model.totals.clone();
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
            cost_vs_oracle: 0.0,
            refusals: books.refusals,
            fallbacks: books.fallbacks,
            scale_direction_changes: direction_changes(&desired_series),
            peak_queue_depth: totals.peak_waiting,
            peak_ready_replicas: peak_ready,
        };
        Ok((report, samples))
    }
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

    #[test]
    fn direction_changes_count_flips_only() {
        assert_eq!(direction_changes(&[8, 8, 12, 20, 20, 19, 18, 20]), 2);
        assert_eq!(direction_changes(&[8, 9, 10]), 0);
    }
}
