//! Pools: one fleet per workload class, and the policy that shapes it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{AccountName, LadderRung, OfferingId, PoolName};

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
    /// Successful requests per second one ready replica sustains for the measured request mix.
    pub replica_throughput_rps: f64,
    /// The backlog should be drained within this long.
    pub backlog_drain: Duration,
    /// Desired must stay below the current target this long before one replica is removed.
    pub scale_down_stabilization: Duration,
    /// A signal older than this is missing: the pool holds instead of scaling.
    pub signal_max_age: Duration,
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
}
