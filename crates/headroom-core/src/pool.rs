//! Pools: one fleet per workload class, and the policy that shapes it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{AccountName, LadderRung, Money, OfferingId, PoolName};

/// How long each rung of the cold-start ladder takes on this pool's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdStartLadder {
    pub node_acquisition: Duration,
    pub image_pull: Duration,
    pub weight_load: Duration,
    pub compile: Duration,
    pub warmup: Duration,
}

impl ColdStartLadder {
    pub fn rung(&self, rung: LadderRung) -> Duration {
        match rung {
            LadderRung::NodeAcquisition => self.node_acquisition,
            LadderRung::ImagePull => self.image_pull,
            LadderRung::WeightLoad => self.weight_load,
            LadderRung::Compile => self.compile,
            LadderRung::Warmup => self.warmup,
        }
    }

    /// Full ladder for a brand-new node.
    pub fn cold_total(&self) -> Duration {
        LadderRung::ALL.iter().map(|r| self.rung(*r)).sum()
    }

    /// The rungs a stopped warm node still has to climb: it keeps its disk, so node acquisition
    /// and image pull are skipped; weights, compile caches in memory and warmup are not.
    pub fn rungs_from_stopped() -> &'static [LadderRung] {
        &[
            LadderRung::WeightLoad,
            LadderRung::Compile,
            LadderRung::Warmup,
        ]
    }

    pub fn from_stopped_total(&self) -> Duration {
        Self::rungs_from_stopped()
            .iter()
            .map(|r| self.rung(*r))
            .sum()
    }
}

/// When and how fast the controller moves a pool. See [`crate::controller`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScalingPolicy {
    /// HPA rule: waiting requests per ready replica to aim for. `None` turns the rule off.
    pub target_queue_per_replica: Option<f64>,
    /// HPA rule: a usage ratio within this of 1 changes nothing (the HPA's 0.1).
    pub tolerance: f64,
    /// Oldest-age rule: scale out when the oldest eligible request has waited longer than this
    /// while arrivals exceed departures for two consecutive windows. `None` turns it off.
    pub oldest_age_threshold: Option<Duration>,
    /// Successful requests per second one ready replica sustains for the measured request mix;
    /// used until departures are measured.
    pub replica_throughput_rps: f64,
    /// Tokens per second one ready replica sustains: set, and with signals that count queued
    /// tokens, the backlog-drain rule sizes the pool in tokens instead of requests.
    pub replica_throughput_tps: Option<f64>,
    /// Backlog-drain rule: the queue should be drained within this long.
    pub backlog_drain: Duration,
    /// Backlog-drain rule: the arrivals are served at this share of the replicas' throughput,
    /// leaving the rest for variance (1 runs them flat out, where any burst queues at once).
    pub target_utilization: f64,
    /// A scale-up needs this many breaching windows in a row...
    pub scale_up_breaches: u32,
    /// ...of this length (two 15 s breaches by default).
    pub breach_window: Duration,
    /// At most this many replicas added per `scale_up_period`; with the objective at risk,
    /// the pool's parked warm nodes are woken past it: the limit paces buying new nodes.
    pub scale_up_limit: u32,
    pub scale_up_period: Duration,
    /// The longest a replica above demand is kept before it goes. Within it, scale-in waits
    /// the break-even of getting the replica back: a wake (the rungs after the disk) before it
    /// parks one in the warm pool, a cold start before it releases one.
    pub scale_down_stabilization: Duration,
    /// Nothing goes while the queue per replica or the oldest age is at or above this fraction
    /// of its threshold.
    pub scale_down_fraction: f64,
    /// Replicas kept above what the rules want, as a share of it, when scaling in.
    pub scale_down_margin: f64,
    /// At least this long between two scale-in steps (each step takes the whole surplus).
    pub scale_down_period: Duration,
    /// At most one change of direction (up after down, down after up) per cooldown.
    pub direction_cooldown: Duration,
    /// Replicas kept whatever the signal says, for bursts shorter than the cold start.
    pub min_capacity: u32,
    /// Ready replicas kept above what the rules want while they want any: spare capacity that
    /// serves the first of a rise at once while more comes up the ladder, as an overprovisioning
    /// buffer of pause pods does under Karpenter. Not demand: neither the warm pool, the
    /// forecast nor shedding counts it.
    pub buffer_replicas: u32,
    /// GPU utilisation at or above this is "high" in the three-way classification.
    pub utilization_high: f64,
    /// A signal older than this is missing: the pool holds instead of scaling.
    pub signal_max_age: Duration,
    /// Decisions are computed and recorded but not executed.
    pub shadow: bool,
    /// Launch ahead of what the pool's own history says recurs ([`crate::forecast`]).
    pub forecast: bool,
    /// Per priority tier (low, normal, high, critical): how long its requests stay useful.
    /// A tier with a deadline is shed only for the part of its backlog the capacity ready and
    /// on its way cannot start within it (`headroom_core::shedding`), when signals count the
    /// tier's queue.
    pub shed_deadlines: [Option<Duration>; 4],
}

impl ScalingPolicy {
    /// The deadline set for `priority`, if any.
    pub fn shed_deadline(&self, priority: crate::Priority) -> Option<Duration> {
        self.shed_deadlines[priority as usize]
    }
}

impl Default for ScalingPolicy {
    fn default() -> Self {
        ScalingPolicy {
            target_queue_per_replica: None,
            tolerance: 0.1,
            oldest_age_threshold: None,
            replica_throughput_rps: 1.0,
            replica_throughput_tps: None,
            backlog_drain: Duration::from_secs(60),
            target_utilization: 0.9,
            scale_up_breaches: 2,
            breach_window: Duration::from_secs(15),
            scale_up_limit: 100,
            scale_up_period: Duration::from_secs(60),
            scale_down_stabilization: Duration::from_secs(600),
            scale_down_fraction: 0.2,
            scale_down_margin: 0.05,
            scale_down_period: Duration::ZERO,
            direction_cooldown: Duration::from_secs(60),
            min_capacity: 0,
            buffer_replicas: 0,
            utilization_high: 0.7,
            signal_max_age: Duration::from_secs(30),
            shadow: false,
            forecast: true,
            shed_deadlines: [None; 4],
        }
    }
}

/// A pool's specification, validated at the configuration edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolSpec {
    pub name: PoolName,
    /// The budget account this pool's spend is charged to.
    pub account: AccountName,
    /// Allowed offerings; the planner picks the cheapest available one.
    pub offerings: Vec<OfferingId>,
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// At most this many wakes and launches in one plan.
    pub max_scale_up_per_step: u32,
    /// Stopped nodes kept past the ladder, ready to wake.
    pub warm_pool_size: u32,
    pub ladder: ColdStartLadder,
    pub scaling: ScalingPolicy,
    pub supply: SupplyPolicy,
}

impl PoolSpec {
    /// The most nodes the warm pool may hold: `warm_pool_max`, by default the pool's room above
    /// its floor, never below `warm_pool_size`. A pool whose warm nodes keep running pays for
    /// each by the hour, so it never grows past its floor.
    pub fn warm_ceiling(&self) -> u32 {
        if self.supply.warm_mode == WarmMode::Running {
            return self.warm_pool_size;
        }
        let room = self.max_replicas.saturating_sub(self.min_replicas);
        self.supply
            .warm_pool_max
            .unwrap_or(room)
            .max(self.warm_pool_size)
    }
}

/// How a warm node waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarmMode {
    /// Stopped: costs only its disk; waking skips node acquisition and image pull.
    #[default]
    Stopped,
    /// Running without traffic: billed by the hour, serves the moment it is woken.
    Running,
}

impl WarmMode {
    pub fn as_str(self) -> &'static str {
        match self {
            WarmMode::Stopped => "stopped",
            WarmMode::Running => "running",
        }
    }
}

/// Where a pool's capacity comes from and what the governor allows it to buy: the order of
/// supply after warm nodes and reservations, and the limits that stop a stampede.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupplyPolicy {
    /// New replicas up to this count are on-demand (reservations count toward it)...
    pub on_demand_base: u32,
    /// ...and of the replicas above the base, this percentage goes to spot (0..=100), like an
    /// auto scaling group's mixed instances policy.
    pub spot_percent_above_base: u32,
    /// Spot offerings whose price in force is above this are not bought. The bid sent to the
    /// cloud is each offering's own configured price.
    pub spot_max_price: Option<Money>,
    pub warm_mode: WarmMode,
    /// Serving nodes released by scale-in refill the warm pool instead of terminating.
    pub reuse_on_scale_in: bool,
    /// A pool that serves this pool's traffic when no offering of its own can (a smaller model).
    pub fallback_pool: Option<PoolName>,
    /// At most this many launches per `launch_period`, whatever asks for them.
    pub max_launches_per_period: Option<u32>,
    pub launch_period: Duration,
    /// Replace on-demand nodes above the spot share with spot ones when spot is available and
    /// cheaper again (after a stockout or a price spike pushed the pool to on-demand): make
    /// before break, a quarter of the pool at a time.
    pub rebalance_to_spot: bool,
    /// The most nodes the warm pool grows to by parking what scale-in releases; `None`: the
    /// pool's room above its floor (`max_replicas - min_replicas`). See
    /// [`PoolSpec::warm_ceiling`].
    pub warm_pool_max: Option<u32>,
    /// How far back the warm pool is sized from: the largest rise in demand within a cold start
    /// over this long is what a burst needs parked.
    pub warm_history: Duration,
}

impl Default for SupplyPolicy {
    fn default() -> Self {
        SupplyPolicy {
            on_demand_base: 0,
            spot_percent_above_base: 100,
            spot_max_price: None,
            warm_mode: WarmMode::Stopped,
            reuse_on_scale_in: true,
            fallback_pool: None,
            max_launches_per_period: None,
            launch_period: Duration::from_secs(60),
            rebalance_to_spot: false,
            warm_pool_max: None,
            warm_history: Duration::from_secs(24 * 3600),
        }
    }
}
