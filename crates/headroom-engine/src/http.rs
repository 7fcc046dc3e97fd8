//! The engine's two outbound HTTP calls — a scrape of a metrics page and an alert webhook POST —
//! each bounded in time (and the scrape in size), so neither can stall a loop.

use std::time::Duration;

/// A metrics page is small; a larger body is refused rather than read.
const MAX_SCRAPE_BYTES: u64 = 8 * 1024 * 1024;

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// One bounded GET of a metrics endpoint.
pub(crate) fn get_metrics_text(url: &str, timeout: Duration) -> Result<String, String> {
    let mut response = agent(timeout).get(url).call().map_err(|e| e.to_string())?;
    response
        .body_mut()
        .with_config()
        .limit(MAX_SCRAPE_BYTES)
        .read_to_string()
        .map_err(|e| e.to_string())
}

/// Why a POST was not delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PostFailure {
    /// The receiver answered with this non-2xx status: it is up and refused this body.
    Status(u16),
    /// No answer: the receiver is down, unreachable or too slow.
    Unreachable(String),
}

impl std::fmt::Display for PostFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PostFailure::Status(code) => write!(f, "answered HTTP {code}"),
            PostFailure::Unreachable(error) => f.write_str(error),
        }
    }
}

/// One bounded POST of a JSON body; any 2xx is delivered.
pub(crate) fn post_json(url: &str, body: &str, timeout: Duration) -> Result<(), PostFailure> {
    match agent(timeout)
        .post(url)
        .header("content-type", "application/json")
        .send(body)
    {
        Ok(_) => Ok(()),
        Err(ureq::Error::StatusCode(code)) => Err(PostFailure::Status(code)),
        Err(e) => Err(PostFailure::Unreachable(e.to_string())),
    }
}
