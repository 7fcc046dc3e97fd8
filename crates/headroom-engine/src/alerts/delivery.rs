//! Delivery of queued notifications from the ledger's outbox to their webhooks. Each
//! notification is retried on its own, with jittered exponential backoff and a bound, then
//! dropped and counted: one notification a receiver refuses never holds back the next. Runs
//! beside the control loop, never in it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headroom_cloud::Clock;
use headroom_core::Timestamp;
use headroom_ledger::{AlertOutbox, LedgerError};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::http::PostFailure;
use crate::metrics::OutcomeLabels;

/// Notifications attempted per round at most.
const ROUND: usize = 50;
/// Each POST is bounded by this.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between rounds.
const ROUND_PAUSE: Duration = Duration::from_millis(500);
/// Attempts at a notification the receiver refused with a 4xx that a retry cannot fix (a bad
/// request, a missing route, no permission): a few cover a receiver mid-deploy, no more.
pub const REFUSED_ATTEMPTS: u32 = 3;
/// Attempts at a notification that failed for a reason that can pass (no answer, a 5xx, 408,
/// 425, 429). With the backoff below (1 s doubling to 5 min) this spans about 18 minutes,
/// Alertmanager's own order of patience for a receiver.
pub const TRANSIENT_ATTEMPTS: u32 = 12;

/// What happens to a notification after a failed attempt, its `attempts`-th.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    Retry,
    Drop,
}

/// The bound on retries: pure, so the rule is tested apart from the sockets.
pub fn after_failure(attempts: u32, status: Option<u16>) -> AfterFailure {
    let hopeless = status.is_some_and(|s| (400..500).contains(&s) && ![408, 425, 429].contains(&s));
    let bound = if hopeless {
        REFUSED_ATTEMPTS
    } else {
        TRANSIENT_ATTEMPTS
    };
    if attempts >= bound {
        AfterFailure::Drop
    } else {
        AfterFailure::Retry
    }
}

/// One notification's retry state, kept in memory: a restart starts its count afresh, and the
/// outbox bound still caps what waits.
#[derive(Debug)]
struct Retry {
    attempts: u32,
    next_at: Timestamp,
    schedule: backon::ExponentialBackoff,
}

#[derive(Debug)]
pub struct AlertDelivery {
    outbox: Arc<dyn AlertOutbox>,
    clock: Arc<dyn Clock>,
    /// `headroom_alert_deliveries_total{outcome}`: delivered, retried, dropped.
    outcomes: Family<OutcomeLabels, Counter>,
    retries: Mutex<HashMap<i64, Retry>>,
}

impl AlertDelivery {
    pub fn new(
        outbox: Arc<dyn AlertOutbox>,
        clock: Arc<dyn Clock>,
        outcomes: Family<OutcomeLabels, Counter>,
    ) -> AlertDelivery {
        AlertDelivery {
            outbox,
            clock,
            outcomes,
            retries: Mutex::default(),
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

    /// One delivery round: at most [`ROUND`] attempts, oldest due notification first.
    pub async fn round(&self) -> Result<(), LedgerError> {
        let pending = self
            .outbox
            .pending_alerts(headroom_ledger::ALERT_OUTBOX_BOUND)
            .await?;
        self.forget_closed(&pending);
        // A receiver that did not answer is not tried again this round: the rest of its
        // notifications would only wait out the same timeout.
        let mut unreachable = BTreeSet::new();
        let mut attempted = 0;
        for alert in pending {
            if attempted == ROUND {
                break;
            }
            let now = self.clock.now();
            if unreachable.contains(&alert.webhook) || self.waiting(alert.seq, now) {
                continue;
            }
            attempted += 1;
            let (url, body) = (alert.webhook.clone(), alert.body.clone());
            let sent = tokio::task::spawn_blocking(move || {
                crate::http::post_json(&url, &body, WEBHOOK_TIMEOUT)
            })
            .await
            .unwrap_or_else(|e| Err(PostFailure::Unreachable(e.to_string())));
            let receiver = receiver_of(&alert.webhook);
            match sent {
                Ok(()) => {
                    self.outbox
                        .alert_delivered(alert.seq, self.clock.now())
                        .await?;
                    self.retries_of().remove(&alert.seq);
                    self.count("delivered");
                }
                Err(failure) => {
                    let status = match &failure {
                        PostFailure::Status(code) => Some(*code),
                        PostFailure::Unreachable(_) => {
                            unreachable.insert(alert.webhook.clone());
                            None
                        }
                    };
                    match self.failed(alert.seq, status, now) {
                        (attempts, None) => {
                            self.outbox
                                .alert_dropped(alert.seq, self.clock.now())
                                .await?;
                            self.count("dropped");
                            tracing::warn!(%receiver, seq = alert.seq, attempts, %failure, "alert notification dropped");
                        }
                        (attempts, Some(delay)) => {
                            self.count("retried");
                            tracing::warn!(%receiver, seq = alert.seq, attempts, %failure, retry_in_s = delay.as_secs_f64(), "alert delivery failed; kept in the outbox");
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn count(&self, outcome: &str) {
        self.outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    fn retries_of(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Retry>> {
        self.retries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the retry state of notifications no longer pending (delivered elsewhere, or pushed
    /// out of the bounded outbox).
    fn forget_closed(&self, pending: &[headroom_ledger::PendingAlert]) {
        let open: BTreeSet<i64> = pending.iter().map(|p| p.seq).collect();
        self.retries_of().retain(|seq, _| open.contains(seq));
    }

    fn waiting(&self, seq: i64, now: Timestamp) -> bool {
        self.retries_of().get(&seq).is_some_and(|r| r.next_at > now)
    }

    /// Records a failed attempt at `now`: the attempts so far, and the delay before the next
    /// one, or `None` when the notification is to be dropped.
    fn failed(&self, seq: i64, status: Option<u16>, now: Timestamp) -> (u32, Option<Duration>) {
        use backon::BackoffBuilder;
        let mut retries = self.retries_of();
        let retry = retries.entry(seq).or_insert_with(|| Retry {
            attempts: 0,
            next_at: now,
            schedule: backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_secs(1))
                .with_max_delay(Duration::from_secs(300))
                .with_jitter()
                .without_max_times()
                .build(),
        });
        retry.attempts += 1;
        let attempts = retry.attempts;
        if after_failure(attempts, status) == AfterFailure::Drop {
            retries.remove(&seq);
            return (attempts, None);
        }
        let delay = retry.schedule.next().unwrap_or(Duration::from_secs(300));
        retry.next_at =
            now + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::minutes(5));
        (attempts, Some(delay))
    }
}

/// The receiver's scheme, host and port: a webhook's path and query often carry its secret
/// (Slack's do), so only this much reaches a log line.
fn receiver_of(webhook: &str) -> String {
    match webhook.parse::<ureq::http::Uri>() {
        Ok(uri) => format!(
            "{}://{}{}",
            uri.scheme_str().unwrap_or("http"),
            uri.host().unwrap_or("?"),
            uri.port_u16().map(|p| format!(":{p}")).unwrap_or_default()
        ),
        Err(_) => "(unparsable webhook url)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{AfterFailure, REFUSED_ATTEMPTS, TRANSIENT_ATTEMPTS, after_failure, receiver_of};

    #[test]
    fn a_hopeless_refusal_is_dropped_after_a_few_attempts_and_a_passing_failure_later() {
        assert_eq!(after_failure(1, Some(400)), AfterFailure::Retry);
        assert_eq!(
            after_failure(REFUSED_ATTEMPTS, Some(400)),
            AfterFailure::Drop
        );
        assert_eq!(
            after_failure(REFUSED_ATTEMPTS, Some(404)),
            AfterFailure::Drop
        );
        for passing in [Some(408), Some(429), Some(500), Some(503), None] {
            assert_eq!(
                after_failure(REFUSED_ATTEMPTS, passing),
                AfterFailure::Retry
            );
            assert_eq!(
                after_failure(TRANSIENT_ATTEMPTS, passing),
                AfterFailure::Drop
            );
        }
    }

    #[test]
    fn only_the_receivers_address_reaches_a_log() {
        assert_eq!(
            receiver_of("https://hooks.slack.com/services/T000/B000/SECRETTOKEN"),
            "https://hooks.slack.com"
        );
        assert_eq!(
            receiver_of("http://user:pw@127.0.0.1:9093/api/v2/alerts?token=x"),
            "http://127.0.0.1:9093"
        );
    }
}
