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
//! burst that needs them, the parked nodes above the size are released (`planner/warm_pool.rs`).
//!
//! The engine keeps one [`DemandHistory`] per pool, fed the demand its controller measured (and,
//! when it takes a pool, the demand by minute read back from the ledger), and asks
//! [`warm_pool_size`] for the size each tick.

use std::collections::VecDeque;

use serde::Serialize;

use crate::{PoolSpec, Timestamp, chrono_or};

/// Demand change points kept per pool at most.
const MAX_POINTS: usize = 4096;

/// One pool's demand history: (when, demand, its rise over the cold start before it).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DemandHistory {
    points: VecDeque<(Timestamp, u32, u32)>,
}

impl DemandHistory {
    /// Records `demand` for `pool` at `now`, over the pool's cold start (five minutes if it
    /// cannot be counted in) and keeping `supply.warm_history` (a day if it cannot).
    pub fn note_for(&mut self, pool: &PoolSpec, now: Timestamp, demand: u32) {
        let cold = chrono_or(pool.ladder.cold_total(), chrono::Duration::minutes(5));
        let keep = chrono_or(pool.supply.warm_history, chrono::Duration::days(1));
        self.note(now, demand, cold, keep);
    }

    /// Records `demand` at `now` if it changed; forgets what is older than `keep`.
    pub fn note(
        &mut self,
        now: Timestamp,
        demand: u32,
        cold: chrono::Duration,
        keep: chrono::Duration,
    ) {
        self.forget_before(now - keep);
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
        while self.points.len() > MAX_POINTS {
            self.points.pop_front();
        }
    }

    /// Forgets the change points before `horizon`, except the demand in force: it stays, but
    /// a rise older than the horizon no longer counts. Done at every note, changed or not, so a
    /// burst followed by flat demand leaves the history when its time is up.
    fn forget_before(&mut self, horizon: Timestamp) {
        while self.points.len() > 1 && self.points.front().is_some_and(|(at, _, _)| *at < horizon) {
            self.points.pop_front();
        }
        if let Some((at, _, rise)) = self.points.front_mut()
            && *at < horizon
        {
            *rise = 0;
        }
    }

    /// The largest rise in demand within a cold start the history holds (0 when empty).
    pub fn largest_rise(&self) -> u32 {
        self.points.iter().map(|(_, _, r)| *r).max().unwrap_or(0)
    }
}

/// What `GET /v1/pools/{name}` says of a pool's warm pool.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WarmPoolSize {
    /// `warm_pool_size`: always kept, refilled by launching when woken.
    pub floor: u32,
    /// The most it may grow to by parking.
    pub ceiling: u32,
    /// The size now, between the two.
    pub size: u32,
    /// The largest rise in demand within a cold start in the history.
    pub largest_rise: u32,
    pub reason: String,
}

/// `pool`'s warm pool size now, and why: the largest rise in its demand `history` (none: no
/// rise) between the floor and the ceiling.
pub fn warm_pool_size(pool: &PoolSpec, history: Option<&DemandHistory>) -> WarmPoolSize {
    let floor = pool.warm_pool_size;
    let ceiling = pool.warm_ceiling();
    let largest_rise = history.map_or(0, DemandHistory::largest_rise);
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::WarmMode;
    use crate::pool::{ColdStartLadder, ScalingPolicy, SupplyPolicy};

    fn at(s: i64) -> Timestamp {
        "2026-11-30T09:00:00Z".parse::<Timestamp>().unwrap() + chrono::Duration::seconds(s)
    }

    /// A pool whose cold start is 220 s, with room 16 above its floor of `floor`.
    fn pool(floor: u32, warm_pool_max: Option<u32>, warm_mode: WarmMode) -> PoolSpec {
        PoolSpec {
            name: "llama".parse().unwrap(),
            account: "ml".parse().unwrap(),
            offerings: vec!["cheap".parse().unwrap()],
            min_replicas: 0,
            max_replicas: 16,
            max_scale_up_per_step: 4,
            warm_pool_size: floor,
            ladder: ColdStartLadder {
                node_acquisition: Duration::from_secs(60),
                image_pull: Duration::from_secs(30),
                weight_load: Duration::from_secs(90),
                compile: Duration::from_secs(30),
                warmup: Duration::from_secs(10),
            },
            scaling: ScalingPolicy::default(),
            supply: SupplyPolicy {
                warm_mode,
                warm_pool_max,
                warm_history: Duration::from_secs(3600),
                ..SupplyPolicy::default()
            },
        }
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

    /// A burst followed by flat demand (nothing changes, so nothing new is noted) leaves the
    /// history when its time is up, whether demand fell back or stayed at the peak.
    #[test]
    fn a_burst_leaves_the_history_when_demand_stays_flat_after_it() {
        let (cold, keep) = (chrono::Duration::seconds(220), chrono::Duration::hours(1));
        for after in [4, 12] {
            let mut h = DemandHistory::default();
            h.note(at(0), 4, cold, keep);
            h.note(at(60), 12, cold, keep);
            h.note(at(600), after, cold, keep);
            h.note(at(3000), after, cold, keep);
            assert_eq!(h.largest_rise(), 8, "within the hour, after {after}");
            h.note(at(60 + 3601), after, cold, keep);
            assert_eq!(h.largest_rise(), 0, "an hour on, flat at {after}: {h:?}");
            // The demand in force is still what the next rise is measured from.
            h.note(at(60 + 3700), after + 3, cold, keep);
            assert_eq!(h.largest_rise(), 3);
        }
    }

    /// `note_for` reads the cold start and the history's length from the pool.
    #[test]
    fn the_pool_gives_the_cold_start_and_the_history() {
        let p = pool(1, None, WarmMode::Stopped);
        let mut h = DemandHistory::default();
        h.note_for(&p, at(0), 2);
        h.note_for(&p, at(200), 7); // within the 220 s cold start: a rise of 5
        h.note_for(&p, at(1000), 12); // 800 s after the last change: a rise of 5 again
        assert_eq!(h.largest_rise(), 5);
        h.note_for(&p, at(1100), 3);
        h.note_for(&p, at(1200), 13); // 10 within the cold start
        assert_eq!(h.largest_rise(), 10);
        h.note_for(&p, at(1200 + 3601), 4); // the hour's history is past
        assert_eq!(h.largest_rise(), 0);
    }

    fn burst(rise: u32) -> DemandHistory {
        let mut h = DemandHistory::default();
        h.note(
            at(0),
            1,
            chrono::Duration::seconds(220),
            chrono::Duration::hours(1),
        );
        h.note(
            at(60),
            1 + rise,
            chrono::Duration::seconds(220),
            chrono::Duration::hours(1),
        );
        h
    }

    #[test]
    fn the_size_and_its_reason_between_floor_and_ceiling() {
        let stopped = pool(2, Some(6), WarmMode::Stopped);
        let cases: [(&str, PoolSpec, Option<DemandHistory>, u32, &str); 6] = [
            (
                "no history",
                stopped.clone(),
                None,
                2,
                "the floor: no rise in demand within a cold start above 2 in the last 1h",
            ),
            (
                "a rise within the floor",
                stopped.clone(),
                Some(burst(2)),
                2,
                "the floor: no rise in demand within a cold start above 2 in the last 1h",
            ),
            (
                "a rise between the two",
                stopped.clone(),
                Some(burst(5)),
                5,
                "demand rose by 5 within a cold start in the last 1h: parked to be woken instead of launched",
            ),
            (
                "a rise past the ceiling",
                stopped.clone(),
                Some(burst(9)),
                6,
                "the ceiling: demand rose by 9 within a cold start in the last 1h, more than warm_pool_max 6",
            ),
            (
                "running warm nodes keep the floor",
                pool(2, Some(6), WarmMode::Running),
                Some(burst(9)),
                2,
                "the floor: warm_pool_max is 2",
            ),
            (
                "no warm_pool_max: the room above the floor",
                pool(2, None, WarmMode::Stopped),
                Some(burst(12)),
                12,
                "demand rose by 12 within a cold start in the last 1h: parked to be woken instead of launched",
            ),
        ];
        for (what, p, h, size, reason) in cases {
            let w = warm_pool_size(&p, h.as_ref());
            assert_eq!((w.size, w.reason.as_str()), (size, reason), "{what}");
            assert_eq!((w.floor, w.ceiling), (2, p.warm_ceiling()), "{what}");
            assert_eq!(w.largest_rise, h.map_or(0, |h| h.largest_rise()), "{what}");
        }
    }

    /// Demand changes a few seconds to a few minutes apart.
    fn changes() -> impl Strategy<Value = Vec<(i64, u32)>> {
        proptest::collection::vec((1..400i64, 0..40u32), 0..60)
    }

    proptest! {
        /// A rise is measured from a demand the history saw: it never exceeds the highest demand
        /// noted, and the size stays between the floor and the ceiling.
        #[test]
        fn the_largest_rise_never_exceeds_the_highest_demand(
            changes in changes(),
            floor in 0..8u32,
            max in proptest::option::of(0..20u32),
        ) {
            let p = pool(floor, max, WarmMode::Stopped);
            let mut h = DemandHistory::default();
            let mut t = 0;
            for (gap, demand) in &changes {
                t += gap;
                h.note_for(&p, at(t), *demand);
            }
            let highest = changes.iter().map(|(_, d)| *d).max().unwrap_or(0);
            prop_assert!(h.largest_rise() <= highest);
            let w = warm_pool_size(&p, Some(&h));
            prop_assert!(w.floor <= w.size && w.size <= w.ceiling, "{w:?}");
            prop_assert_eq!(w.largest_rise, h.largest_rise());
        }

        /// Demand that only falls holds no rise.
        #[test]
        fn falling_demand_holds_no_rise(changes in changes()) {
            let mut demands: Vec<u32> = changes.iter().map(|(_, d)| *d).collect();
            demands.sort_unstable_by(|a, b| b.cmp(a));
            let p = pool(0, None, WarmMode::Stopped);
            let mut h = DemandHistory::default();
            let mut t = 0;
            for ((gap, _), demand) in changes.iter().zip(demands) {
                t += gap;
                h.note_for(&p, at(t), demand);
            }
            prop_assert_eq!(h.largest_rise(), 0);
        }

        /// A change past the history's length forgets everything before it but the demand it
        /// rose from.
        #[test]
        fn a_change_past_the_history_forgets_the_rises_before_it(
            changes in changes(),
            last in 0..40u32,
        ) {
            let p = pool(0, None, WarmMode::Stopped);
            let previous = changes.last().map(|(_, d)| *d);
            // Unchanged demand is not a change point.
            prop_assume!(previous != Some(last));
            let mut h = DemandHistory::default();
            let mut t = 0;
            for (gap, demand) in &changes {
                t += gap;
                h.note_for(&p, at(t), *demand);
            }
            h.note_for(&p, at(t + 3601), last);
            let expected = previous.map_or(0, |p| last.saturating_sub(p));
            prop_assert_eq!(h.largest_rise(), expected);
        }
    }
}
