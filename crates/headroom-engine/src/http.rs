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

/// One bounded POST of a JSON body; any 2xx is delivered.
pub(crate) fn post_json(url: &str, body: &str, timeout: Duration) -> Result<(), String> {
    agent(timeout)
        .post(url)
        .header("content-type", "application/json")
        .send(body)
        .map(|_| ())
        .map_err(|e| e.to_string())
}
