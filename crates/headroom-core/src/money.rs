//! Exact money: integer micro-units of US dollars. Never floating point.

use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Sub};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::CoreError;

const MICROS_PER_UNIT: i64 = 1_000_000;

/// An amount of US dollars held as integer micro-dollars (1 USD = 1 000 000).
///
/// Serialises as a decimal string (`"12.345600"`) so that JSON clients never see a float.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Money {
    micros: i64,
}

impl Money {
    pub const ZERO: Money = Money { micros: 0 };

    pub const fn from_micros(micros: i64) -> Self {
        Money { micros }
    }

    pub const fn micros(self) -> i64 {
        self.micros
    }

    /// Cost of running for `millis` at `self` per hour, rounded half-up to the micro-dollar.
    /// Computed in i128 so that a year at a thousand dollars an hour cannot overflow.
    pub fn per_hour_for_millis(self, millis: i64) -> Money {
        let numerator = i128::from(self.micros) * i128::from(millis);
        let hour_ms = 3_600_000i128;
        let rounded = (numerator + hour_ms / 2).div_euclid(hour_ms);
        let clamped = rounded.clamp(i128::from(i64::MIN), i128::from(i64::MAX));
        Money::from_micros(i64::try_from(clamped).unwrap_or(i64::MAX))
    }

    /// Cost of running for `duration` at `self` per hour. A duration too long for i64
    /// milliseconds (about 292 million years) saturates instead of wrapping: configuration
    /// bounds every horizon far below that, and a wrapped, negative hold would admit anything.
    pub fn per_hour_for(self, duration: std::time::Duration) -> Money {
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        self.per_hour_for_millis(millis)
    }

    pub fn times(self, n: u32) -> Money {
        Money::from_micros(self.micros.saturating_mul(i64::from(n)))
    }

    pub fn saturating_sub(self, other: Money) -> Money {
        Money::from_micros(self.micros.saturating_sub(other.micros))
    }

    /// Dollars as a float, for display and metrics only; never for arithmetic.
    pub fn as_f64_lossy(self) -> f64 {
        self.micros as f64 / MICROS_PER_UNIT as f64
    }

    /// Parses a TOML/JSON number without going through float arithmetic: the shortest decimal
    /// representation of the number is parsed exactly.
    pub fn from_f64_decimal(value: f64) -> Result<Money, CoreError> {
        if !value.is_finite() {
            return Err(CoreError::InvalidMoney {
                value: value.to_string(),
                why: "not a finite number",
            });
        }
        value.to_string().parse()
    }
}

impl FromStr for Money {
    type Err = CoreError;

    /// Accepts `12`, `12.5`, `-0.000001`; at most six decimal places.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| CoreError::InvalidMoney {
            value: s.to_string(),
            why,
        };
        let trimmed = s.trim();
        let (negative, digits) = match trimmed.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() && frac.is_empty() {
            return Err(err("empty amount"));
        }
        if !whole.chars().all(|c| c.is_ascii_digit()) || !frac.chars().all(|c| c.is_ascii_digit()) {
            return Err(err("expected a decimal number such as 12.50"));
        }
        if frac.len() > 6 {
            return Err(err("more than six decimal places"));
        }
        let whole: i64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err("amount too large"))?
        };
        let frac_micros: i64 = format!("{frac:0<6}").parse().unwrap_or(0);
        let micros = whole
            .checked_mul(MICROS_PER_UNIT)
            .and_then(|w| w.checked_add(frac_micros))
            .ok_or_else(|| err("amount too large"))?;
        Ok(Money::from_micros(if negative { -micros } else { micros }))
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.micros < 0 { "-" } else { "" };
        let abs = self.micros.unsigned_abs();
        write!(
            f,
            "{sign}{}.{:06}",
            abs / MICROS_PER_UNIT as u64,
            abs % MICROS_PER_UNIT as u64
        )
    }
}

impl Add for Money {
    type Output = Money;
    fn add(self, rhs: Money) -> Money {
        Money::from_micros(self.micros.saturating_add(rhs.micros))
    }
}

impl AddAssign for Money {
    fn add_assign(&mut self, rhs: Money) {
        *self = *self + rhs;
    }
}

impl Sub for Money {
    type Output = Money;
    fn sub(self, rhs: Money) -> Money {
        self.saturating_sub(rhs)
    }
}

impl Sum for Money {
    fn sum<I: Iterator<Item = Money>>(iter: I) -> Money {
        iter.fold(Money::ZERO, Add::add)
    }
}

impl Serialize for Money {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

// The schema says what `Serialize` writes: a decimal string with six places, never a float.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Money {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(r"^-?[0-9]+\.[0-9]{6}$"))
            .description(Some(
                "US dollars as a decimal string with six places (micro-dollars)",
            ))
            .examples(["12.500000"])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Money {}

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Text(String),
            Int(i64),
            Float(f64),
        }
        match Repr::deserialize(deserializer)? {
            Repr::Text(s) => s.parse().map_err(serde::de::Error::custom),
            Repr::Int(i) => i
                .checked_mul(MICROS_PER_UNIT)
                .map(Money::from_micros)
                .ok_or_else(|| serde::de::Error::custom("amount too large")),
            Repr::Float(f) => Money::from_f64_decimal(f).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_exactly() {
        let m: Money = "8.7324".parse().unwrap();
        assert_eq!(m.micros(), 8_732_400);
        assert_eq!(m.to_string(), "8.732400");
        assert_eq!("-0.000001".parse::<Money>().unwrap().micros(), -1);
        assert_eq!(".5".parse::<Money>().unwrap().micros(), 500_000);
        assert!("1.0000001".parse::<Money>().is_err());
        assert!("1e3".parse::<Money>().is_err());
        assert!("".parse::<Money>().is_err());
        assert!("99999999999999999".parse::<Money>().is_err());
    }

    #[test]
    fn float_input_takes_the_shortest_decimal() {
        assert_eq!(Money::from_f64_decimal(98.32).unwrap().micros(), 98_320_000);
        assert_eq!(Money::from_f64_decimal(0.1).unwrap().micros(), 100_000);
    }

    #[test]
    fn hourly_price_accrues_per_millisecond() {
        let per_hour: Money = "98.32".parse().unwrap();
        // 90 seconds of a p5.48xlarge-class price.
        assert_eq!(per_hour.per_hour_for_millis(90_000).micros(), 2_458_000);
        assert_eq!(per_hour.per_hour_for_millis(3_600_000), per_hour);
    }

    #[test]
    fn json_round_trip_is_a_string() {
        let m: Money = "1.25".parse().unwrap();
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, "\"1.250000\"");
        assert_eq!(serde_json::from_str::<Money>(&json).unwrap(), m);
        assert_eq!(
            serde_json::from_str::<Money>("3").unwrap().micros(),
            3_000_000
        );
    }
}
