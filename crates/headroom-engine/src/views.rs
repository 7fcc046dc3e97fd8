//! Plain data the engine shares with what surrounds it: the signal a source hands in
//! ([`SignalInput`], from pushes, `crate::scrape` and `crate::prometheus`), and what the engine
//! publishes of each pool ([`PoolStatus`] and its parts, [`ProviderTrouble`]) for the API and the
//! alert rules (`crate::alerts::rules`). Kept apart from the engine so those read these types
//! without importing the engine: no arrow runs back into it.

use std::collections::BTreeMap;

use headroom_core::controller::{Classification, Limit, Rule, ScalingHold, Signals};
use headroom_core::forecast::Forecast;
use headroom_core::shedding::TierAdmission;
use headroom_core::{PoolName, PoolSpec, Priority, Timestamp};
use serde::Serialize;

/// The warm pool's size, decided in the core; published with the pool's status.
pub use headroom_core::warm_pool::WarmPoolSize;

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
    /// Requests waiting per priority tier, when the serving layer counts them: deadline-aware
    /// shedding needs them (see `[pools.scaling] shed_deadlines`).
    pub queue_depth_by_priority: BTreeMap<Priority, u64>,
    /// Arrivals per second per priority tier.
    pub arrival_rate_by_priority_rps: BTreeMap<Priority, f64>,
    /// Tokens waiting and tokens arriving per second, when the serving layer weighs its queue.
    pub queued_tokens: Option<f64>,
    pub token_arrival_rate_tps: Option<f64>,
    /// Each replica's own queue, when the source reads replicas one by one (a `[pools.scrape]`
    /// target list); empty otherwise. Shows skew: one replica holding most of the queue.
    pub replica_queue_depths: Vec<u64>,
}

/// How one signal's queue is spread over the replicas that reported it: one replica holding
/// most of it points at the load balancer, not at capacity.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ReplicaQueues {
    pub replicas: u32,
    /// The longest queue of one replica.
    pub max: u64,
    pub mean: f64,
    /// `max / mean`: 1 when the queue is spread evenly, `replicas` when one replica holds it all
    /// (0 with nothing queued).
    pub skew: f64,
}

impl ReplicaQueues {
    /// The spread of `queues`, when at least two replicas reported one.
    pub(crate) fn of(queues: &[u64]) -> Option<ReplicaQueues> {
        if queues.len() < 2 {
            return None;
        }
        let max = queues.iter().copied().max().unwrap_or(0);
        let mean = queues.iter().sum::<u64>() as f64 / queues.len() as f64;
        Some(ReplicaQueues {
            replicas: u32::try_from(queues.len()).unwrap_or(u32::MAX),
            max,
            mean,
            skew: if mean > 0.0 { max as f64 / mean } else { 0.0 },
        })
    }

    /// Whether the spread is worth a person's look: one replica holds at least twice its share
    /// and at least ten more requests than the mean (small queues are noise).
    pub fn imbalanced(&self) -> bool {
        self.skew >= 2.0 && self.max as f64 - self.mean >= 10.0
    }
}

/// What `GET /v1/pools` shows for one pool.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// The warm pool's size now, between its floor and ceiling, and why.
    pub warm_pool: Option<WarmPoolSize>,
    /// What the pool's own history expects within a lead time, and how right it has been
    /// (absent until the pool has a history; `scaling.forecast = false` still shows it).
    pub forecast: Option<ForecastStatus>,
    /// Whether this process holds the pool's lease and reconciles it. With several replicas
    /// sharing a database, each pool has exactly one owner at a time.
    pub reconciled_here: bool,
    /// Set when the controller is holding the pool instead of scaling it (the HPA's
    /// ScalingActive=False, with the reason). A scaling hold, not money held for a budget.
    #[serde(rename = "hold")]
    pub scaling_hold: Option<ScalingHold>,
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
    /// Why the pool's signal source (`[pools.scrape]`, `[pools.signals]`) last failed to give a
    /// signal, until it gives one again: the pool acts on its last good signal until that is
    /// older than `signal_max_age`, then holds and says this.
    pub signal_source_error: Option<String>,
    /// How the latest signal's queue is spread over the replicas, when the source reports each
    /// replica's queue (a `[pools.scrape]` target list, or `replica_queue_depths` in a push).
    pub replica_queues: Option<ReplicaQueues>,
    /// Warm nodes that are running (standby), included in `warm`.
    pub warm_running: u32,
    /// New nodes climbing the ladder to refill the warm pool (not replicas, not yet warm).
    pub warming: u32,
    /// The governor's last clamp of this pool's demand, if it still stands: the reason
    /// (`max_replicas`, `global_ceiling`, `budget`, `no_offering`) and the replicas refused.
    pub clamped: Option<Clamp>,
    /// Set when a cloud said the pool's request is invalid or not permitted, or a plan broke a
    /// money or instance invariant (`headroom_core::planner::guard`): the pool launches nothing
    /// until the cause is fixed and Headroom restarted.
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Clamp {
    pub reason: String,
    pub replicas: u32,
}

impl PoolStatus {
    /// A pool before its first tick: holding for a signal, nothing counted.
    pub(crate) fn empty(pool: &PoolSpec) -> PoolStatus {
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
            warm_pool: None,
            forecast: None,
            reconciled_here: false,
            scaling_hold: Some(ScalingHold::SignalMissing),
            limited: None,
            rule: None,
            reason: None,
            classification: None,
            shadow: pool.scaling.shadow,
            last_signal: None,
            signal_source_error: None,
            replica_queues: None,
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
}

/// What `GET /v1/pools/{name}` says of a pool's forecast.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ForecastStatus {
    /// The forecast in force: the most demand the history expects within the lead time.
    pub expected: Option<Forecast>,
    /// How far ahead it looks: a new replica's cold start and the breach windows before a
    /// scale-up.
    pub lead_s: u64,
    /// Minutes of history held.
    pub history_minutes: u64,
    /// Forecasts scored against the demand that came (their minute ended), at most a day's.
    pub scored: u64,
    /// Their mean absolute error, in replicas.
    pub mean_abs_error_replicas: Option<f64>,
}

/// A pool's launches failing with transient provider errors, none succeeding since `since`:
/// what the `ProviderErrors` alert reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderTrouble {
    pub pool: PoolName,
    pub since: Timestamp,
    pub last_at: Timestamp,
    pub failures: u32,
    pub last_error: String,
}
