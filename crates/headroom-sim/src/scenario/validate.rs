//! Parsing and validating a scenario section by section, each problem one line naming its key:
//! the order of the sections, the run's clock, `[headroom]`, `[hpa]`, reservations and spot
//! traces, and the duration and number checks every section uses.

use std::time::Duration;

use headroom_config::Config;

use crate::arrivals::Stream;
use crate::error::SimError;

use super::faults::fault;
use super::pools::{pools, service};
use super::raw::{Raw, RawHpa, RawSpotTrace, toml_error};
use super::streams::stream;
use super::tiers::{queue, tell_pool_the_deadlines, tier_index};
use super::{HpaSettings, Scenario};

/// Parses and validates a scenario's text; `origin` names it in messages. The first problem
/// found is the one reported, section by section in the order below. A text read from no file
/// has no directory to read `[[spot_traces]]` from: those are refused ([`load`](super::load)
/// reads them).
pub fn parse(text: &str, origin: &str) -> Result<Scenario, SimError> {
    parse_in(text, origin, None)
}

/// [`parse`], reading relative `[[spot_traces]]` files from `dir`.
pub(super) fn parse_in(
    text: &str,
    origin: &str,
    dir: Option<&std::path::Path>,
) -> Result<Scenario, SimError> {
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

pub(super) fn duration(origin: &str, key: &str, text: &str) -> Result<f64, SimError> {
    humantime::parse_duration(text)
        .map(|d| d.as_secs_f64())
        .map_err(|e| {
            SimError::scenario(
                origin,
                format!("key `{key}`: {text:?} is not a duration ({e}); write one such as \"90s\", \"5m\" or \"1h\""),
            )
        })
}

pub(super) fn positive(origin: &str, key: &str, x: f64) -> Result<f64, SimError> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(SimError::scenario(
            origin,
            format!("key `{key}`: {x} must be a number above zero"),
        ))
    }
}
