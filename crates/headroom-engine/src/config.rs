//! The configuration file: parsed once at the edge into core types, every mistake reported as one
//! line that names the key and the fix.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use headroom_core::pool::{ColdStartLadder, ScalingPolicy};
use headroom_core::{
    AccountName, Budget, BudgetPeriod, HardAction, Market, Money, Offering, OfferingId, PoolName,
    PoolSpec, ProviderKind, SupplyPolicy, WarmMode,
};
use serde::Deserialize;

/// Everything wrong with a configuration file, one problem per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for ConfigErrors {}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Tags every instance Headroom launches, so a restart can tell its own instances apart.
    pub cluster_id: String,
    pub listen: SocketAddr,
    pub database_url: Option<String>,
    pub engine: EngineSettings,
    pub sim: SimSettings,
    pub offerings: Vec<OfferingConfig>,
    pub pools: Vec<PoolSpec>,
    pub budgets: Vec<Budget>,
    pub alerts: crate::alerts::AlertSettings,
    pub api: ApiSettings,
    /// Per pool, the service classes whose oldest age counts (all when absent).
    pub age_classes: BTreeMap<PoolName, Vec<String>>,
    /// Pools whose signals are scraped from a Prometheus text endpoint.
    pub scrape: BTreeMap<PoolName, crate::scrape::ScrapeTarget>,
    /// The `[aws]` table, parsed by the AWS provider crate.
    pub aws: Option<toml::Table>,
    /// The `[gcp]` table, parsed by the GCP provider crate.
    pub gcp: Option<toml::Table>,
    /// The `[kube]` table, parsed by `headroom-kube` (readiness and drains from a cluster).
    pub kube: Option<toml::Table>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineSettings {
    /// How often the reconcile loop runs when nothing wakes it.
    pub tick: Duration,
    /// Running time each wake or launch holds against its budget.
    pub hold_horizon: Duration,
    /// How long an offering the cloud refused for capacity is skipped.
    pub offering_cooldown: Duration,
    /// A cloud call still unanswered after this is abandoned as a transient error.
    pub provider_timeout: Duration,
    /// The governor's ceiling across every pool: nodes that exist (starting, serving, warm).
    pub global_max_nodes: Option<u32>,
    /// How often live prices (spot) are asked of the cloud; zero keeps the configured prices.
    pub price_refresh: Duration,
    /// What happens to instances tagged as this deployment's that the ledger does not know.
    pub orphan_policy: OrphanPolicy,
}

/// `engine.orphan_policy`: what reconciliation does with an orphan (an instance tagged with this
/// deployment's cluster id that the ledger does not know).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OrphanPolicy {
    /// Terminate it: it costs money and serves nobody.
    #[default]
    Terminate,
    /// Leave it, and say so (alert `OrphanInstances`, metric, decision log): for adopting
    /// Headroom into an account where instances may already carry its tags.
    Report,
}

impl OrphanPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            OrphanPolicy::Terminate => "terminate",
            OrphanPolicy::Report => "report",
        }
    }
}

/// `[api]`: limits every request meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiSettings {
    /// Requests per second per token (the whole API when authentication is off)...
    pub requests_per_second: u32,
    /// ...with this burst on top.
    pub burst: u32,
    pub request_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SimSettings {
    pub seed: u64,
    /// Keep the simulated cloud's state in this file, shared by every process that names it.
    pub state_file: Option<std::path::PathBuf>,
    pub gpu_quota_per_region: BTreeMap<String, u32>,
}

/// An offering plus what the simulated cloud needs to imitate it.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferingConfig {
    pub offering: Offering,
    /// Simulated cloud only: instances that can run at once.
    pub sim_capacity: u32,
    /// Simulated cloud only: the ladder this offering's nodes actually climb.
    pub sim_ladder: ColdStartLadder,
    /// Simulated cloud only: mean interruptions per spot instance-hour.
    pub sim_spot_interruptions_per_hour: f64,
    /// For market "reserved": the reservation or capacity block behind the offering.
    pub reservation: Option<Reservation>,
}

/// A reservation (or capacity block): nodes already committed to, usable by the pools that list
/// its offering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    pub nodes: u32,
    /// When it ends, if it does: alerts warn before.
    pub ends_at: Option<headroom_core::Timestamp>,
}

impl Config {
    pub fn pool(&self, name: &PoolName) -> Option<&PoolSpec> {
        self.pools.iter().find(|p| &p.name == name)
    }

    pub fn offering(&self, id: &OfferingId) -> Option<&Offering> {
        self.offerings
            .iter()
            .map(|o| &o.offering)
            .find(|o| &o.id == id)
    }

    /// The clouds the offerings name, each once, in a stable order.
    pub fn providers(&self) -> BTreeSet<ProviderKind> {
        self.offerings.iter().map(|o| o.offering.provider).collect()
    }

    pub fn budget(&self, account: &AccountName) -> Option<&Budget> {
        self.budgets.iter().find(|b| &b.account == account)
    }

    /// Parses and validates a configuration file's text. `origin` names it in messages.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigErrors> {
        let raw: RawConfig = toml::from_str(text)
            .map_err(|e| ConfigErrors(vec![describe_toml_error(&e, text, origin)]))?;
        raw.validate(origin)
    }
}

/// Turns a TOML/serde error into one line: where, which key, what is wrong, how to fix it.
fn describe_toml_error(err: &toml::de::Error, text: &str, origin: &str) -> String {
    let message = err.message().replace('\n', " ");
    let Some(span) = err.span() else {
        return format!("{origin}: {message}");
    };
    let line_no = text[..span.start.min(text.len())].matches('\n').count() + 1;
    let line = text.lines().nth(line_no - 1).unwrap_or("").trim();
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim().to_string())
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    let fix = if message.contains("unknown field") {
        "remove it or correct its spelling"
    } else if message.contains("missing field") {
        "add it to this table"
    } else if message.contains("expected u32")
        || message.contains("expected u64")
        || message.contains("expected u8")
    {
        "use a whole number that is zero or more"
    } else if message.contains("duration") {
        "write a duration such as \"90s\", \"5m\" or \"1h\""
    } else if message.contains("amount") {
        "write an amount in US dollars such as \"12.50\""
    } else {
        "correct the value"
    };
    match key {
        Some(key) => format!("{origin}:{line_no}: key `{key}`: {message}; fix: {fix}"),
        None => format!("{origin}:{line_no}: {message}; fix: {fix}"),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    cluster_id: String,
    #[serde(default = "default_listen")]
    listen: String,
    database_url: Option<String>,
    #[serde(default)]
    engine: RawEngine,
    #[serde(default)]
    sim: RawSim,
    #[serde(default)]
    offerings: Vec<RawOffering>,
    #[serde(default)]
    pools: Vec<RawPool>,
    #[serde(default)]
    budgets: Vec<RawBudget>,
    #[serde(default)]
    alerts: RawAlerts,
    #[serde(default)]
    api: RawApi,
    /// `[aws]` and `[gcp]` belong to the provider crates, which parse and check them.
    aws: Option<toml::Table>,
    gcp: Option<toml::Table>,
    /// `[kube]` belongs to `headroom-kube`, likewise.
    kube: Option<toml::Table>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApi {
    requests_per_second: Option<u32>,
    burst: Option<u32>,
    request_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlerts {
    repeat_interval: Option<String>,
    refusal_window: Option<String>,
    #[serde(default)]
    webhooks: Vec<crate::alerts::Webhook>,
}

fn default_listen() -> String {
    "127.0.0.1:8080".to_string()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEngine {
    #[serde(default = "default_tick")]
    tick: String,
    #[serde(default = "default_hold_horizon")]
    hold_horizon: String,
    #[serde(default = "default_cooldown")]
    offering_cooldown: String,
    #[serde(default = "default_provider_timeout")]
    provider_timeout: String,
    global_max_nodes: Option<u32>,
    #[serde(default = "default_price_refresh")]
    price_refresh: String,
    #[serde(default = "default_orphan_policy")]
    orphan_policy: String,
}

fn default_orphan_policy() -> String {
    "terminate".into()
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
            orphan_policy: default_orphan_policy(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSim {
    #[serde(default)]
    seed: u64,
    state_file: Option<std::path::PathBuf>,
    #[serde(default)]
    gpu_quota_per_region: BTreeMap<String, u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLadder {
    node_acquisition: String,
    image_pull: String,
    weight_load: String,
    compile: String,
    warmup: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOffering {
    id: OfferingId,
    provider: ProviderKind,
    region: String,
    zone: String,
    instance_type: String,
    market: Market,
    price_usd_per_hour: Money,
    gpus: u32,
    #[serde(default = "default_sim_capacity")]
    sim_capacity: u32,
    sim_ladder: Option<RawLadder>,
    #[serde(default)]
    sim_spot_interruptions_per_hour: f64,
    reserved_nodes: Option<u32>,
    reservation_ends: Option<String>,
}

fn default_sim_capacity() -> u32 {
    16
}

/// `[pools.scaling]`: every key but `replica_throughput_rps` has a default (see
/// `ScalingPolicy::default`); durations are strings like "15s".
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScaling {
    replica_throughput_rps: f64,
    target_queue_per_replica: Option<f64>,
    tolerance: Option<f64>,
    oldest_age_threshold: Option<String>,
    backlog_drain: Option<String>,
    scale_up_breaches: Option<u32>,
    breach_window: Option<String>,
    scale_up_limit: Option<u32>,
    scale_up_period: Option<String>,
    scale_down_stabilization: Option<String>,
    scale_down_fraction: Option<f64>,
    scale_down_period: Option<String>,
    direction_cooldown: Option<String>,
    min_capacity: Option<u32>,
    utilization_high: Option<f64>,
    signal_max_age: Option<String>,
    age_classes: Option<Vec<String>>,
    #[serde(default)]
    shadow: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    name: PoolName,
    account: AccountName,
    offerings: Vec<OfferingId>,
    #[serde(default)]
    min_replicas: u32,
    max_replicas: u32,
    #[serde(default = "default_step")]
    max_scale_up_per_step: u32,
    #[serde(default)]
    warm_pool_size: u32,
    ladder: RawLadder,
    scaling: RawScaling,
    #[serde(default)]
    supply: RawSupply,
    scrape: Option<RawScrape>,
}

/// `[pools.supply]`: the order of supply and the governor's per-pool limits; see
/// `SupplyPolicy`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSupply {
    on_demand_base: Option<u32>,
    spot_percent_above_base: Option<u32>,
    spot_max_price_usd_per_hour: Option<Money>,
    warm_mode: Option<String>,
    reuse_on_scale_in: Option<bool>,
    fallback_pool: Option<PoolName>,
    max_launches_per_period: Option<u32>,
    launch_period: Option<String>,
    rebalance_to_spot: Option<bool>,
}

/// `[pools.scrape]`: where to read the pool's signals, and `[pools.scrape.series]`: which series.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScrape {
    url: String,
    interval: Option<String>,
    timeout: Option<String>,
    series: crate::scrape::ScrapeSelectors,
}

fn default_step() -> u32 {
    4
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    account: AccountName,
    period: BudgetPeriod,
    ceiling_usd: Money,
    #[serde(default = "default_soft")]
    soft_threshold_percent: u8,
    #[serde(default = "default_hard")]
    hard_action: HardAction,
}

fn default_soft() -> u8 {
    80
}
fn default_hard() -> HardAction {
    HardAction::Refuse
}

/// Collects validation problems, each tied to a key path.
struct Problems<'a> {
    origin: &'a str,
    lines: Vec<String>,
}

impl Problems<'_> {
    fn add(&mut self, key: &str, what: impl fmt::Display, fix: impl fmt::Display) {
        self.lines
            .push(format!("{}: key `{key}`: {what}; fix: {fix}", self.origin));
    }

    fn supply(&mut self, key: &str, raw: &RawSupply, pool: &PoolName) -> SupplyPolicy {
        let d = SupplyPolicy::default();
        let percent = raw
            .spot_percent_above_base
            .unwrap_or(d.spot_percent_above_base);
        if percent > 100 {
            self.add(
                &format!("{key}.spot_percent_above_base"),
                format!("{percent} is above 100"),
                "use a percentage from 0 (all on-demand) to 100 (all spot)",
            );
        }
        let warm_mode = match raw.warm_mode.as_deref() {
            None | Some("stopped") => WarmMode::Stopped,
            Some("running") => WarmMode::Running,
            Some(other) => {
                self.add(
                    &format!("{key}.warm_mode"),
                    format!("{other:?} is not a warm mode"),
                    "use \"stopped\" or \"running\"",
                );
                WarmMode::Stopped
            }
        };
        if raw.fallback_pool.as_ref() == Some(pool) {
            self.add(
                &format!("{key}.fallback_pool"),
                "names the pool itself",
                "name another pool (a smaller model) or remove it",
            );
        }
        if raw.max_launches_per_period == Some(0) {
            self.add(
                &format!("{key}.max_launches_per_period"),
                "must be at least 1",
                "raise it, or remove it for no per-period limit",
            );
        }
        let launch_period = match &raw.launch_period {
            Some(text) => self.duration(&format!("{key}.launch_period"), text),
            None => d.launch_period,
        };
        if launch_period.is_zero() {
            self.add(
                &format!("{key}.launch_period"),
                "must be more than zero",
                "use e.g. \"60s\"",
            );
        }
        SupplyPolicy {
            on_demand_base: raw.on_demand_base.unwrap_or(d.on_demand_base),
            spot_percent_above_base: percent.min(100),
            spot_max_price: raw.spot_max_price_usd_per_hour,
            warm_mode,
            reuse_on_scale_in: raw.reuse_on_scale_in.unwrap_or(d.reuse_on_scale_in),
            fallback_pool: raw.fallback_pool.clone(),
            max_launches_per_period: raw.max_launches_per_period,
            launch_period,
            rebalance_to_spot: raw.rebalance_to_spot.unwrap_or(d.rebalance_to_spot),
        }
    }

    fn duration(&mut self, key: &str, text: &str) -> Duration {
        match humantime::parse_duration(text) {
            Ok(d) => d,
            Err(e) => {
                self.add(
                    key,
                    format!("{text:?} is not a duration ({e})"),
                    "write a duration such as \"90s\", \"5m\" or \"1h\"",
                );
                Duration::ZERO
            }
        }
    }

    fn scaling(&mut self, key: &str, s: &RawScaling) -> ScalingPolicy {
        let d = ScalingPolicy::default();
        let mut duration = |name: &str, value: &Option<String>, default: Duration| match value {
            Some(text) => self.duration(&format!("{key}.{name}"), text),
            None => default,
        };
        let policy = ScalingPolicy {
            target_queue_per_replica: s.target_queue_per_replica,
            tolerance: s.tolerance.unwrap_or(d.tolerance),
            oldest_age_threshold: s.oldest_age_threshold.as_ref().map(|_| {
                duration(
                    "oldest_age_threshold",
                    &s.oldest_age_threshold,
                    Duration::ZERO,
                )
            }),
            replica_throughput_rps: s.replica_throughput_rps,
            backlog_drain: duration("backlog_drain", &s.backlog_drain, d.backlog_drain),
            scale_up_breaches: s.scale_up_breaches.unwrap_or(d.scale_up_breaches),
            breach_window: duration("breach_window", &s.breach_window, d.breach_window),
            scale_up_limit: s.scale_up_limit.unwrap_or(d.scale_up_limit),
            scale_up_period: duration("scale_up_period", &s.scale_up_period, d.scale_up_period),
            scale_down_stabilization: duration(
                "scale_down_stabilization",
                &s.scale_down_stabilization,
                d.scale_down_stabilization,
            ),
            scale_down_fraction: s.scale_down_fraction.unwrap_or(d.scale_down_fraction),
            scale_down_period: duration(
                "scale_down_period",
                &s.scale_down_period,
                d.scale_down_period,
            ),
            direction_cooldown: duration(
                "direction_cooldown",
                &s.direction_cooldown,
                d.direction_cooldown,
            ),
            min_capacity: s.min_capacity.unwrap_or(d.min_capacity),
            utilization_high: s.utilization_high.unwrap_or(d.utilization_high),
            signal_max_age: duration("signal_max_age", &s.signal_max_age, d.signal_max_age),
            shadow: s.shadow,
        };
        let positive = |x: f64| x.is_finite() && x > 0.0;
        let fraction = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
        if !positive(policy.replica_throughput_rps) {
            self.add(
                &format!("{key}.replica_throughput_rps"),
                "must be a positive number",
                "measure successful requests per second per ready replica, e.g. 2.5",
            );
        }
        if policy
            .target_queue_per_replica
            .is_some_and(|t| !positive(t))
        {
            self.add(
                &format!("{key}.target_queue_per_replica"),
                "must be a positive number",
                "use e.g. 2 waiting requests per ready replica",
            );
        }
        if !fraction(policy.tolerance) {
            self.add(
                &format!("{key}.tolerance"),
                "must be between 0 and 1",
                "use e.g. 0.1",
            );
        }
        if !fraction(policy.scale_down_fraction) {
            self.add(
                &format!("{key}.scale_down_fraction"),
                "must be between 0 and 1",
                "use e.g. 0.2",
            );
        }
        if !fraction(policy.utilization_high) {
            self.add(
                &format!("{key}.utilization_high"),
                "must be between 0 and 1",
                "use e.g. 0.7",
            );
        }
        if policy.scale_up_breaches == 0 {
            self.add(
                &format!("{key}.scale_up_breaches"),
                "must be at least 1",
                "use 1 to scale up on the first breach, or e.g. 2",
            );
        }
        if policy.scale_up_limit == 0 {
            self.add(
                &format!("{key}.scale_up_limit"),
                "must be at least 1",
                "allow at least one replica per scale_up_period",
            );
        }
        if policy.signal_max_age.is_zero() {
            self.add(
                &format!("{key}.signal_max_age"),
                "must be more than zero",
                "use e.g. \"30s\"",
            );
        }
        policy
    }

    fn ladder(&mut self, key: &str, raw: &RawLadder) -> ColdStartLadder {
        ColdStartLadder {
            node_acquisition: self
                .duration(&format!("{key}.node_acquisition"), &raw.node_acquisition),
            image_pull: self.duration(&format!("{key}.image_pull"), &raw.image_pull),
            weight_load: self.duration(&format!("{key}.weight_load"), &raw.weight_load),
            compile: self.duration(&format!("{key}.compile"), &raw.compile),
            warmup: self.duration(&format!("{key}.warmup"), &raw.warmup),
        }
    }
}

/// A typical GPU node ladder, for simulated offerings that do not set their own.
pub const DEFAULT_SIM_LADDER: ColdStartLadder = ColdStartLadder {
    node_acquisition: Duration::from_secs(60),
    image_pull: Duration::from_secs(45),
    weight_load: Duration::from_secs(90),
    compile: Duration::from_secs(30),
    warmup: Duration::from_secs(15),
};

impl RawConfig {
    fn validate(self, origin: &str) -> Result<Config, ConfigErrors> {
        let mut p = Problems {
            origin,
            lines: vec![],
        };

        if self.cluster_id.trim().is_empty() || self.cluster_id.len() > 63 {
            p.add(
                "cluster_id",
                "must be 1 to 63 characters",
                "name this Headroom deployment, e.g. \"prod-use1\"",
            );
        }
        let listen = self.listen.parse().unwrap_or_else(|_| {
            p.add(
                "listen",
                format!("{:?} is not an address", self.listen),
                "write host:port, e.g. \"127.0.0.1:8080\"",
            );
            default_listen()
                .parse()
                .expect("default listen address parses")
        });
        let engine = EngineSettings {
            tick: p.duration("engine.tick", &self.engine.tick),
            hold_horizon: p.duration("engine.hold_horizon", &self.engine.hold_horizon),
            offering_cooldown: p
                .duration("engine.offering_cooldown", &self.engine.offering_cooldown),
            provider_timeout: p.duration("engine.provider_timeout", &self.engine.provider_timeout),
            global_max_nodes: self.engine.global_max_nodes,
            price_refresh: p.duration("engine.price_refresh", &self.engine.price_refresh),
            orphan_policy: match self.engine.orphan_policy.as_str() {
                "terminate" => OrphanPolicy::Terminate,
                "report" => OrphanPolicy::Report,
                other => {
                    p.add(
                        "engine.orphan_policy",
                        format!("{other:?} is not a policy"),
                        "write \"terminate\" or \"report\"",
                    );
                    OrphanPolicy::Terminate
                }
            },
        };
        if !engine.price_refresh.is_zero() && engine.price_refresh < Duration::from_secs(10) {
            p.add(
                "engine.price_refresh",
                "must be at least 10s (price history calls are rate-limited)",
                "use e.g. \"5m\", or \"0s\" to keep the configured prices",
            );
        }
        if engine.global_max_nodes == Some(0) {
            p.add(
                "engine.global_max_nodes",
                "must be at least 1",
                "raise it, or remove it for no ceiling",
            );
        }
        if engine.tick < Duration::from_millis(50) || engine.tick > Duration::from_secs(300) {
            p.add(
                "engine.tick",
                "must be between 50ms and 5m",
                "use e.g. \"1s\"",
            );
        }

        let mut offerings = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, o) in self.offerings.into_iter().enumerate() {
            let key = format!("offerings[{i}]");
            if !seen.insert(o.id.clone()) {
                p.add(
                    &format!("{key}.id"),
                    format!("offering {} is defined twice", o.id),
                    "give each offering its own id",
                );
            }
            if o.price_usd_per_hour < Money::ZERO {
                p.add(
                    &format!("{key}.price_usd_per_hour"),
                    "must not be negative",
                    "write the hourly price, e.g. \"55.04\"",
                );
            }
            if o.gpus == 0 {
                p.add(
                    &format!("{key}.gpus"),
                    "must be at least 1",
                    "set the number of GPUs per node",
                );
            }
            if !(0.0..=1000.0).contains(&o.sim_spot_interruptions_per_hour) {
                p.add(
                    &format!("{key}.sim_spot_interruptions_per_hour"),
                    "must be between 0 and 1000",
                    "use e.g. 0.05",
                );
            }
            for (field, value) in [
                ("region", &o.region),
                ("zone", &o.zone),
                ("instance_type", &o.instance_type),
            ] {
                if value.trim().is_empty() {
                    p.add(&format!("{key}.{field}"), "must not be empty", "fill it in");
                }
            }
            let reservation = match (o.market, o.reserved_nodes) {
                (Market::Reserved, Some(nodes)) if nodes > 0 => Some(Reservation {
                    nodes,
                    ends_at: o.reservation_ends.as_deref().and_then(|text| {
                        match text.parse::<headroom_core::Timestamp>() {
                            Ok(t) => Some(t),
                            Err(_) => {
                                p.add(
                                    &format!("{key}.reservation_ends"),
                                    format!("{text:?} is not a timestamp"),
                                    "write RFC 3339, e.g. \"2026-12-31T00:00:00Z\"",
                                );
                                None
                            }
                        }
                    }),
                }),
                (Market::Reserved, _) => {
                    p.add(
                        &format!("{key}.reserved_nodes"),
                        "a reserved offering needs the number of nodes reserved",
                        "set reserved_nodes = N (at least 1)",
                    );
                    None
                }
                (_, Some(_)) => {
                    p.add(
                        &format!("{key}.reserved_nodes"),
                        "only a reserved offering has reserved nodes",
                        "set market = \"reserved\" or remove reserved_nodes",
                    );
                    None
                }
                (_, None) => None,
            };
            let sim_ladder = match &o.sim_ladder {
                Some(l) => p.ladder(&format!("{key}.sim_ladder"), l),
                None => DEFAULT_SIM_LADDER,
            };
            offerings.push(OfferingConfig {
                offering: Offering {
                    id: o.id,
                    provider: o.provider,
                    region: o.region,
                    zone: o.zone,
                    instance_type: o.instance_type,
                    market: o.market,
                    price_usd_per_hour: o.price_usd_per_hour,
                    gpus_per_node: o.gpus,
                },
                sim_capacity: o.sim_capacity,
                sim_ladder,
                sim_spot_interruptions_per_hour: o.sim_spot_interruptions_per_hour,
                reservation,
            });
        }

        let budgets_accounts: BTreeSet<AccountName> =
            self.budgets.iter().map(|b| b.account.clone()).collect();
        let mut pools = Vec::new();
        let mut scrape = BTreeMap::new();
        let mut age_classes = BTreeMap::new();
        let mut pool_names = BTreeSet::new();
        for (i, raw) in self.pools.into_iter().enumerate() {
            let key = format!("pools[{i}]");
            if !pool_names.insert(raw.name.clone()) {
                p.add(
                    &format!("{key}.name"),
                    format!("pool {} is defined twice", raw.name),
                    "give each pool its own name",
                );
            }
            if raw.offerings.is_empty() {
                p.add(
                    &format!("{key}.offerings"),
                    "lists no offering",
                    "list at least one offering id",
                );
            }
            for (j, id) in raw.offerings.iter().enumerate() {
                if !seen.contains(id) {
                    p.add(
                        &format!("{key}.offerings[{j}]"),
                        format!("names unknown offering {id}"),
                        format!("define [[offerings]] with id = \"{id}\" or remove it"),
                    );
                }
            }
            if raw.max_replicas == 0 {
                p.add(
                    &format!("{key}.max_replicas"),
                    "must be at least 1",
                    "set the most replicas this pool may run",
                );
            }
            if raw.min_replicas > raw.max_replicas {
                p.add(
                    &format!("{key}.min_replicas"),
                    format!(
                        "{} is above max_replicas {}",
                        raw.min_replicas, raw.max_replicas
                    ),
                    "lower min_replicas or raise max_replicas",
                );
            }
            if raw.max_scale_up_per_step == 0 {
                p.add(
                    &format!("{key}.max_scale_up_per_step"),
                    "must be at least 1",
                    "allow at least one launch per step",
                );
            }
            if !budgets_accounts.is_empty() && !budgets_accounts.contains(&raw.account) {
                p.add(
                    &format!("{key}.account"),
                    format!("account {} has no budget", raw.account),
                    "add a [[budgets]] entry for it or charge an account that has one",
                );
            }
            let scaling = p.scaling(&format!("{key}.scaling"), &raw.scaling);
            if let Some(classes) = &raw.scaling.age_classes {
                age_classes.insert(raw.name.clone(), classes.clone());
            }
            if let Some(target) = &raw.scrape {
                let interval = match &target.interval {
                    Some(text) => p.duration(&format!("{key}.scrape.interval"), text),
                    None => Duration::from_secs(5),
                };
                let timeout = match &target.timeout {
                    Some(text) => p.duration(&format!("{key}.scrape.timeout"), text),
                    None => Duration::from_secs(2),
                };
                if !(target.url.starts_with("http://") || target.url.starts_with("https://")) {
                    p.add(
                        &format!("{key}.scrape.url"),
                        format!("{:?} is not an http:// or https:// URL", target.url),
                        "scrape an endpoint such as \"http://10.0.0.5:8000/metrics\"",
                    );
                }
                if interval < Duration::from_secs(1) || interval > Duration::from_secs(300) {
                    p.add(
                        &format!("{key}.scrape.interval"),
                        "must be between 1s and 5m",
                        "use e.g. \"5s\"",
                    );
                }
                if timeout.is_zero() || timeout > interval {
                    p.add(
                        &format!("{key}.scrape.timeout"),
                        "must be more than zero and at most the interval",
                        "use e.g. \"2s\"",
                    );
                }
                scrape.insert(
                    raw.name.clone(),
                    crate::scrape::ScrapeTarget {
                        url: target.url.clone(),
                        interval,
                        timeout,
                        selectors: target.series.clone(),
                    },
                );
            }
            let ladder = p.ladder(&format!("{key}.ladder"), &raw.ladder);
            let supply = p.supply(&format!("{key}.supply"), &raw.supply, &raw.name);
            pools.push(PoolSpec {
                name: raw.name,
                account: raw.account,
                offerings: raw.offerings,
                min_replicas: raw.min_replicas,
                max_replicas: raw.max_replicas,
                max_scale_up_per_step: raw.max_scale_up_per_step,
                warm_pool_size: raw.warm_pool_size,
                ladder,
                scaling,
                supply,
            });
        }
        for (i, pool) in pools.iter().enumerate() {
            let Some(target) = &pool.supply.fallback_pool else {
                continue;
            };
            let key = format!("pools[{i}].supply.fallback_pool");
            match pools.iter().find(|q| &q.name == target) {
                None => p.add(
                    &key,
                    format!("names unknown pool {target}"),
                    "name a pool defined in this file",
                ),
                Some(q) if q.supply.fallback_pool.is_some() && q.name != pool.name => p.add(
                    &key,
                    format!("pool {target} has a fallback pool of its own"),
                    "fall back one step only: point at a pool without fallback_pool",
                ),
                Some(_) => {}
            }
        }

        let mut budgets = Vec::new();
        let mut budget_seen = BTreeSet::new();
        for (i, b) in self.budgets.into_iter().enumerate() {
            let key = format!("budgets[{i}]");
            if !budget_seen.insert(b.account.clone()) {
                p.add(
                    &format!("{key}.account"),
                    format!("account {} has two budgets", b.account),
                    "keep one budget per account",
                );
            }
            if b.ceiling_usd <= Money::ZERO {
                p.add(
                    &format!("{key}.ceiling_usd"),
                    "must be more than zero",
                    "write the ceiling in US dollars, e.g. \"5000\"",
                );
            }
            if b.soft_threshold_percent == 0 || b.soft_threshold_percent > 100 {
                p.add(
                    &format!("{key}.soft_threshold_percent"),
                    "must be between 1 and 100",
                    "use e.g. 80",
                );
            }
            budgets.push(Budget {
                account: b.account,
                period: b.period,
                ceiling: b.ceiling_usd,
                soft_threshold_percent: b.soft_threshold_percent,
                hard_action: b.hard_action,
            });
        }

        let defaults = crate::alerts::AlertSettings::default();
        let alerts = crate::alerts::AlertSettings {
            repeat_interval: match &self.alerts.repeat_interval {
                Some(t) => p.duration("alerts.repeat_interval", t),
                None => defaults.repeat_interval,
            },
            refusal_window: match &self.alerts.refusal_window {
                Some(t) => p.duration("alerts.refusal_window", t),
                None => defaults.refusal_window,
            },
            webhooks: self.alerts.webhooks,
        };
        for (i, w) in alerts.webhooks.iter().enumerate() {
            if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
                p.add(
                    &format!("alerts.webhooks[{i}].url"),
                    format!("{:?} is not an http:// or https:// URL", w.url),
                    "give the receiver's address, e.g. \"https://hooks.slack.com/services/…\"",
                );
            }
        }
        let api = ApiSettings {
            requests_per_second: self.api.requests_per_second.unwrap_or(50),
            burst: self.api.burst.unwrap_or(100),
            request_timeout: match &self.api.request_timeout {
                Some(t) => p.duration("api.request_timeout", t),
                None => Duration::from_secs(30),
            },
        };
        if api.requests_per_second == 0 || api.burst == 0 {
            p.add(
                "api.requests_per_second",
                "the rate and the burst must be at least 1",
                "use e.g. 50 and 100",
            );
        }
        if api.request_timeout.is_zero() {
            p.add(
                "api.request_timeout",
                "must be more than zero",
                "use e.g. \"30s\"",
            );
        }
        if p.lines.is_empty() {
            Ok(Config {
                cluster_id: self.cluster_id,
                listen,
                database_url: self.database_url,
                engine,
                sim: SimSettings {
                    seed: self.sim.seed,
                    state_file: self.sim.state_file,
                    gpu_quota_per_region: self.sim.gpu_quota_per_region,
                },
                offerings,
                pools,
                budgets,
                alerts,
                api,
                age_classes,
                scrape,
                aws: self.aws,
                gcp: self.gcp,
                kube: self.kube,
            })
        } else {
            Err(ConfigErrors(p.lines))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../config/headroom.example.toml");

    fn errors(text: &str) -> Vec<String> {
        Config::parse(text, "t.toml")
            .expect_err("config should be rejected")
            .0
    }

    #[test]
    fn the_example_is_valid() {
        let config = Config::parse(EXAMPLE, "example").unwrap();
        assert_eq!(config.pools.len(), 2);
        assert_eq!(
            config
                .offering(&"use1-p5-od".parse().unwrap())
                .unwrap()
                .price_usd_per_hour,
            "55.04".parse().unwrap()
        );
    }

    #[test]
    fn supply_mistakes_name_the_key_and_the_fix() {
        let with_supply = |supply: &str| {
            EXAMPLE.replacen(
                "\n[pools.ladder]\n",
                &format!("\n[pools.supply]\n{supply}\n[pools.ladder]\n"),
                1,
            )
        };
        for (supply, key) in [
            (
                "spot_percent_above_base = 150",
                "pools[0].supply.spot_percent_above_base",
            ),
            ("warm_mode = \"tepid\"", "pools[0].supply.warm_mode"),
            ("fallback_pool = \"nope\"", "pools[0].supply.fallback_pool"),
            (
                "fallback_pool = \"llama-70b-interactive\"",
                "pools[0].supply.fallback_pool",
            ),
            (
                "max_launches_per_period = 0",
                "pools[0].supply.max_launches_per_period",
            ),
        ] {
            let e = errors(&with_supply(supply));
            assert!(
                e.len() == 1 && e[0].contains(key) && e[0].contains("fix:"),
                "{supply}: {e:?}"
            );
        }
        let ok = Config::parse(
            &with_supply("on_demand_base = 2\nspot_percent_above_base = 50\nwarm_mode = \"running\"\nfallback_pool = \"mistral-7b-batch\""),
            "t.toml",
        )
        .unwrap();
        assert_eq!(ok.pools[0].supply.on_demand_base, 2);
        assert_eq!(ok.pools[0].supply.warm_mode, WarmMode::Running);

        let reserved = EXAMPLE.replacen("market = \"on-demand\"", "market = \"reserved\"", 1);
        let e = errors(&reserved);
        assert!(e[0].contains("offerings[0].reserved_nodes"), "{e:?}");
        let ok = Config::parse(
            &reserved.replacen(
                "gpus = 8",
                "gpus = 8\nreserved_nodes = 4\nreservation_ends = \"2027-01-01T00:00:00Z\"",
                1,
            ),
            "t.toml",
        )
        .unwrap();
        assert_eq!(ok.offerings[0].reservation.map(|r| r.nodes), Some(4));
    }

    #[test]
    fn unknown_key_names_the_key_and_line() {
        let text = EXAMPLE.replace("warm_pool_size = 4", "warm_pool_sise = 4");
        let e = errors(&text);
        assert_eq!(e.len(), 1);
        assert!(
            e[0].contains("warm_pool_sise") && e[0].contains("fix:"),
            "{}",
            e[0]
        );
        assert!(e[0].starts_with("t.toml:"), "{}", e[0]);
    }

    #[test]
    fn negative_size_is_rejected_with_a_fix() {
        let e = errors(&EXAMPLE.replace("warm_pool_size = 4", "warm_pool_size = -4"));
        assert!(
            e[0].contains("key `warm_pool_size`") && e[0].contains("whole number"),
            "{}",
            e[0]
        );
    }

    #[test]
    fn semantic_problems_are_each_one_line() {
        let text = EXAMPLE
            .replace("min_replicas = 8", "min_replicas = 30")
            .replace(
                "\"use1-p4d-od\", \"use2-p4d-od\"",
                "\"use1-p4d-od\", \"nowhere\"",
            )
            .replace(
                "scale_down_stabilization = \"10m\"",
                "scale_down_stabilization = \"ten minutes\"",
            );
        let e = errors(&text);
        assert_eq!(e.len(), 3, "{e:#?}");
        assert!(e.iter().any(|l| l.contains("key `pools[0].min_replicas`") && l.contains("max_replicas 24")));
        assert!(
            e.iter()
                .any(|l| l.contains("key `pools[0].offerings[1]`") && l.contains("nowhere"))
        );
        assert!(e.iter().any(
            |l| l.contains("key `pools[0].scaling.scale_down_stabilization`")
                && l.contains("\"90s\"")
        ));
        assert!(e.iter().all(|l| !l.contains('\n')));
    }

    #[test]
    fn price_refresh_is_off_at_zero_and_never_a_hammering_loop() {
        let c = Config::parse(
            &EXAMPLE.replace("price_refresh = \"5m\"", "price_refresh = \"0s\""),
            "t",
        )
        .unwrap();
        assert!(c.engine.price_refresh.is_zero());
        let e = errors(&EXAMPLE.replace("price_refresh = \"5m\"", "price_refresh = \"2s\""));
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(
            e[0].contains("engine.price_refresh") && e[0].contains("\"0s\""),
            "{}",
            e[0]
        );
    }

    #[test]
    fn orphan_policy_is_terminate_or_report() {
        let c = Config::parse(
            &EXAMPLE.replace(
                "orphan_policy = \"terminate\"",
                "orphan_policy = \"report\"",
            ),
            "t",
        )
        .unwrap();
        assert_eq!(c.engine.orphan_policy, OrphanPolicy::Report);
        let e =
            errors(&EXAMPLE.replace("orphan_policy = \"terminate\"", "orphan_policy = \"keep\""));
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(
            e[0].contains("engine.orphan_policy") && e[0].contains("\"report\""),
            "{}",
            e[0]
        );
    }

    #[test]
    fn bad_money_and_names_are_rejected() {
        let e = errors(&EXAMPLE.replace("\"55.04\"", "\"55.0400001\""));
        assert!(e[0].contains("price_usd_per_hour"), "{}", e[0]);
        let e = errors(&EXAMPLE.replace("name = \"mistral-7b-batch\"", "name = \"Mistral 7B\""));
        assert!(e[0].contains("pool name"), "{}", e[0]);
    }
}
