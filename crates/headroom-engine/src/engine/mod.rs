//! The executor and its reconcile loop, one module a phase of the tick.
//!
//! A tick reads top-down through the phases, each in its own file:
//!
//! 1. [`input`]: what the ledger and the cloud say, read once ([`TickInput`]); every write the
//!    later phases make is applied to it, so no phase reads the ledger again for it.
//! 2. [`observe`]: settle node states with the cloud's inventory, finish interrupted work,
//!    terminate or report orphans ([`orphans`]), with a cluster by [`cluster_steps`].
//! 3. [`renewals`]: running nodes' holds renewed before they lapse; a refused renewal stops or
//!    releases the node (the budget's hard action).
//! 4. [`decide`]: per owned pool, the pure controller and planner on the input.
//! 5. [`execute`]: the plan's actions, each a ledger intent, a cloud call, a ledger outcome.
//! 6. [`status`]: what `GET /v1/pools` shows, and the pool gauges.
//! 7. [`alerting`]: alert rules on a snapshot of the tick, queued in the ledger's outbox.
//!
//! Each phase keeps what it must remember between ticks in its own small state struct behind
//! its own lock; the tick lock makes ticks one at a time, so those locks only order the tick
//! against API reads.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use headroom_cloud::{Clock, CloudError, CloudProvider, SimCloud, SimConfig, SimOffering};
use headroom_config::Config;
use headroom_core::{PoolName, Timestamp};
use headroom_ledger::{IdSource, Ledger, LedgerError};
use thiserror::Error;
use tokio::sync::Notify;

use crate::alerts::AlertDelivery;
use crate::cluster::Cluster;
use crate::metrics::Metrics;

mod alert_book;
mod alerting;
mod cluster_steps;
mod controller_memory;
mod decide;
mod decisions;
mod execute;
mod forecasting;
mod health;
mod input;
mod observe;
mod offerings;
mod orphans;
mod quotas;
mod read_cache;
mod renewals;
mod restore;
mod schedules;
mod signals;
mod spans;
mod status;
mod warm_pool;

pub use decisions::{DECISION_LOG_LEN, DecisionPage, DecisionRecord};
use input::TickInput;
pub use offerings::OfferingPrice;
pub use quotas::OfferingQuota;
pub use schedules::DeclaredWindow;

pub use crate::views::{Clamp, PoolStatus, ReplicaQueues, SignalInput};

#[derive(Debug, Error)]
pub enum EngineError {
    #[error("ledger")]
    Ledger(#[from] LedgerError),
    #[error("cloud inventory")]
    Inventory(#[source] CloudError),
    /// A scheduled window that does not check out (the field, what, the fix).
    #[error("{}: {}; {}", .0.field, .0.what, .0.fix)]
    InvalidWindow(headroom_config::schedule::WindowProblem),
    /// A scheduled window that clashes with the pool's others (a name taken, too many).
    #[error("{0}")]
    WindowConflict(String),
}

/// Applies the core's decisions. One `tick` at a time (the loop is the only caller that mutates
/// the cloud); API handlers only read status and append capacity requests.
#[derive(Debug)]
pub struct Engine {
    config: Arc<Config>,
    ledger: Arc<dyn Ledger>,
    /// The provider behind [`crate::bounded_cloud::BoundedCloud`] (a composite's members each
    /// behind their own): every call has a deadline.
    cloud: Arc<dyn CloudProvider>,
    clock: Arc<dyn Clock>,
    /// Where node and window ids come from: random, or seeded to replay a run.
    ids: IdSource,
    /// The Kubernetes cluster, when `[kube]` is enabled: readiness and drains go through it.
    cluster: Option<Arc<dyn Cluster>>,
    metrics: Arc<Metrics>,
    tick_lock: tokio::sync::Mutex<()>,
    wake: Notify,
    /// Whether the configuration's budgets have been written to the ledger.
    budgets_seeded: AtomicBool,
    signals: Mutex<HashMap<PoolName, (headroom_core::controller::Signals, signals::TierSignal)>>,
    /// Per pool, why its signal source last failed, until it succeeds again.
    source_errors: Mutex<HashMap<PoolName, String>>,
    observed: Mutex<observe::ObserveMemory>,
    control: Mutex<decide::ControlMemory>,
    renewals: Mutex<renewals::RenewalBook>,
    offerings: Mutex<offerings::OfferingBook>,
    /// Each region's quotas as last read (quota preflight).
    quotas: Mutex<quotas::QuotaBook>,
    /// Pools stopped until a restart, with why: an invalid-request or permission refusal, a
    /// plan or launch that broke an invariant, two live instances for one client token
    /// (`halt_pool`).
    halted: Mutex<HashMap<PoolName, String>>,
    status: Mutex<BTreeMap<PoolName, PoolStatus>>,
    /// The instances serving per pool at the end of the last tick (instance id, GPUs).
    serving: Mutex<HashMap<PoolName, Vec<(String, u32)>>>,
    alerting: Mutex<alerting::AlertMemory>,
    delivery: AlertDelivery,
    spans: spans::RequestSpans,
    /// When the last tick that finished without error started, on the engine's clock.
    last_good_tick: Mutex<Option<Timestamp>>,
    /// What ticks read that seldom changes, kept until the ledger says it moved.
    reads: Mutex<read_cache::ReadCache>,
}

/// Locks one of the engine's state structs. A panic elsewhere never leaves them half-written
/// (each critical section is a few assignments), so a poisoned lock is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The simulated cloud described by a configuration's offerings.
pub fn sim_cloud_for(config: &Config, clock: Arc<dyn Clock>) -> SimCloud {
    let cloud = SimCloud::new(
        SimConfig {
            seed: config.sim.seed,
            offerings: config
                .offerings
                .iter()
                .map(|o| SimOffering {
                    offering: o.offering.clone(),
                    capacity: o.sim_capacity,
                    ladder: o.sim_ladder,
                    spot_interruptions_per_hour: o.sim_spot_interruptions_per_hour,
                })
                .collect(),
            gpu_quota_per_region: config.sim.gpu_quota_per_region.clone(),
        },
        clock,
    );
    cloud.set_launch_answer_delay(config.sim.launch_answer_delay);
    match &config.sim.state_file {
        Some(path) => cloud.with_state_file(path.clone()),
        None => cloud,
    }
}

impl Engine {
    pub fn new(
        config: Arc<Config>,
        ledger: Arc<dyn Ledger>,
        cloud: Arc<dyn CloudProvider>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Engine> {
        Engine::with_cluster(config, ledger, cloud, clock, None)
    }

    /// An engine that takes readiness from `cluster` and drains through it.
    pub fn with_cluster(
        config: Arc<Config>,
        ledger: Arc<dyn Ledger>,
        cloud: Arc<dyn CloudProvider>,
        clock: Arc<dyn Clock>,
        cluster: Option<Arc<dyn Cluster>>,
    ) -> Arc<Engine> {
        Engine::with_ids(config, ledger, cloud, clock, cluster, IdSource::random())
    }

    /// An engine minting its node and window ids from `ids`, as it reads time from `clock`: the
    /// simulator hands it a seeded source, so a seed replays a run, ids included.
    pub fn with_ids(
        config: Arc<Config>,
        ledger: Arc<dyn Ledger>,
        cloud: Arc<dyn CloudProvider>,
        clock: Arc<dyn Clock>,
        cluster: Option<Arc<dyn Cluster>>,
        ids: IdSource,
    ) -> Arc<Engine> {
        let metrics = Arc::new(Metrics::default());
        metrics.initialise(&config.pools);
        let bound = |inner: Arc<dyn CloudProvider>| -> Arc<dyn CloudProvider> {
            Arc::new(crate::bounded_cloud::BoundedCloud {
                inner,
                metrics: metrics.clone(),
                timeout: config.engine.provider_timeout,
            })
        };
        // A composite's clouds are bounded and labelled each by its own kind.
        let cloud = match cloud.as_multi() {
            Some(multi) => Arc::new(multi.map_members(bound)),
            None => bound(cloud),
        };
        let status = config
            .pools
            .iter()
            .map(|p| (p.name.clone(), PoolStatus::empty(p)))
            .collect();
        Arc::new(Engine {
            delivery: AlertDelivery::new(
                ledger.clone(),
                clock.clone(),
                metrics.service.alert_deliveries.clone(),
            ),
            metrics,
            config,
            ledger,
            cloud,
            clock,
            ids,
            cluster,
            tick_lock: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
            budgets_seeded: AtomicBool::new(false),
            signals: Mutex::default(),
            source_errors: Mutex::default(),
            observed: Mutex::default(),
            control: Mutex::default(),
            renewals: Mutex::default(),
            offerings: Mutex::default(),
            quotas: Mutex::default(),
            halted: Mutex::default(),
            status: Mutex::new(status),
            serving: Mutex::default(),
            alerting: Mutex::default(),
            spans: spans::RequestSpans::default(),
            last_good_tick: Mutex::default(),
            reads: Mutex::default(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Stops `pool` launching until Headroom restarts (status `halted`, alert `PoolHalted`),
    /// logged once with `why`; a pool already halted keeps its first reason.
    pub(super) fn halt_pool(&self, pool: &PoolName, why: String) {
        let mut halted = lock(&self.halted);
        if !halted.contains_key(pool) {
            tracing::error!(%pool, %why, "pool halted");
            halted.insert(pool.clone(), why);
        }
    }

    /// A plan or launch (`what`) that broke a money or instance invariant, which the caller
    /// applies none of: counted, and the pool halted (logged at error, alert `PoolHalted`). A
    /// bug, so never retried; never a panic, so the other pools go on.
    pub(super) fn refuse_violation(
        &self,
        pool: &headroom_core::PoolSpec,
        what: &str,
        violation: &headroom_core::planner::guard::PlanViolation,
    ) {
        self.metrics
            .invariant_violations
            .get_or_create(&crate::metrics::InvariantLabels {
                pool: pool.name.to_string(),
                account: pool.account.to_string(),
                invariant: violation.invariant().to_string(),
            })
            .inc();
        self.halt_pool(
            &pool.name,
            format!(
                "{what} broke the {} invariant and was not applied ({violation}): a bug, report it",
                violation.invariant()
            ),
        );
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Asks the loop to run a tick now (a capacity request arrived).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Runs ticks until `shutdown` resolves: every `engine.tick`, or sooner when woken. A tick
    /// that fails is logged and the next activation tries again; nothing retries in a loop.
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            if let Err(e) = self.tick().await {
                tracing::error!(error = %error_chain(&e), "reconcile tick failed");
            }
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(self.config.engine.tick) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    /// One activation: read, observe and settle, decide and execute per pool, publish status,
    /// evaluate alerts. Idempotent: it repeats nothing a previous activation finished. Timed
    /// for `/metrics`, and remembered for `/readyz` when it succeeds.
    pub async fn tick(&self) -> Result<(), EngineError> {
        let _one_at_a_time = self.tick_lock.lock().await;
        let started = self.clock.now();
        let timer = crate::metrics::latency_timer();
        let result = self.tick_phases().await;
        self.record_tick(started, timer.elapsed(), result.is_ok());
        if result.is_ok() && !self.config.alerts.webhooks.is_empty() {
            // The outbox's depth after this tick queued its notifications (without webhooks
            // nothing is queued: no query).
            match self.ledger.pending_alert_count().await {
                Ok(n) => {
                    self.metrics.service.alert_outbox_depth.set(n as i64);
                }
                Err(e) => tracing::warn!(error = %error_chain(&e), "reading the outbox depth"),
            }
        }
        result
    }

    async fn tick_phases(&self) -> Result<(), EngineError> {
        self.seed_budgets().await?;
        // Leases first: only the pools this process owns are observed, planned and changed.
        let names: Vec<PoolName> = self.config.pools.iter().map(|p| p.name.clone()).collect();
        let owned = self.ledger.pool_leases(&names).await?;
        self.restore_recent_history(&owned).await?;
        // Per cloud: one that cannot be read leaves its nodes as they were this tick, and the
        // other clouds' pools go on. Only when no cloud answers does the tick fail.
        let mut inventory = Vec::new();
        // The clouds that did not answer, with their errors.
        let mut unread = BTreeMap::new();
        let mut failure = None;
        let answers = self.cloud.list_owned_each(&self.config.cluster_id).await;
        let clouds = answers.len();
        for (kind, answer) in answers {
            match answer {
                Ok(instances) => inventory.extend(instances),
                Err(e) => {
                    let error = error_chain(&e);
                    tracing::warn!(provider = %kind, error = %error, "cannot read the cloud's inventory; its nodes stay as they were");
                    unread.insert(kind, error);
                    failure = failure.or(Some(e));
                }
            }
        }
        self.note_inventory_reads(&unread, self.clock.now());
        if let Some(e) = failure
            && unread.len() == clouds
        {
            return Err(EngineError::Inventory(e));
        }
        // Read the ledger after the inventory: an instance in the inventory had its intent
        // written before it was launched, so it cannot be mistaken for an orphan.
        // The tick lock is held: nothing else uses the cache meanwhile. Taken out across the
        // reads, so a tick that fails leaves none of it (the next reads afresh).
        let mut reads = std::mem::take(&mut *lock(&self.reads));
        let mut input =
            TickInput::read(self.ledger.as_ref(), owned, &inventory, &mut reads).await?;
        self.observe(&mut input, &inventory, &unread).await?;
        self.refresh_prices().await;
        self.refresh_quotas().await;
        input
            .read_demand(self.ledger.as_ref(), &self.config, &mut reads)
            .await?;
        *lock(&self.reads) = reads;
        self.renew_holds(&mut input).await?;
        for pool in &self.config.pools {
            if input.owned.contains(&pool.name) {
                self.reconcile_pool(&mut input, pool).await?;
            }
        }
        self.publish_status(&input);
        self.evaluate_alerts(&mut input).await
    }

    /// Writes the configuration's budgets for accounts the ledger has none for, once per
    /// process. Budgets changed through the API later are versions in the ledger and win.
    async fn seed_budgets(&self) -> Result<(), EngineError> {
        if self.budgets_seeded.load(Ordering::Acquire) {
            return Ok(());
        }
        let existing = self.ledger.budgets().await?;
        let now = self.clock.now();
        for budget in &self.config.budgets {
            if !existing.iter().any(|b| b.account == budget.account) {
                self.ledger.put_budget(budget, now).await?;
            }
        }
        self.budgets_seeded.store(true, Ordering::Release);
        Ok(())
    }
}

/// An error with its sources, for one log line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
