//! The spans of recent API calls that created capacity requests, so the launches made for a
//! request later, in the loop, join the same trace.

use super::*;

/// API spans kept for linking launches to their capacity request's trace.
const MAX_REQUEST_SPANS: usize = 10_000;

/// Bounded: ordered by request id (ids are random, so eviction is arbitrary but bounded).
#[derive(Debug, Default)]
pub(super) struct RequestSpans(Mutex<BTreeMap<RequestId, tracing::Span>>);

impl RequestSpans {
    fn remember(&self, request: &RequestId, span: tracing::Span) {
        let mut spans = lock(&self.0);
        if spans.len() >= MAX_REQUEST_SPANS
            && let Some(oldest) = spans.keys().next().cloned()
        {
            spans.remove(&oldest);
        }
        spans.insert(request.clone(), span);
    }

    fn get(&self, request: &RequestId) -> Option<tracing::Span> {
        lock(&self.0).get(request).cloned()
    }
}

impl Engine {
    /// Remembers the span of the API call that created a capacity request, so the launches made
    /// for it later join the same trace. Bounded: the oldest are forgotten first.
    pub fn remember_request_span(&self, request: &RequestId, span: tracing::Span) {
        self.spans.remember(request, span);
    }

    /// A span for one action; a child of its capacity request's API span when there is one.
    pub(super) fn action_span(
        &self,
        action: &'static str,
        pool: &PoolSpec,
        request: Option<&RequestId>,
        node: &NodeId,
    ) -> tracing::Span {
        let parent = request.and_then(|r| self.spans.get(r));
        let request = request.map(|r| r.0.clone()).unwrap_or_default();
        match parent {
            Some(parent) => {
                tracing::info_span!(parent: &parent, "engine.action", action, pool = %pool.name, request, node = %node)
            }
            None => {
                tracing::info_span!("engine.action", action, pool = %pool.name, request, node = %node)
            }
        }
    }
}
