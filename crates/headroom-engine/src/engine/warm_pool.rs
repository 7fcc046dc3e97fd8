//! The warm pool's size, adapted to the pool's bursts: the engine keeps each pool's demand
//! history under its control lock and asks the core for the size
//! (`headroom_core::warm_pool`, which holds the rule).

use std::collections::HashMap;

use headroom_core::{DemandHistory, PoolName, PoolSpec, Timestamp, WarmPoolSize};

use super::{Engine, lock};

/// Records the demand the controller measured for `pool` (what its rules asked for).
pub(super) fn note_demand(
    histories: &mut HashMap<PoolName, DemandHistory>,
    pool: &PoolSpec,
    demand: u32,
    now: Timestamp,
) {
    histories
        .entry(pool.name.clone())
        .or_default()
        .note_for(pool, now, demand);
}

impl Engine {
    /// The warm pool's size now, and why.
    pub(super) fn warm_size(&self, pool: &PoolSpec) -> WarmPoolSize {
        headroom_core::warm_pool_size(pool, lock(&self.control).demand.get(&pool.name))
    }
}
