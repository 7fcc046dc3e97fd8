//! Clouds as Headroom sees them: the [`CloudProvider`] trait and its written contract, the
//! clocks, the simulated cloud that is the embedded default, and the composite that routes one
//! deployment's calls to several clouds.

pub mod clock;
#[cfg(feature = "contract")]
pub mod contract;
mod multi;
mod provider;
pub mod sim;

pub use clock::{Clock, ManualClock, ScaledClock, SystemClock};
pub use headroom_core::{QuotaDraw, QuotaHeadroom, QuotaUnit};
pub use multi::MultiCloud;
pub use provider::{
    CloudError, CloudProvider, Instance, InstanceId, InstancePhase, LaunchSpec, OwnershipTags,
    Quotas,
};
pub use sim::{SimCloud, SimConfig, SimOffering};
