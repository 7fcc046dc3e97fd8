//! The executor and its reconcile loop.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use headroom_cloud::{
    Clock, CloudError, CloudProvider, Instance, InstanceId, InstancePhase, LaunchSpec,
    OwnershipTags, SimCloud, SimConfig, SimOffering,
};
use headroom_core::admission::{self, AdmissionInput, TierAdmission};
use headroom_core::budget::BudgetStanding;
use headroom_core::controller::{
    self, Classification, ControllerMemory, Decision, HoldReason, Limit, ReplicaCounts, Rule,
    Signals,
};
use headroom_core::planner::{
    self, Action, Destination, FallbackKind, NodeView, OfferingChoice, OpenRequest, PlanInput,
};
use headroom_core::{
    CapacityRequest, ErrorClass, HardAction, Money, NodeId, NodeState, Offering, OfferingId,
    PoolName, PoolSpec, RefusalReason, RequestId, Timestamp, WarmMode,
};
use headroom_ledger::{Admission, Ledger, LedgerError, NodeEvent, RefusalRecord};
use serde::Serialize;
use thiserror::Error;
use tokio::sync::Notify;
use tracing::Instrument;

use crate::cluster::Cluster;
use crate::config::Config;

mod cluster_steps;
mod orphans;
mod prices;
mod restore;

pub use prices::OfferingPrice;

#[derive(Debug, Error)]
pub enum EngineError {
    #[error("ledger")]
    Ledger(#[from] LedgerError),
    #[error("cloud inventory")]
    Inventory(#[source] CloudError),
}

/// A sample pushed for a pool; the engine stamps it on receipt.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SignalInput {
    pub queue_depth: u64,
    pub oldest_age_s: Option<f64>,
    /// Oldest eligible request age per service class; the pool's `age_classes` choose which
    /// count (all when unset), and the oldest of them is the pool's age.
    pub oldest_age_by_class_s: BTreeMap<String, f64>,
    pub arrival_rate_rps: Option<f64>,
    pub departure_rate_rps: Option<f64>,
    pub error_rate_rps: Option<f64>,
    pub batch_occupancy: Option<f64>,
    pub gpu_utilization: Option<f64>,
}

/// Decisions kept per pool for `GET /v1/pools/{name}/decisions`.
pub const DECISION_LOG_LEN: usize = 256;

/// One entry of a pool's decision log: what the controller saw, what it answered and why.
/// Consecutive identical answers are folded into one entry with a count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRecord {
    pub at: Timestamp,
    /// The last activation folded into this entry.
    pub last_at: Timestamp,
    pub repeated: u32,
    #[serde(flatten)]
    pub decision: Decision,
    pub signal: Option<Signals>,
    pub replicas: ReplicaCounts,
    /// Shadow mode: recorded, not executed.
    pub shadow: bool,
}

/// What `GET /v1/pools` shows for one pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolStatus {
    pub name: PoolName,
    pub account: String,
    /// Ready replicas wanted: the controller's target plus open capacity requests.
    pub desired: u32,
    /// What the signal alone asked for, before the max-replicas clamp.
    pub unclamped_desired: u32,
    /// Intents and launches the cloud has not answered with a running node yet.
    pub requested: u32,
    /// Climbing the cold-start ladder.
    pub starting: u32,
    /// Serving: the only count that is capacity.
    pub ready: u32,
    pub warm: u32,
    pub draining: u32,
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub warm_pool_size: u32,
    /// Whether this process holds the pool's lease and reconciles it. With several replicas
    /// sharing a database, each pool has exactly one owner at a time.
    pub reconciled_here: bool,
    /// Set when the controller is holding the pool instead of scaling it (the HPA's
    /// ScalingActive=False, with the reason).
    pub hold: Option<HoldReason>,
    /// Set when the target is below what the rules asked for (the HPA's ScalingLimited).
    pub limited: Option<Limit>,
    /// The rule behind the controller's last answer, and why.
    pub rule: Option<Rule>,
    pub reason: Option<String>,
    /// Queue age read against GPU utilisation, when both are reported.
    pub classification: Option<Classification>,
    /// Decisions are recorded but not executed.
    pub shadow: bool,
    pub last_signal: Option<Signals>,
    /// Warm nodes that are running (standby), included in `warm`.
    pub warm_running: u32,
    /// New nodes climbing the ladder to refill the warm pool (not replicas, not yet warm).
    pub warming: u32,
    /// The governor's last clamp of this pool's demand, if it still stands: the reason
    /// (`max_replicas`, `global_ceiling`, `budget`, `no_offering`) and the replicas refused.
    pub clamped: Option<Clamp>,
    /// Set when a cloud said the pool's request is invalid or not permitted: the pool launches
    /// nothing until the configuration is fixed and Headroom restarted.
    pub halted: Option<String>,
    /// Replicas this pool runs for pools that fell back to it (it is their smaller model).
    pub serving_for_others: u32,
    /// Replicas this pool could not supply and handed to its fallback pool.
    pub handed_to_fallback: u32,
    /// Ready replicas measured demand calls for (0 while the pool holds), which shedding compares
    /// with what can serve in time.
    pub demand: u32,
    /// What the serving layer should admit, per priority tier (also `GET .../admission`).
    pub admission: Vec<TierAdmission>,
}

/// A standing clamp of a pool's demand (the HPA's ScalingLimited, made visible).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Clamp {
    pub reason: String,
    pub replicas: u32,
}

#[derive(Debug, Default)]
struct LoopState {
    memory: HashMap<PoolName, ControllerMemory>,
    signals: HashMap<PoolName, Signals>,
    /// Bounded log of decisions per pool, newest last.
    /// The pool's current decision, with its repeats; closed ones are in the ledger.
    decision_log: HashMap<PoolName, DecisionRecord>,
    /// Offerings a cloud refused recently, skipped until the instant given.
    unavailable_until: HashMap<OfferingId, Timestamp>,
    /// The last pool-level refusal written, so a standing refusal is not re-recorded every tick.
    last_pool_refusal: HashMap<PoolName, (RefusalReason, u32)>,
    alert_book: crate::alerts::AlertBook,
    /// Per-webhook delivery backoff: when the next attempt may start, and the delay schedule.
    webhook_backoff: HashMap<String, (Timestamp, backon::ExponentialBackoff)>,
    /// Whether the configuration's budgets have been written to the ledger.
    budgets_seeded: bool,
    /// The controller's last answer per pool, for status.
    decisions: HashMap<PoolName, controller::Decision>,
    status: BTreeMap<PoolName, PoolStatus>,
    /// When each offering was refused recently, for the planner's price-capacity ranking.
    refusal_log: HashMap<OfferingId, VecDeque<Timestamp>>,
    /// Launch intents per pool in the current launch period (the governor's per-period limit).
    launch_log: HashMap<PoolName, VecDeque<Timestamp>>,
    /// Replicas handed to a fallback pool: fallback pool → (pool that fell back → replicas).
    borrowed: HashMap<PoolName, BTreeMap<PoolName, u32>>,
    /// Pools stopped by an invalid-request or permission refusal, with the cloud's message.
    halted: HashMap<PoolName, String>,
    /// Client tokens of instances under an interruption notice, from the last inventory.
    reclaiming: HashSet<String>,
    /// Nodes whose interruption notice has been recorded.
    noticed: HashSet<NodeId>,
    /// Reservations with no node on them, since when.
    reservation_idle_since: HashMap<OfferingId, Timestamp>,
    /// What the cluster last showed for each climbing node, to stamp each rung once.
    cluster_seen: HashMap<NodeId, crate::cluster::ClusterNodeView>,
    /// Orphans in the last inventory, by the pool they are counted under (see `orphans.rs`).
    orphans: BTreeMap<PoolName, Vec<InstanceId>>,
    /// Orphans already written to the decision log (those still orphans).
    orphans_seen: HashSet<InstanceId>,
    /// Pools whose recent launches, refusals and rung stamps have been read back from the
    /// ledger (see `restore.rs`).
    restored: HashSet<PoolName>,
    /// Prices the cloud quoted (spot), from the last refresh that answered.
    live_prices: HashMap<OfferingId, Money>,
    /// When prices were last asked for, and when an answer last came.
    prices_asked_at: Option<Timestamp>,
    prices_quoted_at: Option<Timestamp>,
    /// Unschedulable model-server pods last seen per pool (logged when the count changes).
    pending_pods: HashMap<PoolName, u32>,
}

/// Live prices older than this many refresh periods (the cloud stopped answering) are dropped:
/// the configured prices apply again.
const STALE_PRICE_PERIODS: i32 = 3;

/// A reservation unused this long raises an alert...
const RESERVATION_IDLE_ALERT: chrono::Duration = chrono::Duration::minutes(30);
/// ...and so does one ending within this.
const RESERVATION_ENDING_ALERT: chrono::Duration = chrono::Duration::days(7);

/// How far back refusals count against an offering in the planner's ranking.
const RECENT_REFUSALS: chrono::Duration = chrono::Duration::minutes(15);

/// Applies the core's decisions. One `tick` at a time (the loop is the only caller that mutates
/// the cloud); API handlers only read status and append capacity requests.
#[derive(Debug)]
pub struct Engine {
    config: Arc<Config>,
    ledger: Arc<dyn Ledger>,
    cloud: Arc<dyn CloudProvider>,
    clock: Arc<dyn Clock>,
    /// The Kubernetes cluster, when `[kube]` is enabled: readiness and drains go through it.
    cluster: Option<Arc<dyn Cluster>>,
    state: Mutex<LoopState>,
    tick_lock: tokio::sync::Mutex<()>,
    wake: Notify,
    /// API spans of recent capacity requests, ordered by id (ids are random, so eviction is
    /// arbitrary but bounded).
    request_spans: Mutex<BTreeMap<RequestId, tracing::Span>>,
    metrics: Arc<crate::metrics::Metrics>,
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
    match &config.sim.state_file {
        Some(path) => cloud.with_state_file(path.clone()),
        None => cloud,
    }
}

/// API spans kept for linking launches to their capacity request's trace.
const MAX_REQUEST_SPANS: usize = 10_000;

/// Upper bound on plan-execute rounds in one tick: each cloud refusal removes one offering, so a
/// pool can need one round per offering plus one.
const MAX_FALLBACK_ROUNDS: usize = 16;

/// Extra attempts at a throttled launch within one tick (100 ms .. 2 s apart, jittered).
const THROTTLE_RETRIES: usize = 3;

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
        let metrics = Arc::new(crate::metrics::Metrics::default());
        let cloud: Arc<dyn CloudProvider> = Arc::new(crate::metrics::InstrumentedCloud {
            inner: cloud,
            metrics: metrics.clone(),
            timeout: config.engine.provider_timeout,
        });
        let engine = Arc::new(Engine {
            metrics,
            config,
            ledger,
            cloud,
            clock,
            cluster,
            state: Mutex::new(LoopState::default()),
            tick_lock: tokio::sync::Mutex::new(()),
            request_spans: Mutex::new(BTreeMap::new()),
            wake: Notify::new(),
        });
        let now = engine.clock.now();
        let status = engine
            .config
            .pools
            .iter()
            .map(|p| (p.name.clone(), engine.empty_status(p, now)))
            .collect();
        engine.state().status = status;
        engine
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

    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    fn state(&self) -> MutexGuard<'_, LoopState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn empty_status(&self, pool: &PoolSpec, _now: Timestamp) -> PoolStatus {
        PoolStatus {
            name: pool.name.clone(),
            account: pool.account.to_string(),
            desired: pool.min_replicas,
            unclamped_desired: pool.min_replicas,
            requested: 0,
            starting: 0,
            ready: 0,
            warm: 0,
            draining: 0,
            min_replicas: pool.min_replicas,
            max_replicas: pool.max_replicas,
            warm_pool_size: pool.warm_pool_size,
            reconciled_here: false,
            hold: Some(HoldReason::SignalMissing),
            limited: None,
            rule: None,
            reason: None,
            classification: None,
            shadow: pool.scaling.shadow,
            last_signal: None,
            warm_running: 0,
            warming: 0,
            clamped: None,
            halted: None,
            serving_for_others: 0,
            handed_to_fallback: 0,
            demand: 0,
            admission: Vec::new(),
        }
    }

    /// Records a queue sample for `pool`, stamped with the engine's clock on receipt.
    pub fn push_signal(&self, pool: &PoolName, input: SignalInput) {
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
        };
        self.state().signals.insert(pool.clone(), signal);
    }

    /// Scrapes every pool that has a `[pools.scrape]` target, each on its own interval, until
    /// `shutdown` resolves. A failed scrape is logged and skipped; with no fresh signal the
    /// pool holds and says so.
    pub async fn run_scrapers(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        let mut tasks = tokio::task::JoinSet::new();
        for (pool, target) in self.config.scrape.clone() {
            let engine = self.clone();
            tasks.spawn(async move {
                let mut scraper = crate::scrape::Scraper::default();
                loop {
                    let url = target.url.clone();
                    let timeout = target.timeout;
                    let fetched = tokio::task::spawn_blocking(move || fetch(&url, timeout)).await;
                    let at = engine.clock.now();
                    let result = match fetched {
                        Ok(Ok(text)) => scraper.signal(&target.selectors, &text, at),
                        Ok(Err(e)) => Err(e),
                        Err(e) => Err(e.to_string()),
                    };
                    match result {
                        Ok(signal) => engine.push_signal(&pool, signal),
                        Err(e) => tracing::warn!(pool = %pool, url = %target.url, error = %e, "scrape failed"),
                    }
                    tokio::time::sleep(target.interval).await;
                }
            });
        }
        shutdown.await;
        tasks.abort_all();
    }

    /// The alerts firing now.
    pub fn active_alerts(&self) -> Vec<crate::alerts::ActiveAlert> {
        self.state().alert_book.active()
    }

    /// Evaluates alert conditions for the pools this process owns (and budgets, by the owner of
    /// the first pool) and queues notifications in the ledger's outbox.
    async fn evaluate_alerts(&self, owned: &BTreeSet<PoolName>) -> Result<(), EngineError> {
        use crate::alerts::Alert;
        let now = self.clock.now();
        let settings = &self.config.alerts;
        let owns_budgets = self
            .config
            .pools
            .first()
            .is_some_and(|p| owned.contains(&p.name));
        let mut holding = Vec::new();
        for status in self
            .pool_statuses()
            .iter()
            .filter(|s| owned.contains(&s.name))
        {
            let pool = status.name.to_string();
            match status.hold {
                Some(HoldReason::SignalMissing | HoldReason::SignalStale) => {
                    holding.push(Alert::new(
                        "PoolSignalsMissing",
                        "warning",
                        &[("pool", pool.clone())],
                        format!(
                            "pool {pool} is holding: {}",
                            status.reason.clone().unwrap_or_default()
                        ),
                    ))
                }
                Some(HoldReason::DispatchFailure) => holding.push(Alert::new(
                    "PoolDeparturesStalled",
                    "critical",
                    &[("pool", pool.clone())],
                    format!("pool {pool}: {}", status.reason.clone().unwrap_or_default()),
                )),
                _ => {}
            }
            if let Some(why) = &status.halted {
                holding.push(Alert::new(
                    "PoolHalted",
                    "critical",
                    &[("pool", pool.clone())],
                    format!("pool {pool} launches nothing: the cloud refused its request as invalid or not permitted ({why}); fix the configuration or permissions and restart"),
                ));
            }
            if status.handed_to_fallback > 0 {
                holding.push(Alert::new(
                    "PoolServedByFallback",
                    "warning",
                    &[("pool", pool.clone())],
                    format!("pool {pool}: no offering can supply {} replicas; its fallback pool (a smaller model) serves that traffic", status.handed_to_fallback),
                ));
            }
            let shed: Vec<&str> = status
                .admission
                .iter()
                .filter(|t| !t.admit)
                .map(|t| t.priority.as_str())
                .collect();
            if !shed.is_empty() {
                holding.push(Alert::new(
                    "PoolShedding",
                    "warning",
                    &[("pool", pool.clone())],
                    format!("pool {pool} is shedding tiers {} until capacity lands ({} ready of {} wanted)", shed.join(", "), status.ready, status.unclamped_desired),
                ));
            }
            if status.warm_pool_size > 0 && status.warm == 0 {
                holding.push(Alert::new(
                    "WarmPoolDepleted",
                    "warning",
                    &[("pool", pool.clone())],
                    format!("pool {pool} has no warm node left of its {}; the next burst meets the full cold start", status.warm_pool_size),
                ));
            }
        }
        let since = now
            - chrono::Duration::from_std(settings.refusal_window)
                .unwrap_or(chrono::Duration::minutes(10));
        let refusals = self
            .ledger
            .refusals_between(since, now + chrono::Duration::milliseconds(1))
            .await?;
        for r in refusals.iter().filter(|r| owned.contains(&r.pool)) {
            let pool = r.pool.to_string();
            let alert = match r.reason {
                RefusalReason::Cloud(headroom_core::ErrorClass::Quota) => Alert::new(
                    "CloudQuotaExhausted",
                    "warning",
                    &[
                        ("pool", pool.clone()),
                        (
                            "offering",
                            r.offering
                                .as_ref()
                                .map(|o| o.to_string())
                                .unwrap_or_default(),
                        ),
                    ],
                    r.detail.clone(),
                ),
                reason if reason.closes_request() => Alert::new(
                    "CapacityRefused",
                    "critical",
                    &[("pool", pool.clone()), ("reason", reason.code())],
                    r.detail.clone(),
                ),
                _ => continue,
            };
            holding.push(alert);
        }
        if self.config.engine.orphan_policy == crate::config::OrphanPolicy::Report {
            let orphans = self.state().orphans.clone();
            for (pool, ids) in orphans.iter().filter(|(p, _)| owned.contains(*p)) {
                let shown: Vec<String> = ids.iter().take(5).map(|i| i.to_string()).collect();
                holding.push(Alert::new(
                    "OrphanInstances",
                    "warning",
                    &[("pool", pool.to_string())],
                    format!(
                        "{} instance(s) tagged for pool {pool} of cluster {} are unknown to the ledger and left running ({}{}); terminate them, or set engine.orphan_policy = \"terminate\"",
                        ids.len(),
                        self.config.cluster_id,
                        shown.join(", "),
                        if ids.len() > shown.len() { ", …" } else { "" }
                    ),
                ));
            }
        }
        if owns_budgets {
            let live = self.ledger.live_nodes().await?;
            for o in &self.config.offerings {
                let Some(reservation) = o.reservation else {
                    continue;
                };
                let used = live.iter().filter(|e| e.offering == o.offering.id).count() as u32;
                let labels = [("offering", o.offering.id.to_string())];
                let idle_since = {
                    let mut st = self.state();
                    if used > 0 {
                        st.reservation_idle_since.remove(&o.offering.id);
                        None
                    } else {
                        Some(
                            *st.reservation_idle_since
                                .entry(o.offering.id.clone())
                                .or_insert(now),
                        )
                    }
                };
                if let Some(since) = idle_since
                    && now - since >= RESERVATION_IDLE_ALERT
                {
                    holding.push(Alert::new(
                        "ReservationIdle",
                        "warning",
                        &labels,
                        format!("reservation {} ({} nodes) has been unused since {since}: it is paid for either way; route a pool to it or release it", o.offering.id, reservation.nodes),
                    ));
                }
                if let Some(ends) = reservation.ends_at
                    && ends - now <= RESERVATION_ENDING_ALERT
                {
                    holding.push(Alert::new(
                        "ReservationEnding",
                        "warning",
                        &labels,
                        format!("reservation {} ends at {ends} with {used} of {} nodes in use; renew it or make room on other offerings", o.offering.id, reservation.nodes),
                    ));
                }
            }
            for budget in self.ledger.budgets().await? {
                let s = self.ledger.budget_standing(&budget, now).await?;
                let committed = s.spent + s.held;
                if (committed.micros() as i128) * 100
                    >= (budget.ceiling.micros() as i128) * budget.soft_threshold_percent as i128
                {
                    holding.push(Alert::new(
                        "BudgetSoftThresholdReached",
                        "warning",
                        &[("account", budget.account.to_string())],
                        format!(
                            "account {} has ${} spent and ${} held of its ${} {} ceiling ({}% threshold)",
                            budget.account, s.spent, s.held, s.ceiling, budget.period.as_str(), budget.soft_threshold_percent
                        ),
                    ));
                }
            }
        }
        // Deduplicate conditions that hold several times (several refusals of one reason).
        holding.sort_by_key(|a| a.key());
        holding.dedup_by_key(|a| a.key());
        let notifications = {
            let mut st = self.state();
            st.alert_book.update(
                holding,
                |a| match a.labels.get("pool") {
                    Some(pool) => pool.parse::<PoolName>().is_ok_and(|p| owned.contains(&p)),
                    None => owns_budgets,
                },
                now,
                settings.repeat_interval,
            )
        };
        for n in &notifications {
            tracing::warn!(alert = %n.alert.name, status = ?n.status, summary = %n.alert.summary, "alert");
            for webhook in &settings.webhooks {
                let body = crate::alerts::render(webhook.format, n);
                self.ledger.enqueue_alert(&webhook.url, &body, now).await?;
            }
        }
        Ok(())
    }

    /// Delivers queued alert notifications until `shutdown` resolves: each webhook in order,
    /// with jittered exponential backoff per webhook when it fails. Runs beside the control
    /// loop, never in it.
    pub async fn run_alert_delivery(
        self: Arc<Self>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        loop {
            if let Err(e) = self.deliver_alerts().await {
                tracing::warn!(error = %error_chain(&e), "alert delivery round failed");
            }
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            }
        }
    }

    /// One delivery round: at most 50 notifications.
    pub async fn deliver_alerts(&self) -> Result<(), EngineError> {
        use backon::BackoffBuilder;
        let pending = self.ledger.pending_alerts(50).await?;
        let mut failed = BTreeSet::new();
        for alert in pending {
            let now = self.clock.now();
            if failed.contains(&alert.webhook) {
                continue; // keep order per webhook: nothing overtakes a failed notification
            }
            let waiting = self
                .state()
                .webhook_backoff
                .get(&alert.webhook)
                .is_some_and(|(next, _)| *next > now);
            if waiting {
                failed.insert(alert.webhook.clone());
                continue;
            }
            let (url, body) = (alert.webhook.clone(), alert.body.clone());
            let sent = tokio::task::spawn_blocking(move || post_json(&url, &body)).await;
            match sent {
                Ok(Ok(())) => {
                    self.ledger
                        .alert_delivered(alert.seq, self.clock.now())
                        .await?;
                    self.state().webhook_backoff.remove(&alert.webhook);
                }
                other => {
                    let error = match other {
                        Ok(Err(e)) => e,
                        Err(e) => e.to_string(),
                        Ok(Ok(())) => String::new(),
                    };
                    let mut st = self.state();
                    let entry = st
                        .webhook_backoff
                        .entry(alert.webhook.clone())
                        .or_insert_with(|| {
                            let schedule = backon::ExponentialBuilder::default()
                                .with_min_delay(std::time::Duration::from_secs(1))
                                .with_max_delay(std::time::Duration::from_secs(300))
                                .with_jitter()
                                .without_max_times()
                                .build();
                            (now, schedule)
                        });
                    let delay = entry
                        .1
                        .next()
                        .unwrap_or(std::time::Duration::from_secs(300));
                    entry.0 = now
                        + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::minutes(5));
                    tracing::warn!(webhook = %alert.webhook, %error, retry_in_s = delay.as_secs_f64(), "alert delivery failed; kept in the outbox");
                    failed.insert(alert.webhook.clone());
                }
            }
        }
        Ok(())
    }

    /// Asks the loop to run a tick now (a capacity request arrived).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub fn pool_statuses(&self) -> Vec<PoolStatus> {
        self.state().status.values().cloned().collect()
    }

    pub fn pool_status(&self, pool: &PoolName) -> Option<PoolStatus> {
        self.state().status.get(pool).cloned()
    }

    /// The pool's decisions, newest first: the current one, then the ledger's record (which
    /// survives restarts), at most [`DECISION_LOG_LEN`] in all.
    pub async fn decisions(&self, pool: &PoolName) -> Result<Vec<serde_json::Value>, EngineError> {
        let current = self.state().decision_log.get(pool).cloned();
        let mut out: Vec<serde_json::Value> = current
            .iter()
            .filter_map(|d| serde_json::to_value(d).ok())
            .collect();
        for record in self.ledger.decisions(pool, DECISION_LOG_LEN as i64).await? {
            if out.len() >= DECISION_LOG_LEN {
                break;
            }
            if let Ok(value) = serde_json::from_str(&record) {
                out.push(value);
            }
        }
        Ok(out)
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

    /// One activation: observe the cloud, settle node states, plan and apply, publish status.
    pub async fn tick(&self) -> Result<(), EngineError> {
        let _one_at_a_time = self.tick_lock.lock().await;
        if !self.state().budgets_seeded {
            self.seed_budgets().await?;
            self.state().budgets_seeded = true;
        }
        // Leases first: only the pools this process owns are observed, planned and changed.
        let names: Vec<PoolName> = self.config.pools.iter().map(|p| p.name.clone()).collect();
        let owned = self.ledger.pool_leases(&names).await?;
        self.restore_recent_history(&owned).await?;
        let inventory = self
            .cloud
            .list_owned(&self.config.cluster_id)
            .await
            .map_err(EngineError::Inventory)?;
        self.observe(&inventory, &owned).await?;
        self.refresh_prices().await;
        for pool in self.config.pools.iter().filter(|p| owned.contains(&p.name)) {
            self.reconcile_pool(pool).await?;
        }
        self.publish_status(&owned).await?;
        self.evaluate_alerts(&owned).await
    }

    /// Writes the configuration's budgets for accounts the ledger has none for. Budgets changed
    /// through the API later are versions in the ledger and win over the file.
    async fn seed_budgets(&self) -> Result<(), EngineError> {
        let existing = self.ledger.budgets().await?;
        let now = self.clock.now();
        for budget in &self.config.budgets {
            if !existing.iter().any(|b| b.account == budget.account) {
                self.ledger.put_budget(budget, now).await?;
            }
        }
        Ok(())
    }

    /// Moves ledger node states along with what the cloud reports, finishes interrupted work
    /// (intents without outcomes, drains), and terminates owned instances the ledger does not
    /// know.
    async fn observe(
        &self,
        inventory: &[Instance],
        owned: &BTreeSet<PoolName>,
    ) -> Result<(), EngineError> {
        let now = self.clock.now();
        // Read the ledger after the inventory: an instance in the inventory had its intent
        // written before it was launched, so it cannot be mistaken for an orphan.
        let live = self.ledger.live_nodes().await?;
        let by_token: HashMap<&str, &Instance> = inventory
            .iter()
            .map(|i| (i.client_token.as_str(), i))
            .collect();
        let known: std::collections::HashSet<&str> =
            live.iter().map(|e| e.client_token.as_str()).collect();
        self.state().reclaiming = inventory
            .iter()
            .filter(|i| i.interruption_notice.is_some() && i.phase != InstancePhase::Interrupted)
            .map(|i| i.client_token.clone())
            .collect();
        {
            let live_ids: HashSet<&NodeId> = live.iter().map(|e| &e.node).collect();
            let mut st = self.state();
            st.noticed.retain(|n| live_ids.contains(n));
            st.cluster_seen.retain(|n, _| live_ids.contains(n));
        }
        for last in live.iter().filter(|e| owned.contains(&e.pool)) {
            if let Some(instance) = by_token.get(last.client_token.as_str())
                && let Some(reclaim_at) = instance.interruption_notice
                && instance.phase != InstancePhase::Interrupted
                && !last.state.is_warm()
            {
                self.record_interruption_notice(last, reclaim_at).await?;
                if let Some(cluster) = &self.cluster
                    && last.state == NodeState::Serving
                {
                    self.drain_on_notice(cluster, last, reclaim_at).await?;
                }
            }
        }

        for last in live.iter().filter(|e| owned.contains(&e.pool)) {
            let instance = by_token.get(last.client_token.as_str()).copied();
            self.settle(last, instance, now).await?;
        }

        // Another replica's pools are its to clean.
        let orphans: Vec<(PoolName, &Instance)> = inventory
            .iter()
            .filter(|i| !known.contains(i.client_token.as_str()))
            .filter_map(|i| Some((self.orphan_pool(i)?, i)))
            .filter(|(pool, _)| owned.contains(pool))
            .collect();
        self.handle_orphans(&orphans, now).await?;
        Ok(())
    }

    /// Records an interruption notice once per node: the decision log says what happened and
    /// when the node goes, the metric counts it, and the offering ranks lower for a while. The
    /// planner, which no longer counts the node, launches its replacement in this same tick.
    async fn record_interruption_notice(
        &self,
        last: &NodeEvent,
        reclaim_at: Timestamp,
    ) -> Result<(), EngineError> {
        let now = self.clock.now();
        {
            let mut st = self.state();
            if !st.noticed.insert(last.node.clone()) {
                return Ok(());
            }
            // A wave of notices in one tick is one signal against the offering, not one per node:
            // otherwise a single wave would rank it out of plans for the whole window.
            let log = st.refusal_log.entry(last.offering.clone()).or_default();
            if log.back() != Some(&now) {
                log.push_back(now);
            }
            // The market may have moved past what the pool pays: quote prices again before
            // this tick plans the replacement.
            st.prices_asked_at = None;
        }
        tracing::warn!(pool = %last.pool, node = %last.node, offering = %last.offering, %reclaim_at, "spot interruption notice; replacing the node now");
        self.metrics
            .interruption_notices
            .get_or_create(&crate::metrics::PoolLabels {
                pool: last.pool.to_string(),
            })
            .inc();
        let entry = serde_json::json!({
            "at": now,
            "event": "interruption_notice",
            "node": last.node,
            "offering": last.offering,
            "reclaim_at": reclaim_at,
            "reason": "the cloud will reclaim this spot node; a replacement is planned now",
        });
        self.ledger
            .append_decision(&last.pool, now, &entry.to_string())
            .await?;
        Ok(())
    }

    /// Brings one node's ledger state in line with its instance.
    async fn settle(
        &self,
        last: &NodeEvent,
        instance: Option<&Instance>,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        if let Some(cluster) = &self.cluster
            && self
                .settle_with_cluster(cluster, last, instance, now)
                .await?
        {
            return Ok(());
        }
        let ledger = &self.ledger;
        let append = |state, reason: &str| {
            let mut e = last.next(state, reason, now);
            if let Some(i) = instance {
                e.instance = Some(i.id.0.clone());
            }
            async move { ledger.append_node_event(&e).await }
        };
        match (last.state, instance.map(|i| i.phase)) {
            // An intent without an outcome: the process stopped between the two. The client token
            // makes repeating the launch safe: it returns the instance if the first call made one.
            (NodeState::Requested, _) => {
                let Some(pool) = self.config.pool(&last.pool) else {
                    return Ok(());
                };
                let Some(offering) = self.config.offering(&last.offering).cloned() else {
                    append(NodeState::Refused, "offering_removed").await?;
                    return Ok(());
                };
                self.launch_for_intent(pool, &offering, last).await?;
            }
            (NodeState::Launching, Some(InstancePhase::Booting(_))) => {
                append(NodeState::Booting, "running").await?;
            }
            (NodeState::Launching | NodeState::Booting, Some(InstancePhase::Ready)) => {
                if last.destination == Destination::Warm {
                    self.stop_to_warm(last, "warmed").await?;
                } else {
                    append(NodeState::Serving, "ready").await?;
                }
            }
            (
                NodeState::Launching
                | NodeState::Booting
                | NodeState::Serving
                | NodeState::Warm
                | NodeState::Standby,
                Some(InstancePhase::Interrupted),
            ) => {
                append(NodeState::Interrupted, "spot_interruption").await?;
                self.terminate_node(last, "interrupted").await?;
            }
            (NodeState::Interrupted | NodeState::Failed, _) => {
                self.terminate_node(last, "cleanup").await?;
            }
            (NodeState::Draining, _) => {
                if last.reason.as_deref() == Some("release_to_warm") && instance.is_some() {
                    self.stop_to_warm(last, "released").await?;
                } else {
                    self.terminate_node(last, "released").await?;
                }
            }
            (state, None) if state != NodeState::Requested => {
                // The cloud no longer lists it: it is gone, whatever the ledger thought.
                append(NodeState::Failed, "instance_missing").await?;
                append(NodeState::Terminated, "instance_missing").await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Parks the node warm, detached from any request: running (standby) when its pool keeps
    /// warm nodes running, else stopped (it keeps its disk).
    async fn stop_to_warm(&self, last: &NodeEvent, reason: &str) -> Result<(), EngineError> {
        let Some(id) = last.instance.clone().map(InstanceId) else {
            return self.terminate_node(last, reason).await;
        };
        if self
            .config
            .pool(&last.pool)
            .is_some_and(|p| p.supply.warm_mode == WarmMode::Running)
        {
            let mut e = last.next(NodeState::Standby, reason, self.clock.now());
            e.request = None;
            e.destination = Destination::Warm;
            self.ledger.append_node_event(&e).await?;
            return Ok(());
        }
        match self.cloud.stop(&id).await {
            Ok(_) => {
                let mut e = last.next(NodeState::Warm, reason, self.clock.now());
                e.request = None;
                self.ledger.append_node_event(&e).await?;
            }
            Err(e) => {
                tracing::warn!(node = %last.node, error = %e, "stop failed; next tick retries")
            }
        }
        Ok(())
    }

    /// Terminates the node's instance, if it has one, and records the end of the node.
    async fn terminate_node(&self, last: &NodeEvent, reason: &str) -> Result<(), EngineError> {
        if let Some(id) = last.instance.clone().map(InstanceId) {
            match self.cloud.terminate(&id).await {
                Ok(()) | Err(CloudError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(node = %last.node, error = %e, "terminate failed; next tick retries");
                    return Ok(());
                }
            }
        }
        self.ledger
            .append_node_event(&last.next(NodeState::Terminated, reason, self.clock.now()))
            .await?;
        Ok(())
    }

    /// Sends the launch for an intent already in the ledger and records the outcome.
    /// Returns the cloud's refusal, if any, for the planner to fall back on.
    async fn launch_for_intent(
        &self,
        pool: &PoolSpec,
        offering: &Offering,
        intent: &NodeEvent,
    ) -> Result<Option<CloudError>, EngineError> {
        let spec = LaunchSpec {
            offering: offering.clone(),
            client_token: intent.client_token.clone(),
            tags: OwnershipTags {
                cluster: self.config.cluster_id.clone(),
                pool: pool.name.to_string(),
                node: intent.node.0.clone(),
                request: intent.request.as_ref().map(|r| r.0.clone()),
            },
            user_data: self
                .cluster
                .as_ref()
                .and_then(|c| c.bootstrap(&pool.name, &intent.node, offering.provider)),
        };
        // Throttling is retried here, a few times with jittered backoff, within the tick; past
        // that the intent stays and the next tick repeats it with the same client token.
        let result = {
            use backon::{ExponentialBuilder, Retryable};
            (|| self.cloud.launch(&spec))
                .retry(
                    ExponentialBuilder::default()
                        .with_min_delay(std::time::Duration::from_millis(100))
                        .with_max_delay(std::time::Duration::from_secs(2))
                        .with_max_times(THROTTLE_RETRIES)
                        .with_jitter(),
                )
                .when(|e: &CloudError| e.class() == ErrorClass::Throttled)
                .await
        };
        let now = self.clock.now();
        match result {
            Ok(instance) => {
                let mut e = intent.next(NodeState::Launching, "accepted", now);
                e.instance = Some(instance.id.0);
                self.ledger.append_node_event(&e).await?;
                Ok(None)
            }
            Err(err) if err.class().is_retryable() => {
                // Throttled or transient: keep the intent; the next activation repeats the call
                // with the same client token.
                tracing::warn!(node = %intent.node, error = %err, "launch deferred to the next tick");
                Ok(None)
            }
            Err(err) => {
                let class = err.class();
                self.ledger
                    .append_node_event(&intent.next(NodeState::Refused, err.code(), now))
                    .await?;
                self.ledger
                    .append_refusal(&RefusalRecord {
                        pool: pool.name.clone(),
                        request: intent.request.clone(),
                        node: Some(intent.node.clone()),
                        offering: Some(offering.id.clone()),
                        replicas: 1,
                        reason: RefusalReason::Cloud(class),
                        detail: err.to_string(),
                        at: now,
                    })
                    .await?;
                self.metrics
                    .refusals
                    .get_or_create(&crate::metrics::RefusalLabels {
                        pool: pool.name.to_string(),
                        reason: RefusalReason::Cloud(class).code(),
                        provider: offering.provider.to_string(),
                        offering: offering.id.to_string(),
                    })
                    .inc();
                if class.falls_back() {
                    self.mark_unavailable(&offering.id);
                } else if class == ErrorClass::InvalidRequest {
                    // Our request is wrong or not permitted: every retry would fail the same way
                    // (and may spam the cloud's audit log). Stop the pool and alert.
                    tracing::error!(pool = %pool.name, offering = %offering.id, error = %err, "launch refused as invalid or not permitted; pool halted");
                    self.state().halted.insert(
                        pool.name.clone(),
                        format!("{} on {}: {err}", err.code(), offering.id),
                    );
                } else {
                    tracing::error!(pool = %pool.name, offering = %offering.id, error = %err, "launch refused; not falling back for this class");
                }
                Ok(Some(err))
            }
        }
    }

    /// Skips `offering` in plans for the configured cooldown, and remembers the refusal for
    /// the ranking after that.
    fn mark_unavailable(&self, offering: &OfferingId) {
        let now = self.clock.now();
        let until = now
            + chrono::Duration::from_std(self.config.engine.offering_cooldown)
                .unwrap_or(chrono::Duration::minutes(3));
        let mut st = self.state();
        st.unavailable_until.insert(offering.clone(), until);
        st.refusal_log
            .entry(offering.clone())
            .or_default()
            .push_back(now);
    }

    async fn reconcile_pool(&self, pool: &PoolSpec) -> Result<(), EngineError> {
        let now = self.clock.now();
        // The controller sizes the pool's organic replicas (capacity requests come on top).
        let mut counts = ReplicaCounts::default();
        for e in self.ledger.live_nodes().await?.iter().filter(|e| {
            e.pool == pool.name && e.request.is_none() && e.destination == Destination::Serve
        }) {
            match e.state {
                NodeState::Requested | NodeState::Launching => counts.requested += 1,
                NodeState::Booting => counts.starting += 1,
                NodeState::Serving => counts.ready += 1,
                NodeState::Draining => counts.draining += 1,
                _ => {}
            }
        }
        let controller_target = {
            let mut st = self.state();
            // After a restart the controller has no memory: it starts from the replicas that
            // exist, so a pool with no signal yet holds where it is instead of draining to zero.
            let memory = st
                .memory
                .get(&pool.name)
                .cloned()
                .unwrap_or(ControllerMemory {
                    target: counts.provisioned(),
                    ..ControllerMemory::default()
                });
            let signal = st.signals.get(&pool.name).copied();
            let decision = controller::decide(pool, signal.as_ref(), counts, memory, now);
            let previous_hold = st.decisions.get(&pool.name).and_then(|d| d.hold);
            if decision.hold.is_some() && decision.hold != previous_hold {
                tracing::warn!(pool = %pool.name, hold = ?decision.hold, reason = %decision.reason, "pool is holding");
            }
            st.memory.insert(pool.name.clone(), decision.memory.clone());
            self.metrics
                .decisions
                .get_or_create(&crate::metrics::RuleLabels {
                    pool: pool.name.to_string(),
                    rule: serde_json::to_value(decision.rule)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                })
                .inc();
            let closed = record_decision(&mut st, pool, &decision, signal, counts, now);
            let target = if pool.scaling.shadow {
                // Shadow mode: the decision is on record; the pool keeps what it has.
                counts.provisioned()
            } else {
                decision.target
            };
            st.decisions.insert(pool.name.clone(), decision);
            (target, closed)
        };
        let (controller_target, closed) = controller_target;
        let controller_target = self
            .floor_for_pending_pods(pool, counts, controller_target, now)
            .await?;
        if let Some(closed) = closed
            && let Ok(json) = serde_json::to_string(&closed)
        {
            self.ledger
                .append_decision(&pool.name, closed.at, &json)
                .await?;
        }
        let requests: Vec<CapacityRequest> = self
            .ledger
            .open_capacity_requests()
            .await?
            .into_iter()
            .filter(|r| r.pool == pool.name)
            .collect();
        let open: Vec<OpenRequest> = requests
            .iter()
            .map(|r| OpenRequest {
                id: r.id.clone(),
                replicas: r.replicas,
                priority: r.priority,
                created_at: r.created_at,
            })
            .collect();

        // Nodes of a cancelled request go back to organic demand (and scale-in); nodes of a request
        // closed by a refusal stay with it, since what was delivered is still wanted.
        let mut cancelled = std::collections::HashSet::new();
        for id in self
            .ledger
            .live_nodes()
            .await?
            .iter()
            .filter(|e| e.pool == pool.name)
            .filter_map(|e| e.request.clone())
            .collect::<std::collections::BTreeSet<_>>()
        {
            if let Some(outcome) = self.ledger.capacity_request(&id).await?
                && outcome.state == headroom_core::RequestState::Cancelled
            {
                cancelled.insert(id);
            }
        }

        if let Some(why) = self.state().halted.get(&pool.name) {
            tracing::debug!(pool = %pool.name, %why, "pool halted; not planning");
            return Ok(());
        }
        let mut unserved = 0;
        for _round in 0..MAX_FALLBACK_ROUNDS {
            let all_live = self.ledger.live_nodes().await?;
            let live: Vec<NodeEvent> = all_live
                .iter()
                .filter(|e| e.pool == pool.name)
                .cloned()
                .collect();
            let (nodes, offerings, launches_in_period, borrowed) = {
                let mut st = self.state();
                let nodes: Vec<NodeView> = live
                    .iter()
                    .map(|e| NodeView {
                        id: e.node.clone(),
                        state: e.state,
                        offering: e.offering.clone(),
                        market: e.market,
                        request: e.request.clone().filter(|r| !cancelled.contains(r)),
                        destination: e.destination,
                        price_usd_per_hour: e.price_usd_per_hour,
                        reclaiming: st.reclaiming.contains(&e.client_token),
                    })
                    .collect();
                let since = now - RECENT_REFUSALS;
                let offerings: Vec<OfferingChoice> = pool
                    .offerings
                    .iter()
                    .filter_map(|id| self.config.offerings.iter().find(|o| &o.offering.id == id))
                    .map(|o| {
                        let log = st.refusal_log.entry(o.offering.id.clone()).or_default();
                        while log.front().is_some_and(|t| *t < since) {
                            log.pop_front();
                        }
                        let recent_refusals = log.len() as u32;
                        // Ranked and held at the price in force; a spot market above the most a
                        // launch pays would only earn a refusal.
                        let (offering, above_max_price) =
                            prices::in_force(&o.offering, &st.live_prices);
                        OfferingChoice {
                            offering,
                            available: !above_max_price
                                && st
                                    .unavailable_until
                                    .get(&o.offering.id)
                                    .is_none_or(|until| *until <= now),
                            recent_refusals,
                            // A reservation is shared by every pool that lists it.
                            reservation_free: o.reservation.map(|r| {
                                let used = all_live
                                    .iter()
                                    .filter(|e| e.offering == o.offering.id)
                                    .count() as u32;
                                r.nodes.saturating_sub(used)
                            }),
                        }
                    })
                    .collect();
                let period = chrono::Duration::from_std(pool.supply.launch_period)
                    .unwrap_or(chrono::Duration::minutes(1));
                let log = st.launch_log.entry(pool.name.clone()).or_default();
                while log.front().is_some_and(|t| *t <= now - period) {
                    log.pop_front();
                }
                let launches_in_period = log.len() as u32;
                let borrowed: u32 = st
                    .borrowed
                    .get(&pool.name)
                    .map_or(0, |from| from.values().sum());
                (nodes, offerings, launches_in_period, borrowed)
            };
            let global_room = self
                .config
                .engine
                .global_max_nodes
                .map(|max| max.saturating_sub(all_live.len() as u32));
            let budget_in_force = self.ledger.budget(&pool.account).await?;
            let budget = match &budget_in_force {
                Some(b) => Some(self.ledger.budget_standing(b, now).await?),
                None => None,
            };
            let plan = planner::plan(&PlanInput {
                pool,
                offerings: &offerings,
                nodes: &nodes,
                controller_target,
                borrowed,
                requests: &open,
                budget,
                budget_action: budget_in_force.map_or(HardAction::Clamp, |b| b.hard_action),
                hold_horizon: self.config.engine.hold_horizon,
                launches_in_period,
                global_room,
            });
            unserved = plan.unserved;
            if !self.apply(pool, &plan.actions, &live, &requests).await? {
                break;
            }
        }
        self.hand_to_fallback(pool, unserved);
        Ok(())
    }

    /// Hands the organic replicas no offering of `pool` could supply to its fallback pool (a
    /// smaller model), or takes them back once the pool can supply them again.
    fn hand_to_fallback(&self, pool: &PoolSpec, unserved: u32) {
        let Some(fallback) = &pool.supply.fallback_pool else {
            return;
        };
        let mut st = self.state();
        let from = st.borrowed.entry(fallback.clone()).or_default();
        let before = from.get(&pool.name).copied().unwrap_or(0);
        if unserved == 0 {
            from.remove(&pool.name);
        } else {
            from.insert(pool.name.clone(), unserved);
        }
        if unserved > before {
            tracing::warn!(pool = %pool.name, fallback = %fallback, replicas = unserved, "no offering left; the fallback pool serves the traffic");
            self.metrics
                .fallbacks
                .get_or_create(&crate::metrics::FallbackLabels {
                    pool: pool.name.to_string(),
                    kind: FallbackKind::SmallerModel.as_str().to_string(),
                })
                .inc_by((unserved - before) as u64);
        }
    }

    /// Applies a plan. Returns whether a cloud refused a launch, so the caller re-plans at once.
    async fn apply(
        &self,
        pool: &PoolSpec,
        actions: &[Action],
        live: &[NodeEvent],
        requests: &[CapacityRequest],
    ) -> Result<bool, EngineError> {
        let mut fell_back = false;
        let mut pool_refusal = None;
        for action in actions {
            let now = self.clock.now();
            match action {
                Action::Launch {
                    offering,
                    request,
                    destination,
                    hold,
                    fallback,
                } => {
                    let Some(offering) = self.config.offering(offering).cloned() else {
                        continue;
                    };
                    let node = NodeId(format!("n-{}", uuid::Uuid::new_v4().simple()));
                    // The ledger records the price in force (what the node costs); the cloud
                    // is asked with the configured one (for spot, the most we pay).
                    let intent = NodeEvent::launch_intent(
                        pool,
                        &self.priced(&offering),
                        node,
                        request.clone(),
                        *destination,
                        *hold,
                        now,
                    );
                    // Intent first, with its hold, in the transaction that checks the budget: if
                    // we die after the cloud call, the restart finds this row.
                    let span = self.action_span("launch", pool, request.as_ref(), &intent.node);
                    if !self
                        .admit_or_refuse(pool, &intent, &mut pool_refusal)
                        .instrument(span.clone())
                        .await?
                    {
                        break;
                    }
                    self.state()
                        .launch_log
                        .entry(pool.name.clone())
                        .or_default()
                        .push_back(now);
                    match self
                        .launch_for_intent(pool, &offering, &intent)
                        .instrument(span)
                        .await?
                    {
                        Some(err) if err.class().falls_back() => {
                            // The rest of this plan assumed an offering that is gone: plan again.
                            fell_back = true;
                            break;
                        }
                        Some(err) if err.class() == ErrorClass::InvalidRequest => break,
                        Some(_) => {}
                        None => {
                            if let Some(kind) = fallback {
                                self.metrics
                                    .fallbacks
                                    .get_or_create(&crate::metrics::FallbackLabels {
                                        pool: pool.name.to_string(),
                                        kind: kind.as_str().to_string(),
                                    })
                                    .inc();
                            }
                        }
                    }
                }
                Action::Wake {
                    node,
                    request,
                    hold,
                } => {
                    let Some(last) = live.iter().find(|e| &e.node == node) else {
                        continue;
                    };
                    let Some(instance) = last.instance.clone().map(InstanceId) else {
                        continue;
                    };
                    // A running warm node serves the moment traffic is routed to it (with a
                    // cluster: once it shows the model server Ready); a stopped one is started
                    // and climbs the rest of the ladder.
                    let running = last.state == NodeState::Standby;
                    let serves_now = running
                        && self
                            .cluster
                            .as_ref()
                            .is_none_or(|c| self.standby_serves_now(c, last));
                    let next = if serves_now {
                        NodeState::Serving
                    } else {
                        NodeState::Booting
                    };
                    let mut e = last.next(next, "wake", now);
                    e.request = request.clone();
                    e.destination = Destination::Serve;
                    e.hold = *hold;
                    let span = self.action_span("wake", pool, request.as_ref(), node);
                    if !self
                        .admit_or_refuse(pool, &e, &mut pool_refusal)
                        .instrument(span.clone())
                        .await?
                    {
                        break;
                    }
                    if running {
                        if let Some(cluster) = &self.cluster
                            && !serves_now
                        {
                            self.uncordon_standby(cluster, last).await;
                        }
                        continue;
                    }
                    if let Err(err) = self.cloud.start(&instance).instrument(span).await {
                        let back = e.next(NodeState::Warm, err.code(), self.clock.now());
                        self.ledger
                            .append_node_event(&NodeEvent {
                                request: None,
                                ..back
                            })
                            .await?;
                        self.ledger
                            .append_refusal(&RefusalRecord {
                                pool: pool.name.clone(),
                                request: request.clone(),
                                node: Some(node.clone()),
                                offering: Some(last.offering.clone()),
                                replicas: 1,
                                reason: RefusalReason::Cloud(err.class()),
                                detail: format!("waking {node}: {err}"),
                                at: now,
                            })
                            .await?;
                        if err.class().falls_back() {
                            self.mark_unavailable(&last.offering);
                            fell_back = true;
                            break;
                        }
                    }
                }
                Action::Release { node, to_warm } => {
                    let Some(last) = live.iter().find(|e| &e.node == node) else {
                        continue;
                    };
                    if last.state.is_warm() {
                        // A warm node above the floor serves nobody: nothing to drain.
                        self.terminate_node(last, "warm_surplus").await?;
                        continue;
                    }
                    let reason = if *to_warm {
                        "release_to_warm"
                    } else {
                        "release_terminate"
                    };
                    let draining = last.next(NodeState::Draining, reason, now);
                    self.ledger.append_node_event(&draining).await?;
                    if let Some(cluster) = &self.cluster
                        && self.drain(cluster, &draining, None, now).await?
                    {
                        continue; // still draining: the next ticks finish it
                    }
                    if *to_warm {
                        self.stop_to_warm(&draining, "released").await?;
                    } else {
                        self.terminate_node(&draining, "released").await?;
                    }
                }
                Action::Refuse {
                    request,
                    count,
                    reason,
                } => {
                    let detail = refusal_detail(pool, *reason, *count, request.as_ref(), requests);
                    self.refuse(
                        pool,
                        request.as_ref(),
                        *count,
                        *reason,
                        detail,
                        &mut pool_refusal,
                    )
                    .await?;
                }
            }
        }
        let mut st = self.state();
        match pool_refusal {
            Some(r) => st.last_pool_refusal.insert(pool.name.clone(), r),
            None => st.last_pool_refusal.remove(&pool.name),
        };
        Ok(fell_back)
    }

    /// Remembers the span of the API call that created a capacity request, so the launches made
    /// for it later join the same trace. Bounded: the oldest are forgotten first.
    pub fn remember_request_span(&self, request: &RequestId, span: tracing::Span) {
        let mut spans = self.request_spans.lock().unwrap_or_else(|e| e.into_inner());
        if spans.len() >= MAX_REQUEST_SPANS
            && let Some(oldest) = spans.keys().next().cloned()
        {
            spans.remove(&oldest);
        }
        spans.insert(request.clone(), span);
    }

    /// A span for one action; a child of its capacity request's API span when there is one.
    fn action_span(
        &self,
        action: &'static str,
        pool: &PoolSpec,
        request: Option<&RequestId>,
        node: &NodeId,
    ) -> tracing::Span {
        let parent = request.and_then(|r| {
            self.request_spans
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(r)
                .cloned()
        });
        let request = request.map(|r| r.0.clone()).unwrap_or_default();
        match parent {
            Some(parent) => {
                tracing::info_span!(parent: &parent, "engine.action", action, pool = %pool.name, request, node = %node)
            }
            None => {
                tracing::info_span!("engine.action", action, pool = %pool.name, request, node = %node)
            }
        }
    }

    /// Writes an event that places a hold if its budget can carry it (one transaction), or
    /// records a budget refusal. Returns whether it was admitted.
    async fn admit_or_refuse(
        &self,
        pool: &PoolSpec,
        event: &NodeEvent,
        pool_refusal: &mut Option<(RefusalReason, u32)>,
    ) -> Result<bool, EngineError> {
        let admitted = self
            .ledger
            .admit_node_event(event)
            .instrument(tracing::info_span!("ledger.admit", node = %event.node))
            .await?;
        match admitted {
            Admission::Admitted => Ok(true),
            Admission::OverBudget(standing) => {
                let detail =
                    over_budget_detail(pool, event.request.as_ref(), event.hold, &standing);
                self.refuse(
                    pool,
                    event.request.as_ref(),
                    1,
                    RefusalReason::Budget,
                    detail,
                    pool_refusal,
                )
                .await?;
                Ok(false)
            }
        }
    }

    /// Records a refusal. A standing refusal of organic demand (no request) is written once, not
    /// on every tick it persists.
    async fn refuse(
        &self,
        pool: &PoolSpec,
        request: Option<&RequestId>,
        count: u32,
        reason: RefusalReason,
        detail: String,
        pool_refusal: &mut Option<(RefusalReason, u32)>,
    ) -> Result<(), EngineError> {
        if request.is_none() {
            *pool_refusal = Some((reason, count));
            if self.state().last_pool_refusal.get(&pool.name) == Some(&(reason, count)) {
                return Ok(());
            }
            tracing::warn!(pool = %pool.name, %detail, "demand refused");
        }
        self.metrics
            .refusals
            .get_or_create(&crate::metrics::RefusalLabels {
                pool: pool.name.to_string(),
                reason: reason.code(),
                provider: String::new(),
                offering: String::new(),
            })
            .inc_by(count as u64);
        self.ledger
            .append_refusal(&RefusalRecord {
                pool: pool.name.clone(),
                request: request.cloned(),
                node: None,
                offering: None,
                replicas: count,
                reason,
                detail,
                at: self.clock.now(),
            })
            .await?;
        Ok(())
    }

    async fn publish_status(&self, owned: &BTreeSet<PoolName>) -> Result<(), EngineError> {
        let live = self.ledger.live_nodes().await?;
        let open = self.ledger.open_capacity_requests().await?;
        let now = self.clock.now();
        let mut st = self.state();
        let mut status = BTreeMap::new();
        let st = &mut *st;
        for pool in &self.config.pools {
            let mut s = self.empty_status(pool, now);
            s.reconciled_here = owned.contains(&pool.name);
            let requested_by_clients: u32 = open
                .iter()
                .filter(|r| r.pool == pool.name)
                .map(|r| r.replicas)
                .sum();
            if let Some(decision) = st.decisions.get(&pool.name) {
                s.desired = (decision.target + requested_by_clients).min(pool.max_replicas);
                s.unclamped_desired =
                    decision.unclamped.max(pool.min_replicas) + requested_by_clients;
                s.hold = decision.hold;
                s.limited = decision.limited;
                s.rule = Some(decision.rule);
                s.reason = Some(decision.reason.clone());
                s.classification = decision.classification;
            }
            s.last_signal = st.signals.get(&pool.name).copied();
            // Capacity that lands within the drain objective counts against the shortfall.
            let objective = chrono::Duration::from_std(pool.scaling.backlog_drain)
                .unwrap_or(chrono::Duration::minutes(1));
            let mut arriving_in_time = 0;
            let mut next_capacity: Option<chrono::Duration> = None;
            for e in live.iter().filter(|e| e.pool == pool.name) {
                match e.state {
                    _ if e.state.is_starting() && e.destination == Destination::Warm => {
                        s.warming += 1
                    }
                    NodeState::Requested | NodeState::Launching => s.requested += 1,
                    NodeState::Booting => s.starting += 1,
                    NodeState::Serving if !st.reclaiming.contains(&e.client_token) => s.ready += 1,
                    NodeState::Serving => {}
                    NodeState::Warm => s.warm += 1,
                    NodeState::Standby => {
                        s.warm += 1;
                        s.warm_running += 1;
                    }
                    NodeState::Draining => s.draining += 1,
                    _ => {}
                }
                if e.state.is_starting() && e.destination == Destination::Serve {
                    let remaining = remaining_ladder(pool, e, now);
                    if remaining <= objective {
                        arriving_in_time += 1;
                    }
                    next_capacity = Some(next_capacity.map_or(remaining, |n| n.min(remaining)));
                }
            }
            s.clamped = st
                .last_pool_refusal
                .get(&pool.name)
                .map(|(reason, n)| Clamp {
                    reason: reason.code(),
                    replicas: *n,
                });
            s.halted = st.halted.get(&pool.name).cloned();
            s.serving_for_others = st
                .borrowed
                .get(&pool.name)
                .map_or(0, |from| from.values().sum());
            s.handed_to_fallback = pool
                .supply
                .fallback_pool
                .as_ref()
                .and_then(|f| st.borrowed.get(f))
                .and_then(|from| from.get(&pool.name))
                .copied()
                .unwrap_or(0);
            // A shed client should come back when capacity is due; with none on its way, when a
            // refused offering may be tried again, else after a cold start.
            let retry = next_capacity
                .or_else(|| {
                    pool.offerings
                        .iter()
                        .filter_map(|o| st.unavailable_until.get(o))
                        .filter(|until| **until > now)
                        .min()
                        .map(|until| *until - now)
                })
                .and_then(|d| d.to_std().ok())
                .unwrap_or(pool.ladder.cold_total());
            // Shedding follows measured demand only: with no usable signal the pool holds and
            // admits everything (its own alert says the signal is missing).
            let demand = st
                .decisions
                .get(&pool.name)
                .filter(|d| d.hold.is_none())
                .map_or(0, |d| d.unclamped);
            s.demand = demand;
            s.admission = admission::admission(&AdmissionInput {
                wanted: demand.saturating_sub(s.handed_to_fallback),
                ready: s.ready,
                arriving_in_time,
                next_capacity_in: retry,
            });
            let label = |state: &str| crate::metrics::PoolStateLabels {
                pool: pool.name.to_string(),
                state: state.to_string(),
            };
            for (state, n) in [
                ("requested", s.requested),
                ("starting", s.starting),
                ("ready", s.ready),
                ("warm", s.warm),
                ("warming", s.warming),
                ("draining", s.draining),
            ] {
                self.metrics
                    .replicas
                    .get_or_create(&label(state))
                    .set(n as i64);
            }
            let pool_label = crate::metrics::PoolLabels {
                pool: pool.name.to_string(),
            };
            self.metrics
                .desired
                .get_or_create(&pool_label)
                .set(s.desired as i64);
            if let Some(signal) = &s.last_signal {
                self.metrics
                    .queue_depth
                    .get_or_create(&pool_label)
                    .set(signal.queue_depth.min(i64::MAX as u64) as i64);
                if let Some(age) = signal.oldest_age_s {
                    self.metrics
                        .oldest_age_seconds
                        .get_or_create(&pool_label)
                        .set(age);
                }
            }
            status.insert(pool.name.clone(), s);
        }
        st.status = status;
        Ok(())
    }
}

/// One bounded POST of a JSON body; any 2xx is delivered.
fn post_json(url: &str, body: &str) -> Result<(), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(std::time::Duration::from_secs(5)))
        .build()
        .into();
    agent
        .post(url)
        .header("content-type", "application/json")
        .send(body)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// One bounded GET of a metrics endpoint.
fn fetch(url: &str, timeout: std::time::Duration) -> Result<String, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .build()
        .into();
    let mut response = agent.get(url).call().map_err(|e| e.to_string())?;
    // A metrics page is small; refuse to read an unbounded one.
    response
        .body_mut()
        .with_config()
        .limit(8 * 1024 * 1024)
        .read_to_string()
        .map_err(|e| e.to_string())
}

/// Folds a decision into the pool's open entry when nothing but the time changed; otherwise
/// opens a new entry and returns the closed one, for the caller to write to the ledger.
fn record_decision(
    st: &mut LoopState,
    pool: &PoolSpec,
    decision: &Decision,
    signal: Option<Signals>,
    replicas: ReplicaCounts,
    now: Timestamp,
) -> Option<DecisionRecord> {
    if let Some(open) = st.decision_log.get_mut(&pool.name) {
        let d = &open.decision;
        if (d.target, d.rule, d.hold, d.limited)
            == (
                decision.target,
                decision.rule,
                decision.hold,
                decision.limited,
            )
        {
            open.last_at = now;
            open.repeated = open.repeated.saturating_add(1);
            return None;
        }
    }
    st.decision_log.insert(
        pool.name.clone(),
        DecisionRecord {
            at: now,
            last_at: now,
            repeated: 1,
            decision: decision.clone(),
            signal,
            replicas,
            shadow: pool.scaling.shadow,
        },
    )
}

/// How long a starting node still has to climb, by the pool's ladder estimates: a launch climbs
/// the whole ladder, a woken stopped node only the rungs after its disk.
fn remaining_ladder(pool: &PoolSpec, e: &NodeEvent, now: Timestamp) -> chrono::Duration {
    let total = match (e.state, e.reason.as_deref()) {
        (NodeState::Booting, Some("wake")) => pool.ladder.from_stopped_total(),
        (NodeState::Booting, _) => pool
            .ladder
            .cold_total()
            .saturating_sub(pool.ladder.node_acquisition),
        _ => pool.ladder.cold_total(),
    };
    let total = chrono::Duration::from_std(total).unwrap_or(chrono::Duration::zero());
    (total - (now - e.at)).max(chrono::Duration::zero())
}

fn refusal_detail(
    pool: &PoolSpec,
    reason: RefusalReason,
    count: u32,
    request: Option<&RequestId>,
    requests: &[CapacityRequest],
) -> String {
    let whose = match request.and_then(|id| requests.iter().find(|r| &r.id == id)) {
        Some(r) => format!("{count} of {} replicas for request {}", r.replicas, r.id),
        None => format!("{count} replicas of organic demand"),
    };
    match reason {
        RefusalReason::MaxReplicas => format!(
            "{whose} refused: pool {} is at max_replicas {}; raise max_replicas or lower demand",
            pool.name, pool.max_replicas
        ),
        RefusalReason::GlobalCeiling => format!(
            "{whose} refused: every pool together is at engine.global_max_nodes; raise it or release capacity elsewhere"
        ),
        RefusalReason::Budget => format!(
            "{whose} refused: account {} has no budget left for the hold; raise its ceiling or wait for the next period",
            pool.account
        ),
        RefusalReason::NoOffering => format!(
            "{whose} refused: every offering of pool {} was refused by its cloud recently; add offerings, zones or regions",
            pool.name
        ),
        RefusalReason::Cloud(class) => format!("{whose} refused by the cloud ({})", class.as_str()),
    }
}

fn over_budget_detail(
    pool: &PoolSpec,
    request: Option<&RequestId>,
    hold: Money,
    standing: &BudgetStanding,
) -> String {
    let whose = match request {
        Some(id) => format!("a replica for request {id}"),
        None => "a replica of organic demand".to_string(),
    };
    format!(
        "{whose} refused: account {} would hold ${hold} more with ${} spent and ${} held of its ${} ceiling; raise the ceiling (PUT /v1/budgets/{}) or wait for the next period",
        pool.account, standing.spent, standing.held, standing.ceiling, pool.account
    )
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
