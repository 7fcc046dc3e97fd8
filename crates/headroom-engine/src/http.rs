//! The engine's outbound HTTP calls — a scrape of a metrics page, a Prometheus query and an alert
//! webhook POST — each bounded in time (and the reads in size), so none can stall a loop.

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

/// The certificates of a PEM bundle, or why there are none.
pub(crate) fn ca_certificates(
    ca_file: &std::path::Path,
) -> Result<Vec<ureq::tls::Certificate<'static>>, String> {
    let pem =
        std::fs::read(ca_file).map_err(|e| format!("cannot read {}: {e}", ca_file.display()))?;
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(cert)) => Some(cert),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", ca_file.display()));
    }
    Ok(certs)
}

/// One bounded GET of a Prometheus HTTP API path (`/api/v1/query`, `/api/v1/query_range`) with
/// `params`: the HTTP status and the body, whatever the status (Prometheus explains its errors
/// in the body). The source's credentials are read from their files here, on every call, so a
/// rotated token is used as soon as it is written.
pub(crate) fn prometheus_get(
    source: &headroom_config::prometheus::PrometheusSource,
    path: &str,
    params: &[(&str, &str)],
) -> Result<(u16, String), String> {
    use headroom_config::prometheus::PrometheusAuth;
    let read_secret = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let mut config = ureq::Agent::config_builder()
        .timeout_global(Some(source.timeout))
        .http_status_as_error(false);
    if let Some(ca_file) = &source.ca_file {
        let certs = ca_certificates(ca_file)?;
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
                .build(),
        );
    }
    let agent: ureq::Agent = config.build().into();
    let url = format!("{}{path}", source.url.trim_end_matches('/'));
    let mut request = agent.get(&url).query_pairs(params.iter().copied());
    match &source.auth {
        PrometheusAuth::None => {}
        PrometheusAuth::BearerTokenFile(path) => {
            request = request.header("authorization", format!("Bearer {}", read_secret(path)?));
        }
        PrometheusAuth::Basic {
            username,
            password_file,
        } => {
            use base64::Engine as _;
            let pair = format!("{username}:{}", read_secret(password_file)?);
            let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
            request = request.header("authorization", format!("Basic {encoded}"));
        }
    }
    let mut response = request.call().map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_SCRAPE_BYTES)
        .read_to_string()
        .map_err(|e| e.to_string())?;
    Ok((status, body))
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
