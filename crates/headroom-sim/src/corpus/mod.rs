//! The scenario corpus (issue 33): a parametric family of scenarios drawn from a seed, so that
//! policies are compared over hundreds of situations rather than a dozen written by hand.
//!
//! Each member is drawn as [`Params`] (pure: the seed and the member's index decide everything),
//! written as scenario TOML (what `--corpus-dump` saves and `--scenario FILE` replays) and parsed
//! by the same code as the built-in scenarios, so a member is valid exactly when its text is.
//! `scenarios/README.md` documents every parameter and its range; the constants in `params.rs` are them.

use crate::error::SimError;
use crate::scenario::{self, Scenario};

mod draw;
mod params;
mod rates;
mod render;
mod sections;
pub mod summary;
#[cfg(test)]
mod tests;

pub use draw::draw;
pub use params::{
    Budget, Burst, Daily, Job, ModelClass, Params, PriceMove, Ramp, Reclaim, SecondPool, Spot,
    Stockout, Tier, TokenShape, Weekly,
};
pub use render::to_toml;

/// The most scenarios one corpus may hold (`--corpus` above it is refused).
pub const MAX_SCENARIOS: u32 = 10_000;

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
