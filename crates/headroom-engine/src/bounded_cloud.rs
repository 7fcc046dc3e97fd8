//! The cloud provider as the engine calls it: every call bounded by `engine.provider_timeout`
//! (invariant 7 relies on this: a hanging cloud API never stalls the loop) and timed, with its
//! error class, for `/metrics`.

use std::sync::Arc;

use async_trait::async_trait;
use headroom_cloud::{CloudError, CloudProvider, Instance, InstanceId, LaunchSpec};
use headroom_core::{Money, Offering, OfferingId, ProviderKind};

use crate::metrics::{CallErrorLabels, CallLabels, Metrics};

use crate::metrics::latency_timer as start_timer;

/// A cloud provider that bounds every call's time and records its latency and error class. A
/// call that overruns is abandoned and reported as a transient error, so a hanging cloud API
/// can never stall the control loop; the next activation repeats it (launches with the same
/// client token).
#[derive(Debug)]
pub struct BoundedCloud {
    pub inner: Arc<dyn CloudProvider>,
    pub metrics: Arc<Metrics>,
    pub timeout: std::time::Duration,
}

impl BoundedCloud {
    async fn bounded<T>(
        &self,
        method: &str,
        call: impl std::future::Future<Output = Result<T, CloudError>>,
    ) -> Result<T, CloudError> {
        let started = start_timer();
        let span = tracing::info_span!("cloud.call", method, provider = %self.inner.kind());
        let result =
            match tracing::Instrument::instrument(tokio::time::timeout(self.timeout, call), span)
                .await
            {
                Ok(r) => r,
                Err(_) => Err(CloudError::Refused {
                    provider: self.inner.kind(),
                    class: headroom_core::ErrorClass::Transient,
                    code: "Timeout".to_string(),
                    message: format!("{method} did not answer within {:?}", self.timeout),
                }),
            };
        self.observe(method, started, &result);
        result
    }

    fn observe<T>(
        &self,
        method: &str,
        started: std::time::Instant,
        result: &Result<T, CloudError>,
    ) {
        let provider = self.inner.kind().to_string();
        self.metrics
            .provider_call_seconds
            .get_or_create(&CallLabels {
                provider: provider.clone(),
                method: method.to_string(),
            })
            .observe(started.elapsed().as_secs_f64());
        if let Err(e) = result {
            self.metrics
                .provider_errors
                .get_or_create(&CallErrorLabels {
                    provider,
                    method: method.to_string(),
                    class: e.class().as_str().to_string(),
                })
                .inc();
        }
    }
}

#[async_trait]
impl CloudProvider for BoundedCloud {
    fn kind(&self) -> ProviderKind {
        self.inner.kind()
    }

    async fn launch(&self, spec: &LaunchSpec) -> Result<Instance, CloudError> {
        self.bounded("launch", self.inner.launch(spec)).await
    }

    async fn start(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        self.bounded("start", self.inner.start(id)).await
    }

    async fn stop(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        self.bounded("stop", self.inner.stop(id)).await
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), CloudError> {
        self.bounded("terminate", self.inner.terminate(id)).await
    }

    async fn describe(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        self.bounded("describe", self.inner.describe(id)).await
    }

    async fn list_owned(&self, cluster: &str) -> Result<Vec<Instance>, CloudError> {
        self.bounded("list_owned", self.inner.list_owned(cluster))
            .await
    }

    async fn current_prices(
        &self,
        offerings: &[Offering],
    ) -> Result<Vec<(OfferingId, Money)>, CloudError> {
        self.bounded("current_prices", self.inner.current_prices(offerings))
            .await
    }
    async fn quota_headroom(
        &self,
        region: &str,
        offerings: &[Offering],
    ) -> Result<headroom_cloud::Quotas, CloudError> {
        self.bounded(
            "quota_headroom",
            self.inner.quota_headroom(region, offerings),
        )
        .await
    }
}
