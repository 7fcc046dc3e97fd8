use thiserror::Error;

/// Errors from parsing values into the core's domain types, and a plan that breaks a money or
/// instance invariant.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CoreError {
    #[error("invalid {kind} {value:?}: {why}")]
    InvalidName {
        kind: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("invalid amount {value:?}: {why}")]
    InvalidMoney { value: String, why: &'static str },
    #[error("unknown {kind} {value:?}; expected one of: {expected}")]
    UnknownVariant {
        kind: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("node cannot go from {from} to {to}")]
    InvalidTransition {
        from: crate::NodeState,
        to: crate::NodeState,
    },
    #[error(transparent)]
    PlanViolation(#[from] crate::planner::guard::PlanViolation),
}
