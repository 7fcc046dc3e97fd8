//! Headroom's simulator: request arrivals (synthetic or a trace), a serving model with
//! continuous batching, priority tiers and deadlines, and the policies users compare — the real
//! engine (`headroom`), the Kubernetes HPA on GPU utilisation and on queue depth, KEDA over
//! Karpenter with an overprovisioning buffer, EC2-style predictive scaling, static capacity and
//! an oracle — in virtual time against the simulated cloud.

pub mod arrivals;
pub mod corpus;
pub mod error;
pub mod golden;
pub mod model;
pub mod render;
pub mod replay;
pub mod reserve;
pub mod run;
pub mod scenario;
pub mod spot_trace;
pub mod traffic;

pub use error::SimError;
pub use run::{Policy, Report, run, run_keeping_ledger};
pub use scenario::Scenario;
pub use traffic::{BurstProfile, QueueModel};
