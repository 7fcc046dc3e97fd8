//! Every "no", with a typed reason, and the cloud error taxonomy.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One classification of cloud errors across providers; each class is handled differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// No capacity for this offering now: mark it unavailable for a while and fall back at once.
    Capacity,
    /// A quota is exhausted: fall back and alert.
    Quota,
    /// The market price is above what we bid: fall back.
    Price,
    /// Rate limited: retry with jittered backoff.
    Throttled,
    /// Our request is wrong (or our credentials are): stop the pool and alert.
    InvalidRequest,
    /// 5xx, timeouts: bounded retry.
    Transient,
    /// The instance does not exist (any more).
    NotFound,
    /// Anything else: alert, never retry forever.
    Unknown,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Capacity => "capacity",
            ErrorClass::Quota => "quota",
            ErrorClass::Price => "price",
            ErrorClass::Throttled => "throttled",
            ErrorClass::InvalidRequest => "invalid_request",
            ErrorClass::Transient => "transient",
            ErrorClass::NotFound => "not_found",
            ErrorClass::Unknown => "unknown",
        }
    }

    /// Whether the planner should try another offering straight away.
    pub fn falls_back(self) -> bool {
        matches!(
            self,
            ErrorClass::Capacity | ErrorClass::Quota | ErrorClass::Price
        )
    }

    /// Whether the same call may be repeated later (by the next activation, never in a loop).
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorClass::Throttled | ErrorClass::Transient)
    }
}

/// Why some capacity was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// The cloud refused one offering; the planner fell back to the next.
    Cloud(ErrorClass),
    /// The pool's budget account cannot hold the launch.
    Budget,
    /// The pool is at its maximum replica count.
    MaxReplicas,
    /// Every pool together is at the deployment's ceiling.
    GlobalCeiling,
    /// Every allowed offering is unavailable.
    NoOffering,
}

impl RefusalReason {
    pub fn code(self) -> String {
        match self {
            RefusalReason::Cloud(class) => format!("cloud_{}", class.as_str()),
            RefusalReason::Budget => "budget".to_string(),
            RefusalReason::MaxReplicas => "max_replicas".to_string(),
            RefusalReason::GlobalCeiling => "global_ceiling".to_string(),
            RefusalReason::NoOffering => "no_offering".to_string(),
        }
    }

    pub fn parse(code: &str) -> Option<RefusalReason> {
        Some(match code {
            "budget" => RefusalReason::Budget,
            "max_replicas" => RefusalReason::MaxReplicas,
            "global_ceiling" => RefusalReason::GlobalCeiling,
            "no_offering" => RefusalReason::NoOffering,
            other => {
                let class = other.strip_prefix("cloud_")?;
                let class = [
                    ErrorClass::Capacity,
                    ErrorClass::Quota,
                    ErrorClass::Price,
                    ErrorClass::Throttled,
                    ErrorClass::InvalidRequest,
                    ErrorClass::Transient,
                    ErrorClass::NotFound,
                    ErrorClass::Unknown,
                ]
                .into_iter()
                .find(|c| c.as_str() == class)?;
                RefusalReason::Cloud(class)
            }
        })
    }

    /// A refusal that ends a capacity request: nothing more will be tried for it. A cloud
    /// refusal does not: the planner falls back to another offering.
    pub fn closes_request(self) -> bool {
        !matches!(self, RefusalReason::Cloud(_))
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for reason in [
            RefusalReason::Cloud(ErrorClass::Capacity),
            RefusalReason::Cloud(ErrorClass::InvalidRequest),
            RefusalReason::Budget,
            RefusalReason::MaxReplicas,
            RefusalReason::GlobalCeiling,
            RefusalReason::NoOffering,
        ] {
            assert_eq!(RefusalReason::parse(&reason.code()), Some(reason));
        }
        assert_eq!(RefusalReason::parse("cloud_weather"), None);
    }
}
