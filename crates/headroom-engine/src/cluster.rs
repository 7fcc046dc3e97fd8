//! What the engine asks of a Kubernetes cluster, when one is configured (`[kube]`, implemented
//! by `headroom-kube`). Without one, the cloud's word decides readiness and releases are
//! immediate, as in `headroom demo`.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use headroom_core::{NodeId, PoolName, ProviderKind};

/// A failure talking to the cluster; the engine logs it and tries again on the next tick.
pub type ClusterError = Box<dyn std::error::Error + Send + Sync>;

/// How the cluster finds a ledger node: by the provider ID its kubelet reports
/// (`aws:///zone/i-…`, `gce://project/zone/name`, `sim:///zone/sim-N`) or Headroom's own node
/// label carrying the node id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNodeKey {
    pub pool: PoolName,
    pub node: NodeId,
    pub provider: ProviderKind,
    pub zone: String,
    /// The cloud's instance id (the last segment of the provider ID).
    pub instance: String,
}

/// What the cluster shows for one node, from its watch caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClusterNodeView {
    /// A Node object matches the key.
    pub registered: bool,
    /// Its `Ready` condition is `True`.
    pub node_ready: bool,
    /// A pod of the pool's model-server selector runs on it and is `Ready`.
    pub model_ready: bool,
    /// `spec.unschedulable` is set.
    pub cordoned: bool,
}

/// Where a drain stands after one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainProgress {
    /// Cordoned and no evictable pod is left (or the node never registered).
    Drained,
    /// Pods are still on the node; `blocked` of them were refused eviction by a
    /// PodDisruptionBudget (429) this step and are tried again on the next.
    Waiting { pods_left: u32, blocked: u32 },
}

/// The cluster seam. Reads come from caches kept by watches; the one call that talks to the API
/// server, `drain_step`, does a bounded amount of work and never waits for pods to leave, so a
/// tick is never blocked by a slow drain: the node stays `draining` across ticks.
#[async_trait]
pub trait Cluster: Send + Sync + fmt::Debug {
    fn node(&self, key: &ClusterNodeKey) -> ClusterNodeView;

    /// Cordons the node if it is not yet, asks the Eviction API once for each pod still on it
    /// (honouring PodDisruptionBudgets), and reports what is left.
    async fn drain_step(&self, key: &ClusterNodeKey) -> Result<DrainProgress, ClusterError>;

    /// Makes a node schedulable again: one Headroom cordoned to park warm and now wakes.
    async fn uncordon(&self, key: &ClusterNodeKey) -> Result<(), ClusterError>;

    /// The first-boot user data (cloud-init, nodeadm) that gives a node of `pool` its identity
    /// in the cluster: its pool's labels and taints and Headroom's node label. `None` when the
    /// image or launch template bootstraps nodes by itself. Rendered from settings, no API call.
    fn bootstrap(&self, pool: &PoolName, node: &NodeId, provider: ProviderKind) -> Option<String>;

    /// The pool's model-server pods the scheduler could not place (Pending, `PodScheduled`
    /// False with reason `Unschedulable`) whose node selector a node of the pool satisfies:
    /// replicas waiting for a node, a demand signal beside queue depth.
    fn unschedulable_pods(&self, pool: &PoolName) -> u32;

    /// A launched node that has not registered within this is failed, replaced and terminated.
    fn register_timeout(&self) -> Duration;

    /// A registered node whose model server is not Ready within this is failed, replaced and
    /// terminated. Counted from the same instant as `register_timeout`: the instance running,
    /// or the warm node being woken.
    fn ready_timeout(&self) -> Duration;

    /// A drain still waiting after this goes ahead (stop or terminate) anyway.
    fn drain_timeout(&self) -> Duration;

    /// The addresses (pod IPs) of the pool's model-server pods that are Ready and not
    /// terminating: the replicas a `[pools.scrape.pods]` scrape reads, so warming and draining
    /// replicas stay out of the pool's signal. Read from a cache, no API call.
    fn ready_model_pods(&self, pool: &PoolName) -> Vec<String> {
        let _ = pool;
        Vec::new()
    }
}
