//! A member's request rates as piecewise-linear points: the compressed day, each extra as a
//! trapezoid, their sum per tier, and the peak the main pool sees.

use crate::arrivals::RateProfile;

use super::draw::round_to;
use super::params::{Daily, Params, Tier, Weekly};

/// The length of a (compressed) day: a seventh of the run in a week, else the daily period,
/// else the whole run.
pub(super) fn day_length(duration_s: u32, daily: Option<Daily>, weekly: Option<Weekly>) -> f64 {
    let d = f64::from(duration_s);
    match (weekly, daily) {
        (Some(_), _) => d / 7.0,
        (None, Some(daily)) => d / f64::from(daily.days),
        (None, None) => d,
    }
}

/// A trapezoid from 0 at `start` to `height` over `rise`, held `hold`, back to 0 over `fall`.
pub(super) fn trapezoid(
    start: f64,
    rise: f64,
    hold: f64,
    fall: f64,
    height: f64,
) -> Vec<(f64, f64)> {
    vec![
        (start, 0.0),
        (start + rise, height),
        (start + rise + hold, height),
        (start + rise + hold + fall, 0.0),
    ]
}

/// The rate components of `tier`'s stream, each a continuous piecewise-linear function that is
/// zero before its first point and after its last (the base rate and the daily sine aside).
pub(super) fn components(p: &Params, tier: Tier) -> Vec<Vec<(f64, f64)>> {
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
pub(super) fn sum_points(base: f64, parts: &[Vec<(f64, f64)>], end: f64) -> Vec<(f64, f64)> {
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
pub(super) fn peak_rps(p: &Params) -> f64 {
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
