//! Scheduled capacity: windows with a replica floor for events a team knows are coming (a batch
//! job at 09:00 on weekdays, a launch next Tuesday), as KEDA's cron scaler and EC2 Auto
//! Scaling's scheduled actions declare them, in a time zone. Declared in `[[pools.schedule]]`
//! or through `POST /v1/pools/{name}/schedules` (kept in the ledger).
//!
//! Pure: a window is parsed and checked once ([`WindowSpec::parse`]), and the floor in force at
//! an instant is a function of the windows, the instant and the lead (one cold start, so that
//! capacity is ready when the window opens).

use std::time::Duration;

use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};
use chrono_tz::Tz;
use headroom_core::Timestamp;
use headroom_core::controller::ScheduledFloor;
use serde::{Deserialize, Serialize};

/// The most windows one pool keeps (configuration and API together).
pub const MAX_WINDOWS_PER_POOL: usize = 64;
/// The longest a one-off window may last.
const MAX_ONCE_DAYS: i64 = 31;

/// A window as written in the configuration or sent to the API: weekly (`start`, `end`, and
/// `days`) or once (`from`, `to`), in `time_zone` (IANA, UTC by default).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowSpec {
    /// A name for people and for the decision's reason, e.g. `batch-0900`.
    pub name: String,
    /// Ready replicas the pool keeps at least while the window is open.
    pub min_replicas: u32,
    /// Weekly: the days it opens on (`mon` … `sun`, or `weekdays`, `weekends`; every day by
    /// default), at `start` and until `end` (`HH:MM`, local; an `end` before `start` closes the
    /// next day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// Once: from and to, RFC 3339 with an offset, or a local date and time
    /// (`2026-12-08T09:00`) in `time_zone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// An IANA time zone, e.g. `Europe/Paris`; UTC by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// A window checked and ready to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleWindow {
    pub name: String,
    pub min_replicas: u32,
    pub when: WindowTime,
    /// As it was declared.
    pub spec: WindowSpec,
}

#[derive(Debug, Clone, PartialEq)]
pub enum WindowTime {
    Weekly {
        /// Monday first.
        days: [bool; 7],
        start: NaiveTime,
        end: NaiveTime,
        zone: Tz,
    },
    Once {
        from: Timestamp,
        to: Timestamp,
    },
}

/// A mistake in a window: the field, what is wrong, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowProblem {
    pub field: &'static str,
    pub what: String,
    pub fix: String,
}

fn problem(field: &'static str, what: impl Into<String>, fix: impl Into<String>) -> WindowProblem {
    WindowProblem {
        field,
        what: what.into(),
        fix: fix.into(),
    }
}

fn parse_days(days: &[String]) -> Result<[bool; 7], WindowProblem> {
    const NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    let mut set = [false; 7];
    for day in days {
        let day = day.to_ascii_lowercase();
        match day.as_str() {
            "weekdays" => set[..5].iter_mut().for_each(|d| *d = true),
            "weekends" => set[5..].iter_mut().for_each(|d| *d = true),
            "daily" => set = [true; 7],
            name => match NAMES.iter().position(|n| *n == name) {
                Some(i) => set[i] = true,
                None => {
                    return Err(problem(
                        "days",
                        format!("{day:?} is not a day"),
                        "use mon, tue, wed, thu, fri, sat, sun, weekdays, weekends or daily",
                    ));
                }
            },
        }
    }
    if !set.contains(&true) {
        return Err(problem(
            "days",
            "names no day",
            "list the days it opens on, or leave days out for every day",
        ));
    }
    Ok(set)
}

fn parse_time(field: &'static str, text: &str) -> Result<NaiveTime, WindowProblem> {
    NaiveTime::parse_from_str(text, "%H:%M").map_err(|_| {
        problem(
            field,
            format!("{text:?} is not a time"),
            "use HH:MM, e.g. \"09:00\"",
        )
    })
}

/// The instant a local date and time names in `zone`: the earlier of two in a repeated hour,
/// and an hour later in a skipped one (a window set for 02:30 on the day clocks jump to 03:00
/// opens at 03:30).
fn local_instant(zone: Tz, local: NaiveDateTime) -> Timestamp {
    zone.from_local_datetime(&local)
        .earliest()
        .or_else(|| {
            zone.from_local_datetime(&(local + chrono::Duration::hours(1)))
                .earliest()
        })
        .map_or_else(|| local.and_utc(), |t| t.with_timezone(&chrono::Utc))
}

fn parse_instant(field: &'static str, text: &str, zone: Tz) -> Result<Timestamp, WindowProblem> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
        .map(|local| local_instant(zone, local))
        .ok_or_else(|| {
            problem(
                field,
                format!("{text:?} is not a date and time"),
                "use RFC 3339 (2026-12-08T09:00:00+01:00) or a local 2026-12-08T09:00 in time_zone",
            )
        })
}

impl WindowSpec {
    /// Checks the window against a pool that runs at most `max_replicas`.
    pub fn parse(&self, max_replicas: u32) -> Result<ScheduleWindow, WindowProblem> {
        let name = self.name.trim();
        if name.is_empty() || name.len() > 63 {
            return Err(problem(
                "name",
                "must be 1 to 63 characters",
                "name the event, e.g. \"batch-0900\"",
            ));
        }
        if self.min_replicas == 0 || self.min_replicas > max_replicas {
            return Err(problem(
                "min_replicas",
                format!(
                    "{} is outside 1..={max_replicas} (the pool's max_replicas)",
                    self.min_replicas
                ),
                "ask for at most the pool's max_replicas",
            ));
        }
        let zone: Tz = match &self.time_zone {
            Some(text) => text.parse().map_err(|_| {
                problem(
                    "time_zone",
                    format!("{text:?} is not an IANA time zone"),
                    "use e.g. \"Europe/Paris\" or \"America/New_York\"",
                )
            })?,
            None => Tz::UTC,
        };
        let when = match (&self.start, &self.end, &self.from, &self.to) {
            (Some(start), Some(end), None, None) => {
                let (start, end) = (parse_time("start", start)?, parse_time("end", end)?);
                if start == end {
                    return Err(problem("end", "equals start", "give the window a length"));
                }
                let days = match &self.days {
                    Some(days) => parse_days(days)?,
                    None => [true; 7],
                };
                WindowTime::Weekly {
                    days,
                    start,
                    end,
                    zone,
                }
            }
            (None, None, Some(from), Some(to)) => {
                if self.days.is_some() {
                    return Err(problem(
                        "days",
                        "is set on a one-off window",
                        "remove days, or use start and end",
                    ));
                }
                let (from, to) = (
                    parse_instant("from", from, zone)?,
                    parse_instant("to", to, zone)?,
                );
                if to <= from {
                    return Err(problem(
                        "to",
                        "is not after from",
                        "end the window after it starts",
                    ));
                }
                if to - from > chrono::Duration::days(MAX_ONCE_DAYS) {
                    return Err(problem(
                        "to",
                        format!("the window lasts more than {MAX_ONCE_DAYS} days"),
                        "raise min_replicas instead for a lasting floor",
                    ));
                }
                WindowTime::Once { from, to }
            }
            _ => {
                return Err(problem(
                    "start",
                    "a window needs start and end (weekly) or from and to (once), not a mix",
                    "set start = \"09:00\" and end = \"09:30\", or from and to",
                ));
            }
        };
        Ok(ScheduleWindow {
            name: name.to_string(),
            min_replicas: self.min_replicas,
            when,
            spec: self.clone(),
        })
    }
}

impl ScheduleWindow {
    /// The occurrence (start, end) that is open at `now` or opens within `lead`, if any.
    pub fn occurrence(&self, now: Timestamp, lead: Duration) -> Option<(Timestamp, Timestamp)> {
        let lead = chrono::Duration::from_std(lead).unwrap_or_default();
        let open = |(start, end): (Timestamp, Timestamp)| {
            (start - lead <= now && now < end).then_some((start, end))
        };
        match &self.when {
            WindowTime::Once { from, to } => open((*from, *to)),
            WindowTime::Weekly {
                days,
                start,
                end,
                zone,
            } => {
                // An occurrence starting yesterday may still be open (past midnight), and one
                // starting tomorrow (local) may open within the lead.
                let today = (now + lead).with_timezone(zone).date_naive();
                [-1i64, 0, 1].into_iter().find_map(|offset| {
                    let day: NaiveDate = today + chrono::Duration::days(offset);
                    if !days[day.weekday().num_days_from_monday() as usize] {
                        return None;
                    }
                    let ends_on = if end > start {
                        day
                    } else {
                        day + chrono::Duration::days(1)
                    };
                    open((
                        local_instant(*zone, day.and_time(*start)),
                        local_instant(*zone, ends_on.and_time(*end)),
                    ))
                })
            }
        }
    }

    /// When the window opens, for people: `mon-fri 09:00-09:30 Europe/Paris`.
    pub fn describe(&self) -> String {
        match &self.when {
            WindowTime::Once { from, to } => {
                format!("{} to {}", from.to_rfc3339(), to.to_rfc3339())
            }
            WindowTime::Weekly {
                days,
                start,
                end,
                zone,
            } => {
                const NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
                let on: Vec<&str> = NAMES
                    .iter()
                    .zip(days)
                    .filter(|(_, d)| **d)
                    .map(|(n, _)| *n)
                    .collect();
                let days = match on.len() {
                    7 => "daily".to_string(),
                    _ if days[..5].iter().all(|d| *d) && !days[5] && !days[6] => {
                        "mon-fri".to_string()
                    }
                    _ => on.join(","),
                };
                format!(
                    "{days} {}-{} {zone}",
                    start.format("%H:%M"),
                    end.format("%H:%M")
                )
            }
        }
    }
}

/// The highest floor of the windows open at `now` (or opening within `lead`), with the
/// sentence the decision gives.
pub fn floor_at<'a>(
    windows: impl IntoIterator<Item = &'a ScheduleWindow>,
    now: Timestamp,
    lead: Duration,
) -> Option<ScheduledFloor> {
    windows
        .into_iter()
        .filter_map(|w| w.occurrence(now, lead).map(|occurrence| (w, occurrence)))
        .max_by_key(|(w, _)| w.min_replicas)
        .map(|(w, (start, end))| ScheduledFloor {
            replicas: w.min_replicas,
            why: format!(
                "scheduled window {} ({}) keeps {} replicas from {} (ready one cold start ahead) until {}",
                w.name,
                w.describe(),
                w.min_replicas,
                start.format("%Y-%m-%d %H:%M UTC"),
                end.format("%Y-%m-%d %H:%M UTC"),
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn weekly(days: Option<&[&str]>, start: &str, end: &str, zone: Option<&str>) -> WindowSpec {
        WindowSpec {
            name: "batch-0900".into(),
            min_replicas: 8,
            days: days.map(|d| d.iter().map(|s| s.to_string()).collect()),
            start: Some(start.into()),
            end: Some(end.into()),
            from: None,
            to: None,
            time_zone: zone.map(str::to_string),
        }
    }

    const LEAD: Duration = Duration::from_secs(240);

    #[test]
    fn a_weekday_job_in_paris_opens_one_lead_ahead_and_only_on_weekdays() {
        let w = weekly(Some(&["weekdays"]), "09:00", "09:30", Some("Europe/Paris"))
            .parse(24)
            .unwrap();
        // 2026-12-07 is a Monday; Paris is UTC+1 in December: 09:00 local is 08:00 UTC.
        let open = |at: &str| floor_at(std::slice::from_ref(&w), t(at), LEAD).map(|f| f.replicas);
        assert_eq!(
            open("2026-12-07T07:55:00Z"),
            None,
            "five minutes before: past the lead"
        );
        assert_eq!(
            open("2026-12-07T07:56:00Z"),
            Some(8),
            "one cold start (4 min) ahead"
        );
        assert_eq!(open("2026-12-07T08:29:59Z"), Some(8));
        assert_eq!(open("2026-12-07T08:30:00Z"), None, "closed at 09:30 local");
        assert_eq!(open("2026-12-12T08:10:00Z"), None, "Saturday");
        // In July Paris is UTC+2: the same local 09:00 is 07:00 UTC.
        assert_eq!(open("2027-07-05T07:10:00Z"), Some(8));
        assert_eq!(open("2027-07-05T08:10:00Z"), None);
        let why = floor_at(std::slice::from_ref(&w), t("2026-12-07T08:00:00Z"), LEAD)
            .unwrap()
            .why;
        assert!(
            why.contains("batch-0900 (mon-fri 09:00-09:30 Europe/Paris)"),
            "{why}"
        );
    }

    #[test]
    fn a_window_past_midnight_and_a_one_off_launch() {
        let night = weekly(Some(&["fri"]), "23:00", "02:00", None)
            .parse(24)
            .unwrap();
        let open = |w: &ScheduleWindow, at: &str| w.occurrence(t(at), LEAD).is_some();
        assert!(
            open(&night, "2026-12-12T01:00:00Z"),
            "Friday's window, on Saturday morning"
        );
        assert!(
            !open(&night, "2026-12-13T01:00:00Z"),
            "Saturday opened none"
        );
        let launch = WindowSpec {
            name: "launch".into(),
            min_replicas: 12,
            days: None,
            start: None,
            end: None,
            from: Some("2026-12-08T09:00".into()),
            to: Some("2026-12-08T18:00".into()),
            time_zone: Some("America/New_York".into()),
        }
        .parse(24)
        .unwrap();
        assert!(
            open(&launch, "2026-12-08T14:00:00Z"),
            "09:00 in New York is 14:00 UTC"
        );
        assert!(!open(&launch, "2026-12-08T23:00:00Z"));
        // The highest floor of the open windows wins.
        let both = [night, launch];
        assert_eq!(
            floor_at(&both, t("2026-12-08T15:00:00Z"), LEAD)
                .unwrap()
                .replicas,
            12
        );
    }

    #[test]
    fn every_mistake_names_its_field() {
        let field = |w: WindowSpec| w.parse(24).unwrap_err().field;
        assert_eq!(field(weekly(None, "9am", "10:00", None)), "start");
        assert_eq!(field(weekly(None, "09:00", "09:00", None)), "end");
        assert_eq!(
            field(weekly(Some(&["funday"]), "09:00", "10:00", None)),
            "days"
        );
        assert_eq!(field(weekly(Some(&[]), "09:00", "10:00", None)), "days");
        assert_eq!(
            field(weekly(None, "09:00", "10:00", Some("Mars/Olympus"))),
            "time_zone"
        );
        assert_eq!(
            field(WindowSpec {
                min_replicas: 25,
                ..weekly(None, "09:00", "10:00", None)
            }),
            "min_replicas"
        );
        assert_eq!(
            field(WindowSpec {
                min_replicas: 0,
                ..weekly(None, "09:00", "10:00", None)
            }),
            "min_replicas"
        );
        assert_eq!(
            field(WindowSpec {
                name: " ".into(),
                ..weekly(None, "09:00", "10:00", None)
            }),
            "name"
        );
        let once = |from: &str, to: &str| WindowSpec {
            start: None,
            end: None,
            from: Some(from.into()),
            to: Some(to.into()),
            ..weekly(None, "", "", None)
        };
        assert_eq!(field(once("2026-12-08T09:00", "2026-12-08T08:00")), "to");
        assert_eq!(field(once("2026-12-01T09:00", "2027-01-08T08:00")), "to");
        assert_eq!(field(once("next tuesday", "2026-12-08T08:00")), "from");
        assert_eq!(
            field(WindowSpec {
                from: Some("2026-12-08T09:00".into()),
                ..weekly(None, "09:00", "10:00", None)
            }),
            "start"
        );
    }
}
