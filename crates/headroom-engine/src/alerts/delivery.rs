//! Delivery of queued notifications from the ledger's outbox to their webhooks: each webhook in
//! order, with jittered exponential backoff per webhook when it fails. Runs beside the control
//! loop, never in it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headroom_cloud::Clock;
use headroom_core::Timestamp;
use headroom_ledger::{Ledger, LedgerError};

/// Notifications sent per round at most.
const ROUND: i64 = 50;
/// Each POST is bounded by this.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between rounds.
const ROUND_PAUSE: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct AlertDelivery {
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    /// Per webhook: when the next attempt may start, and the delay schedule.
    backoff: Mutex<HashMap<String, (Timestamp, backon::ExponentialBackoff)>>,
}

impl AlertDelivery {
    pub fn new(ledger: Arc<dyn Ledger>, clock: Arc<dyn Clock>) -> AlertDelivery {
        AlertDelivery {
            ledger,
            clock,
            backoff: Mutex::default(),
        }
    }

    /// Delivers until `shutdown` resolves.
    pub async fn run(&self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            if let Err(e) = self.round().await {
                tracing::warn!(error = %crate::error_chain(&e), "alert delivery round failed");
            }
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(ROUND_PAUSE) => {}
            }
        }
    }

    /// One delivery round: at most [`ROUND`] notifications.
    pub async fn round(&self) -> Result<(), LedgerError> {
        let pending = self.ledger.pending_alerts(ROUND).await?;
        let mut failed = BTreeSet::new();
        for alert in pending {
            let now = self.clock.now();
            if failed.contains(&alert.webhook) {
                continue; // keep order per webhook: nothing overtakes a failed notification
            }
            if self.waiting(&alert.webhook, now) {
                failed.insert(alert.webhook.clone());
                continue;
            }
            let (url, body) = (alert.webhook.clone(), alert.body.clone());
            let sent = tokio::task::spawn_blocking(move || {
                crate::http::post_json(&url, &body, WEBHOOK_TIMEOUT)
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
            match sent {
                Ok(()) => {
                    self.ledger
                        .alert_delivered(alert.seq, self.clock.now())
                        .await?;
                    self.backoff_of().remove(&alert.webhook);
                }
                Err(error) => {
                    let delay = self.back_off(&alert.webhook, now);
                    tracing::warn!(webhook = %alert.webhook, %error, retry_in_s = delay.as_secs_f64(), "alert delivery failed; kept in the outbox");
                    failed.insert(alert.webhook.clone());
                }
            }
        }
        Ok(())
    }

    fn backoff_of(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (Timestamp, backon::ExponentialBackoff)>> {
        self.backoff.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn waiting(&self, webhook: &str, now: Timestamp) -> bool {
        self.backoff_of()
            .get(webhook)
            .is_some_and(|(next, _)| *next > now)
    }

    /// Schedules the next attempt at `webhook` after a failure at `now`; returns the delay.
    fn back_off(&self, webhook: &str, now: Timestamp) -> Duration {
        use backon::BackoffBuilder;
        let mut backoff = self.backoff_of();
        let entry = backoff.entry(webhook.to_string()).or_insert_with(|| {
            let schedule = backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_secs(1))
                .with_max_delay(Duration::from_secs(300))
                .with_jitter()
                .without_max_times()
                .build();
            (now, schedule)
        });
        let delay = entry.1.next().unwrap_or(Duration::from_secs(300));
        entry.0 = now + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::minutes(5));
        delay
    }
}
