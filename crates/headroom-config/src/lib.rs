//! The configuration file: parsed once at the edge into core types, every mistake reported as one
//! line that names the key and the fix.
//!
//! `raw` is the file as serde reads it; each section has its validator (a function of its raw
//! table and the `Problems` collector that returns the validated part), and
//! `RawConfig::validate` runs them top-down with the checks that span sections. Problems come
//! section by section in that fixed order, each pool's together, so the same file always gets
//! the same lines.
//!
//! Pure: nothing here reads a file, the network or a clock (`tests/cli/purity.rs` checks what it
//! links). The section types the engine runs on live with their sections: [`alerts`] (webhooks
//! and intervals), [`scrape`] (selectors, targets, age aggregations), [`prometheus`] (sources
//! and their PromQL, checked at load) and [`schedule`] (windows and the floor in force). Reading
//! the credential files a source names is the engine's (`headroom_engine::prometheus`).

pub mod alerts;
mod api;
mod budgets;
mod engine;
mod offerings;
mod pools;
pub mod prometheus;
mod raw;
mod scaling;
pub mod schedule;
pub mod scrape;
mod supply;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use headroom_core::pool::ColdStartLadder;
use headroom_core::{
    AccountName, Budget, Money, Offering, OfferingId, PoolName, PoolSpec, ProviderKind,
};

use raw::{RawConfig, RawLadder, RawSim, default_listen};

/// Everything wrong with a configuration file, one problem per line: the crate's one error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct ConfigErrors(pub Vec<String>);

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
    pub alerts: alerts::AlertSettings,
    pub api: ApiSettings,
    /// Per pool, the service classes whose oldest age counts (all when absent).
    pub age_classes: BTreeMap<PoolName, Vec<String>>,
    /// Pools whose signals are scraped from a Prometheus text endpoint.
    pub scrape: BTreeMap<PoolName, scrape::ScrapeTarget>,
    /// Windows with a replica floor per pool (`[[pools.schedule]]`).
    pub schedules: BTreeMap<PoolName, Vec<schedule::ScheduleWindow>>,
    /// Pools whose signals are queried from a Prometheus server (`[pools.signals]`).
    pub prometheus: BTreeMap<PoolName, prometheus::PrometheusSource>,
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
    /// How long a region's quotas, read from the cloud, are trusted before they are read again
    /// (quota preflight); zero reads none and leaves quota to the cloud's refusals.
    pub quota_cache_ttl: Duration,
    /// What happens to instances tagged as this deployment's that the ledger does not know.
    pub orphan_policy: OrphanPolicy,
    /// Transient launch failures (5xx, timeouts) of one offering within
    /// `transient_failure_window` after which it is treated as refused (`provider_errors`).
    pub transient_failure_limit: u32,
    pub transient_failure_window: Duration,
    /// A pool whose launches have failed with provider errors, none succeeding, for this long
    /// raises `ProviderErrors`.
    pub provider_errors_alert_after: Duration,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSettings {
    /// Requests per second per token (the whole API when authentication is off)...
    pub requests_per_second: u32,
    /// ...with this burst on top.
    pub burst: u32,
    /// Requests per second per client address, checked before any token is looked up...
    pub client_requests_per_second: u32,
    /// ...with this burst on top.
    pub client_burst: u32,
    pub request_timeout: Duration,
    /// A verified token is read from the ledger again after this for read-only requests: a
    /// revocation takes effect on reads within it (writes always read the ledger).
    pub token_recheck_interval: Duration,
    /// While the ledger is down, tokens verified within this long still pass read-only requests.
    pub token_outage_grace: Duration,
    /// A request's head must arrive within this, counted from when the connection opens or its
    /// previous answer is sent (so an idle keep-alive connection closes after it too).
    pub header_read_timeout: Duration,
    /// A connection with no request in hand on which no byte moves for this long is closed.
    pub idle_timeout: Duration,
    /// Connections at once, lowered at start below the process's file-descriptor limit.
    pub max_connections: u32,
    /// Connections at once from one peer address (trusted proxies are exempt).
    pub max_connections_per_client: u32,
    /// Requests being handled at once; past it a request is answered 503 at once instead of
    /// queueing behind the others (`/healthz`, `/readyz`, `/metrics` and `/openapi.json` are
    /// exempt).
    pub max_requests_in_flight: u32,
    /// Load balancers and proxies whose `X-Forwarded-For` names the client the per-client limit
    /// counts; from any other peer the header is ignored.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SimSettings {
    pub seed: u64,
    /// Keep the simulated cloud's state in this file, shared by every process that names it.
    pub state_file: Option<std::path::PathBuf>,
    pub gpu_quota_per_region: BTreeMap<String, u32>,
    /// How long a launch takes to answer after the instance exists: the window between the
    /// cloud call and its ledger outcome, for crash tests (zero: at once).
    pub launch_answer_delay: Duration,
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
    /// When it began to be paid for, if after the history a report covers.
    pub starts_at: Option<headroom_core::Timestamp>,
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

    /// The GPUs of a node of `pool`'s first offering (what it asks for first): a replica's
    /// GPUs where a figure in GPUs is wanted before any node has landed.
    pub fn first_offering_gpus(&self, pool: &PoolSpec) -> Option<u32> {
        pool.offerings
            .first()
            .and_then(|id| self.offering(id))
            .map(|o| o.gpus_per_node)
    }

    /// Every reservation as the books price it: its nodes at the offering's price, and the
    /// pools (with their accounts) that list it.
    pub fn reserved_capacity(&self) -> Vec<headroom_core::ReservedCapacity> {
        self.offerings
            .iter()
            .filter_map(|o| Some((&o.offering, o.reservation?)))
            .map(|(o, r)| headroom_core::ReservedCapacity {
                offering: o.id.clone(),
                provider: o.provider,
                region: o.region.clone(),
                zone: o.zone.clone(),
                instance_type: o.instance_type.clone(),
                nodes: r.nodes,
                gpus_per_node: o.gpus_per_node,
                price_usd_per_hour: o.price_usd_per_hour,
                starts_at: r.starts_at,
                ends_at: r.ends_at,
                pools: self
                    .pools
                    .iter()
                    .filter(|p| p.offerings.contains(&o.id))
                    .map(|p| (p.name.clone(), p.account.clone()))
                    .collect(),
            })
            .collect()
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

/// Collects validation problems, each tied to a key path: one line a key at most, so a value
/// that is malformed is not also reported as out of range, or as at odds with another key.
struct Problems<'a> {
    origin: &'a str,
    lines: Vec<String>,
    reported: BTreeSet<String>,
}

/// The range a duration key accepts. Every duration in the file has one: a value that parses
/// but is outside it is refused, so none can break an invariant (a zero hold, a timeout that
/// never fires, a horizon too long for the ledger's arithmetic).
#[derive(Debug, Clone, Copy)]
struct Within {
    min: Duration,
    max: Duration,
    /// Zero is accepted too, meaning "off".
    zero_is_off: bool,
    example: &'static str,
}

impl Within {
    const fn secs(min: u64, max: u64, example: &'static str) -> Within {
        Within {
            min: Duration::from_secs(min),
            max: Duration::from_secs(max),
            zero_is_off: false,
            example,
        }
    }

    const fn millis(min: u64, max: u64, example: &'static str) -> Within {
        Within {
            min: Duration::from_millis(min),
            max: Duration::from_millis(max),
            zero_is_off: false,
            example,
        }
    }

    /// The same range, with "0s" accepted as "off".
    const fn or_off(self) -> Within {
        Within {
            zero_is_off: true,
            ..self
        }
    }

    fn contains(&self, d: Duration) -> bool {
        (self.zero_is_off && d.is_zero()) || (self.min..=self.max).contains(&d)
    }
}

const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

impl Problems<'_> {
    fn add(&mut self, key: &str, what: impl fmt::Display, fix: impl fmt::Display) {
        if !self.reported.insert(key.to_string()) {
            return;
        }
        self.lines
            .push(format!("{}: key `{key}`: {what}; fix: {fix}", self.origin));
    }

    /// Whether `key` has a problem already (checks that span keys skip it).
    fn reported(&self, key: &str) -> bool {
        self.reported.contains(key)
    }

    /// A duration within `within`; a malformed or out-of-range one is one line, and the value
    /// returned is then the nearest in range (it is never used: the file is refused).
    fn duration(&mut self, key: &str, text: &str, within: Within) -> Duration {
        let shown = |d: Duration| humantime::format_duration(d).to_string();
        match humantime::parse_duration(text) {
            Ok(d) if within.contains(d) => d,
            Ok(d) => {
                let off = if within.zero_is_off {
                    ", or \"0s\" for off"
                } else {
                    ""
                };
                self.add(
                    key,
                    format!(
                        "{text:?} is outside {}..{}",
                        shown(within.min),
                        shown(within.max)
                    ),
                    format!("use e.g. \"{}\"{off}", within.example),
                );
                d.clamp(within.min, within.max)
            }
            Err(e) => {
                self.add(
                    key,
                    format!("{text:?} is not a duration ({e})"),
                    format!(
                        "write a duration such as \"90s\", \"5m\" or \"1h\" (between {} and {})",
                        shown(within.min),
                        shown(within.max)
                    ),
                );
                within.min
            }
        }
    }

    /// An amount of money within `min..=max`, or one line.
    fn money(&mut self, key: &str, value: Money, min: Money, max: Money, example: &str) -> Money {
        if (min..=max).contains(&value) {
            return value;
        }
        self.add(
            key,
            format!("${value} is outside ${min}..${max}"),
            format!("write an amount in US dollars such as \"{example}\""),
        );
        value.clamp(min, max)
    }

    /// A `[pools.ladder]` or `[offerings.sim_ladder]` table.
    /// Each rung takes from nothing to six hours.
    fn ladder(&mut self, key: &str, raw: &RawLadder) -> ColdStartLadder {
        let rung = Within::secs(0, 6 * HOUR, "90s");
        ColdStartLadder {
            node_acquisition: self.duration(
                &format!("{key}.node_acquisition"),
                &raw.node_acquisition,
                rung,
            ),
            image_pull: self.duration(&format!("{key}.image_pull"), &raw.image_pull, rung),
            weight_load: self.duration(&format!("{key}.weight_load"), &raw.weight_load, rung),
            compile: self.duration(&format!("{key}.compile"), &raw.compile, rung),
            warmup: self.duration(&format!("{key}.warmup"), &raw.warmup, rung),
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
            reported: BTreeSet::new(),
        };
        cluster_id(&self.cluster_id, &mut p);
        let listen = listen(&self.listen, &mut p);
        let engine = engine::engine(&self.engine, &mut p);
        let offerings = offerings::offerings(self.offerings, &mut p);
        // Pools name offerings and charge accounts: both are checked as each pool is read, so
        // a pool's problems stay together.
        let known = Known {
            offerings: offerings.iter().map(|o| o.offering.id.clone()).collect(),
            budget_accounts: self.budgets.iter().map(|b| b.account.clone()).collect(),
            kube_enabled: self
                .kube
                .as_ref()
                .and_then(|t| t.get("enabled"))
                .and_then(toml::Value::as_bool)
                .unwrap_or(false),
        };
        let pools = pools::pools(self.pools, &known, &mut p);
        engine::horizon_covers_the_ladders(&engine, &pools.specs, &mut p);
        fallback_pools(&pools.specs, &mut p);
        let budgets = budgets::budgets(self.budgets, &mut p);
        let alerts = alerts::alerts(self.alerts, &mut p);
        let api = api::api(&self.api, &mut p);
        let sim = sim(self.sim, &mut p);
        if !p.lines.is_empty() {
            return Err(ConfigErrors(p.lines));
        }
        Ok(Config {
            cluster_id: self.cluster_id,
            listen,
            database_url: self.database_url,
            engine,
            sim,
            offerings,
            pools: pools.specs,
            budgets,
            alerts,
            api,
            age_classes: pools.age_classes,
            scrape: pools.scrape,
            prometheus: pools.prometheus,
            schedules: pools.schedules,
            aws: self.aws,
            gcp: self.gcp,
            kube: self.kube,
        })
    }
}

fn cluster_id(cluster_id: &str, p: &mut Problems) {
    if cluster_id.trim().is_empty() || cluster_id.len() > 63 {
        p.add(
            "cluster_id",
            "must be 1 to 63 characters",
            "name this Headroom deployment, e.g. \"prod-use1\"",
        );
    }
}

fn listen(listen: &str, p: &mut Problems) -> SocketAddr {
    listen.parse().unwrap_or_else(|_| {
        p.add(
            "listen",
            format!("{listen:?} is not an address"),
            "write host:port, e.g. \"127.0.0.1:8080\"",
        );
        default_listen()
            .parse()
            .expect("default listen address parses")
    })
}

/// `[sim]`: any seed, file and quotas will do; the launch delay is a duration of at most 10m.
fn sim(raw: RawSim, p: &mut Problems) -> SimSettings {
    let launch_answer_delay = raw
        .launch_answer_delay
        .as_deref()
        .map_or(Duration::ZERO, |d| {
            p.duration("sim.launch_answer_delay", d, Within::secs(0, 600, "300ms"))
        });
    SimSettings {
        seed: raw.seed,
        state_file: raw.state_file,
        gpu_quota_per_region: raw.gpu_quota_per_region,
        launch_answer_delay,
    }
}

/// What other sections define, for the checks of the sections that refer to them.
struct Known {
    /// Every offering id the file defines.
    offerings: BTreeSet<OfferingId>,
    /// Accounts with a `[[budgets]]` entry.
    budget_accounts: BTreeSet<AccountName>,
    /// `[kube] enabled = true`: pods can be read from the cluster.
    kube_enabled: bool,
}

impl Known {
    /// A pool's offerings are defined in `[[offerings]]`.
    fn check_offerings(&self, key: &str, ids: &[OfferingId], p: &mut Problems) {
        for (j, id) in ids.iter().enumerate() {
            if !self.offerings.contains(id) {
                p.add(
                    &format!("{key}.offerings[{j}]"),
                    format!("names unknown offering {id}"),
                    format!("define [[offerings]] with id = \"{id}\" or remove it"),
                );
            }
        }
    }

    /// Once any account has a budget, every pool charges one that does.
    fn check_account(&self, key: &str, account: &AccountName, p: &mut Problems) {
        if !self.budget_accounts.is_empty() && !self.budget_accounts.contains(account) {
            p.add(
                &format!("{key}.account"),
                format!("account {account} has no budget"),
                "add a [[budgets]] entry for it or charge an account that has one",
            );
        }
    }
}

/// A pool's fallback pool exists and has no fallback of its own (one step only).
fn fallback_pools(pools: &[PoolSpec], p: &mut Problems) {
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
}
