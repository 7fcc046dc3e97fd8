//! What the engine remembers of a pool's recent past — launches in the current launch period,
//! the cloud's recent refusals of its offerings, the demand history, the controller's memory, the
//! alerts firing and, with a cluster, the readiness rungs already stamped — rebuilt from the
//! ledger when this process takes the pool (at start, or on taking over another replica's
//! lease). Without it a restart would forget the per-period limit, send one more launch to every
//! offering that just refused, stamp rungs a second time, count the controller's windows and
//! cooldowns afresh, and send every firing alert again as new.

use std::collections::{BTreeSet, VecDeque};

use headroom_core::{NodeState, PoolName, PoolSpec, Timestamp, chrono_or};

use super::offerings::RECENT_REFUSALS;
use super::{Engine, EngineError, lock};

impl Engine {
    pub(super) async fn restore_recent_history(
        &self,
        owned: &BTreeSet<PoolName>,
    ) -> Result<(), EngineError> {
        let taken: Vec<&PoolSpec> = {
            let mut observed = lock(&self.observed);
            // A pool another replica owned meanwhile has a history this process did not see.
            observed.restored.retain(|p| owned.contains(p));
            self.config
                .pools
                .iter()
                .filter(|p| owned.contains(&p.name) && !observed.restored.contains(&p.name))
                .collect()
        };
        if taken.is_empty() {
            return Ok(());
        }
        let now = self.clock.now();
        let cooldown = chrono_or(
            self.config.engine.offering_cooldown,
            chrono::Duration::minutes(3),
        );
        let refusals = self
            .ledger
            .refusals_between(now - RECENT_REFUSALS.max(cooldown), now)
            .await?;
        for pool in taken {
            let period = chrono_or(pool.supply.launch_period, chrono::Duration::minutes(1));
            let launches: VecDeque<Timestamp> = self
                .ledger
                .pool_events(&pool.name)
                .await?
                .into_iter()
                .filter(|e| e.state == NodeState::Requested && e.at > now - period)
                .map(|e| e.at)
                .collect();
            if self.cluster.is_some() {
                self.load_rung_stamps(&pool.name).await?;
            }
            self.restore_demand(pool, now).await?;
            self.restore_controller_memory(&pool.name).await?;
            self.restore_alert_book(pool.name.as_str()).await?;
            if self
                .config
                .pools
                .first()
                .is_some_and(|p| p.name == pool.name)
            {
                self.restore_alert_book("").await?;
            }
            // What this process saw itself is never replaced, only what it cannot have seen.
            if !launches.is_empty() {
                lock(&self.control)
                    .launch_log
                    .entry(pool.name.clone())
                    .or_insert(launches);
            }
            let mut book = lock(&self.offerings);
            for offering in &pool.offerings {
                if book.refusal_log.contains_key(offering) {
                    continue;
                }
                let mut times: Vec<Timestamp> = refusals
                    .iter()
                    .filter(|r| r.offering.as_ref() == Some(offering))
                    .filter(|r| r.reason.falls_back())
                    .map(|r| r.at)
                    .collect();
                if times.is_empty() {
                    continue;
                }
                times.sort();
                if let Some(last) = times.last()
                    && *last + cooldown > now
                {
                    book.unavailable_until
                        .insert(offering.clone(), *last + cooldown);
                }
                book.refusal_log.insert(
                    offering.clone(),
                    times
                        .into_iter()
                        .filter(|t| *t >= now - RECENT_REFUSALS)
                        .collect(),
                );
            }
            drop(book);
            lock(&self.observed).restored.insert(pool.name.clone());
        }
        Ok(())
    }
}
