//! Spot interruption warnings: EventBridge events read from the region's SQS queue, remembered
//! until EC2 takes the instance.

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use headroom_cloud::InstanceId;

use super::errors::api_error;
use super::{AwsProvider, MAX_REMEMBERED};

/// Batches of ten spot interruption warnings read per region and inventory.
const MAX_WARNING_BATCHES: usize = 10;

impl AwsProvider {
    /// Reads the spot interruption warnings waiting in `region`'s queue, a bounded number of
    /// batches, and deletes them once remembered. Warnings only hasten what the instance state
    /// shows later, so a queue that cannot be read is logged, not an inventory failure.
    pub(super) async fn read_warnings(&self, region: &str) {
        let Some((sqs, url)) = self.queues.get(region) else {
            return;
        };
        for _ in 0..MAX_WARNING_BATCHES {
            let out = match sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .wait_time_seconds(0)
                .send()
                .await
            {
                Ok(out) => out,
                Err(e) => {
                    tracing::warn!(region, error = %api_error(e, None), "cannot read spot interruption warnings");
                    return;
                }
            };
            let messages = out.messages();
            if messages.is_empty() {
                return;
            }
            let mut done = Vec::new();
            for (n, message) in messages.iter().enumerate() {
                if let Some(id) = message.body().and_then(warned_instance) {
                    tracing::warn!(instance = %id, "spot interruption warning");
                    let reclaim_at = self.clock.now() + chrono::Duration::minutes(2);
                    let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
                    if warned.len() >= MAX_REMEMBERED {
                        warned.clear();
                    }
                    warned.entry(id).or_insert(reclaim_at);
                }
                if let Some(handle) = message.receipt_handle()
                    && let Ok(entry) = DeleteMessageBatchRequestEntry::builder()
                        .id(n.to_string())
                        .receipt_handle(handle)
                        .build()
                {
                    done.push(entry);
                }
            }
            if let Err(e) = sqs
                .delete_message_batch()
                .queue_url(url)
                .set_entries(Some(done))
                .send()
                .await
            {
                // They come back after their visibility timeout and are read again: harmless.
                tracing::warn!(region, error = %api_error(e, None), "cannot delete spot interruption warnings");
                return;
            }
        }
    }
}

/// The instance an EventBridge "EC2 Spot Instance Interruption Warning" event names, if `body`
/// is one.
pub fn warned_instance(body: &str) -> Option<InstanceId> {
    let event: serde_json::Value = serde_json::from_str(body).ok()?;
    if event.get("detail-type")?.as_str()? != "EC2 Spot Instance Interruption Warning" {
        return None;
    }
    let id = event.get("detail")?.get("instance-id")?.as_str()?;
    Some(InstanceId(id.to_string()))
}
