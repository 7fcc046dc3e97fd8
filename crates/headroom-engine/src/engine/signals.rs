//! Queue signals as the engine receives them: pushed through the API or scraped
//! ([`crate::scrape`]), stamped on receipt, the latest kept per pool for the controller.

use std::collections::BTreeMap;
use std::sync::Arc;

use headroom_core::controller::Signals;
use headroom_core::{PoolName, Priority};
use headroom_ledger::LedgerError;

use super::{Engine, EngineError, lock};
use crate::views::{ReplicaQueues, SignalInput};

/// The per-tier part of a pool's latest signal.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct TierSignal {
    pub queued: BTreeMap<Priority, u64>,
    pub arrival_rps: BTreeMap<Priority, f64>,
    /// Each replica's own queue, when the source reports them.
    pub replica_queues: Vec<u64>,
}

/// A signal as processes share it through the ledger ([`Coordination::share_signal`]): already
/// stamped by the process that received it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct SharedSignal {
    pool: String,
    signal: Signals,
    #[serde(default)]
    queued: BTreeMap<Priority, u64>,
    #[serde(default)]
    arrival_rps: BTreeMap<Priority, f64>,
    #[serde(default)]
    replica_queues: Vec<u64>,
}

impl Engine {
    /// Records a queue sample for `pool`, stamped with the engine's clock on receipt, in this
    /// process only (scrapes, tests; see [`Engine::receive_signal`] for pushes).
    pub fn push_signal(&self, pool: &PoolName, input: SignalInput) {
        let (signal, tiers) = self.stamp(pool, input);
        self.keep_signal(pool, signal, tiers);
    }

    /// Records a pushed sample and shares it with every process on the ledger, so the one
    /// that holds the pool's lease sees it whichever replica the push reached.
    pub async fn receive_signal(
        &self,
        pool: &PoolName,
        input: SignalInput,
    ) -> Result<(), EngineError> {
        let (signal, tiers) = self.stamp(pool, input);
        self.keep_signal(pool, signal, tiers.clone());
        let shared = SharedSignal {
            pool: pool.to_string(),
            signal,
            queued: tiers.queued,
            arrival_rps: tiers.arrival_rps,
            replica_queues: tiers.replica_queues,
        };
        let payload = serde_json::to_string(&shared)
            .map_err(|e| LedgerError::Corrupt(format!("a signal could not be encoded: {e}")))?;
        self.ledger.share_signal(&payload).await?;
        Ok(())
    }

    fn stamp(&self, pool: &PoolName, input: SignalInput) -> (Signals, TierSignal) {
        let classes = self.config.age_classes.get(pool);
        let class_age = input
            .oldest_age_by_class_s
            .iter()
            .filter(|(class, _)| classes.is_none_or(|c| c.contains(*class)))
            .map(|(_, age)| *age)
            .reduce(f64::max);
        let oldest_age_s = match (input.oldest_age_s, class_age) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let signal = Signals {
            queue_depth: input.queue_depth,
            oldest_age_s,
            arrival_rate_rps: input.arrival_rate_rps,
            departure_rate_rps: input.departure_rate_rps,
            error_rate_rps: input.error_rate_rps,
            batch_occupancy: input.batch_occupancy,
            gpu_utilization: input.gpu_utilization,
            received_at: self.clock.now(),
            queued_tokens: input.queued_tokens,
            token_arrival_rate_tps: input.token_arrival_rate_tps,
        };
        let tiers = TierSignal {
            queued: input.queue_depth_by_priority,
            arrival_rps: input.arrival_rate_by_priority_rps,
            replica_queues: input.replica_queue_depths,
        };
        (signal, tiers)
    }

    /// Records why `pool`'s signal source could not give a signal this time (a scrape or query
    /// that failed). The last good signal still counts until it is stale; the pool's status
    /// and, once it holds, its reason say this.
    pub fn signal_source_failed(&self, pool: &PoolName, why: String) {
        let previous = lock(&self.source_errors).insert(pool.clone(), why.clone());
        if previous.as_ref() != Some(&why) {
            tracing::warn!(pool = %pool, error = %why, "the signal source failed");
        }
    }

    /// Why `pool`'s signal source last failed, if it has not given a signal since.
    pub(super) fn signal_source_error(&self, pool: &PoolName) -> Option<String> {
        lock(&self.source_errors).get(pool).cloned()
    }

    /// Keeps the sample unless a newer one is already kept: a shared copy can arrive after a
    /// later push.
    fn keep_signal(&self, pool: &PoolName, signal: Signals, tiers: TierSignal) {
        if lock(&self.source_errors).remove(pool).is_some() {
            tracing::info!(pool = %pool, "the signal source gives signals again");
        }
        let mut signals = lock(&self.signals);
        if signals
            .get(pool)
            .is_some_and(|(kept, _)| kept.received_at > signal.received_at)
        {
            return;
        }
        signals.insert(pool.clone(), (signal, tiers));
    }

    /// Keeps what other processes share until `shutdown` resolves; returns at once on a
    /// ledger only this process opens.
    pub async fn run_signal_feed(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::select! {
            () = shutdown => {}
            () = self.follow_shared_signals() => {}
        }
    }

    async fn follow_shared_signals(&self) {
        const RETRY: std::time::Duration = std::time::Duration::from_secs(1);
        loop {
            let mut feed = match self.ledger.shared_signals().await {
                Ok(Some(feed)) => feed,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for shared signals; retrying");
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            };
            loop {
                match feed.next().await {
                    Ok(payload) => self.keep_shared(&payload),
                    Err(e) => {
                        tracing::warn!(error = %e, "the shared signal feed broke; reopening");
                        tokio::time::sleep(RETRY).await;
                        break;
                    }
                }
            }
        }
    }

    /// Keeps a shared signal for a pool this configuration knows; anything else is ignored.
    fn keep_shared(&self, payload: &str) {
        let Ok(shared) = serde_json::from_str::<SharedSignal>(payload) else {
            tracing::warn!("ignored a shared signal that does not parse");
            return;
        };
        let Some(pool) = shared
            .pool
            .parse::<PoolName>()
            .ok()
            .filter(|p| self.config.pool(p).is_some())
        else {
            return;
        };
        let tiers = TierSignal {
            queued: shared.queued,
            arrival_rps: shared.arrival_rps,
            replica_queues: shared.replica_queues,
        };
        self.keep_signal(&pool, shared.signal, tiers);
    }

    /// The latest signal of `pool`, if any arrived.
    pub(super) fn signal(&self, pool: &PoolName) -> Option<Signals> {
        lock(&self.signals).get(pool).map(|(s, _)| *s)
    }

    /// The per-tier counts of the latest signal of `pool`, if it had any.
    pub(super) fn tier_signal(&self, pool: &PoolName) -> Option<TierSignal> {
        lock(&self.signals)
            .get(pool)
            .map(|(_, t)| t.clone())
            .filter(|t| !t.queued.is_empty())
    }

    /// The addresses of `pool`'s Ready model-server pods, when a cluster is configured.
    pub(crate) fn ready_model_pods(&self, pool: &PoolName) -> Vec<String> {
        self.cluster
            .as_ref()
            .map(|c| c.ready_model_pods(pool))
            .unwrap_or_default()
    }

    /// How the queue of `pool`'s latest signal is spread over its replicas, when the source
    /// reported each replica's queue.
    pub(super) fn replica_queues(&self, pool: &PoolName) -> Option<ReplicaQueues> {
        lock(&self.signals)
            .get(pool)
            .and_then(|(_, t)| ReplicaQueues::of(&t.replica_queues))
    }

    /// Reads every pool that has a `[pools.scrape]` target or a `[pools.signals]` source until
    /// `shutdown` resolves (see [`crate::signal_sources::run`]).
    pub async fn run_scrapers(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        crate::signal_sources::run(self, shutdown).await
    }
}
