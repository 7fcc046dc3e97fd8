//! The GCP provider: Compute Engine instances through the official `google-cloud-compute-v1`
//! client, behind the [`headroom_cloud::CloudProvider`] contract.
//!
//! - [`GcpProvider`]: launch (insert from an instance template or a boot image; SPOT or
//!   STANDARD; reservation affinity for reserved offerings), start/stop or resume/suspend for
//!   warm pools, delete, describe, list by label; spot preemption from zone operations.
//! - [`errors`]: GCP's errors, HTTP or inside a finished operation, mapped to the taxonomy.
//! - [`GcpSettings`]: the `[gcp]` table.
//! - [`federation`]: credentials on AWS ECS/Fargate by workload identity federation from the
//!   task role (the library alone cannot read the container credentials endpoint).
//! - `server` (feature `test-server`): a local Compute API server for tests and trials.

pub mod errors;
pub mod federation;
pub mod iam;
pub mod naming;
mod provider;
pub mod quotas;
#[cfg(feature = "test-server")]
pub mod server;
pub mod settings;

pub use provider::{GcpProvider, PREEMPTED_OPERATION, Times, phase_of};
pub use settings::{Credentials, GcpSettings, TerminationAction, WarmMode};

/// The crate's own errors: configuration and client construction. Provider calls fail with
/// [`headroom_cloud::CloudError`].
#[derive(Debug, thiserror::Error)]
pub enum GcpError {
    /// One line naming the key and the fix.
    #[error("{0}")]
    Config(String),
    #[error("gcp: cannot build the Compute Engine client: {0}")]
    Client(String),
}
