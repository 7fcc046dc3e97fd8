//! Headroom's pure core.
//!
//! Everything here is a function of its arguments: no I/O, no clock reads (`now` is always a
//! parameter), no global state. The same code runs in `headroom serve`, in the simulator and in
//! tests, so any decision can be replayed from the ledger.

pub mod budget;
pub mod controller;
pub mod cost;
pub mod error;
pub mod forecast;
pub mod money;
pub mod names;
pub mod node;
pub mod offering;
pub mod planner;
pub mod pool;
pub mod promotion;
pub mod quota;
pub mod refusal;
pub mod renewal;
pub mod request;
pub mod shedding;
pub mod transient;
pub mod warm_pool;

pub use budget::{Budget, BudgetPeriod, HardAction};
pub use error::CoreError;
pub use money::Money;
pub use names::{AccountName, OfferingId, PoolName};
pub use node::{LadderRung, NodeId, NodeState};
pub use offering::{Market, Offering, ProviderKind, ReservedCapacity};
pub use pool::{ColdStartLadder, PoolSpec, SupplyPolicy, WarmMode};
pub use quota::{QuotaDraw, QuotaHeadroom, QuotaUnit};
pub use refusal::{ErrorClass, RefusalReason};
pub use request::{CapacityRequest, Priority, RequestId, RequestState};
pub use transient::{TransientFailures, TransientVerdict};
pub use warm_pool::{DemandHistory, WarmPoolSize, warm_pool_size};

/// Wall-clock instant in UTC. The core never produces one itself; callers pass `now`.
pub type Timestamp = chrono::DateTime<chrono::Utc>;

/// A `std::time::Duration` setting as a chrono duration, or `fallback` (its default) when it is
/// too long to count in.
pub fn chrono_or(d: std::time::Duration, fallback: chrono::Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(fallback)
}
