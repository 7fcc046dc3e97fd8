//! The read after an insert: a successful create is never a refusal.

use std::time::Duration;

use headroom_cloud::{CloudError, Instance, InstanceId};
use headroom_core::ErrorClass;

use super::{GcpProvider, transient};

impl GcpProvider {
    /// Reads a VM back after its insert finished. A successful create is never a refusal: a
    /// read that misses (GCE's reads can lag the write) or fails is repeated by the
    /// deterministic name, with backoff, for at most `gcp.operation_timeout`; past that the
    /// launch is a transient error, so the intent stays and its retry, with the same name and
    /// requestId, adopts the VM instead of making another.
    pub(super) async fn read_back(
        &self,
        id: &InstanceId,
        zone: &str,
        name: &str,
    ) -> Result<Instance, CloudError> {
        let mut delay = Duration::from_millis(100);
        let mut last = None;
        let bounded = tokio::time::timeout(self.settings.operation_timeout, async {
            loop {
                match self.describe_in(id, zone, name).await {
                    Ok(found) => return Ok(found),
                    Err(e) if e.class() == ErrorClass::NotFound || e.class().is_retryable() => {
                        tracing::debug!(instance = %id, error = %e, "created VM not readable yet; reading again");
                        last = Some(e);
                    }
                    Err(e) => return Err(e),
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        })
        .await;
        match bounded {
            Ok(result) => result,
            Err(_) => Err(transient(
                "read_back_pending",
                format!(
                    "instance {id} was created but could not be read back within {:?} ({}); the next activation adopts it by name",
                    self.settings.operation_timeout,
                    last.map_or_else(|| "no answer".to_string(), |e| e.to_string())
                ),
            )),
        }
    }
}
