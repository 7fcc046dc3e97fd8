//! Orphans: instances tagged with this deployment's cluster id that the ledger does not know — a
//! node the ledger ended that the cloud kept, an instance made by hand or by an older deployment
//! with our tags, an Auto Scaling group instance no launch claimed. `engine.orphan_policy` decides:
//! `terminate` (the default) ends them, since they cost money and serve nobody; `report` leaves
//! them and raises `OrphanInstances`, for adopting Headroom into an account that may already hold
//! such instances. Either way each one is written once to its pool's decision log and counted in
//! `headroom_orphan_instances`.

use std::collections::{BTreeMap, HashSet};

use headroom_cloud::{CloudError, Instance, InstanceId};
use headroom_config::OrphanPolicy;
use headroom_core::{PoolName, Timestamp};

use super::{Engine, EngineError, lock};

impl Engine {
    /// The pool an orphan belongs to: its tag's, or — for pools no longer configured — the
    /// first pool, whose owner cleans them.
    pub(super) fn orphan_pool(&self, orphan: &Instance) -> Option<PoolName> {
        orphan
            .tags
            .pool
            .parse::<PoolName>()
            .ok()
            .filter(|p| self.config.pool(p).is_some())
            .or_else(|| self.config.pools.first().map(|p| p.name.clone()))
    }

    /// Terminates or reports `orphans`, each with the pool it is counted under. Returns them by
    /// pool, for the alert rules.
    pub(super) async fn handle_orphans(
        &self,
        orphans: &[(PoolName, &Instance)],
        now: Timestamp,
    ) -> Result<BTreeMap<PoolName, Vec<InstanceId>>, EngineError> {
        let policy = self.config.engine.orphan_policy;
        let mut by_pool: BTreeMap<PoolName, Vec<InstanceId>> = BTreeMap::new();
        for (pool, orphan) in orphans {
            by_pool
                .entry(pool.clone())
                .or_default()
                .push(orphan.id.clone());
            let first_seen = lock(&self.observed).orphans_seen.insert(orphan.id.clone());
            if first_seen {
                let entry = serde_json::json!({
                    "event": "orphan",
                    "instance": orphan.id,
                    "node": orphan.tags.node,
                    "offering": orphan.offering,
                    "policy": policy.as_str(),
                    "reason": "tagged with this deployment's cluster id but unknown to the ledger",
                });
                self.log_event(pool, entry, now).await?;
            }
            match policy {
                OrphanPolicy::Report => {
                    if first_seen {
                        tracing::warn!(instance = %orphan.id, node = %orphan.tags.node, %pool, "orphaned instance left running (engine.orphan_policy = report)");
                    }
                }
                OrphanPolicy::Terminate => {
                    tracing::warn!(instance = %orphan.id, node = %orphan.tags.node, %pool, "terminating orphaned instance");
                    match self.cloud.terminate(&orphan.id).await {
                        Ok(()) | Err(CloudError::NotFound(_)) => {}
                        Err(e) => {
                            tracing::warn!(instance = %orphan.id, error = %e, "orphan termination failed; next tick retries")
                        }
                    }
                }
            }
        }
        for pool in &self.config.pools {
            let count = by_pool.get(&pool.name).map_or(0, Vec::len);
            self.metrics
                .orphan_instances
                .get_or_create(&crate::metrics::PoolLabels::of(pool))
                .set(count as i64);
        }
        let current: HashSet<&InstanceId> = by_pool.values().flatten().collect();
        lock(&self.observed)
            .orphans_seen
            .retain(|id| current.contains(id));
        Ok(by_pool)
    }
}
