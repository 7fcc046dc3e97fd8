//! A pool's demand forecast from its own history: what recurred at this time of day on most of
//! the last three days (a daily shape, a weekday 09:00 job) or at this time of the week on
//! each of the last two weeks, looked up one lead time ahead so capacity can be launched before
//! the rise instead of after it.
//!
//! The history is the most replicas the reactive rules asked for in each minute (never what a
//! forecast asked for, or it would feed on itself). Pure: the caller records, persists and
//! restores it, and passes `now`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::Timestamp;

/// Minutes of history kept: two weeks and a day, what the weekly rule reads.
pub const KEEP_MINUTES: i64 = 15 * MINUTES_PER_DAY;
const MINUTES_PER_DAY: i64 = 24 * 60;
const MINUTES_PER_WEEK: i64 = 7 * MINUTES_PER_DAY;
/// A past occurrence counts within this many minutes either side of the same time: a job that
/// starts a minute late is the same job.
const SLACK_MINUTES: i64 = 2;
/// A past day (or week) is known at a time when the history holds a minute within this many
/// minutes either side: a process that was down then knows nothing of it.
const KNOWN_WITHIN_MINUTES: i64 = 30;

/// The minute `at` falls in (Unix minutes).
pub fn minute_of(at: Timestamp) -> i64 {
    at.timestamp().div_euclid(60)
}

/// When minute `minute` starts.
pub fn minute_start(minute: i64) -> Timestamp {
    chrono::DateTime::from_timestamp(minute.saturating_mul(60), 0).unwrap_or_default()
}

/// Demand by minute, at most [`KEEP_MINUTES`] back from the newest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DemandRecord {
    minutes: BTreeMap<i64, u32>,
}

/// Why a forecast says what it says.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Recurrence {
    /// Seen at this time of day on at least two of the last three days known.
    Daily,
    /// Seen at this time of the week on each of the last two weeks.
    Weekly,
}

/// The replicas the history expects within the lead time.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Forecast {
    pub replicas: u32,
    /// When that demand is expected (the start of its minute).
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub expected_at: Timestamp,
    pub recurrence: Recurrence,
}

impl DemandRecord {
    /// Records `demand` at `at`: a minute keeps the most it saw. Forgets what is older than
    /// [`KEEP_MINUTES`] before the newest minute.
    pub fn note(&mut self, at: Timestamp, demand: u32) {
        let minute = minute_of(at);
        let slot = self.minutes.entry(minute).or_insert(0);
        *slot = (*slot).max(demand);
        let newest = self.minutes.last_key_value().map_or(minute, |(m, _)| *m);
        while self
            .minutes
            .first_key_value()
            .is_some_and(|(m, _)| *m < newest - KEEP_MINUTES)
        {
            self.minutes.pop_first();
        }
    }

    /// The demand recorded for `minute`, if any.
    pub fn at_minute(&self, minute: i64) -> Option<u32> {
        self.minutes.get(&minute).copied()
    }

    /// The recorded minutes within `range`, oldest first.
    pub fn minutes_in(
        &self,
        range: impl std::ops::RangeBounds<i64>,
    ) -> impl Iterator<Item = (i64, u32)> + '_ {
        self.minutes.range(range).map(|(m, d)| (*m, *d))
    }

    /// How many minutes are recorded.
    pub fn len(&self) -> usize {
        self.minutes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.minutes.is_empty()
    }

    /// The most demand seen within [`SLACK_MINUTES`] of `minute`, when the history knows that
    /// time at all (0 then if nothing was asked for); `None` when it does not.
    fn around(&self, minute: i64) -> Option<u32> {
        let known = self
            .minutes
            .range(minute - KNOWN_WITHIN_MINUTES..=minute + KNOWN_WITHIN_MINUTES)
            .next()
            .is_some();
        known.then(|| {
            self.minutes
                .range(minute - SLACK_MINUTES..=minute + SLACK_MINUTES)
                .map(|(_, d)| *d)
                .max()
                .unwrap_or(0)
        })
    }

    /// What recurs at `minute`: the daily level (the second highest of the last three days
    /// known, so it was there on two of them), unless the same day last week is known and
    /// lower (a weekday job is not expected on a Saturday); or the weekly level (the lower of
    /// the last two weeks), whichever is higher.
    fn recurring_at(&self, minute: i64) -> Option<(u32, Recurrence)> {
        let mut days: Vec<u32> = (1..=3)
            .filter_map(|d| self.around(minute - d * MINUTES_PER_DAY))
            .collect();
        let week_ago = self.around(minute - MINUTES_PER_WEEK);
        let daily = (days.len() >= 2).then(|| {
            days.sort_unstable_by(|a, b| b.cmp(a));
            let level = days[1];
            week_ago.map_or(level, |w| level.min(w))
        });
        let weekly = week_ago
            .zip(self.around(minute - 2 * MINUTES_PER_WEEK))
            .map(|(a, b)| a.min(b));
        match (daily, weekly) {
            (Some(d), Some(w)) if w > d => Some((w, Recurrence::Weekly)),
            (Some(d), _) => Some((d, Recurrence::Daily)),
            (None, Some(w)) => Some((w, Recurrence::Weekly)),
            (None, None) => None,
        }
    }

    /// The highest recurring demand expected from `now` to `now + lead`, if the history holds
    /// any: launched now, capacity serves by the time it comes.
    pub fn forecast(&self, now: Timestamp, lead: Duration) -> Option<Forecast> {
        let from = minute_of(now);
        let to = minute_of(now + chrono::Duration::from_std(lead).unwrap_or_default());
        (from..=to)
            .filter_map(|m| self.recurring_at(m).map(|(r, why)| (m, r, why)))
            .max_by_key(|(m, replicas, _)| (*replicas, std::cmp::Reverse(*m)))
            .map(|(m, replicas, recurrence)| Forecast {
                replicas,
                expected_at: minute_start(m),
                recurrence,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// Demand of 2 all day, and `job` replicas from 09:00 to 09:20 on the days listed
    /// (0 = Monday 2026-11-30), every minute recorded.
    fn record(days: std::ops::Range<i64>, job_days: &[i64], job: u32) -> DemandRecord {
        let mut r = DemandRecord::default();
        let monday = at("2026-11-30T00:00:00Z");
        for day in days {
            for minute in 0..MINUTES_PER_DAY {
                let t = monday + chrono::Duration::minutes(day * MINUTES_PER_DAY + minute);
                let in_job = job_days.contains(&day) && (540..560).contains(&minute);
                r.note(t, if in_job { job } else { 2 });
            }
        }
        r
    }

    const LEAD: Duration = Duration::from_secs(5 * 60);

    #[test]
    fn a_weekday_job_is_expected_from_the_third_weekday_on() {
        let weekdays = [0, 1, 2, 3, 4, 7, 8, 9, 10, 11];
        // Before 09:00 on day `d`, a lead time ahead, with the history of the days before it.
        let expected = |d: i64| {
            let r = record(0..d, &weekdays, 9);
            let t = at("2026-11-30T08:56:00Z") + chrono::Duration::days(d);
            r.forecast(t, LEAD).map(|f| f.replicas)
        };
        assert_eq!(expected(1), None, "one day is no pattern");
        assert_eq!(
            expected(2),
            Some(9),
            "Wednesday, the third weekday: seen two days running"
        );
        assert_eq!(expected(4), Some(9));
        // A job seen once is no pattern either.
        let once = record(0..2, &[1], 9);
        let wednesday = at("2026-12-02T08:56:00Z");
        assert_eq!(once.forecast(wednesday, LEAD).map(|f| f.replicas), Some(2));
        // Saturday: the three days before had the job, but no week is known yet.
        assert_eq!(expected(5), Some(9));
        // The next Saturday: last Saturday had no job, so none is expected.
        assert_eq!(expected(12), Some(2));
        // The next Monday: the weekend says no, a week ago and two say yes.
        let r = record(0..14, &weekdays, 9);
        let monday = at("2026-12-14T08:56:00Z");
        assert_eq!(
            r.forecast(monday, LEAD),
            Some(Forecast {
                replicas: 9,
                expected_at: at("2026-12-14T09:00:00Z") - chrono::Duration::minutes(SLACK_MINUTES),
                recurrence: Recurrence::Weekly,
            })
        );
    }

    #[test]
    fn nothing_is_expected_outside_the_lead_time_or_where_the_history_is_blank() {
        let r = record(0..3, &[0, 1, 2], 9);
        let early = at("2026-12-03T08:00:00Z");
        assert_eq!(r.forecast(early, LEAD).map(|f| f.replicas), Some(2));
        // Days the process was not running are unknown, not zero.
        let mut gappy = DemandRecord::default();
        gappy.note(at("2026-12-01T09:05:00Z"), 9);
        assert_eq!(gappy.forecast(at("2026-12-03T08:56:00Z"), LEAD), None);
    }

    #[test]
    fn a_minute_keeps_its_peak_and_old_minutes_are_forgotten() {
        let mut r = DemandRecord::default();
        let t = at("2026-11-30T09:00:10Z");
        r.note(t, 3);
        r.note(t + chrono::Duration::seconds(20), 7);
        r.note(t + chrono::Duration::seconds(40), 1);
        assert_eq!(r.at_minute(minute_of(t)), Some(7));
        r.note(t + chrono::Duration::minutes(KEEP_MINUTES + 1), 1);
        assert_eq!(r.at_minute(minute_of(t)), None);
        assert_eq!(r.len(), 1);
    }
}
