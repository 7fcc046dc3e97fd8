//! Drawing a member's [`Params`] from the seed and its index (pure), its extras scaled to fit the
//! replica cap and its budget sized against the floors' cost.

use super::params::{
    Budget, Burst, COLD_START_S, DURATION_MIN, Daily, Job, ModelClass, PEAK_REPLICAS, Params,
    PriceMove, Ramp, Reclaim, SecondPool, Spot, Stockout, Tier, TokenShape, Weekly,
};
use super::rates::{day_length, peak_rps};

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

pub(super) fn round_to(x: f64, digits: i32) -> f64 {
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

/// Scales every extra (bursts, ramp, week, job) down so the peak needs at most
/// [`PEAK_REPLICAS`] replicas; the base and the daily swing stay.
pub(super) fn fit_peak(p: &mut Params) {
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
pub(super) fn floor_usd_per_hour(p: &Params) -> f64 {
    let main = f64::from(p.min_replicas) * p.model.hardware().on_demand_usd;
    let small = p.second_pool.map_or(0.0, |s| {
        f64::from(s.min_replicas) * ModelClass::Llama8bL4.hardware().on_demand_usd
    });
    main + small
}
