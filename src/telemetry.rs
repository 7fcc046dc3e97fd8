//! Logs and traces. Logs go to stderr (JSON off a terminal); traces go over OTLP/HTTP when the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) variable is set, and nowhere
//! otherwise. `OTEL_EXPORTER_OTLP_PROTOCOL` picks `http/protobuf` (default) or `http/json`.

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

fn tracer_provider() -> Option<SdkTracerProvider> {
    let wanted = std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        || std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
    if !wanted || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v == "none") {
        return None;
    }
    let protocol = match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref() {
        Ok("http/json") => Protocol::HttpJson,
        _ => Protocol::HttpBinary,
    };
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
    {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!("warning: OpenTelemetry export is off: {e}");
            return None;
        }
    };
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("headroom")
        .build();
    Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build(),
    )
}

/// Installs the log subscriber, and the trace exporter when configured.
pub fn init() -> Telemetry {
    // RUST_LOG sets the log level (default warn); traces carry Headroom's own info spans.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
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
    let provider = tracer_provider();
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
    Telemetry { provider }
}
