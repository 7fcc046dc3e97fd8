//! Scenarios: traffic, the pool and its offerings (a Headroom configuration), the cloud's
//! behaviour over time, the SLO and the baselines' settings, as one TOML file. See
//! `scenarios/README.md` for every key.

use std::collections::BTreeMap;
use std::time::Duration;

use headroom_config::Config;
use headroom_core::{ErrorClass, Money, OfferingId, PoolSpec};

use crate::arrivals::Stream;
use crate::model::{QueuePolicy, Service};

mod builtin;
mod faults;
mod pools;
mod raw;
mod streams;
mod tiers;
mod validate;

pub use builtin::{BUILT_IN, built_in_names, load};
pub use validate::parse;

/// The settings of the HPA baselines (Kubernetes defaults unless the scenario says otherwise).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpaSettings {
    pub target_utilization: f64,
    pub target_queue_per_pod: f64,
    pub sync: Duration,
    pub tolerance: f64,
    pub scale_down_stabilization: Duration,
    /// `keda-karpenter`: pause pods kept as an overprovisioning buffer, one node each.
    pub overprovision: u32,
    /// `predictive`: how long a day is in this run (its forecast looks a day, or a week, back).
    pub day: Duration,
}

/// Something the cloud does at an instant of the run.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultKind {
    /// The offering can run this many instances from now on (`0` is a stockout).
    Capacity(u32),
    /// This share of the offering's running instances is reclaimed at once (a spot wave).
    Interrupt(f64),
    /// The next `count` launches on the offering fail with `class`.
    LaunchErrors(ErrorClass, u32),
    /// The spot market can run this many instances from now on, and what runs above it is
    /// reclaimed with the usual notice (a replayed availability trace, `--spot-trace`).
    Available(u32),
    /// The spot market's price per hour from now on: what running spot nodes cost, what the
    /// cloud quotes, and the most a launch may pay is checked against it.
    SpotPrice(Money),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub at_s: f64,
    pub offering: OfferingId,
    pub kind: FaultKind,
}

/// One pool the run simulates: its Headroom configuration and how fast its replicas serve.
#[derive(Debug, Clone)]
pub struct SimPool {
    pub spec: PoolSpec,
    /// A replica of the pool on an offering without its own entry in `on_offering`.
    pub service: Service,
    /// A replica on this offering (a faster GPU, another instance type).
    pub on_offering: BTreeMap<OfferingId, Service>,
    /// The simulated pool its `supply.fallback_pool` names (its smaller model), by index.
    pub fallback: Option<usize>,
}

impl SimPool {
    /// How fast a replica of this pool on `offering` serves.
    pub fn service_on(&self, offering: &OfferingId) -> Service {
        self.on_offering
            .get(offering)
            .copied()
            .unwrap_or(self.service)
    }
}

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub duration_s: f64,
    /// How often policies act: the engine ticks, baselines reconcile nodes, the oracle plans.
    pub tick_s: f64,
    pub seed: u64,
    pub config: Config,
    /// The pools simulated together on one cloud, at least one; a trace arrives at the first.
    pub pools: Vec<SimPool>,
    pub queue: QueuePolicy,
    pub streams: Vec<Stream>,
    /// The tier trace requests get.
    pub trace_tier: u8,
    pub hpa: HpaSettings,
    pub faults: Vec<Fault>,
    /// Reservations in force (`--reserve`, `[[reservations]]`): paid for whether used or not.
    pub reservations: Vec<crate::reserve::SimReservation>,
}

impl Scenario {
    /// The first simulated pool: where a trace arrives.
    pub fn primary(&self) -> &SimPool {
        &self.pools[0]
    }

    /// The scenario with pool `i` alone (what plans one pool at a time, as the oracle does): its
    /// fallback is not simulated, and its requests are the ones `requests` says arrive at it.
    pub fn alone(&self, i: usize) -> Scenario {
        let mut sc = self.clone();
        let mut pool = sc.pools.swap_remove(i);
        pool.fallback = None;
        sc.pools = vec![pool];
        sc
    }
}
