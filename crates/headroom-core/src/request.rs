//! Capacity requests: a client's ask and its outcome over time.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{CoreError, PoolName, Timestamp};

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub String);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Priority tier. When capacity or money runs out, the lowest tier is shed first.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Batch and other retryable work: shed first.
    Low,
    #[default]
    Normal,
    High,
    /// Interactive traffic that must not be shed while anything else can be.
    Critical,
}

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
            Priority::Critical => "critical",
        }
    }

    pub fn parse(s: &str) -> Result<Priority, CoreError> {
        match s {
            "low" => Ok(Priority::Low),
            "normal" => Ok(Priority::Normal),
            "high" => Ok(Priority::High),
            "critical" => Ok(Priority::Critical),
            _ => Err(CoreError::UnknownVariant {
                kind: "priority",
                value: s.to_string(),
                expected: "low, normal, high, critical",
            }),
        }
    }
}

/// Where a capacity request stands.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestState {
    Pending,
    PartiallyDelivered,
    Delivered,
    Refused,
    Cancelled,
}

impl RequestState {
    /// Every state, in the order a request can reach them.
    pub const ALL: [RequestState; 5] = [
        RequestState::Pending,
        RequestState::PartiallyDelivered,
        RequestState::Delivered,
        RequestState::Refused,
        RequestState::Cancelled,
    ];

    /// The name the API shows (and filters by).
    pub fn as_str(self) -> &'static str {
        match self {
            RequestState::Pending => "pending",
            RequestState::PartiallyDelivered => "partially_delivered",
            RequestState::Delivered => "delivered",
            RequestState::Refused => "refused",
            RequestState::Cancelled => "cancelled",
        }
    }

    /// The state named `s`, as [`Self::as_str`] names it.
    pub fn parse(s: &str) -> Option<RequestState> {
        RequestState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
    }

    /// Derives the state from what the ledger knows; nothing stores it, so it cannot drift.
    pub fn derive(
        requested: u32,
        delivered: u32,
        closed_by_refusal: bool,
        cancelled: bool,
    ) -> Self {
        if cancelled {
            RequestState::Cancelled
        } else if delivered >= requested {
            RequestState::Delivered
        } else if closed_by_refusal && delivered == 0 {
            RequestState::Refused
        } else if delivered > 0 {
            RequestState::PartiallyDelivered
        } else {
            RequestState::Pending
        }
    }
}

/// A recorded capacity request: "pool P needs N more ready replicas for me".
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityRequest {
    pub id: RequestId,
    pub pool: PoolName,
    pub replicas: u32,
    pub priority: Priority,
    pub idempotency_key: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_are_the_serialised_ones() {
        for state in RequestState::ALL {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(state.as_str())
            );
            assert_eq!(RequestState::parse(state.as_str()), Some(state));
        }
        assert_eq!(RequestState::parse("done"), None);
    }

    #[test]
    fn state_is_derived_from_counts() {
        assert_eq!(
            RequestState::derive(3, 0, false, false),
            RequestState::Pending
        );
        assert_eq!(
            RequestState::derive(3, 1, false, false),
            RequestState::PartiallyDelivered
        );
        assert_eq!(
            RequestState::derive(3, 3, false, false),
            RequestState::Delivered
        );
        assert_eq!(
            RequestState::derive(3, 0, true, false),
            RequestState::Refused
        );
        assert_eq!(
            RequestState::derive(3, 2, true, false),
            RequestState::PartiallyDelivered
        );
        assert_eq!(
            RequestState::derive(3, 3, false, true),
            RequestState::Cancelled
        );
    }

    #[test]
    fn priorities_order_lowest_first() {
        assert!(Priority::Low < Priority::Normal && Priority::High < Priority::Critical);
    }
}
