//! The file as serde reads it: one `Raw*` struct per table, with the defaults of keys that have
//! one. Validation (the sibling modules) turns these into the core's types.

use std::collections::BTreeMap;

use headroom_core::{
    AccountName, BudgetPeriod, HardAction, Market, Money, OfferingId, PoolName, ProviderKind,
};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) cluster_id: String,
    #[serde(default = "default_listen")]
    pub(super) listen: String,
    pub(super) database_url: Option<String>,
    #[serde(default)]
    pub(super) engine: RawEngine,
    #[serde(default)]
    pub(super) sim: RawSim,
    #[serde(default)]
    pub(super) offerings: Vec<RawOffering>,
    #[serde(default)]
    pub(super) pools: Vec<RawPool>,
    #[serde(default)]
    pub(super) budgets: Vec<RawBudget>,
    #[serde(default)]
    pub(super) alerts: RawAlerts,
    #[serde(default)]
    pub(super) api: RawApi,
    /// `[aws]` and `[gcp]` belong to the provider crates, which parse and check them.
    pub(super) aws: Option<toml::Table>,
    pub(super) gcp: Option<toml::Table>,
    /// `[kube]` belongs to `headroom-kube`, likewise.
    pub(super) kube: Option<toml::Table>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApi {
    pub(super) requests_per_second: Option<u32>,
    pub(super) burst: Option<u32>,
    pub(super) client_requests_per_second: Option<u32>,
    pub(super) client_burst: Option<u32>,
    pub(super) request_timeout: Option<String>,
    pub(super) token_recheck_interval: Option<String>,
    pub(super) token_outage_grace: Option<String>,
    pub(super) header_read_timeout: Option<String>,
    pub(super) idle_timeout: Option<String>,
    pub(super) max_connections: Option<u32>,
    pub(super) max_connections_per_client: Option<u32>,
    pub(super) max_requests_in_flight: Option<u32>,
    #[serde(default)]
    pub(super) trusted_proxies: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlerts {
    pub(super) repeat_interval: Option<String>,
    pub(super) resend_interval: Option<String>,
    pub(super) refusal_window: Option<String>,
    pub(super) watchdog: Option<bool>,
    #[serde(default)]
    pub(super) external_labels: std::collections::BTreeMap<String, String>,
    pub(super) runbook_base_url: Option<String>,
    pub(super) generator_base_url: Option<String>,
    #[serde(default)]
    pub(super) webhooks: Vec<crate::alerts::Webhook>,
}

pub(super) fn default_listen() -> String {
    "127.0.0.1:8080".to_string()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEngine {
    #[serde(default = "default_tick")]
    pub(super) tick: String,
    #[serde(default = "default_hold_horizon")]
    pub(super) hold_horizon: String,
    #[serde(default = "default_cooldown")]
    pub(super) offering_cooldown: String,
    #[serde(default = "default_provider_timeout")]
    pub(super) provider_timeout: String,
    pub(super) global_max_nodes: Option<u32>,
    #[serde(default = "default_price_refresh")]
    pub(super) price_refresh: String,
    #[serde(default = "default_quota_cache_ttl")]
    pub(super) quota_cache_ttl: String,
    #[serde(default = "default_orphan_policy")]
    pub(super) orphan_policy: String,
    #[serde(default = "default_transient_failure_limit")]
    pub(super) transient_failure_limit: u32,
    #[serde(default = "default_transient_failure_window")]
    pub(super) transient_failure_window: String,
    #[serde(default = "default_provider_errors_alert_after")]
    pub(super) provider_errors_alert_after: String,
}

fn default_transient_failure_limit() -> u32 {
    3
}

fn default_transient_failure_window() -> String {
    "5m".into()
}

fn default_provider_errors_alert_after() -> String {
    "5m".into()
}

fn default_orphan_policy() -> String {
    "terminate".into()
}

fn default_quota_cache_ttl() -> String {
    "5m".into()
}

fn default_price_refresh() -> String {
    "5m".into()
}

fn default_provider_timeout() -> String {
    "60s".into()
}

fn default_tick() -> String {
    "1s".into()
}
fn default_hold_horizon() -> String {
    "1h".into()
}
fn default_cooldown() -> String {
    "3m".into()
}

impl Default for RawEngine {
    fn default() -> Self {
        RawEngine {
            tick: default_tick(),
            hold_horizon: default_hold_horizon(),
            offering_cooldown: default_cooldown(),
            provider_timeout: default_provider_timeout(),
            global_max_nodes: None,
            price_refresh: default_price_refresh(),
            quota_cache_ttl: default_quota_cache_ttl(),
            orphan_policy: default_orphan_policy(),
            transient_failure_limit: default_transient_failure_limit(),
            transient_failure_window: default_transient_failure_window(),
            provider_errors_alert_after: default_provider_errors_alert_after(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSim {
    #[serde(default)]
    pub(super) seed: u64,
    pub(super) state_file: Option<std::path::PathBuf>,
    #[serde(default)]
    pub(super) gpu_quota_per_region: BTreeMap<String, u32>,
    pub(super) launch_answer_delay: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLadder {
    pub(super) node_acquisition: String,
    pub(super) image_pull: String,
    pub(super) weight_load: String,
    pub(super) compile: String,
    pub(super) warmup: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOffering {
    pub(super) id: OfferingId,
    pub(super) provider: ProviderKind,
    pub(super) region: String,
    pub(super) zone: String,
    pub(super) instance_type: String,
    pub(super) market: Market,
    pub(super) price_usd_per_hour: Money,
    pub(super) gpus: u32,
    /// GB of volumes a node keeps while parked; prices `warm_usd_per_hour` unless it is set.
    pub(super) volume_gb: Option<u32>,
    pub(super) warm_usd_per_hour: Option<Money>,
    #[serde(default = "default_sim_capacity")]
    pub(super) sim_capacity: u32,
    pub(super) sim_ladder: Option<RawLadder>,
    #[serde(default)]
    pub(super) sim_spot_interruptions_per_hour: f64,
    pub(super) reserved_nodes: Option<u32>,
    pub(super) reservation_starts: Option<String>,
    pub(super) reservation_ends: Option<String>,
}

fn default_sim_capacity() -> u32 {
    16
}

/// `[pools.scaling]`: every key but `replica_throughput_rps` has a default (see
/// `ScalingPolicy::default`); durations are strings like "15s".
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScaling {
    pub(super) replica_throughput_rps: f64,
    #[serde(default)]
    pub(super) replica_throughput_tps: Option<f64>,
    pub(super) target_queue_per_replica: Option<f64>,
    pub(super) tolerance: Option<f64>,
    pub(super) oldest_age_threshold: Option<String>,
    pub(super) backlog_drain: Option<String>,
    pub(super) target_utilization: Option<f64>,
    pub(super) scale_up_breaches: Option<u32>,
    pub(super) breach_window: Option<String>,
    pub(super) scale_up_limit: Option<u32>,
    pub(super) scale_up_period: Option<String>,
    pub(super) scale_down_stabilization: Option<String>,
    pub(super) scale_down_fraction: Option<f64>,
    pub(super) scale_down_margin: Option<f64>,
    pub(super) scale_down_period: Option<String>,
    pub(super) direction_cooldown: Option<String>,
    pub(super) min_capacity: Option<u32>,
    pub(super) buffer_replicas: Option<u32>,
    pub(super) utilization_high: Option<f64>,
    pub(super) signal_max_age: Option<String>,
    pub(super) age_classes: Option<Vec<String>>,
    #[serde(default)]
    pub(super) shadow: bool,
    pub(super) forecast: Option<bool>,
    /// Priority → duration text.
    #[serde(default)]
    pub(super) shed_deadlines: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPool {
    pub(super) name: PoolName,
    pub(super) account: AccountName,
    pub(super) offerings: Vec<OfferingId>,
    #[serde(default)]
    pub(super) min_replicas: u32,
    pub(super) max_replicas: u32,
    #[serde(default = "default_step")]
    pub(super) max_scale_up_per_step: u32,
    #[serde(default)]
    pub(super) warm_pool_size: u32,
    pub(super) ladder: RawLadder,
    pub(super) scaling: RawScaling,
    #[serde(default)]
    pub(super) supply: RawSupply,
    pub(super) scrape: Option<RawScrape>,
    pub(super) signals: Option<RawSignals>,
    /// `[[pools.schedule]]`: windows with a replica floor.
    #[serde(default)]
    pub(super) schedule: Vec<crate::schedule::WindowSpec>,
}

/// `[pools.supply]`: the order of supply and the governor's per-pool limits; see
/// `SupplyPolicy`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSupply {
    pub(super) on_demand_base: Option<u32>,
    pub(super) spot_percent_above_base: Option<u32>,
    pub(super) spot_max_price_usd_per_hour: Option<Money>,
    pub(super) warm_mode: Option<String>,
    pub(super) reuse_on_scale_in: Option<bool>,
    pub(super) fallback_pool: Option<PoolName>,
    pub(super) max_launches_per_period: Option<u32>,
    pub(super) launch_period: Option<String>,
    pub(super) rebalance_to_spot: Option<bool>,
    pub(super) warm_pool_max: Option<u32>,
    pub(super) warm_history: Option<String>,
}

/// `[pools.scrape]`: where to read the pool's signals, and `[pools.scrape.series]`: which series.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScrape {
    /// One endpoint (a replica or an aggregator) ...
    pub(super) url: Option<String>,
    /// ... or every replica's endpoint, all read each interval ...
    pub(super) targets: Option<Vec<String>>,
    /// ... or every Ready model-server pod the Kubernetes cluster shows.
    pub(super) pods: Option<RawPodEndpoints>,
    pub(super) interval: Option<String>,
    pub(super) timeout: Option<String>,
    /// How the replicas' oldest ages become the pool's: `max` (the default) or `p50`..`p99`.
    pub(super) oldest_age_aggregation: Option<String>,
    pub(super) series: crate::scrape::ScrapeSelectors,
}

/// `[pools.scrape.pods]`: where each model-server pod serves its metrics.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPodEndpoints {
    pub(super) port: u16,
    pub(super) path: Option<String>,
    pub(super) scheme: Option<String>,
}

/// `[pools.signals]`: a signal source other than pushes and `[pools.scrape]`; today a
/// Prometheus server queried with PromQL (`[pools.signals.queries]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSignals {
    pub(super) source: String,
    pub(super) url: String,
    pub(super) interval: Option<String>,
    pub(super) timeout: Option<String>,
    pub(super) bearer_token_file: Option<std::path::PathBuf>,
    pub(super) basic_auth_username: Option<String>,
    pub(super) basic_auth_password_file: Option<std::path::PathBuf>,
    pub(super) ca_file: Option<std::path::PathBuf>,
    pub(super) queries: crate::prometheus::SignalQueries,
}

fn default_step() -> u32 {
    4
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudget {
    pub(super) account: AccountName,
    pub(super) period: BudgetPeriod,
    pub(super) ceiling_usd: Money,
    #[serde(default = "default_soft")]
    pub(super) soft_threshold_percent: u8,
    #[serde(default = "default_hard")]
    pub(super) hard_action: HardAction,
}

fn default_soft() -> u8 {
    80
}
fn default_hard() -> HardAction {
    HardAction::Refuse
}
