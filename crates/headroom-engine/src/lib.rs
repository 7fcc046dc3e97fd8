//! Headroom's engine: the executor that applies the core's plans through the ledger and a cloud,
//! and the reconcile loop that runs it. The configuration it runs on is `headroom_config`'s.
//!
//! Deciding and doing are split: [`headroom_core::controller`] and [`headroom_core::planner`]
//! decide with no I/O; [`Engine::tick`] observes the cloud, asks them, and applies the plan,
//! writing a ledger intent before every cloud mutation and an outcome after it.

pub mod alerts;
pub mod bounded_cloud;
pub mod cluster;
mod engine;
mod http;
pub mod metrics;
pub mod process_metrics;
pub mod prometheus;
pub mod scrape;
pub mod signal_sources;
pub mod views;

pub use cluster::{Cluster, ClusterError, ClusterNodeKey, ClusterNodeView, DrainProgress};
pub use engine::{
    Clamp, DECISION_LOG_LEN, DecisionPage, DecisionRecord, DeclaredWindow, Engine, EngineError,
    OfferingPrice, PoolStatus, ReplicaQueues, SignalInput, error_chain, sim_cloud_for,
};
