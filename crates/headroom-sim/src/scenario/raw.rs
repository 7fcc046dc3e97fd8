//! A scenario file as TOML gives it (the `Raw*` types serde reads), and a TOML error as one line.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::SimError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    pub(super) name: String,
    #[serde(default)]
    pub(super) description: String,
    pub(super) duration: String,
    pub(super) tick: Option<String>,
    /// The serving model's old fixed step: it now moves from event to event, so the key is
    /// accepted (scenarios written for it still load) and ignored.
    #[serde(rename = "step")]
    pub(super) _step: Option<String>,
    pub(super) seed: Option<u64>,
    pub(super) pool: Option<String>,
    #[serde(default)]
    pub(super) pools: Vec<RawPool>,
    pub(super) trace_tier: Option<String>,
    pub(super) service: RawService,
    pub(super) tiers: Vec<RawTier>,
    pub(super) shed_depth: Option<u64>,
    #[serde(default)]
    pub(super) traffic: Vec<RawStream>,
    #[serde(default)]
    pub(super) hpa: RawHpa,
    #[serde(default)]
    pub(super) faults: Vec<RawFault>,
    /// Reservations the run has in place, as `--reserve` adds them.
    #[serde(default)]
    pub(super) reservations: Vec<RawReservation>,
    /// Spot offerings' availability replayed from SkyPilot-format files, as `--spot-trace`
    /// adds them; a relative `file` is read from the scenario file's directory.
    #[serde(default)]
    pub(super) spot_traces: Vec<RawSpotTrace>,
    pub(super) headroom: toml::Table,
}

/// One `[[spot_traces]]` entry: a spot `offering` of the scenario and the trace `file`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpotTrace {
    pub(super) offering: String,
    pub(super) file: String,
}

/// One `[[reservations]]` entry: `offering`, `nodes`, and optionally `period` and
/// `usd_per_node_hour`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReservation {
    pub(super) offering: String,
    pub(super) nodes: u32,
    pub(super) period: Option<String>,
    pub(super) usd_per_node_hour: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawService {
    pub(super) tokens_per_s: f64,
    pub(super) request_tokens_per_s: Option<f64>,
    pub(super) max_batch: Option<u32>,
    pub(super) input_token_weight: Option<f64>,
}

/// One `[[pools]]` entry: a pool of `[headroom]` to simulate, its replica's speed (default the
/// top-level `[service]`) and, per offering, what differs there.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPool {
    pub(super) name: String,
    pub(super) service: Option<RawService>,
    #[serde(default)]
    pub(super) offerings: BTreeMap<String, RawServiceChange>,
}

/// A replica's speed on one offering, where it differs from the pool's.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServiceChange {
    pub(super) tokens_per_s: Option<f64>,
    pub(super) request_tokens_per_s: Option<f64>,
    pub(super) max_batch: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTier {
    pub(super) name: String,
    pub(super) objective: String,
    pub(super) deadline: Option<String>,
    #[serde(default)]
    pub(super) shed: bool,
    /// The admission priority the tier is shed at: low, normal, high or critical (default: low
    /// for a tier that may be shed, critical otherwise).
    pub(super) priority: Option<String>,
    /// Whether a pool's smaller-model fallback may serve the tier while Headroom hands over.
    #[serde(default)]
    pub(super) smaller_model: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawRate {
    Constant(f64),
    Points(Vec<[f64; 2]>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawTokens {
    Fixed(u32),
    Range([u32; 2]),
    Distribution(RawTokenDistribution),
}

/// `{ distribution = "lognormal", median = N, sigma = S, max = M }`: heavy-tailed token counts.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTokenDistribution {
    pub(super) distribution: String,
    pub(super) median: u32,
    pub(super) sigma: f64,
    pub(super) max: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStream {
    pub(super) tier: String,
    pub(super) pool: Option<String>,
    pub(super) process: Option<String>,
    pub(super) rate: RawRate,
    pub(super) diurnal_amplitude: Option<f64>,
    pub(super) diurnal_period: Option<String>,
    pub(super) input_tokens: RawTokens,
    pub(super) output_tokens: RawTokens,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHpa {
    pub(super) target_utilization: Option<f64>,
    pub(super) target_queue_per_pod: Option<f64>,
    pub(super) sync: Option<String>,
    pub(super) tolerance: Option<f64>,
    pub(super) scale_down_stabilization: Option<String>,
    pub(super) overprovision: Option<u32>,
    pub(super) day: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFault {
    pub(super) at: String,
    pub(super) kind: String,
    pub(super) offering: String,
    pub(super) capacity: Option<u32>,
    pub(super) fraction: Option<f64>,
    pub(super) class: Option<String>,
    pub(super) count: Option<u32>,
    pub(super) price_usd_per_hour: Option<String>,
}

/// A TOML or serde error as one line: where, what, and where to look.
pub(super) fn toml_error(e: &toml::de::Error, text: &str, origin: &str) -> SimError {
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
