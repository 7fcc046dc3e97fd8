//! `[pools.supply]`: the order of supply and the governor's per-pool limits.

use headroom_core::{Money, PoolName, SupplyPolicy, WarmMode};

use super::raw::RawSupply;
use super::{DAY, Problems, Within};

pub(super) fn supply(
    key: &str,
    raw: &RawSupply,
    pool: &PoolName,
    p: &mut Problems,
) -> SupplyPolicy {
    let d = SupplyPolicy::default();
    let percent = raw
        .spot_percent_above_base
        .unwrap_or(d.spot_percent_above_base);
    if percent > 100 {
        p.add(
            &format!("{key}.spot_percent_above_base"),
            format!("{percent} is above 100"),
            "use a percentage from 0 (all on-demand) to 100 (all spot)",
        );
    }
    let warm_mode = match raw.warm_mode.as_deref() {
        None | Some("stopped") => WarmMode::Stopped,
        Some("running") => WarmMode::Running,
        Some(other) => {
            p.add(
                &format!("{key}.warm_mode"),
                format!("{other:?} is not a warm mode"),
                "use \"stopped\" or \"running\"",
            );
            WarmMode::Stopped
        }
    };
    if raw.fallback_pool.as_ref() == Some(pool) {
        p.add(
            &format!("{key}.fallback_pool"),
            "names the pool itself",
            "name another pool (a smaller model) or remove it",
        );
    }
    if raw
        .max_launches_per_period
        .is_some_and(|n| !(1..=10_000).contains(&n))
    {
        p.add(
            &format!("{key}.max_launches_per_period"),
            "must be between 1 and 10000",
            "raise it, or remove it for no per-period limit",
        );
    }
    let launch_period = match &raw.launch_period {
        Some(text) => p.duration(
            &format!("{key}.launch_period"),
            text,
            Within::secs(1, DAY, "60s"),
        ),
        None => d.launch_period,
    };
    let warm_history = match &raw.warm_history {
        Some(text) => p.duration(
            &format!("{key}.warm_history"),
            text,
            Within::secs(10, 7 * DAY, "24h"),
        ),
        None => d.warm_history,
    };
    let spot_max_price = raw.spot_max_price_usd_per_hour.map(|price| {
        p.money(
            &format!("{key}.spot_max_price_usd_per_hour"),
            price,
            Money::from_micros(1),
            super::offerings::MOST_PER_HOUR,
            "12.50",
        )
    });
    SupplyPolicy {
        on_demand_base: raw.on_demand_base.unwrap_or(d.on_demand_base),
        spot_percent_above_base: percent.min(100),
        spot_max_price,
        warm_mode,
        reuse_on_scale_in: raw.reuse_on_scale_in.unwrap_or(d.reuse_on_scale_in),
        fallback_pool: raw.fallback_pool.clone(),
        max_launches_per_period: raw.max_launches_per_period,
        launch_period,
        rebalance_to_spot: raw.rebalance_to_spot.unwrap_or(d.rebalance_to_spot),
        warm_pool_max: raw.warm_pool_max,
        warm_history,
    }
}
