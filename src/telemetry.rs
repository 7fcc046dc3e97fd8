//! Logs and traces. Logs go to stderr (JSON off a terminal); traces go over OTLP/HTTP when the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) variable is set, and nowhere
//! otherwise. `OTEL_EXPORTER_OTLP_PROTOCOL` (or `…_TRACES_PROTOCOL`) picks `http/protobuf`
//! (default) or `http/json`; `grpc` is refused at start, as this binary has no gRPC exporter.
//! `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` are honoured; the service is `headroom`
//! when neither names it.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
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
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build(),
    ))
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

/// Each API request in an `http.request` span whose parent is the caller's W3C trace context
/// (`traceparent`, `tracestate`), so Headroom's spans join the caller's trace.
pub async fn trace_incoming(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .extract(&Headers(request.headers()));
    let span = tracing::info_span!(
        "http.request",
        method = %request.method(),
        path = %request.uri().path()
    );
    let _ = span.set_parent(parent);
    next.run(request).instrument(span).await
}
