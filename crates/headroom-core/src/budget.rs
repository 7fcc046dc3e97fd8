//! Budgets and an account's standing against one: the cost governor's vocabulary. A hold is
//! the amount on a node's ledger event; `headroom_ledger::derive` sums what is still held into
//! `BudgetStanding::held`.

use chrono::{Datelike, Duration as ChronoDuration, TimeZone, Timelike, Utc};
use serde::{Deserialize, Serialize};

use crate::{AccountName, Money, Timestamp};

/// The window a ceiling applies to, in UTC.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetPeriod {
    Hour,
    Day,
    /// Calendar month.
    Month,
}

impl BudgetPeriod {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::Hour => "hour",
            BudgetPeriod::Day => "day",
            BudgetPeriod::Month => "month",
        }
    }

    pub fn parse(s: &str) -> Option<BudgetPeriod> {
        [BudgetPeriod::Hour, BudgetPeriod::Day, BudgetPeriod::Month]
            .into_iter()
            .find(|p| p.as_str() == s)
    }

    /// The `[start, end)` of the period that contains `now`.
    pub fn bounds(self, now: Timestamp) -> (Timestamp, Timestamp) {
        match self {
            BudgetPeriod::Hour => {
                let start = now
                    .with_minute(0)
                    .and_then(|t| t.with_second(0))
                    .and_then(|t| t.with_nanosecond(0))
                    .unwrap_or(now);
                (start, start + ChronoDuration::hours(1))
            }
            BudgetPeriod::Day => {
                let start = Utc
                    .with_ymd_and_hms(now.year(), now.month(), now.day(), 0, 0, 0)
                    .single()
                    .unwrap_or(now);
                (start, start + ChronoDuration::days(1))
            }
            BudgetPeriod::Month => {
                let start = Utc
                    .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
                    .single()
                    .unwrap_or(now);
                let (year, month) = if now.month() == 12 {
                    (now.year() + 1, 1)
                } else {
                    (now.year(), now.month() + 1)
                };
                let end = Utc
                    .with_ymd_and_hms(year, month, 1, 0, 0, 0)
                    .single()
                    .unwrap_or(now);
                (start, end)
            }
        }
    }
}

/// What the governor does when a launch would cross the ceiling.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HardAction {
    /// Refuse the launch with a budget reason.
    Refuse,
    /// Launch as many as still fit, refuse the rest.
    Clamp,
    /// Refuse the lowest priority tier's launches first.
    ShedLowestTier,
}

impl HardAction {
    pub fn as_str(self) -> &'static str {
        match self {
            HardAction::Refuse => "refuse",
            HardAction::Clamp => "clamp",
            HardAction::ShedLowestTier => "shed-lowest-tier",
        }
    }

    pub fn parse(s: &str) -> Option<HardAction> {
        [
            HardAction::Refuse,
            HardAction::Clamp,
            HardAction::ShedLowestTier,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
    }
}

/// The largest ceiling a budget may have, from the configuration or the API: a billion dollars
/// a period, far below what integer micro-dollars could not sum (spend plus holds).
pub const MOST_CEILING: Money = Money::from_micros(1_000_000_000 * 1_000_000);

/// A money ceiling for one account and period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    pub account: AccountName,
    pub period: BudgetPeriod,
    pub ceiling: Money,
    /// Percentage of the ceiling at which an alert fires.
    pub soft_threshold_percent: u8,
    pub hard_action: HardAction,
}

/// The governor's view of one account at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetStanding {
    pub ceiling: Money,
    pub spent: Money,
    pub held: Money,
}

impl BudgetStanding {
    pub fn remaining(&self) -> Money {
        self.ceiling - self.spent - self.held
    }

    /// Whether a further hold of `amount` fits under the ceiling.
    pub fn admits(&self, amount: Money) -> bool {
        self.spent + self.held + amount <= self.ceiling
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn periods_are_utc_calendar_windows() {
        let now = at("2026-12-31T23:59:59Z");
        assert_eq!(
            BudgetPeriod::Hour.bounds(now),
            (at("2026-12-31T23:00:00Z"), at("2027-01-01T00:00:00Z"))
        );
        assert_eq!(
            BudgetPeriod::Day.bounds(now),
            (at("2026-12-31T00:00:00Z"), at("2027-01-01T00:00:00Z"))
        );
        assert_eq!(
            BudgetPeriod::Month.bounds(at("2026-02-10T12:00:00Z")),
            (at("2026-02-01T00:00:00Z"), at("2026-03-01T00:00:00Z"))
        );
    }

    #[test]
    fn standing_admits_up_to_the_ceiling_exactly() {
        let standing = BudgetStanding {
            ceiling: "100".parse().unwrap(),
            spent: "60".parse().unwrap(),
            held: "30".parse().unwrap(),
        };
        assert!(standing.admits("10".parse().unwrap()));
        assert!(!standing.admits("10.000001".parse().unwrap()));
        assert_eq!(standing.remaining(), "10".parse().unwrap());
    }
}
