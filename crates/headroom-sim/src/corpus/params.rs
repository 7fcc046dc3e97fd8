//! What a member of the corpus is drawn from: [`Params`] and its parts (model class, token shape,
//! bursts, ramps, days and weeks, spot, faults, a second pool, a budget), and the family's ranges.

use serde::Serialize;

use crate::arrivals::Tokens;

/// Scenario length: whole minutes in this range. Short, because every policy steps the serving
/// model every 100 ms; days and weeks are compressed into it.
pub(super) const DURATION_MIN: (u32, u32) = (10, 20);
/// Cold start (the whole ladder), seconds, in 10 s steps.
pub(super) const COLD_START_S: (u32, u32) = (60, 600);
/// No pool grows past this many replicas: the traffic's extras are scaled down to fit.
pub(super) const PEAK_REPLICAS: f64 = 32.0;
/// Simulated capacity of every offering (until a stockout).
pub(super) const OFFERING_CAPACITY: u32 = 64;
/// The budget account every pool charges.
pub(super) const ACCOUNT: &str = "ml-platform";

/// The hardware a pool runs on, and how fast one replica serves there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelClass {
    /// A 70B model on 8 × A100 (p4d.24xlarge, $21.96/h on demand).
    Llama70bP4d,
    /// An 8B model on one L4 (g6.xlarge, $0.80/h on demand).
    Llama8bL4,
}

pub(super) struct Hardware {
    pub(super) family: &'static str,
    pub(super) instance_type: &'static str,
    pub(super) gpus: u32,
    pub(super) on_demand_usd: f64,
    pub(super) tokens_per_s: u32,
    pub(super) request_tokens_per_s: u32,
    pub(super) max_batch: u32,
}

impl ModelClass {
    pub(super) fn hardware(self) -> Hardware {
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
    pub(super) fn tokens(self) -> (Tokens, Tokens) {
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
    pub(super) fn mean_work(self) -> f64 {
        let (input, output) = self.tokens();
        output.mean() + INPUT_TOKEN_WEIGHT * input.mean()
    }
}

pub(super) const INPUT_TOKEN_WEIGHT: f64 = 0.02;

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
