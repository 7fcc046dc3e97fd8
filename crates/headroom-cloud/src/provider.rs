//! The contract between Headroom and a cloud.

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use headroom_core::{
    ErrorClass, LadderRung, Money, Offering, OfferingId, ProviderKind, QuotaHeadroom, Timestamp,
};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The cloud's own identifier of an instance (`i-0abc…`, a GCE instance name, `sim-42`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InstanceId(pub String);

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Tags (labels on GCP) that make an instance recognisably ours after a crash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnershipTags {
    /// The Headroom deployment that owns the instance; `list_owned` filters on it.
    pub cluster: String,
    pub pool: String,
    pub node: String,
    pub request: Option<String>,
}

impl OwnershipTags {
    pub fn to_map(&self) -> BTreeMap<String, String> {
        let mut tags = BTreeMap::from([
            ("headroom-cluster".to_string(), self.cluster.clone()),
            ("headroom-pool".to_string(), self.pool.clone()),
            ("headroom-node".to_string(), self.node.clone()),
        ]);
        if let Some(request) = &self.request {
            tags.insert("headroom-request".to_string(), request.clone());
        }
        tags
    }
}

/// One launch: one instance of one offering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    pub offering: Offering,
    /// Derived from the ledger intent; the same token never yields a second instance
    /// (AWS `ClientToken`, GCP `requestId`).
    pub client_token: String,
    pub tags: OwnershipTags,
    /// What the instance runs at first boot (cloud-init / nodeadm), rendered per node when a
    /// cluster is configured with a bootstrap; `None` leaves the image's or template's own.
    pub user_data: Option<String>,
}

/// Where an instance is, as the provider can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "phase", content = "rung", rename_all = "snake_case")]
pub enum InstancePhase {
    /// Accepted, not yet running.
    Pending,
    /// Running and climbing the cold-start ladder. Providers that cannot see inside the node
    /// report the rung they last know of; readiness then comes from the cluster.
    Booting(LadderRung),
    /// Past the ladder and able to serve.
    Ready,
    Stopped,
    Terminated,
    /// Reclaimed by the cloud (spot).
    Interrupted,
}

impl InstancePhase {
    /// Accepted and not stopped or gone: pending, booting or ready. Such an instance holds its
    /// host (and the simulated cloud bills its compute).
    pub fn is_running(self) -> bool {
        matches!(
            self,
            InstancePhase::Pending | InstancePhase::Booting(_) | InstancePhase::Ready
        )
    }
}

/// An instance as the provider describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    pub id: InstanceId,
    pub offering: OfferingId,
    pub client_token: String,
    pub tags: OwnershipTags,
    pub phase: InstancePhase,
    pub launched_at: Timestamp,
    /// Set once the cloud has announced it will reclaim this (spot) instance at the instant
    /// given (AWS's two-minute warning, a GCE preemption notice): the planner replaces it now.
    #[serde(default)]
    pub interruption_notice: Option<Timestamp>,
}

/// A provider call that failed, classified once for every cloud.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CloudError {
    /// The cloud answered no. `code` is the provider's own code (`InsufficientInstanceCapacity`,
    /// `ZONE_RESOURCE_POOL_EXHAUSTED`, …) so an operator can search for it.
    #[error("{provider} refused with {code} ({}): {message}", class.as_str())]
    Refused {
        provider: ProviderKind,
        class: ErrorClass,
        code: String,
        message: String,
    },
    #[error("instance {0} does not exist")]
    NotFound(InstanceId),
}

impl CloudError {
    pub fn class(&self) -> ErrorClass {
        match self {
            CloudError::Refused { class, .. } => *class,
            CloudError::NotFound(_) => ErrorClass::NotFound,
        }
    }

    pub fn code(&self) -> &str {
        match self {
            CloudError::Refused { code, .. } => code,
            CloudError::NotFound(_) => "NotFound",
        }
    }
}

/// What a provider knows of a region's quotas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "quotas", content = "headroom", rename_all = "snake_case")]
pub enum Quotas {
    /// The provider cannot read quotas: nothing is skipped for quota, the cloud's refusal stays
    /// the answer.
    Unknown,
    /// Every quota the asked offerings count against (empty: none limits them).
    Known(Vec<QuotaHeadroom>),
}

/// What Headroom needs from a cloud. Every implementation passes the shared contract suite in
/// [`crate::contract`] (feature `contract`).
///
/// Contract, for every method:
/// - Calls are idempotent where the cloud allows it and safe to repeat after a crash: the
///   executor records an intent in the ledger before each call and an outcome after it, and on
///   restart it repeats or reconciles, never guesses.
/// - Errors are [`CloudError`]s with an [`ErrorClass`]; callers decide what to do per class
///   (fall back, retry on the next activation, alert). Implementations do not retry `Capacity`,
///   `Quota`, `Price` or `InvalidRequest` themselves, and retry `Throttled`/`Transient` at most
///   within their SDK's own bounded policy, never in a loop of their own.
/// - Nothing blocks for long: every call returns within the provider's configured timeout.
#[async_trait]
pub trait CloudProvider: Send + Sync + fmt::Debug {
    fn kind(&self) -> ProviderKind;

    /// The composite this is, if it is one ([`crate::MultiCloud`]): its callers then label and
    /// bound each member's calls apart, since one `kind` cannot name several clouds.
    fn as_multi(&self) -> Option<&crate::MultiCloud> {
        None
    }

    /// Launches one instance of `spec.offering`, tagged with `spec.tags`.
    ///
    /// Must: return the *same* instance when called again with the same `client_token` (even
    /// after that instance has changed phase), and create nothing when it returns an error.
    /// A refusal for want of capacity, quota or price comes back as `Refused` with that class.
    async fn launch(&self, spec: &LaunchSpec) -> Result<Instance, CloudError>;

    /// Starts a stopped instance. Starting one that is already booting or ready is a no-op that
    /// returns it. `NotFound` for unknown or terminated instances.
    async fn start(&self, id: &InstanceId) -> Result<Instance, CloudError>;

    /// Stops a running instance, keeping its disk, so a later `start` skips node acquisition and
    /// image pull. Stopping a stopped instance is a no-op.
    async fn stop(&self, id: &InstanceId) -> Result<Instance, CloudError>;

    /// Terminates an instance. Idempotent: terminating a terminated instance succeeds.
    /// `NotFound` only for ids the provider has never seen.
    async fn terminate(&self, id: &InstanceId) -> Result<(), CloudError>;

    /// Describes one instance, including terminated ones the cloud still remembers.
    async fn describe(&self, id: &InstanceId) -> Result<Instance, CloudError>;

    /// Every instance tagged with `cluster` that is not terminated: the inventory that
    /// reconciliation compares with the ledger.
    async fn list_owned(&self, cluster: &str) -> Result<Vec<Instance>, CloudError>;

    /// [`Self::list_owned`] per cloud: a composite answers for each member apart, so that a
    /// cloud that cannot be read leaves the others' inventories usable (the engine then leaves
    /// that cloud's nodes as they were). A single cloud answers for itself.
    async fn list_owned_each(
        &self,
        cluster: &str,
    ) -> Vec<(ProviderKind, Result<Vec<Instance>, CloudError>)> {
        vec![(self.kind(), self.list_owned(cluster).await)]
    }

    /// The price in force now, per hour, of those `offerings` the cloud quotes a live price for
    /// (spot markets: AWS's spot price history). Offerings left out keep their configured price.
    /// The default quotes nothing: list prices come from the configured catalog.
    async fn current_prices(
        &self,
        offerings: &[Offering],
    ) -> Result<Vec<(OfferingId, Money)>, CloudError> {
        let _ = offerings;
        Ok(Vec::new())
    }

    /// The quotas of `region` that launches of `offerings` (the configured offerings in
    /// `region`) count against: per quota its cloud name, unit, limit and what is in use across
    /// the whole account or project (a quota counts instances Headroom does not own too), and
    /// what one node of each covered offering draws. Read-only and cheap enough to call once a
    /// region every few minutes (the engine caches it, `engine.quota_cache_ttl`); a failure is
    /// a `CloudError` like any call's, and the engine then plans as if the quotas were unknown.
    /// The default knows no quotas ([`Quotas::Unknown`]): nothing is skipped before a launch.
    async fn quota_headroom(
        &self,
        region: &str,
        offerings: &[Offering],
    ) -> Result<Quotas, CloudError> {
        let _ = (region, offerings);
        Ok(Quotas::Unknown)
    }
}
