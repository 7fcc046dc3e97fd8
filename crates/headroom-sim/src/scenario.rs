//! Scenarios: traffic, the pool and its offerings (a Headroom configuration), the cloud's
//! behaviour over time, the SLO and the baselines' settings, as one TOML file. See
//! `scenarios/README.md` for every key.

use std::collections::BTreeMap;
use std::time::Duration;

use headroom_config::Config;
use headroom_core::{ErrorClass, Money, OfferingId, PoolName, PoolSpec};
use serde::Deserialize;

use crate::arrivals::{Process, RateProfile, Stream, Tokens};
use crate::error::SimError;
use crate::model::{QueuePolicy, Service};

/// The scenarios built into the binary.
pub const BUILT_IN: &[(&str, &str)] = &[
    (
        "seed-000-backlog",
        include_str!("../scenarios/seed-000-backlog.toml"),
    ),
    (
        "seed-001-burst",
        include_str!("../scenarios/seed-001-burst.toml"),
    ),
    (
        "stockout-fallback",
        include_str!("../scenarios/stockout-fallback.toml"),
    ),
    (
        "multicloud-stockout",
        include_str!("../scenarios/multicloud-stockout.toml"),
    ),
    (
        "spot-interruptions",
        include_str!("../scenarios/spot-interruptions.toml"),
    ),
    (
        "spot-price-spike",
        include_str!("../scenarios/spot-price-spike.toml"),
    ),
    (
        "budget-clamp",
        include_str!("../scenarios/budget-clamp.toml"),
    ),
    (
        "azure-code-trace",
        include_str!("../scenarios/azure-code-trace.toml"),
    ),
    ("flash-burst", include_str!("../scenarios/flash-burst.toml")),
    ("slow-ramp", include_str!("../scenarios/slow-ramp.toml")),
    (
        "compressed-day",
        include_str!("../scenarios/compressed-day.toml"),
    ),
    (
        "scale-to-zero",
        include_str!("../scenarios/scale-to-zero.toml"),
    ),
    (
        "smaller-model-handover",
        include_str!("../scenarios/smaller-model-handover.toml"),
    ),
    (
        "long-context-chat",
        include_str!("../scenarios/long-context-chat.toml"),
    ),
];

/// The built-in scenarios' names, for messages.
pub fn built_in_names() -> Vec<&'static str> {
    BUILT_IN.iter().map(|(name, _)| *name).collect()
}

/// The settings of the HPA baselines (Kubernetes defaults unless the scenario says otherwise).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpaSettings {
    pub target_utilization: f64,
    pub target_queue_per_pod: f64,
    pub sync: Duration,
    pub tolerance: f64,
    pub scale_down_stabilization: Duration,
    /// `keda-karpenter`: pause pods kept as an overprovisioning buffer, one node each.
    pub overprovision: u32,
    /// `predictive`: how long a day is in this run (its forecast looks a day, or a week, back).
    pub day: Duration,
}

/// Something the cloud does at an instant of the run.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultKind {
    /// The offering can run this many instances from now on (`0` is a stockout).
    Capacity(u32),
    /// This share of the offering's running instances is reclaimed at once (a spot wave).
    Interrupt(f64),
    /// The next `count` launches on the offering fail with `class`.
    LaunchErrors(ErrorClass, u32),
    /// The spot market can run this many instances from now on, and what runs above it is
    /// reclaimed with the usual notice (a replayed availability trace, `--spot-trace`).
    Available(u32),
    /// The spot market's price per hour from now on: what running spot nodes cost, what the
    /// cloud quotes, and the most a launch may pay is checked against it.
    SpotPrice(Money),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub at_s: f64,
    pub offering: OfferingId,
    pub kind: FaultKind,
}

/// One pool the run simulates: its Headroom configuration and how fast its replicas serve.
#[derive(Debug, Clone)]
pub struct SimPool {
    pub spec: PoolSpec,
    /// A replica of the pool on an offering without its own entry in `on_offering`.
    pub service: Service,
    /// A replica on this offering (a faster GPU, another instance type).
    pub on_offering: BTreeMap<OfferingId, Service>,
    /// The simulated pool its `supply.fallback_pool` names (its smaller model), by index.
    pub fallback: Option<usize>,
}

impl SimPool {
    /// How fast a replica of this pool on `offering` serves.
    pub fn service_on(&self, offering: &OfferingId) -> Service {
        self.on_offering
            .get(offering)
            .copied()
            .unwrap_or(self.service)
    }
}

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub duration_s: f64,
    /// How often policies act: the engine ticks, baselines reconcile nodes, the oracle plans.
    pub tick_s: f64,
    pub seed: u64,
    pub config: Config,
    /// The pools simulated together on one cloud, at least one; a trace arrives at the first.
    pub pools: Vec<SimPool>,
    pub queue: QueuePolicy,
    pub streams: Vec<Stream>,
    /// The tier trace requests get.
    pub trace_tier: u8,
    pub hpa: HpaSettings,
    pub faults: Vec<Fault>,
    /// Reservations in force (`--reserve`, `[[reservations]]`): paid for whether used or not.
    pub reservations: Vec<crate::reserve::SimReservation>,
}

impl Scenario {
    /// The first simulated pool: where a trace arrives.
    pub fn primary(&self) -> &SimPool {
        &self.pools[0]
    }

    /// The scenario with pool `i` alone (what plans one pool at a time, as the oracle does): its
    /// fallback is not simulated, and its requests are the ones `requests` says arrive at it.
    pub fn alone(&self, i: usize) -> Scenario {
        let mut sc = self.clone();
        let mut pool = sc.pools.swap_remove(i);
        pool.fallback = None;
        sc.pools = vec![pool];
        sc
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    #[serde(default)]
    description: String,
    duration: String,
    tick: Option<String>,
    /// The serving model's old fixed step: it now moves from event to event, so the key is
    /// accepted (scenarios written for it still load) and ignored.
    #[serde(rename = "step")]
    _step: Option<String>,
    seed: Option<u64>,
    pool: Option<String>,
    #[serde(default)]
    pools: Vec<RawPool>,
    trace_tier: Option<String>,
    service: RawService,
    tiers: Vec<RawTier>,
    shed_depth: Option<u64>,
    #[serde(default)]
    traffic: Vec<RawStream>,
    #[serde(default)]
    hpa: RawHpa,
    #[serde(default)]
    faults: Vec<RawFault>,
    /// Reservations the run has in place, as `--reserve` adds them.
    #[serde(default)]
    reservations: Vec<RawReservation>,
    /// Spot offerings' availability replayed from SkyPilot-format files, as `--spot-trace`
    /// adds them; a relative `file` is read from the scenario file's directory.
    #[serde(default)]
    spot_traces: Vec<RawSpotTrace>,
    headroom: toml::Table,
}

/// One `[[spot_traces]]` entry: a spot `offering` of the scenario and the trace `file`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpotTrace {
    offering: String,
    file: String,
}

/// One `[[reservations]]` entry: `offering`, `nodes`, and optionally `period` and
/// `usd_per_node_hour`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReservation {
    offering: String,
    nodes: u32,
    period: Option<String>,
    usd_per_node_hour: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    tokens_per_s: f64,
    request_tokens_per_s: Option<f64>,
    max_batch: Option<u32>,
    input_token_weight: Option<f64>,
}

/// One `[[pools]]` entry: a pool of `[headroom]` to simulate, its replica's speed (default the
/// top-level `[service]`) and, per offering, what differs there.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    name: String,
    service: Option<RawService>,
    #[serde(default)]
    offerings: BTreeMap<String, RawServiceChange>,
}

/// A replica's speed on one offering, where it differs from the pool's.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServiceChange {
    tokens_per_s: Option<f64>,
    request_tokens_per_s: Option<f64>,
    max_batch: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTier {
    name: String,
    objective: String,
    deadline: Option<String>,
    #[serde(default)]
    shed: bool,
    /// The admission priority the tier is shed at: low, normal, high or critical (default: low
    /// for a tier that may be shed, critical otherwise).
    priority: Option<String>,
    /// Whether a pool's smaller-model fallback may serve the tier while Headroom hands over.
    #[serde(default)]
    smaller_model: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawRate {
    Constant(f64),
    Points(Vec<[f64; 2]>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawTokens {
    Fixed(u32),
    Range([u32; 2]),
    Distribution(RawTokenDistribution),
}

/// `{ distribution = "lognormal", median = N, sigma = S, max = M }`: heavy-tailed token counts.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTokenDistribution {
    distribution: String,
    median: u32,
    sigma: f64,
    max: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStream {
    tier: String,
    pool: Option<String>,
    process: Option<String>,
    rate: RawRate,
    diurnal_amplitude: Option<f64>,
    diurnal_period: Option<String>,
    input_tokens: RawTokens,
    output_tokens: RawTokens,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHpa {
    target_utilization: Option<f64>,
    target_queue_per_pod: Option<f64>,
    sync: Option<String>,
    tolerance: Option<f64>,
    scale_down_stabilization: Option<String>,
    overprovision: Option<u32>,
    day: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    at: String,
    kind: String,
    offering: String,
    capacity: Option<u32>,
    fraction: Option<f64>,
    class: Option<String>,
    count: Option<u32>,
    price_usd_per_hour: Option<String>,
}

/// Loads a built-in scenario by name, or a TOML file by path (its `[[spot_traces]]` files read
/// from the file's directory).
pub fn load(name_or_file: &str) -> Result<Scenario, SimError> {
    if let Some((name, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_file) {
        return parse(text, name);
    }
    let path = std::path::Path::new(name_or_file);
    if !path.exists() {
        return Err(SimError::UnknownScenario(name_or_file.to_string()));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| SimError::Io(format!("--scenario: cannot read {name_or_file} ({e})")))?;
    parse_in(&text, name_or_file, path.parent())
}

fn duration(origin: &str, key: &str, text: &str) -> Result<f64, SimError> {
    humantime::parse_duration(text)
        .map(|d| d.as_secs_f64())
        .map_err(|e| {
            SimError::scenario(
                origin,
                format!("key `{key}`: {text:?} is not a duration ({e}); write one such as \"90s\", \"5m\" or \"1h\""),
            )
        })
}

fn positive(origin: &str, key: &str, x: f64) -> Result<f64, SimError> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(SimError::scenario(
            origin,
            format!("key `{key}`: {x} must be a number above zero"),
        ))
    }
}

/// Parses and validates a scenario's text; `origin` names it in messages. The first problem
/// found is the one reported, section by section in the order below. A text read from no file
/// has no directory to read `[[spot_traces]]` from: those are refused ([`load`] reads them).
pub fn parse(text: &str, origin: &str) -> Result<Scenario, SimError> {
    parse_in(text, origin, None)
}

/// [`parse`], reading relative `[[spot_traces]]` files from `dir`.
fn parse_in(text: &str, origin: &str, dir: Option<&std::path::Path>) -> Result<Scenario, SimError> {
    let raw: Raw = toml::from_str(text).map_err(|e| toml_error(&e, text, origin))?;
    let clock = clock(origin, &raw)?;
    let config = headroom(origin, &raw)?;
    let default_service = service(origin, "service", &raw.service)?;
    let mut pools = pools(origin, &raw, &config, default_service)?;
    if raw.tiers.is_empty() {
        return Err(SimError::scenario(
            origin,
            "key `tiers`: none; add a [[tiers]] with a name and an objective",
        ));
    }
    let queue = queue(origin, &raw.tiers, raw.shed_depth)?;
    let mut config = config;
    for pool in &mut pools {
        tell_pool_the_deadlines(&queue, &mut config, &mut pool.spec);
    }
    let streams = raw
        .traffic
        .iter()
        .enumerate()
        .map(|(i, st)| stream(origin, i, st, &raw.tiers, &pools))
        .collect::<Result<Vec<_>, _>>()?;
    let trace_tier = match &raw.trace_tier {
        Some(t) => tier_index(origin, &raw.tiers, "trace_tier", t)?,
        None => 0,
    };
    let hpa = hpa(origin, &raw.hpa, &streams)?;
    let mut faults = raw
        .faults
        .iter()
        .enumerate()
        .map(|(i, f)| fault(origin, i, f, &config))
        .collect::<Result<Vec<_>, _>>()?;
    faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));

    let mut scenario = Scenario {
        name: raw.name,
        description: raw.description,
        duration_s: clock.duration_s,
        tick_s: clock.tick_s,
        seed: raw.seed.unwrap_or(0),
        config,
        pools,
        queue,
        streams,
        trace_tier,
        hpa,
        faults,
        reservations: Vec::new(),
    };
    for (i, r) in raw.reservations.iter().enumerate() {
        // The same words as the flag, so one parser checks both.
        let mut text = format!("{}={}", r.offering, r.nodes);
        if let Some(p) = &r.period {
            text.push_str(&format!(":{p}"));
        }
        if let Some(rate) = &r.usd_per_node_hour {
            text.push_str(&format!("@{rate}"));
        }
        let spec: crate::reserve::ReserveSpec = text.parse().map_err(|e: String| {
            SimError::scenario(origin, format!("key `reservations[{i}]`: {e}"))
        })?;
        crate::reserve::reserve(&mut scenario, &spec).map_err(|e| {
            // The scenario is already named once; keep only what went wrong.
            let why = match e {
                SimError::Scenario { message, .. } => message,
                other => other.to_string(),
            };
            SimError::scenario(origin, format!("key `reservations[{i}]`: {why}"))
        })?;
    }
    let traces = raw
        .spot_traces
        .iter()
        .enumerate()
        .map(|(i, t)| spot_trace(origin, i, t, dir, &scenario))
        .collect::<Result<Vec<_>, _>>()?;
    crate::spot_trace::apply(&mut scenario, &traces);
    Ok(scenario)
}

/// `spot_traces[i]`: the file read (relative to `dir`) as the named spot offering's history,
/// checked as `--spot-trace` checks it.
fn spot_trace(
    origin: &str,
    i: usize,
    t: &RawSpotTrace,
    dir: Option<&std::path::Path>,
    scenario: &Scenario,
) -> Result<crate::spot_trace::SpotTrace, SimError> {
    let key = format!("spot_traces[{i}]");
    let Some(dir) = dir else {
        return Err(SimError::scenario(
            origin,
            format!(
                "key `{key}`: a scenario read from no file has no directory to read {} from; load it from a file",
                t.file
            ),
        ));
    };
    let spec = format!("{}={}", t.offering, dir.join(&t.file).display());
    crate::spot_trace::SpotTrace::read(&spec, scenario).map_err(|e| {
        let why = match e {
            SimError::Trace { message, .. } => message,
            other => other.to_string(),
        };
        SimError::scenario(origin, format!("key `{key}` ({}): {why}", t.file))
    })
}

/// A TOML or serde error as one line: where, what, and where to look.
fn toml_error(e: &toml::de::Error, text: &str, origin: &str) -> SimError {
    let message = e.message().replace('\n', " ");
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    let at = line.map(|l| format!("line {l}: ")).unwrap_or_default();
    SimError::scenario(
        origin,
        format!("{at}{message}; fix the key or value there (see scenarios/README.md)"),
    )
}

/// How long the run lasts and how often policies act, in seconds.
struct Clock {
    duration_s: f64,
    tick_s: f64,
}

fn clock(origin: &str, raw: &Raw) -> Result<Clock, SimError> {
    let duration_s = positive(
        origin,
        "duration",
        duration(origin, "duration", &raw.duration)?,
    )?;
    let tick_s = match &raw.tick {
        Some(t) => positive(origin, "tick", duration(origin, "tick", t)?)?,
        None => 1.0,
    };
    Ok(Clock { duration_s, tick_s })
}

/// `[headroom]` as a Headroom configuration.
fn headroom(origin: &str, raw: &Raw) -> Result<Config, SimError> {
    let config_text = toml::to_string(&raw.headroom)
        .map_err(|e| SimError::scenario(origin, format!("table `headroom`: {e}")))?;
    Config::parse(&config_text, &format!("{origin} [headroom]"))
        .map_err(|e| SimError::scenario(origin, e.0.join("; ")))
}

/// A pool of `[headroom]` by name; `key` is what names it.
fn pool_of(origin: &str, config: &Config, key: &str, name: &str) -> Result<PoolSpec, SimError> {
    let name: PoolName = name
        .parse()
        .map_err(|e| SimError::scenario(origin, format!("key `{key}`: {e}")))?;
    config.pool(&name).cloned().ok_or_else(|| {
        SimError::scenario(
            origin,
            format!("key `{key}`: {name} is not a pool of [headroom]; name one of its [[headroom.pools]]"),
        )
    })
}

/// The pools the run simulates: `[[pools]]` if given, else the one `pool` names (default the
/// first of `[headroom]`) at the top-level `[service]`. A simulated pool's fallback pool must be
/// simulated too, so the demand it hands over has somewhere to go.
fn pools(
    origin: &str,
    raw: &Raw,
    config: &Config,
    default_service: Service,
) -> Result<Vec<SimPool>, SimError> {
    let single = |spec: PoolSpec| SimPool {
        spec,
        service: default_service,
        on_offering: BTreeMap::new(),
        fallback: None,
    };
    let mut pools = match (&raw.pool, raw.pools.is_empty()) {
        (Some(_), false) => {
            return Err(SimError::scenario(
                origin,
                "key `pool`: given with [[pools]]; list the pools in [[pools]] only (the first is where a trace arrives)",
            ));
        }
        (Some(name), true) => vec![single(pool_of(origin, config, "pool", name)?)],
        (None, true) => vec![single(config.pools.first().cloned().ok_or_else(|| {
            SimError::scenario(
                origin,
                "table `headroom`: no [[headroom.pools]]; add the pool to simulate",
            )
        })?)],
        (None, false) => raw
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| sim_pool(origin, i, p, config, default_service))
            .collect::<Result<Vec<_>, _>>()?,
    };
    if pools.len() > u8::MAX as usize {
        return Err(SimError::scenario(
            origin,
            "key `pools`: more than 255 pools; simulate fewer",
        ));
    }
    let names: Vec<PoolName> = pools.iter().map(|p| p.spec.name.clone()).collect();
    for (i, pool) in pools.iter_mut().enumerate() {
        if names[..i].contains(&pool.spec.name) {
            return Err(SimError::scenario(
                origin,
                format!(
                    "key `pools[{i}].name`: {} is listed twice; list each pool once",
                    pool.spec.name
                ),
            ));
        }
        let Some(fallback) = &pool.spec.supply.fallback_pool else {
            continue;
        };
        match names.iter().position(|n| n == fallback) {
            Some(j) => pool.fallback = Some(j),
            None if raw.pools.is_empty() => {}
            None => {
                return Err(SimError::scenario(
                    origin,
                    format!(
                        "key `pools[{i}]`: {} falls back to {fallback}, which is not simulated; add a [[pools]] entry for it",
                        pool.spec.name
                    ),
                ));
            }
        }
    }
    Ok(pools)
}

/// One `[[pools]]` entry.
fn sim_pool(
    origin: &str,
    i: usize,
    raw: &RawPool,
    config: &Config,
    default_service: Service,
) -> Result<SimPool, SimError> {
    let spec = pool_of(origin, config, &format!("pools[{i}].name"), &raw.name)?;
    let base = match &raw.service {
        Some(s) => service(origin, &format!("pools[{i}].service"), s)?,
        None => default_service,
    };
    let mut on_offering = BTreeMap::new();
    for (id, change) in &raw.offerings {
        let key = format!("pools[{i}].offerings.{id}");
        let offering: OfferingId = id
            .parse()
            .map_err(|e| SimError::scenario(origin, format!("key `{key}`: {e}")))?;
        if !spec.offerings.contains(&offering) {
            return Err(SimError::scenario(
                origin,
                format!(
                    "key `{key}`: {offering} is not an offering of pool {}; name one of its `offerings`",
                    spec.name
                ),
            ));
        }
        let changed = RawService {
            tokens_per_s: change.tokens_per_s.unwrap_or(base.tokens_per_s),
            request_tokens_per_s: Some(
                change
                    .request_tokens_per_s
                    .unwrap_or(base.request_tokens_per_s),
            ),
            max_batch: Some(change.max_batch.unwrap_or(base.max_batch)),
            input_token_weight: Some(base.input_token_weight),
        };
        on_offering.insert(offering, service(origin, &key, &changed)?);
    }
    Ok(SimPool {
        spec,
        service: base,
        on_offering,
        fallback: None,
    })
}

/// The index of the tier named `name` in `[[tiers]]`; `key` is what names it.
fn tier_index(origin: &str, tiers: &[RawTier], key: &str, name: &str) -> Result<u8, SimError> {
    tiers
        .iter()
        .position(|t| t.name == name)
        .map(|i| i as u8)
        .ok_or_else(|| {
            SimError::scenario(
                origin,
                format!(
                    "key `{key}`: tier {name:?} is not one of [[tiers]]; use one of their names"
                ),
            )
        })
}

/// `[[tiers]]` and `shed_depth`: the queue's tiers, their objectives, deadlines and priorities.
fn queue(
    origin: &str,
    tiers: &[RawTier],
    shed_depth: Option<u64>,
) -> Result<QueuePolicy, SimError> {
    let mut objective_s = Vec::new();
    let mut deadline_s = Vec::new();
    let mut shed_tiers = Vec::new();
    let mut priorities = Vec::new();
    for (i, t) in tiers.iter().enumerate() {
        priorities.push(match &t.priority {
            Some(p) => headroom_core::Priority::parse(p).map_err(|e| {
                SimError::scenario(
                    origin,
                    format!("key `tiers[{i}].priority`: {e}; use low, normal, high or critical"),
                )
            })?,
            None if t.shed => headroom_core::Priority::Low,
            None => headroom_core::Priority::Critical,
        });
        objective_s.push(duration(
            origin,
            &format!("tiers[{i}].objective"),
            &t.objective,
        )?);
        deadline_s.push(match &t.deadline {
            Some(d) => Some(duration(origin, &format!("tiers[{i}].deadline"), d)?),
            None => None,
        });
        if t.shed {
            shed_tiers.push(i as u8);
        }
    }
    Ok(QueuePolicy {
        tiers: tiers.iter().map(|t| t.name.clone()).collect(),
        objective_s,
        deadline_s,
        shed_tiers,
        priorities,
        shed_depth,
        smaller_model: tiers.iter().map(|t| t.smaller_model).collect(),
    })
}

/// The serving layer the scenario stands for knows its sheddable tiers' deadlines and tells
/// Headroom (`[pools.scaling] shed_deadlines`), unless the pool's configuration says otherwise.
fn tell_pool_the_deadlines(queue: &QueuePolicy, config: &mut Config, pool: &mut PoolSpec) {
    if pool.scaling.shed_deadlines.iter().any(Option::is_some) {
        return;
    }
    for &tier in &queue.shed_tiers {
        let tier = tier as usize;
        if let (Some(priority), Some(Some(deadline))) = (
            queue.priorities.get(tier),
            queue.objective_s.get(tier).map(|o| Some(*o)),
        ) {
            pool.scaling.shed_deadlines[*priority as usize] =
                Some(Duration::from_secs_f64(deadline));
        }
    }
    if let Some(p) = config.pools.iter_mut().find(|p| p.name == pool.name) {
        p.scaling.shed_deadlines = pool.scaling.shed_deadlines;
    }
}

/// A `[service]` table (`key` names it): the serving model's token rates and batch.
fn service(origin: &str, key: &str, s: &RawService) -> Result<Service, SimError> {
    let tokens_per_s = positive(origin, &format!("{key}.tokens_per_s"), s.tokens_per_s)?;
    Ok(Service {
        input_token_weight: s.input_token_weight.unwrap_or(0.0).max(0.0),
        tokens_per_s,
        request_tokens_per_s: positive(
            origin,
            &format!("{key}.request_tokens_per_s"),
            s.request_tokens_per_s.unwrap_or(tokens_per_s),
        )?,
        max_batch: s.max_batch.unwrap_or(1).max(1),
    })
}

/// One `[[traffic]]` stream: its process, rate profile, tier and token counts.
fn stream(
    origin: &str,
    i: usize,
    st: &RawStream,
    tiers: &[RawTier],
    pools: &[SimPool],
) -> Result<Stream, SimError> {
    let key = |k: &str| format!("traffic[{i}].{k}");
    let process = match st.process.as_deref().unwrap_or("uniform") {
        "uniform" => Process::Uniform,
        "poisson" => Process::Poisson,
        other => {
            return Err(SimError::scenario(
                origin,
                format!(
                    "key `{}`: {other:?}; use \"uniform\" or \"poisson\"",
                    key("process")
                ),
            ));
        }
    };
    let rate = RateProfile {
        points: rate_points(origin, &key("rate"), &st.rate)?,
        diurnal: diurnal(origin, i, st)?,
    };
    let tokens = |t: &RawTokens, k: &str| match *t {
        RawTokens::Fixed(n) => Ok(Tokens::Fixed(n)),
        RawTokens::Range([lo, hi]) if lo <= hi => Ok(Tokens::Uniform(lo, hi)),
        RawTokens::Range(_) => Err(SimError::scenario(
            origin,
            format!("key `{}`: [low, high] with low ≤ high", key(k)),
        )),
        RawTokens::Distribution(ref d) => lognormal(origin, &key(k), d),
    };
    let pool = match &st.pool {
        None => 0,
        Some(name) => pools
            .iter()
            .position(|p| p.spec.name.as_str() == name)
            .ok_or_else(|| {
                SimError::scenario(
                    origin,
                    format!(
                        "key `{}`: {name:?} is not a simulated pool; name one of [[pools]]",
                        key("pool")
                    ),
                )
            })? as u8,
    };
    Ok(Stream {
        tier: tier_index(origin, tiers, &key("tier"), &st.tier)?,
        pool,
        process,
        rate,
        input_tokens: tokens(&st.input_tokens, "input_tokens")?,
        output_tokens: tokens(&st.output_tokens, "output_tokens")?,
    })
}

/// A lognormal token distribution: a median of at least one token, a sigma in (0, 4] (beyond
/// that one request in a thousand would be ~10⁵ times the median), a cap at or above the median.
fn lognormal(origin: &str, key: &str, d: &RawTokenDistribution) -> Result<Tokens, SimError> {
    let max = d.max.unwrap_or(u32::MAX);
    if d.distribution != "lognormal" {
        return Err(SimError::scenario(
            origin,
            format!(
                "key `{key}.distribution`: {:?}; use \"lognormal\" (or a number, or [low, high])",
                d.distribution
            ),
        ));
    }
    if d.median == 0 || !(d.sigma > 0.0 && d.sigma <= 4.0) || max < d.median {
        return Err(SimError::scenario(
            origin,
            format!(
                "key `{key}`: median ≥ 1, 0 < sigma ≤ 4 and max ≥ median; got median {}, sigma {}, max {max}",
                d.median, d.sigma
            ),
        ));
    }
    Ok(Tokens::LogNormal {
        median: d.median,
        sigma: d.sigma,
        max,
    })
}

/// A constant rate, or `[seconds, req/s]` points in time order; rates are never negative.
fn rate_points(origin: &str, key: &str, rate: &RawRate) -> Result<Vec<(f64, f64)>, SimError> {
    let points: Vec<(f64, f64)> = match rate {
        RawRate::Constant(r) => vec![(0.0, *r)],
        RawRate::Points(p) => p.iter().map(|[t, r]| (*t, *r)).collect(),
    };
    if points.is_empty()
        || points
            .iter()
            .any(|(t, r)| !(t.is_finite() && r.is_finite() && *r >= 0.0))
        || points.windows(2).any(|w| w[1].0 < w[0].0)
    {
        return Err(SimError::scenario(
            origin,
            format!(
                "key `{key}`: write a rate (req/s ≥ 0) or [[seconds, req/s], …] with times in order"
            ),
        ));
    }
    Ok(points)
}

/// The daily swing on a stream's rate: amplitude, period in seconds and phase, or none.
fn diurnal(origin: &str, i: usize, st: &RawStream) -> Result<Option<(f64, f64, f64)>, SimError> {
    let key = |k: &str| format!("traffic[{i}].{k}");
    match (st.diurnal_amplitude, &st.diurnal_period) {
        (Some(a), Some(p)) => Ok(Some((
            a,
            positive(
                origin,
                &key("diurnal_period"),
                duration(origin, &key("diurnal_period"), p)?,
            )?,
            0.0,
        ))),
        (None, None) => Ok(None),
        _ => Err(SimError::scenario(
            origin,
            format!(
                "key `{}`: give both diurnal_amplitude and diurnal_period, or neither",
                key("diurnal_amplitude")
            ),
        )),
    }
}

/// `[hpa]`: the HPA baselines' settings, Kubernetes' defaults where unset. A day is the first
/// daily swing's period unless `day` says otherwise, else 24 h: what a compressed run calls a day.
fn hpa(origin: &str, h: &RawHpa, streams: &[Stream]) -> Result<HpaSettings, SimError> {
    let swing = streams
        .iter()
        .find_map(|s| s.rate.diurnal.map(|(_, period, _)| period));
    let day = match &h.day {
        Some(d) => positive(origin, "hpa.day", duration(origin, "hpa.day", d)?)?,
        None => swing.unwrap_or(86_400.0),
    };
    Ok(HpaSettings {
        overprovision: h.overprovision.unwrap_or(0),
        day: Duration::from_secs_f64(day),
        target_utilization: positive(
            origin,
            "hpa.target_utilization",
            h.target_utilization.unwrap_or(0.7),
        )?,
        target_queue_per_pod: positive(
            origin,
            "hpa.target_queue_per_pod",
            h.target_queue_per_pod.unwrap_or(2.0),
        )?,
        sync: Duration::from_secs_f64(duration(
            origin,
            "hpa.sync",
            h.sync.as_deref().unwrap_or("15s"),
        )?),
        tolerance: h.tolerance.unwrap_or(0.1),
        scale_down_stabilization: Duration::from_secs_f64(duration(
            origin,
            "hpa.scale_down_stabilization",
            h.scale_down_stabilization.as_deref().unwrap_or("300s"),
        )?),
    })
}

/// One `[[faults]]` entry: an offering of `[headroom]`, what happens to it, and when.
fn fault(origin: &str, i: usize, f: &RawFault, config: &Config) -> Result<Fault, SimError> {
    let key = |k: &str| format!("faults[{i}].{k}");
    let offering: OfferingId = f
        .offering
        .parse()
        .map_err(|e| SimError::scenario(origin, format!("key `{}`: {e}", key("offering"))))?;
    if config.offering(&offering).is_none() {
        return Err(SimError::scenario(
            origin,
            format!(
                "key `{}`: {offering} is not an offering of [headroom]; name one of its [[headroom.offerings]]",
                key("offering")
            ),
        ));
    }
    Ok(Fault {
        kind: fault_kind(origin, i, f, &offering, config)?,
        at_s: duration(origin, &key("at"), &f.at)?,
        offering,
    })
}

fn fault_kind(
    origin: &str,
    i: usize,
    f: &RawFault,
    offering: &OfferingId,
    config: &Config,
) -> Result<FaultKind, SimError> {
    let key = |k: &str| format!("faults[{i}].{k}");
    let missing = |k: &str| {
        SimError::scenario(
            origin,
            format!("key `{}`: required for kind {:?}; add it", key(k), f.kind),
        )
    };
    Ok(match f.kind.as_str() {
        "capacity" => FaultKind::Capacity(f.capacity.ok_or_else(|| missing("capacity"))?),
        "interrupt" => {
            let x = f.fraction.ok_or_else(|| missing("fraction"))?;
            if !(0.0..=1.0).contains(&x) {
                return Err(SimError::scenario(
                    origin,
                    format!(
                        "key `{}`: {x} is not a share between 0 and 1",
                        key("fraction")
                    ),
                ));
            }
            FaultKind::Interrupt(x)
        }
        "spot-price" => {
            let text = f
                .price_usd_per_hour
                .as_deref()
                .ok_or_else(|| missing("price_usd_per_hour"))?;
            let price: Money = text.parse().map_err(|e| {
                SimError::scenario(origin, format!("key `{}`: {e}", key("price_usd_per_hour")))
            })?;
            let spot = config
                .offering(offering)
                .is_some_and(|o| o.market == headroom_core::Market::Spot);
            if !spot {
                return Err(SimError::scenario(
                    origin,
                    format!(
                        "key `{}`: {offering} is not a spot offering; a spot price moves only spot offerings",
                        key("offering")
                    ),
                ));
            }
            FaultKind::SpotPrice(price)
        }
        "launch-errors" => {
            let class = match f.class.as_deref().unwrap_or("capacity") {
                "capacity" => ErrorClass::Capacity,
                "quota" => ErrorClass::Quota,
                "price" => ErrorClass::Price,
                "throttled" => ErrorClass::Throttled,
                "transient" => ErrorClass::Transient,
                other => {
                    return Err(SimError::scenario(
                        origin,
                        format!(
                            "key `{}`: {other:?}; use capacity, quota, price, throttled or transient",
                            key("class")
                        ),
                    ));
                }
            };
            FaultKind::LaunchErrors(class, f.count.ok_or_else(|| missing("count"))?)
        }
        other => {
            return Err(SimError::scenario(
                origin,
                format!(
                    "key `{}`: {other:?}; use \"capacity\", \"interrupt\", \"launch-errors\" or \"spot-price\"",
                    key("kind")
                ),
            ));
        }
    })
}
