//! Every "no", with a typed reason, and the cloud error taxonomy.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One classification of cloud errors across providers; each class is handled differently.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    pub const ALL: [ErrorClass; 8] = [
        ErrorClass::Capacity,
        ErrorClass::Quota,
        ErrorClass::Price,
        ErrorClass::Throttled,
        ErrorClass::InvalidRequest,
        ErrorClass::Transient,
        ErrorClass::NotFound,
        ErrorClass::Unknown,
    ];

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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// One offering kept failing with transient errors (HTTP 5xx, timeouts) within the window:
    /// it is treated as refused (cooled down, ranked lower) and the planner falls back.
    ProviderErrors,
}

impl RefusalReason {
    /// Every reason, so stores and reports that must agree with [`RefusalReason::closes_request`]
    /// can list the codes from it instead of by hand.
    pub const ALL: [RefusalReason; 13] = [
        RefusalReason::Cloud(ErrorClass::Capacity),
        RefusalReason::Cloud(ErrorClass::Quota),
        RefusalReason::Cloud(ErrorClass::Price),
        RefusalReason::Cloud(ErrorClass::Throttled),
        RefusalReason::Cloud(ErrorClass::InvalidRequest),
        RefusalReason::Cloud(ErrorClass::Transient),
        RefusalReason::Cloud(ErrorClass::NotFound),
        RefusalReason::Cloud(ErrorClass::Unknown),
        RefusalReason::Budget,
        RefusalReason::MaxReplicas,
        RefusalReason::GlobalCeiling,
        RefusalReason::NoOffering,
        RefusalReason::ProviderErrors,
    ];

    pub fn code(self) -> String {
        match self {
            RefusalReason::Cloud(class) => format!("cloud_{}", class.as_str()),
            RefusalReason::Budget => "budget".to_string(),
            RefusalReason::MaxReplicas => "max_replicas".to_string(),
            RefusalReason::GlobalCeiling => "global_ceiling".to_string(),
            RefusalReason::NoOffering => "no_offering".to_string(),
            RefusalReason::ProviderErrors => "provider_errors".to_string(),
        }
    }

    pub fn parse(code: &str) -> Option<RefusalReason> {
        RefusalReason::ALL.into_iter().find(|r| r.code() == code)
    }

    /// The codes of every reason that closes a request, for queries that must agree with
    /// [`RefusalReason::closes_request`].
    pub fn closing_codes() -> Vec<String> {
        RefusalReason::ALL
            .into_iter()
            .filter(|r| r.closes_request())
            .map(RefusalReason::code)
            .collect()
    }

    /// A refusal that ends a capacity request: nothing more will be tried for it. A cloud
    /// refusal does not, nor do provider errors: the planner falls back to another offering.
    pub fn closes_request(self) -> bool {
        !matches!(
            self,
            RefusalReason::Cloud(_) | RefusalReason::ProviderErrors
        )
    }

    /// A refusal of one offering that the planner falls back from at once (and that cools the
    /// offering down and ranks it lower).
    pub fn falls_back(self) -> bool {
        match self {
            RefusalReason::Cloud(class) => class.falls_back(),
            RefusalReason::ProviderErrors => true,
            _ => false,
        }
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
        for reason in RefusalReason::ALL {
            assert_eq!(RefusalReason::parse(&reason.code()), Some(reason));
        }
        assert_eq!(RefusalReason::parse("cloud_weather"), None);
        assert_eq!(
            RefusalReason::parse("global_ceiling"),
            Some(RefusalReason::GlobalCeiling)
        );
    }

    /// `ALL` must name every reason once: one missing would be unreadable from the ledger and
    /// absent from every list derived from it.
    #[test]
    fn all_lists_every_reason_once() {
        // Exhaustive on purpose: a new variant stops these compiling until `ALL` has it too.
        let listed_by_hand = |r: RefusalReason| match r {
            RefusalReason::Cloud(_) | RefusalReason::ProviderErrors => false,
            RefusalReason::Budget
            | RefusalReason::MaxReplicas
            | RefusalReason::GlobalCeiling
            | RefusalReason::NoOffering => true,
        };
        let class_name = |c: ErrorClass| match c {
            ErrorClass::Capacity
            | ErrorClass::Quota
            | ErrorClass::Price
            | ErrorClass::Throttled
            | ErrorClass::InvalidRequest
            | ErrorClass::Transient
            | ErrorClass::NotFound
            | ErrorClass::Unknown => c.as_str(),
        };
        let names: std::collections::BTreeSet<_> = ErrorClass::ALL.map(class_name).into();
        assert_eq!(names.len(), 8);
        for class in ErrorClass::ALL {
            assert!(RefusalReason::ALL.contains(&RefusalReason::Cloud(class)));
        }
        let others = RefusalReason::ALL.iter().filter(|r| listed_by_hand(**r));
        assert_eq!(others.count(), 4);
        assert_eq!(RefusalReason::ALL.len(), ErrorClass::ALL.len() + 5);
        assert!(RefusalReason::ALL.contains(&RefusalReason::ProviderErrors));
        assert_eq!(
            RefusalReason::closing_codes(),
            ["budget", "max_replicas", "global_ceiling", "no_offering"]
        );
    }
}
