//! Logs and traces. Logs go to stderr (JSON off a terminal); traces go over OTLP/HTTP when the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) variable is set, and nowhere
//! otherwise. `OTEL_EXPORTER_OTLP_PROTOCOL` (or `…_TRACES_PROTOCOL`) picks `http/protobuf`
//! (default) or `http/json`; `grpc` is refused at start, as this binary has no gRPC exporter.
//! `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` are honoured; the service is `headroom`
//! when neither names it.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Keeps the trace pipeline alive; flushes it when dropped.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
    }
}

/// The OTLP protocol the environment asks for, or the one line that says why it cannot be had.
fn protocol() -> Result<Protocol, String> {
    let (var, value) = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .into_iter()
    .find_map(|var| std::env::var(var).ok().map(|v| (var, v)))
    .unwrap_or(("", String::new()));
    match value.as_str() {
        "" | "http/protobuf" => Ok(Protocol::HttpBinary),
        "http/json" => Ok(Protocol::HttpJson),
        "grpc" => Err(format!(
            "{var}: \"grpc\" is not built into this binary, which exports OTLP over HTTP; set http/protobuf or http/json and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (4318)"
        )),
        other => Err(format!(
            "{var}: {other:?} is not an OTLP protocol; set http/protobuf or http/json"
        )),
    }
}

/// The resource traces carry: the SDK's (which reads `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES`), named `headroom` when those leave the service unnamed.
fn resource() -> opentelemetry_sdk::Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
            v.split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
    let builder = opentelemetry_sdk::Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("headroom").build()
    }
}

fn tracer_provider() -> Result<Option<SdkTracerProvider>, String> {
    let wanted = std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        || std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
    if !wanted || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v == "none") {
        return Ok(None);
    }
    let protocol = protocol()?;
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
    {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!("warning: OpenTelemetry export is off: {e}");
            return Ok(None);
        }
    };
    Ok(Some(
        SdkTracerProvider::builder()
            .with_span_processor(batches(exporter))
            .with_resource(resource())
            .build(),
    ))
}

/// How long an ended span waits to be sent when `OTEL_BSP_SCHEDULE_DELAY` does not say: short,
/// so a capacity request's spans reach the collector while someone is looking, not 5 s (the
/// SDK's default) or a batch later.
const SCHEDULE_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// A batch processor on its own thread that sends ended spans every [`SCHEDULE_DELAY`]; the
/// `OTEL_BSP_*` variables still override it.
fn batches(exporter: opentelemetry_otlp::SpanExporter) -> BatchSpanProcessor {
    let mut config = BatchConfigBuilder::default();
    if std::env::var_os(opentelemetry_sdk::trace::OTEL_BSP_SCHEDULE_DELAY).is_none() {
        config = config.with_scheduled_delay(SCHEDULE_DELAY);
    }
    BatchSpanProcessor::builder(exporter)
        .with_batch_config(config.build())
        .build()
}

/// Installs the log subscriber, and the trace exporter when configured; a variable that asks for
/// what cannot be had is the one line returned. `default_level` applies when RUST_LOG is unset.
pub fn init(default_level: &str) -> Result<Telemetry, String> {
    // RUST_LOG sets the log level; traces carry Headroom's own info spans.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let logs = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    };
    let provider = tracer_provider()?;
    let traces = provider.as_ref().map(|p| {
        let spans = tracing_subscriber::filter::Targets::new()
            .with_target("headroom", tracing::Level::INFO)
            .with_target("headroom_api", tracing::Level::INFO)
            .with_target("headroom_engine", tracing::Level::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("headroom"))
            .with_filter(spans)
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .init();
    Ok(Telemetry { provider })
}

/// Reads a W3C `traceparent` header, as `opentelemetry::propagation::Extractor` asks.
struct Headers<'a>(&'a axum::http::HeaderMap);

impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The OpenTelemetry `network.protocol.version` of a request.
fn protocol_version(version: axum::http::Version) -> &'static str {
    match version {
        axum::http::Version::HTTP_09 => "0.9",
        axum::http::Version::HTTP_10 => "1.0",
        axum::http::Version::HTTP_2 => "2",
        axum::http::Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

/// Each API request in a SERVER span named and attributed by the OpenTelemetry HTTP semantic
/// conventions (`{method} {route}`, `http.request.method`, `http.route` as the route template,
/// `url.path`, `http.response.status_code`, a 5xx an error), whose parent is the caller's W3C
/// trace context (`traceparent`, `tracestate`), so Headroom's spans join the caller's trace.
/// It sits inside the router (`Router::layer`), where the matched route is known; the name is
/// set when the span is created, as it cannot change once a child span has started it.
pub async fn trace_incoming(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .extract(&Headers(request.headers()));
    let method = request.method().as_str().to_string();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_string());
    let name = match &route {
        Some(route) => format!("{method} {route}"),
        None => method.clone(),
    };
    let span = tracing::info_span!(
        "http.request",
        otel.name = %name,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %method,
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        url.path = %request.uri().path(),
        url.scheme = "http",
        server.address = tracing::field::Empty,
        server.port = tracing::field::Empty,
        network.protocol.version = protocol_version(request.version()),
        "error.type" = tracing::field::Empty,
    );
    if let Some(route) = &route {
        span.record("http.route", route.as_str());
    }
    let host = request
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.parse::<axum::http::uri::Authority>().ok());
    if let Some(host) = host {
        span.record("server.address", host.host());
        if let Some(port) = host.port_u16() {
            span.record("server.port", i64::from(port));
        }
    }
    let _ = span.set_parent(parent);
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", i64::from(status.as_u16()));
    // A server span is an error for a 5xx only: a 4xx is the client's.
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
        span.record("error.type", status.as_str());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanKind, Status};
    use opentelemetry_sdk::trace::{SpanData, SpanExporter};
    use std::sync::{Arc, Mutex};
    use tower::ServiceExt;

    /// Keeps every span the pipeline exports.
    #[derive(Debug, Clone, Default)]
    struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Kept {
        async fn export(&self, batch: Vec<SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    fn attribute(span: &SpanData, key: &str) -> Option<String> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    }

    #[tokio::test]
    async fn api_requests_are_server_spans_with_the_http_semantic_conventions() {
        let kept = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(kept.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let _guard = tracing::subscriber::set_default(subscriber);
        let app = axum::Router::new()
            .route("/v1/pools/{name}", axum::routing::get(|| async { "ok" }))
            .route(
                "/v1/broken",
                axum::routing::get(|| async { axum::http::StatusCode::SERVICE_UNAVAILABLE }),
            )
            .layer(axum::middleware::from_fn(trace_incoming));
        for path in ["/v1/pools/llama", "/v1/broken"] {
            let request = axum::http::Request::get(path)
                .header("host", "headroom.internal:8080")
                .body(axum::body::Body::empty())
                .unwrap();
            let _ = app.clone().oneshot(request).await.unwrap();
        }
        let spans = kept.0.lock().unwrap().clone();
        let ok = spans
            .iter()
            .find(|s| s.name == "GET /v1/pools/{name}")
            .unwrap_or_else(|| panic!("{spans:#?}"));
        assert_eq!(ok.span_kind, SpanKind::Server);
        assert_eq!(ok.status, Status::Unset);
        for (key, value) in [
            ("http.request.method", "GET"),
            ("http.route", "/v1/pools/{name}"),
            ("http.response.status_code", "200"),
            ("url.path", "/v1/pools/llama"),
            ("url.scheme", "http"),
            ("server.address", "headroom.internal"),
            ("server.port", "8080"),
            ("network.protocol.version", "1.1"),
        ] {
            assert_eq!(attribute(ok, key).as_deref(), Some(value), "{key}: {ok:#?}");
        }
        assert_eq!(attribute(ok, "error.type"), None);
        let broken = spans
            .iter()
            .find(|s| s.name == "GET /v1/broken")
            .unwrap_or_else(|| panic!("{spans:#?}"));
        assert!(matches!(broken.status, Status::Error { .. }), "{broken:#?}");
        assert_eq!(
            attribute(broken, "http.response.status_code").as_deref(),
            Some("503")
        );
        assert_eq!(attribute(broken, "error.type").as_deref(), Some("503"));
    }
}
