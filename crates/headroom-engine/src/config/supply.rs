//! `[pools.supply]`: the order of supply and the governor's per-pool limits.

use headroom_core::{PoolName, SupplyPolicy, WarmMode};

use super::Problems;
use super::raw::RawSupply;

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
    if raw.max_launches_per_period == Some(0) {
        p.add(
            &format!("{key}.max_launches_per_period"),
            "must be at least 1",
            "raise it, or remove it for no per-period limit",
        );
    }
    let launch_period = match &raw.launch_period {
        Some(text) => p.duration(&format!("{key}.launch_period"), text),
        None => d.launch_period,
    };
    if launch_period.is_zero() {
        p.add(
            &format!("{key}.launch_period"),
            "must be more than zero",
            "use e.g. \"60s\"",
        );
    }
    let warm_history = match &raw.warm_history {
        Some(text) => p.duration(&format!("{key}.warm_history"), text),
        None => d.warm_history,
    };
    SupplyPolicy {
        on_demand_base: raw.on_demand_base.unwrap_or(d.on_demand_base),
        spot_percent_above_base: percent.min(100),
        spot_max_price: raw.spot_max_price_usd_per_hour,
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
