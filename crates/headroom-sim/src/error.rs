//! The simulator's one error type.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum SimError {
    /// A trace row that is not `timestamp, prompt tokens, generated tokens`.
    #[error("{file}:{line}: {message}")]
    TraceRow {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: {message}")]
    Trace { file: String, message: String },
    /// A scenario that does not parse or validate; the message names the key and the fix.
    #[error("scenario {origin}: {message}")]
    Scenario { origin: String, message: String },
    #[error("unknown scenario {0:?}: pass a built-in name ({names}) or a TOML file path", names = crate::scenario::built_in_names().join(", "))]
    UnknownScenario(String),
    #[error(
        "unknown policy {0:?}: use headroom, hpa-utilization, hpa-queue, keda-karpenter, predictive, static or oracle"
    )]
    UnknownPolicy(String),
    #[error("the headroom engine failed: {0}")]
    Engine(String),
    #[error("{0}")]
    Io(String),
}

impl SimError {
    pub(crate) fn scenario(origin: &str, message: impl Into<String>) -> SimError {
        SimError::Scenario {
            origin: origin.to_string(),
            message: message.into(),
        }
    }
}
