//! The warm pool's size, adapted to the pool's bursts. Between the pool's floor
//! (`warm_pool_size`) and its ceiling (`supply.warm_pool_max`), the warm pool is sized to the
//! largest rise in demand within one cold start over the pool's recent history
//! (`supply.warm_history`, a day by default): what a burst like the last big one needs parked to
//! be woken in the rungs after the disk instead of climbing the whole ladder. A history that
//! holds a daily or hourly shape keeps the pool sized for its peak, so it is warm ahead of the
//! next one.
//!
//! The pool grows above its floor only by parking what scale-in releases (those nodes are
//! already up: parking costs a disk), never by launching; once the history no longer holds a
//! burst that needs them, the parked nodes above the size are released.

use std::collections::{HashMap, VecDeque};

use headroom_core::{PoolName, PoolSpec, Timestamp};

use super::{Engine, chrono_or, lock};
use crate::views::WarmPoolSize;

/// Demand change points kept per pool at most.
const MAX_POINTS: usize = 4096;

/// One pool's demand history: (when, demand, its rise over the cold start before it).
#[derive(Debug, Default)]
pub(super) struct DemandHistory {
    points: VecDeque<(Timestamp, u32, u32)>,
}

impl DemandHistory {
    /// Records `demand` at `now` if it changed; forgets what is older than `keep`.
    fn note(
        &mut self,
        now: Timestamp,
        demand: u32,
        cold: chrono::Duration,
        keep: chrono::Duration,
    ) {
        if self.points.back().is_some_and(|(_, d, _)| *d == demand) {
            return;
        }
        // The lowest demand within the cold start before now, counting the one in force at its
        // start.
        let window_start = now - cold;
        let before = self
            .points
            .iter()
            .rev()
            .find(|(at, _, _)| *at <= window_start)
            .map(|(_, d, _)| *d);
        let low = self
            .points
            .iter()
            .filter(|(at, _, _)| *at > window_start)
            .map(|(_, d, _)| *d)
            .chain(before)
            .min()
            .unwrap_or(demand);
        self.points
            .push_back((now, demand, demand.saturating_sub(low)));
        while self
            .points
            .front()
            .is_some_and(|(at, _, _)| *at < now - keep)
            || self.points.len() > MAX_POINTS
        {
            self.points.pop_front();
        }
    }

    fn largest_rise(&self) -> u32 {
        self.points.iter().map(|(_, _, r)| *r).max().unwrap_or(0)
    }
}

/// Records the demand the controller measured for `pool` (what its rules asked for).
pub(super) fn note_demand(
    histories: &mut HashMap<PoolName, DemandHistory>,
    pool: &PoolSpec,
    demand: u32,
    now: Timestamp,
) {
    let cold = chrono_or(pool.ladder.cold_total(), chrono::Duration::minutes(5));
    let keep = chrono_or(pool.supply.warm_history, chrono::Duration::days(1));
    histories
        .entry(pool.name.clone())
        .or_default()
        .note(now, demand, cold, keep);
}

impl Engine {
    /// The warm pool's size now, and why.
    pub(super) fn warm_size(&self, pool: &PoolSpec) -> WarmPoolSize {
        let floor = pool.warm_pool_size;
        let ceiling = pool.warm_ceiling();
        let largest_rise = lock(&self.control)
            .demand
            .get(&pool.name)
            .map_or(0, DemandHistory::largest_rise);
        let size = largest_rise.clamp(floor, ceiling);
        let history = humantime::format_duration(pool.supply.warm_history);
        let reason = if ceiling == floor {
            format!("the floor: warm_pool_max is {ceiling}")
        } else if largest_rise <= floor {
            format!(
                "the floor: no rise in demand within a cold start above {floor} in the last {history}"
            )
        } else if largest_rise > ceiling {
            format!(
                "the ceiling: demand rose by {largest_rise} within a cold start in the last {history}, more than warm_pool_max {ceiling}"
            )
        } else {
            format!(
                "demand rose by {largest_rise} within a cold start in the last {history}: parked to be woken instead of launched"
            )
        };
        WarmPoolSize {
            floor,
            ceiling,
            size,
            largest_rise,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::Timestamp;

    use super::DemandHistory;

    fn at(s: i64) -> Timestamp {
        "2026-11-30T09:00:00Z".parse::<Timestamp>().unwrap() + chrono::Duration::seconds(s)
    }

    #[test]
    fn the_largest_rise_within_a_cold_start_is_remembered_for_the_history() {
        let (cold, keep) = (chrono::Duration::seconds(220), chrono::Duration::hours(1));
        let mut h = DemandHistory::default();
        h.note(at(0), 8, cold, keep);
        // A slow ramp: 8 → 16 over ten minutes, never more than 2 within a cold start.
        for (i, d) in (9..=16).enumerate() {
            h.note(at(75 * (i as i64 + 1)), d, cold, keep);
        }
        assert_eq!(h.largest_rise(), 3, "{h:?}");
        // A burst: 16 → 24 within a minute.
        h.note(at(1000), 20, cold, keep);
        h.note(at(1060), 24, cold, keep);
        assert_eq!(h.largest_rise(), 8);
        // An hour later the burst is out of the history.
        h.note(at(1060 + 3700), 12, cold, keep);
        assert_eq!(h.largest_rise(), 0);
    }
}
