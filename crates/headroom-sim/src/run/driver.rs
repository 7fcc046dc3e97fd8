//! What the run loop asks of a policy, whatever it is: the real engine, a baseline, the oracle.

use std::collections::{BTreeMap, HashMap};

use headroom_cloud::{InstancePhase, SimCloud};
use headroom_core::{Offering, OfferingId};

use crate::error::SimError;
use crate::model::{Gate, Model, ReplicaSpec};
use crate::scenario::{Scenario, SimPool};

/// What a policy's control step leaves for one pool's model and the books.
#[derive(Debug, Clone, Default)]
pub struct Control {
    /// Replicas the policy wants ready now.
    pub desired: u32,
    /// Nodes on their way to serving.
    pub starting: u32,
    /// The replicas serving now, by instance id.
    pub ready: BTreeMap<String, ReplicaSpec>,
    /// The policy's admission answer now, per priority (baselines have no shedder).
    pub admission: Vec<Gate>,
    /// Replicas of demand the policy hands to the pool's smaller model (`handed_to_fallback` in
    /// Headroom's pool status): while above zero, the serving layer sends the pool's waiting
    /// requests of `smaller_model` tiers to the fallback pool's spare slots.
    pub handed_to_fallback: u32,
}

/// What a policy did over the run besides serving: the cloud's refusals by reason, its
/// fallbacks by kind and, for Headroom, its decision log.
#[derive(Debug, Clone, Default)]
pub struct Books {
    pub refusals: BTreeMap<String, u64>,
    pub fallbacks: BTreeMap<String, u64>,
    pub decisions: Vec<serde_json::Value>,
}

/// One policy under simulation, over every simulated pool. The run loop calls `control` once per
/// tick before the models advance, then `paying` for what the tick cost; each policy has its
/// own simulated cloud, which its pools share (the oracle has none: it plans on the scenario).
pub(crate) trait PolicyDriver {
    /// Whether the serving layer in front of this policy sheds tiers by its answer.
    fn sheds(&self) -> bool {
        false
    }

    /// The policy's own cloud, which the scenario's faults hit; `None` for the oracle.
    fn cloud(&self) -> Option<&SimCloud>;

    /// One control step at virtual time `t` (seconds into the run): per pool, in the order of
    /// `sc.pools` (and of `models`).
    async fn control(
        &mut self,
        sc: &Scenario,
        t: f64,
        models: &[Model<'_>],
    ) -> Result<Vec<Control>, SimError>;

    /// What each pool costs during the tick starting at `t`: dollars per hour and GPUs.
    fn paying(&self, t: f64) -> Vec<(f64, f64)>;

    /// Refusals and fallbacks over the run, `end_s` seconds long.
    async fn books(&self, end_s: f64) -> Result<Books, SimError>;
}

/// What the nodes of `pool` running in `cloud` cost now: dollars per hour and GPUs. Booting and
/// ready nodes are paid; stopped warm nodes pay their volumes (the offering's
/// `warm_usd_per_hour`). Spot bills at the market price, whatever a policy believed it would.
pub fn cloud_paying(
    cloud: &SimCloud,
    pool: &str,
    offerings: &HashMap<OfferingId, Offering>,
) -> (f64, f64) {
    let (mut usd_per_hour, mut gpus) = (0.0, 0.0);
    for i in cloud
        .instances_in_play()
        .into_iter()
        .filter(|i| i.tags.pool == pool)
    {
        let Some(o) = offerings.get(&i.offering) else {
            continue;
        };
        if i.phase.is_running() {
            let price = cloud
                .spot_price(&i.offering)
                .unwrap_or(o.price_usd_per_hour);
            usd_per_hour += price.as_f64_lossy();
            gpus += o.gpus_per_node as f64;
        } else if i.phase == InstancePhase::Stopped {
            // A stopped instance keeps its volumes, and the cloud bills them.
            usd_per_hour += o.warm_usd_per_hour.as_f64_lossy();
        }
    }
    (usd_per_hour, gpus)
}

/// The replicas serving now (instance id → GPUs) as the model sees them: each at the pool's
/// speed on the offering its instance runs on.
pub fn ready_replicas(
    cloud: &SimCloud,
    pool: &SimPool,
    serving: impl IntoIterator<Item = (String, u32)>,
) -> BTreeMap<String, ReplicaSpec> {
    let offering_of: HashMap<String, OfferingId> = cloud
        .instances_in_play()
        .into_iter()
        .map(|i| (i.id.0, i.offering))
        .collect();
    serving
        .into_iter()
        .map(|(id, gpus)| {
            let service = offering_of
                .get(&id)
                .map_or(pool.service, |o| pool.service_on(o));
            (id, ReplicaSpec { gpus, service })
        })
        .collect()
}
