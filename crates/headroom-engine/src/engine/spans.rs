//! The trace contexts of recent API calls that created capacity requests, so the launches made
//! for a request later, in the loop, join the same trace. The context, not the span: a span
//! kept here would stay open, and so unexported, until it was forgotten or the process ended.

use std::collections::BTreeMap;
use std::sync::Mutex;

use headroom_core::{NodeId, PoolSpec, RequestId};

use super::{Engine, lock};

/// API span contexts kept for linking launches to their capacity request's trace.
const MAX_REQUEST_SPANS: usize = 10_000;

/// Bounded: ordered by request id (ids are random, so eviction is arbitrary but bounded).
#[derive(Debug, Default)]
pub(super) struct RequestSpans(Mutex<BTreeMap<RequestId, opentelemetry::Context>>);

impl RequestSpans {
    fn remember(&self, request: &RequestId, span: opentelemetry::Context) {
        let mut spans = lock(&self.0);
        if spans.len() >= MAX_REQUEST_SPANS
            && let Some(oldest) = spans.keys().next().cloned()
        {
            spans.remove(&oldest);
        }
        spans.insert(request.clone(), span);
    }

    fn get(&self, request: &RequestId) -> Option<opentelemetry::Context> {
        lock(&self.0).get(request).cloned()
    }
}

impl Engine {
    /// Remembers the span of the API call that created a capacity request, so the launches made
    /// for it later join the same trace. Bounded: the oldest are forgotten first.
    pub fn remember_request_span(&self, request: &RequestId, span: &tracing::Span) {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        self.spans.remember(request, span.context());
    }

    /// A span for one action; a child of its capacity request's API span when there is one.
    pub(super) fn action_span(
        &self,
        action: &'static str,
        pool: &PoolSpec,
        request: Option<&RequestId>,
        node: &NodeId,
    ) -> tracing::Span {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let parent = request.and_then(|r| self.spans.get(r));
        let request = request.map(|r| r.0.clone()).unwrap_or_default();
        let span =
            tracing::info_span!("engine.action", action, pool = %pool.name, request, node = %node);
        if let Some(parent) = parent {
            let _ = span.set_parent(parent);
        }
        span
    }
}
