//! What the run loop asks of a policy, whatever it is: the real engine, a baseline, the oracle.

use std::collections::{BTreeMap, HashMap};

use headroom_cloud::{InstancePhase, SimCloud};
use headroom_core::{Offering, OfferingId};

use crate::error::SimError;
use crate::model::{Gate, Model};

/// What a policy's control step leaves for the model and the books.
#[derive(Debug, Clone, Default)]
pub struct Control {
    /// Replicas the policy wants ready now.
    pub desired: u32,
    /// Nodes on their way to serving.
    pub starting: u32,
    /// The replicas serving now: instance id → GPUs.
    pub ready: BTreeMap<String, u32>,
    /// The policy's admission answer now, per priority (baselines have no shedder).
    pub admission: Vec<Gate>,
}

/// What a policy did over the run besides serving: the cloud's refusals by reason and its
/// fallbacks by kind.
#[derive(Debug, Clone, Default)]
pub struct Books {
    pub refusals: BTreeMap<String, u64>,
    pub fallbacks: BTreeMap<String, u64>,
}

/// One policy under simulation. The run loop calls `control` once per tick before the model
/// advances, then `paying` for what the tick cost; each policy has its own simulated cloud (the
/// oracle has none: it plans on the scenario itself).
pub(crate) trait PolicyDriver {
    /// Whether the serving layer in front of this policy sheds tiers by its answer.
    fn sheds(&self) -> bool {
        false
    }

    /// The policy's own cloud, which the scenario's faults hit; `None` for the oracle.
    fn cloud(&self) -> Option<&SimCloud>;

    /// One control step at virtual time `t` (seconds into the run).
    async fn control(&mut self, t: f64, model: &Model<'_>) -> Result<Control, SimError>;

    /// What the policy pays for during the tick starting at `t`: dollars per hour and GPUs.
    fn paying(&self, t: f64) -> (f64, f64);

    /// Refusals and fallbacks over the run, `end_s` seconds long.
    async fn books(&self, end_s: f64) -> Result<Books, SimError>;
}

/// What the nodes of `pool` running in `cloud` cost now: dollars per hour and GPUs. Booting and
/// ready nodes are paid; stopped warm nodes cost only their disks, which the simulated cloud
/// does not price. Spot bills at the market price, whatever a policy believed it would.
pub fn cloud_paying(
    cloud: &SimCloud,
    pool: &str,
    offerings: &HashMap<OfferingId, Offering>,
) -> (f64, f64) {
    let (mut usd_per_hour, mut gpus) = (0.0, 0.0);
    for i in cloud.all_instances().into_iter().filter(|i| {
        i.tags.pool == pool
            && matches!(
                i.phase,
                InstancePhase::Pending | InstancePhase::Booting(_) | InstancePhase::Ready
            )
    }) {
        if let Some(o) = offerings.get(&i.offering) {
            let price = cloud
                .spot_price(&i.offering)
                .unwrap_or(o.price_usd_per_hour);
            usd_per_hour += price.as_f64_lossy();
            gpus += o.gpus_per_node as f64;
        }
    }
    (usd_per_hour, gpus)
}
