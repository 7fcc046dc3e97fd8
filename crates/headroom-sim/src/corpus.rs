//! The scenario corpus (issue 33): a parametric family of scenarios drawn from a seed, so that
//! policies are compared over hundreds of situations rather than a dozen written by hand.
//!
//! Each member is drawn as [`Params`] (pure: the seed and the member's index decide everything),
//! written as scenario TOML (what `--corpus-dump` saves and `--scenario FILE` replays) and parsed
//! by the same code as the built-in scenarios, so a member is valid exactly when its text is.
//! `scenarios/README.md` documents every parameter and its range; the constants below are them.

use std::fmt::Write;

use serde::Serialize;

use crate::arrivals::{RateProfile, Tokens};
use crate::error::SimError;
use crate::scenario::{self, Scenario};

pub mod summary;

/// The most scenarios one corpus may hold (`--corpus` above it is refused).
pub const MAX_SCENARIOS: u32 = 10_000;

/// Scenario length: whole minutes in this range. Short, because every policy steps the serving
/// model every 100 ms; days and weeks are compressed into it.
const DURATION_MIN: (u32, u32) = (10, 20);
/// Cold start (the whole ladder), seconds, in 10 s steps.
const COLD_START_S: (u32, u32) = (60, 600);
/// No pool grows past this many replicas: the traffic's extras are scaled down to fit.
const PEAK_REPLICAS: f64 = 32.0;
/// Simulated capacity of every offering (until a stockout).
const OFFERING_CAPACITY: u32 = 64;
/// The budget account every pool charges.
const ACCOUNT: &str = "ml-platform";

/// The hardware a pool runs on, and how fast one replica serves there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelClass {
    /// A 70B model on 8 × A100 (p4d.24xlarge, $21.96/h on demand).
    Llama70bP4d,
    /// An 8B model on one L4 (g6.xlarge, $0.80/h on demand).
    Llama8bL4,
}

struct Hardware {
    family: &'static str,
    instance_type: &'static str,
    gpus: u32,
    on_demand_usd: f64,
    tokens_per_s: u32,
    request_tokens_per_s: u32,
    max_batch: u32,
}

impl ModelClass {
    fn hardware(self) -> Hardware {
        match self {
            ModelClass::Llama70bP4d => Hardware {
                family: "p4d",
                instance_type: "p4d.24xlarge",
                gpus: 8,
                on_demand_usd: 21.957642,
                tokens_per_s: 1100,
                request_tokens_per_s: 275,
                max_batch: 16,
            },
            ModelClass::Llama8bL4 => Hardware {
                family: "g6",
                instance_type: "g6.xlarge",
                gpus: 1,
                on_demand_usd: 0.8048,
                tokens_per_s: 2000,
                request_tokens_per_s: 120,
                max_batch: 32,
            },
        }
    }
}

/// Which tier a traffic component's requests belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tier {
    Interactive,
    Batch,
}

/// Request sizes: the built-ins' uniform ranges, or heavy-tailed (lognormal) prompts and outputs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokenShape {
    Uniform,
    LogNormal {
        input_median: u32,
        input_sigma: f64,
        output_median: u32,
        output_sigma: f64,
    },
}

impl TokenShape {
    fn tokens(self) -> (Tokens, Tokens) {
        match self {
            TokenShape::Uniform => (Tokens::Uniform(300, 700), Tokens::Uniform(50, 150)),
            TokenShape::LogNormal {
                input_median,
                input_sigma,
                output_median,
                output_sigma,
            } => (
                Tokens::LogNormal {
                    median: input_median,
                    sigma: input_sigma,
                    max: 16_000,
                },
                Tokens::LogNormal {
                    median: output_median,
                    sigma: output_sigma,
                    max: 4_000,
                },
            ),
        }
    }

    /// A request's mean work in the serving model's units (output + 2 % of the input).
    fn mean_work(self) -> f64 {
        let (input, output) = self.tokens();
        output.mean() + INPUT_TOKEN_WEIGHT * input.mean()
    }
}

const INPUT_TOKEN_WEIGHT: f64 = 0.02;

/// A step burst: `extra_rps` more, reached over `rise_s`, held `length_s`, gone over 2 s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Burst {
    pub tier: Tier,
    pub start_s: u32,
    pub rise_s: u32,
    pub length_s: u32,
    pub extra_rps: f64,
}

/// A slow ramp of the batch tier: up over `up_s`, held `hold_s`, down over `down_s`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ramp {
    pub start_s: u32,
    pub up_s: u32,
    pub hold_s: u32,
    pub down_s: u32,
    pub extra_rps: f64,
}

/// A daily sine on the interactive tier: `days` compressed days in the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Daily {
    pub days: u32,
    pub amplitude_rps: f64,
}

/// A compressed week (seven days in the run): batch work from 07:00 to 19:00 on weekdays only.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Weekly {
    pub weekday_extra_rps: f64,
}

/// A scheduled batch job at 09:00 of every day (every weekday in a week).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Job {
    pub length_s: u32,
    pub extra_rps: f64,
}

/// Spot capacity beside on-demand, at this share of the on-demand price.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spot {
    pub price_share: f64,
}

/// The preferred offering refuses launches from `at_s`; capacity returns after
/// `restore_after_s` if set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stockout {
    pub at_s: u32,
    pub restore_after_s: Option<u32>,
}

/// A wave reclaiming `fraction` of the spot nodes at `at_s`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Reclaim {
    pub at_s: u32,
    pub fraction: f64,
}

/// The spot price times `factor` from `at_s` (above the maximum: spot nodes are reclaimed and
/// launches refused), back after `back_after_s` if set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PriceMove {
    pub at_s: u32,
    pub factor: f64,
    pub back_after_s: Option<u32>,
}

/// A second pool (an 8B model on L4) on the same cloud, with its own interactive traffic; with
/// `fallback` it is the main pool's smaller model (`supply.fallback_pool`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SecondPool {
    pub base_rps: f64,
    pub replica_rps: f64,
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub fallback: bool,
}

/// A daily budget on the account every pool charges.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Budget {
    pub ceiling_usd: f64,
    pub hard_action: &'static str,
}

/// Everything one member of the corpus is drawn from. Times are seconds into the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Params {
    pub name: String,
    /// The scenario's own seed: its arrivals and its simulated cloud.
    pub seed: u64,
    pub duration_s: u32,
    pub model: ModelClass,
    pub interactive_objective_s: u32,
    pub base_rps: f64,
    pub tokens: TokenShape,
    /// One replica's throughput with its batch busy, at the mean request size.
    pub replica_rps: f64,
    pub daily: Option<Daily>,
    pub weekly: Option<Weekly>,
    pub job: Option<Job>,
    pub bursts: Vec<Burst>,
    pub ramp: Option<Ramp>,
    pub cold_start_s: u32,
    pub warm_pool: u32,
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub spot: Option<Spot>,
    /// Another region's on-demand offering at this multiple of the price.
    pub second_region: Option<f64>,
    pub stockout: Option<Stockout>,
    pub reclaim: Option<Reclaim>,
    pub price_move: Option<PriceMove>,
    pub second_pool: Option<SecondPool>,
    pub budget: Option<Budget>,
}

impl Params {
    /// The family's features this member has: what losses are grouped by.
    pub fn traits(&self) -> Vec<&'static str> {
        let mut t = vec![match self.model {
            ModelClass::Llama70bP4d => "70b",
            ModelClass::Llama8bL4 => "8b",
        }];
        let flags = [
            (self.bursts.is_empty(), "no-bursts"),
            (!self.bursts.is_empty(), "bursts"),
            (self.ramp.is_some(), "ramp"),
            (self.daily.is_some(), "daily"),
            (self.weekly.is_some(), "weekly"),
            (self.job.is_some(), "job"),
            (
                matches!(self.tokens, TokenShape::LogNormal { .. }),
                "lognormal",
            ),
            (self.cold_start_s >= 300, "cold-start>=5m"),
            (self.cold_start_s < 300, "cold-start<5m"),
            (self.warm_pool > 0, "warm-pool"),
            (self.warm_pool == 0, "no-warm-pool"),
            (self.spot.is_some(), "spot"),
            (self.second_region.is_some(), "two-regions"),
            (self.stockout.is_some(), "stockout"),
            (self.reclaim.is_some(), "reclaim"),
            (self.price_move.is_some(), "price-move"),
            (self.second_pool.is_some(), "two-pools"),
            (self.second_pool.is_some_and(|p| p.fallback), "fallback"),
            (self.budget.is_some(), "budget"),
        ];
        t.extend(flags.into_iter().filter(|(on, _)| *on).map(|(_, n)| n));
        t
    }
}

/// One member of the corpus: what it was drawn from, its TOML, and the parsed scenario.
#[derive(Debug, Clone)]
pub struct Member {
    pub params: Params,
    pub toml: String,
    pub scenario: Scenario,
}

/// The corpus of `n` members drawn from `seed`. Member `i` depends on `(seed, i)` only, so a
/// smaller corpus is a prefix of a larger one.
pub fn corpus(n: u32, seed: u64) -> Result<Vec<Member>, SimError> {
    (0..n).map(|i| member(seed, i)).collect()
}

/// Member `index` of the corpus of `seed`.
pub fn member(seed: u64, index: u32) -> Result<Member, SimError> {
    let params = draw(seed, index);
    let toml = to_toml(&params);
    let scenario = scenario::parse(&toml, &params.name)?;
    Ok(Member {
        params,
        toml,
        scenario,
    })
}

/// A well-mixed 64-bit seed for member `index` (splitmix64's finaliser).
fn mix(seed: u64, index: u32) -> u64 {
    let mut z = seed ^ (u64::from(index) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform draw in `[lo, hi)` rounded to `digits` decimals.
fn uniform(rng: &mut fastrand::Rng, lo: f64, hi: f64, digits: i32) -> f64 {
    round_to(lo + (hi - lo) * rng.f64(), digits)
}

fn round_to(x: f64, digits: i32) -> f64 {
    let k = 10f64.powi(digits);
    (x * k).round() / k
}

/// Draws member `index` of the corpus of `seed`: every choice of the family, in a fixed order.
pub fn draw(seed: u64, index: u32) -> Params {
    let mut rng = fastrand::Rng::with_seed(mix(seed, index));
    let r = &mut rng;
    let duration_s = 60 * r.u32(DURATION_MIN.0..=DURATION_MIN.1);
    let d = f64::from(duration_s);
    let model = if r.bool() {
        ModelClass::Llama70bP4d
    } else {
        ModelClass::Llama8bL4
    };
    let tokens = if r.bool() {
        TokenShape::Uniform
    } else {
        TokenShape::LogNormal {
            input_median: r.u32(200..=1500),
            input_sigma: uniform(r, 0.6, 1.4, 2),
            output_median: r.u32(40..=200),
            output_sigma: uniform(r, 0.5, 1.2, 2),
        }
    };
    let hw = model.hardware();
    let replica_rps = round_to(f64::from(hw.tokens_per_s) / tokens.mean_work(), 1).max(0.1);
    let min_replicas = r.u32(2..=8);
    let base_rps = round_to(
        replica_rps * f64::from(min_replicas) * uniform(r, 0.4, 0.7, 2),
        1,
    );
    let interactive_objective_s = r.u32(2..=5);
    let daily = (r.f64() < 0.35).then(|| Daily {
        days: r.u32(1..=3),
        amplitude_rps: round_to(base_rps * uniform(r, 0.3, 0.8, 2), 1),
    });
    let weekly = (r.f64() < 0.2).then(|| Weekly {
        weekday_extra_rps: round_to(replica_rps * uniform(r, 2.0, 8.0, 2), 1),
    });
    let day_s = day_length(duration_s, daily, weekly);
    let job = (r.f64() < 0.3).then(|| Job {
        length_s: r.u32(60..=300).min((day_s * 0.6) as u32).max(20),
        extra_rps: round_to(replica_rps * uniform(r, 2.0, 10.0, 2), 1),
    });
    let bursts = draw_bursts(r, duration_s, replica_rps);
    let ramp = (r.f64() < 0.25).then(|| {
        let up_s = (d * uniform(r, 0.2, 0.4, 3)) as u32;
        Ramp {
            start_s: (d * uniform(r, 0.0, 0.3, 3)) as u32,
            up_s,
            hold_s: (d * uniform(r, 0.0, 0.2, 3)) as u32,
            down_s: (f64::from(up_s) * uniform(r, 0.5, 1.0, 3)) as u32,
            extra_rps: round_to(replica_rps * uniform(r, 3.0, 12.0, 2), 1),
        }
    });
    let cold_start_s = 10 * r.u32(COLD_START_S.0 / 10..=COLD_START_S.1 / 10);
    let warm_pool = r.u32(0..=4);
    let spot = (r.f64() < 0.4).then(|| Spot {
        price_share: uniform(r, 0.3, 0.5, 3),
    });
    let second_region = (r.f64() < 0.35).then(|| uniform(r, 1.0, 1.15, 3));
    let stockout = (r.f64() < 0.25).then(|| Stockout {
        at_s: (d * uniform(r, 0.1, 0.6, 3)) as u32,
        restore_after_s: r.bool().then(|| r.u32(120..=480)),
    });
    let reclaim = spot.filter(|_| r.f64() < 0.5).map(|_| Reclaim {
        at_s: (d * uniform(r, 0.2, 0.8, 3)) as u32,
        fraction: uniform(r, 0.3, 1.0, 2),
    });
    let price_move = spot.filter(|_| r.f64() < 0.4).map(|_| PriceMove {
        at_s: (d * uniform(r, 0.1, 0.7, 3)) as u32,
        factor: uniform(r, 1.5, 4.0, 2),
        back_after_s: (r.f64() < 0.7).then(|| r.u32(120..=600)),
    });
    let second_pool = (r.f64() < 0.25).then(|| {
        let small = ModelClass::Llama8bL4.hardware();
        let rps = round_to(f64::from(small.tokens_per_s) / tokens.mean_work(), 1).max(0.1);
        let min = r.u32(1..=4);
        SecondPool {
            base_rps: round_to(rps * f64::from(min) * uniform(r, 0.4, 0.7, 2), 1),
            replica_rps: rps,
            min_replicas: min,
            max_replicas: min + r.u32(4..=8),
            fallback: model == ModelClass::Llama70bP4d && r.bool(),
        }
    });
    let budget_share = (r.f64() < 0.2).then(|| uniform(r, 1.5, 4.0, 2));
    let hard_action = if r.bool() { "clamp" } else { "refuse" };
    let headroom_factor = uniform(r, 1.1, 1.5, 2);
    let mut p = Params {
        name: format!("corpus-s{seed}-{index:04}"),
        seed: mix(seed, index) >> 33,
        duration_s,
        model,
        interactive_objective_s,
        base_rps,
        tokens,
        replica_rps,
        daily,
        weekly,
        job,
        bursts,
        ramp,
        cold_start_s,
        warm_pool,
        min_replicas,
        max_replicas: min_replicas,
        spot,
        second_region,
        stockout,
        reclaim,
        price_move,
        second_pool,
        budget: None,
    };
    fit_peak(&mut p);
    let peak = peak_rps(&p) / p.replica_rps;
    p.max_replicas = ((peak * headroom_factor).ceil() as u32).clamp(min_replicas + 2, 48);
    p.budget = budget_share.map(|share| Budget {
        ceiling_usd: round_to(floor_usd_per_hour(&p) * share, 2),
        hard_action,
    });
    p
}

/// Up to three bursts in sequence, each after a gap; none past the end of the run.
fn draw_bursts(r: &mut fastrand::Rng, duration_s: u32, replica_rps: f64) -> Vec<Burst> {
    let count = match r.u32(0..100) {
        0..30 => 0,
        30..65 => 1,
        65..85 => 2,
        _ => 3,
    };
    let mut bursts = Vec::new();
    let mut at = r.u32(30..=duration_s * 3 / 10);
    for _ in 0..count {
        let b = Burst {
            tier: if r.f64() < 0.3 {
                Tier::Interactive
            } else {
                Tier::Batch
            },
            start_s: at,
            rise_s: r.u32(2..=60),
            length_s: r.u32(60..=480),
            extra_rps: round_to(replica_rps * uniform(r, 2.0, 12.0, 2), 1),
        };
        if b.start_s + b.rise_s + b.length_s + 2 > duration_s {
            break;
        }
        at = b.start_s + b.rise_s + b.length_s + 2 + r.u32(60..=300);
        bursts.push(b);
    }
    bursts
}

/// The length of a (compressed) day: a seventh of the run in a week, else the daily period,
/// else the whole run.
fn day_length(duration_s: u32, daily: Option<Daily>, weekly: Option<Weekly>) -> f64 {
    let d = f64::from(duration_s);
    match (weekly, daily) {
        (Some(_), _) => d / 7.0,
        (None, Some(daily)) => d / f64::from(daily.days),
        (None, None) => d,
    }
}

/// A trapezoid from 0 at `start` to `height` over `rise`, held `hold`, back to 0 over `fall`.
fn trapezoid(start: f64, rise: f64, hold: f64, fall: f64, height: f64) -> Vec<(f64, f64)> {
    vec![
        (start, 0.0),
        (start + rise, height),
        (start + rise + hold, height),
        (start + rise + hold + fall, 0.0),
    ]
}

/// The rate components of `tier`'s stream, each a continuous piecewise-linear function that is
/// zero before its first point and after its last (the base rate and the daily sine aside).
fn components(p: &Params, tier: Tier) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = p
        .bursts
        .iter()
        .filter(|b| b.tier == tier)
        .map(|b| {
            trapezoid(
                f64::from(b.start_s),
                f64::from(b.rise_s),
                f64::from(b.length_s),
                2.0,
                b.extra_rps,
            )
        })
        .collect();
    if tier == Tier::Interactive {
        return out;
    }
    let day = day_length(p.duration_s, p.daily, p.weekly);
    // Weekdays are the first five of the week; without a week, every day is one.
    let days: Vec<f64> = match p.weekly {
        Some(_) => (0..5).map(|k| f64::from(k) * day).collect(),
        None => (0..p.daily.map_or(1, |d| d.days))
            .map(|k| f64::from(k) * day)
            .collect(),
    };
    let hour = day / 24.0;
    if let Some(w) = p.weekly {
        out.extend(days.iter().map(|&d0| {
            trapezoid(
                d0 + 7.0 * hour,
                hour,
                11.0 * hour,
                hour,
                w.weekday_extra_rps,
            )
        }));
    }
    if let Some(j) = p.job {
        out.extend(days.iter().map(|&d0| {
            trapezoid(
                d0 + 9.0 * hour,
                10.0,
                f64::from(j.length_s),
                10.0,
                j.extra_rps,
            )
        }));
    }
    if let Some(r) = p.ramp {
        out.push(trapezoid(
            f64::from(r.start_s),
            f64::from(r.up_s),
            f64::from(r.hold_s),
            f64::from(r.down_s),
            r.extra_rps,
        ));
    }
    out
}

/// The sum of continuous piecewise-linear components (plus `base`), as points at every
/// component's breakpoints within `[0, end]`, rounded to 0.1 req/s.
fn sum_points(base: f64, parts: &[Vec<(f64, f64)>], end: f64) -> Vec<(f64, f64)> {
    let mut times: Vec<f64> = parts
        .iter()
        .flatten()
        .map(|(t, _)| t.round())
        .filter(|t| *t > 0.0 && *t < end)
        .chain([0.0, end])
        .collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    let profiles: Vec<RateProfile> = parts
        .iter()
        .map(|points| RateProfile {
            points: points.clone(),
            diurnal: None,
        })
        .collect();
    times
        .into_iter()
        .map(|t| {
            let rate = base + profiles.iter().map(|p| p.rate_at(t)).sum::<f64>();
            (t, round_to(rate, 1))
        })
        .collect()
}

/// The highest rate the main pool sees (both tiers, the daily sine at its crest).
fn peak_rps(p: &Params) -> f64 {
    let end = f64::from(p.duration_s);
    let mut parts = components(p, Tier::Interactive);
    parts.extend(components(p, Tier::Batch));
    let swing = p.daily.map_or(0.0, |d| d.amplitude_rps);
    sum_points(p.base_rps, &parts, end)
        .into_iter()
        .map(|(_, r)| r)
        .fold(0.0, f64::max)
        + swing
}

/// Scales every extra (bursts, ramp, week, job) down so the peak needs at most
/// [`PEAK_REPLICAS`] replicas; the base and the daily swing stay.
fn fit_peak(p: &mut Params) {
    let limit = PEAK_REPLICAS * p.replica_rps;
    let peak = peak_rps(p);
    let fixed = p.base_rps + p.daily.map_or(0.0, |d| d.amplitude_rps);
    if peak <= limit || peak <= fixed {
        return;
    }
    let k = ((limit - fixed) / (peak - fixed)).clamp(0.0, 1.0);
    let scale = |x: &mut f64| *x = round_to(*x * k, 1);
    p.bursts.iter_mut().for_each(|b| scale(&mut b.extra_rps));
    if let Some(r) = &mut p.ramp {
        scale(&mut r.extra_rps);
    }
    if let Some(w) = &mut p.weekly {
        scale(&mut w.weekday_extra_rps);
    }
    if let Some(j) = &mut p.job {
        scale(&mut j.extra_rps);
    }
}

/// What the floors of every pool cost per hour on demand: what a budget is sized against.
fn floor_usd_per_hour(p: &Params) -> f64 {
    let main = f64::from(p.min_replicas) * p.model.hardware().on_demand_usd;
    let small = p.second_pool.map_or(0.0, |s| {
        f64::from(s.min_replicas) * ModelClass::Llama8bL4.hardware().on_demand_usd
    });
    main + small
}

/// The pool names: the main pool, and the second one if any.
fn main_pool_name(p: &Params) -> &'static str {
    match p.model {
        ModelClass::Llama70bP4d => "main-70b",
        ModelClass::Llama8bL4 => "main-8b",
    }
}
const SECOND_POOL: &str = "small-8b";

fn points_text(points: &[(f64, f64)]) -> String {
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
fn ladder_text(out: &mut String, header: &str, cold_s: u32) {
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
struct OfferingText<'a> {
    id: String,
    region: &'a str,
    hw: &'a Hardware,
    spot: bool,
    price_usd: f64,
    cold_s: u32,
}

fn offering_text(out: &mut String, o: &OfferingText<'_>) {
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
struct PoolText<'a> {
    name: &'a str,
    offerings: &'a [String],
    min: u32,
    max: u32,
    warm: u32,
    cold_s: u32,
    replica_rps: f64,
    /// Spare ready replicas above demand: the careful team's buffer, as the baselines get it.
    buffer: u32,
    fallback: Option<&'a str>,
}

fn pool_text(out: &mut String, p: &PoolText<'_>) {
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
fn stream_text(
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

/// The scenario TOML of `p`: the same keys a hand-written scenario uses.
pub fn to_toml(p: &Params) -> String {
    let mut out = String::new();
    let hw = p.model.hardware();
    let main = main_pool_name(p);
    let end = f64::from(p.duration_s);
    // The buffer a careful team sizes to the floor, a quarter of it (at least one node): the
    // baselines' pause pods, and Headroom's `buffer_replicas` on every pool, alike.
    let buffer = p.min_replicas.div_ceil(4);
    let _ = writeln!(
        out,
        "# Generated by `headroom simulate --corpus`: member of the parametric family in scenarios/README.md.\n# Traits: {}\nname = \"{}\"\ndescription = \"generated: {}\"\nduration = \"{}s\"\ntick = \"1s\"\nstep = \"100ms\"\nseed = {}\nshed_depth = 200",
        p.traits().join(", "),
        p.name,
        p.traits().join(", "),
        p.duration_s,
        p.seed
    );
    let _ = writeln!(
        out,
        "\n[service]\ntokens_per_s = {}\nrequest_tokens_per_s = {}\nmax_batch = {}\ninput_token_weight = {INPUT_TOKEN_WEIGHT}",
        hw.tokens_per_s, hw.request_tokens_per_s, hw.max_batch
    );
    let small = ModelClass::Llama8bL4.hardware();
    if p.second_pool.is_some() {
        let _ = writeln!(
            out,
            "\n[[pools]]\nname = \"{main}\"\n\n[[pools]]\nname = \"{SECOND_POOL}\"\n[pools.service]\ntokens_per_s = {}\nrequest_tokens_per_s = {}\nmax_batch = {}\ninput_token_weight = {INPUT_TOKEN_WEIGHT}",
            small.tokens_per_s, small.request_tokens_per_s, small.max_batch
        );
    }
    let fallback = p.second_pool.is_some_and(|s| s.fallback);
    let _ = writeln!(
        out,
        "\n[[tiers]]\nname = \"interactive\"\nobjective = \"{}s\"\nsmaller_model = {fallback}\n\n[[tiers]]\nname = \"batch\"\nobjective = \"60s\"\ndeadline = \"10m\"\nshed = true",
        p.interactive_objective_s
    );
    let daily = p.daily.map(|d| (d.amplitude_rps, end / f64::from(d.days)));
    let interactive = sum_points(p.base_rps, &components(p, Tier::Interactive), end);
    stream_text(
        &mut out,
        "interactive",
        main,
        &points_text(&interactive),
        daily,
        p.tokens,
    );
    let batch_parts = components(p, Tier::Batch);
    if !batch_parts.is_empty() {
        let batch = sum_points(0.0, &batch_parts, end);
        stream_text(
            &mut out,
            "batch",
            main,
            &points_text(&batch),
            None,
            p.tokens,
        );
    }
    if let Some(s) = p.second_pool {
        let swing = p.daily.map(|d| {
            (
                round_to(s.base_rps * d.amplitude_rps / p.base_rps.max(0.1), 1),
                end / f64::from(d.days),
            )
        });
        stream_text(
            &mut out,
            "interactive",
            SECOND_POOL,
            &s.base_rps.to_string(),
            swing,
            p.tokens,
        );
    }
    // A day as the traffic's shapes compress it, for the predictive baseline's look back.
    let _ = writeln!(
        out,
        "\n[hpa]\ntarget_utilization = 0.7\ntarget_queue_per_pod = 2\noverprovision = {buffer}\nday = \"{}ms\"",
        (day_length(p.duration_s, p.daily, p.weekly) * 1000.0).round()
    );
    let od = format!("use1-{}-od", hw.family);
    let spot = format!("use1-{}-spot", hw.family);
    // The pool's offerings in preference order: spot (cheapest) first when there is one.
    let mut offerings = Vec::new();
    if p.spot.is_some() {
        offerings.push(spot.clone());
    }
    offerings.push(od.clone());
    if p.second_region.is_some() {
        offerings.push(format!("use2-{}-od", hw.family));
    }
    faults_text(&mut out, p, &offerings[0], &spot);
    let _ = writeln!(out, "\n[headroom]\ncluster_id = \"{}\"", p.name);
    let mut defined = vec![OfferingText {
        id: od.clone(),
        region: "us-east-1",
        hw: &hw,
        spot: false,
        price_usd: hw.on_demand_usd,
        cold_s: p.cold_start_s,
    }];
    if let Some(s) = p.spot {
        defined.push(OfferingText {
            id: spot.clone(),
            region: "us-east-1",
            hw: &hw,
            spot: true,
            price_usd: hw.on_demand_usd * s.price_share,
            cold_s: p.cold_start_s,
        });
    }
    if let Some(premium) = p.second_region {
        defined.push(OfferingText {
            id: format!("use2-{}-od", hw.family),
            region: "us-east-2",
            hw: &hw,
            spot: false,
            price_usd: hw.on_demand_usd * premium,
            cold_s: p.cold_start_s,
        });
    }
    let small_cold_s = (p.cold_start_s / 2).max(60);
    // The second pool runs on L4s: the main pool's own offerings when it is an 8B pool too.
    let small_offerings = match p.model {
        ModelClass::Llama8bL4 => offerings.clone(),
        ModelClass::Llama70bP4d => vec!["use1-g6-od".to_string()],
    };
    if p.second_pool.is_some() && p.model == ModelClass::Llama70bP4d {
        defined.push(OfferingText {
            id: "use1-g6-od".to_string(),
            region: "us-east-1",
            hw: &small,
            spot: false,
            price_usd: small.on_demand_usd,
            cold_s: small_cold_s,
        });
    }
    for o in &defined {
        offering_text(&mut out, o);
    }
    pool_text(
        &mut out,
        &PoolText {
            name: main,
            offerings: &offerings,
            min: p.min_replicas,
            max: p.max_replicas,
            warm: p.warm_pool,
            cold_s: p.cold_start_s,
            replica_rps: p.replica_rps,
            buffer,
            fallback: fallback.then_some(SECOND_POOL),
        },
    );
    if let Some(s) = p.second_pool {
        pool_text(
            &mut out,
            &PoolText {
                name: SECOND_POOL,
                offerings: &small_offerings,
                min: s.min_replicas,
                max: s.max_replicas,
                warm: 1,
                cold_s: small_cold_s,
                replica_rps: s.replica_rps,
                buffer,
                fallback: None,
            },
        );
    }
    if let Some(b) = p.budget {
        let _ = writeln!(
            out,
            "\n[[headroom.budgets]]\naccount = \"{ACCOUNT}\"\nperiod = \"day\"\nceiling_usd = \"{:.2}\"\nhard_action = \"{}\"",
            b.ceiling_usd, b.hard_action
        );
        // The ceiling is a few hours of the floor's cost, for a run of minutes: holds are sized
        // to match, the shortest horizon the configuration accepts (twice the longest ladder,
        // at least four rounds of the loop), or an hour's hold per node would spend the
        // ceiling on money no run of this length could use.
        let rounds = 4 * (1 + 60);
        let horizon = (2 * p.cold_start_s).max(rounds);
        let _ = writeln!(out, "\n[headroom.engine]\nhold_horizon = \"{horizon}s\"");
    }
    out
}

/// `[[faults]]`, in time order: the stockout hits the preferred offering; reclaims and price
/// moves hit the spot offering.
fn faults_text(out: &mut String, p: &Params, preferred: &str, spot: &str) {
    let mut faults: Vec<(u32, String)> = Vec::new();
    if let Some(s) = p.stockout {
        faults.push((
            s.at_s,
            format!("offering = \"{preferred}\"\nkind = \"capacity\"\ncapacity = 0"),
        ));
        if let Some(after) = s.restore_after_s {
            faults.push((
                s.at_s + after,
                format!("offering = \"{preferred}\"\nkind = \"capacity\"\ncapacity = {OFFERING_CAPACITY}"),
            ));
        }
    }
    if let Some(r) = p.reclaim {
        faults.push((
            r.at_s,
            format!(
                "offering = \"{spot}\"\nkind = \"interrupt\"\nfraction = {}",
                r.fraction
            ),
        ));
    }
    if let (Some(m), Some(s)) = (p.price_move, p.spot) {
        let base = p.model.hardware().on_demand_usd * s.price_share;
        faults.push((
            m.at_s,
            format!(
                "offering = \"{spot}\"\nkind = \"spot-price\"\nprice_usd_per_hour = \"{:.6}\"",
                base * m.factor
            ),
        ));
        if let Some(after) = m.back_after_s {
            faults.push((
                m.at_s + after,
                format!("offering = \"{spot}\"\nkind = \"spot-price\"\nprice_usd_per_hour = \"{base:.6}\""),
            ));
        }
    }
    // Faults apply in file order as their time comes: keep them sorted.
    faults.sort_by_key(|(at, _)| *at);
    for (at, body) in faults {
        let _ = writeln!(out, "\n[[faults]]\nat = \"{at}s\"\n{body}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_corpus_and_members_do_not_depend_on_its_size() {
        let a = corpus(6, 42).unwrap();
        let b = corpus(6, 42).unwrap();
        let c = corpus(3, 42).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.params, y.params);
            assert_eq!(x.toml, y.toml);
        }
        for (x, y) in a.iter().zip(&c) {
            assert_eq!(x.toml, y.toml);
        }
        let other = corpus(6, 43).unwrap();
        assert!(a.iter().zip(&other).any(|(x, y)| x.toml != y.toml));
    }

    #[test]
    fn summed_components_are_the_base_plus_each_trapezoid() {
        let parts = vec![
            trapezoid(10.0, 10.0, 20.0, 2.0, 30.0),
            trapezoid(20.0, 0.0 + 5.0, 5.0, 5.0, 10.0),
        ];
        let points = sum_points(5.0, &parts, 100.0);
        let rate = RateProfile {
            points,
            diurnal: None,
        };
        assert_eq!(rate.rate_at(0.0), 5.0);
        assert_eq!(rate.rate_at(15.0), 20.0);
        assert_eq!(rate.rate_at(27.0), 45.0);
        assert_eq!(rate.rate_at(60.0), 5.0);
    }
}
