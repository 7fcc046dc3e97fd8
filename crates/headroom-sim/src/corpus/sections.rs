//! Pieces of a member's scenario TOML: rate points, token counts, ladders, an offering, a pool
//! and a traffic stream.

use std::fmt::Write;

use crate::arrivals::Tokens;

use super::params::{ACCOUNT, Hardware, OFFERING_CAPACITY, TokenShape};

pub(super) fn points_text(points: &[(f64, f64)]) -> String {
    let cells: Vec<String> = points.iter().map(|(t, r)| format!("[{t}, {r}]")).collect();
    format!("[{}]", cells.join(", "))
}

fn tokens_text(t: Tokens) -> String {
    match t {
        Tokens::Fixed(n) => n.to_string(),
        Tokens::Uniform(lo, hi) => format!("[{lo}, {hi}]"),
        Tokens::LogNormal { median, sigma, max } => format!(
            "{{ distribution = \"lognormal\", median = {median}, sigma = {sigma}, max = {max} }}"
        ),
    }
}

/// A ladder table splitting `cold_s` over the rungs as a typical GPU node climbs them.
pub(super) fn ladder_text(out: &mut String, header: &str, cold_s: u32) {
    let share = |pct: u32| (cold_s * pct / 100).max(1);
    let acquisition = share(40);
    let image = share(30);
    let weights = share(20);
    let compile = share(5);
    let warmup = cold_s
        .saturating_sub(acquisition + image + weights + compile)
        .max(1);
    let _ = writeln!(
        out,
        "[{header}]\nnode_acquisition = \"{acquisition}s\"\nimage_pull = \"{image}s\"\nweight_load = \"{weights}s\"\ncompile = \"{compile}s\"\nwarmup = \"{warmup}s\""
    );
}

/// One `[[headroom.offerings]]` entry.
pub(super) struct OfferingText<'a> {
    pub(super) id: String,
    pub(super) region: &'a str,
    pub(super) hw: &'a Hardware,
    pub(super) spot: bool,
    pub(super) price_usd: f64,
    pub(super) cold_s: u32,
}

pub(super) fn offering_text(out: &mut String, o: &OfferingText<'_>) {
    let _ = writeln!(
        out,
        "\n[[headroom.offerings]]\nid = \"{}\"\nprovider = \"sim\"\nregion = \"{}\"\nzone = \"{}a\"\ninstance_type = \"{}\"\nmarket = \"{}\"\nprice_usd_per_hour = \"{:.6}\"\ngpus = {}\nsim_capacity = {OFFERING_CAPACITY}",
        o.id,
        o.region,
        o.region,
        o.hw.instance_type,
        if o.spot { "spot" } else { "on-demand" },
        o.price_usd,
        o.hw.gpus
    );
    ladder_text(out, "headroom.offerings.sim_ladder", o.cold_s);
}

/// One `[[headroom.pools]]` entry.
pub(super) struct PoolText<'a> {
    pub(super) name: &'a str,
    pub(super) offerings: &'a [String],
    pub(super) min: u32,
    pub(super) max: u32,
    pub(super) warm: u32,
    pub(super) cold_s: u32,
    pub(super) replica_rps: f64,
    /// Spare ready replicas above demand: the careful team's buffer, as the baselines get it.
    pub(super) buffer: u32,
    pub(super) fallback: Option<&'a str>,
}

pub(super) fn pool_text(out: &mut String, p: &PoolText<'_>) {
    let quoted: Vec<String> = p.offerings.iter().map(|o| format!("\"{o}\"")).collect();
    let step = (p.max / 2).max(4);
    let _ = writeln!(
        out,
        "\n[[headroom.pools]]\nname = \"{}\"\naccount = \"{ACCOUNT}\"\nofferings = [{}]\nmin_replicas = {}\nmax_replicas = {}\nmax_scale_up_per_step = {step}\nwarm_pool_size = {}",
        p.name,
        quoted.join(", "),
        p.min,
        p.max,
        p.warm
    );
    ladder_text(out, "headroom.pools.ladder", p.cold_s);
    if let Some(f) = p.fallback {
        let _ = writeln!(out, "[headroom.pools.supply]\nfallback_pool = \"{f}\"");
    }
    let _ = writeln!(
        out,
        "[headroom.pools.scaling]\nreplica_throughput_rps = {}\ntarget_queue_per_replica = 2.0\nbacklog_drain = \"60s\"\nbreach_window = \"4s\"\nscale_up_breaches = 2\nscale_up_limit = {step}\nscale_up_period = \"60s\"\nscale_down_stabilization = \"5m\"\nbuffer_replicas = {}",
        p.replica_rps,
        p.buffer.min(p.max)
    );
}

/// One `[[traffic]]` stream.
pub(super) fn stream_text(
    out: &mut String,
    tier: &str,
    pool: &str,
    rate: &str,
    daily: Option<(f64, f64)>,
    tokens: TokenShape,
) {
    let (input, output) = tokens.tokens();
    let _ = writeln!(
        out,
        "\n[[traffic]]\ntier = \"{tier}\"\npool = \"{pool}\"\nprocess = \"poisson\"\nrate = {rate}"
    );
    if let Some((amplitude, period_s)) = daily {
        let _ = writeln!(
            out,
            "diurnal_amplitude = {amplitude}\ndiurnal_period = \"{}s\"",
            period_s.round()
        );
    }
    let _ = writeln!(
        out,
        "input_tokens = {}\noutput_tokens = {}",
        tokens_text(input),
        tokens_text(output)
    );
}
