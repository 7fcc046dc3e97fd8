//! `[[traffic]]`: each stream's arrival process, rate profile, daily swing, tier, pool and
//! token counts.

use crate::arrivals::{Process, RateProfile, Stream, Tokens};
use crate::error::SimError;

use super::SimPool;
use super::raw::{RawRate, RawStream, RawTier, RawTokenDistribution, RawTokens};
use super::tiers::tier_index;
use super::validate::{duration, positive};

/// One `[[traffic]]` stream: its process, rate profile, tier and token counts.
pub(super) fn stream(
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
