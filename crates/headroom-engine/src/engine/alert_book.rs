//! The alert book kept in the ledger (`alert_book`), one row per scope — a pool's name, or ""
//! for the deployment-wide alerts its first pool's owner evaluates — so a process that takes a
//! pool, after a restart or a lease move, goes on with the alerts its last owner was sending
//! instead of sending every firing alert again as new.
//!
//! The ledger keeps a scope's newest row plus an hour's (`ALERT_BOOK_RETENTION`, deleting older
//! rows as it records one): a scope's row is written when its set of firing alerts changes (a
//! key, a `starts_at` or a `last_sent_at`: a firing, a repeat or a resolution; an empty list once
//! all resolved), not for a keep-alive resend, so a quiet book is not written again. A process
//! that takes a pool reads the row back and puts its alerts in the book without notifying: they
//! keep their `starts_at`, their repeats and keep-alive resends follow their stored times, and one
//! that no longer holds resolves at the next evaluation.

use std::collections::BTreeMap;

use headroom_core::Timestamp;

use super::{Engine, EngineError, lock};
use crate::alerts::{ActiveAlert, Alert};

/// A scope's alerts as a row records them: each key's `starts_at` and `last_sent_at`.
type Mark = BTreeMap<String, (Timestamp, Timestamp)>;

/// What this process last wrote (or read back) of a scope's alerts.
#[derive(Debug)]
pub(super) struct Written {
    at: Timestamp,
    mark: Mark,
}

/// The scope an alert is kept under: its pool, or "" for a deployment-wide alert.
pub(super) fn scope_of(alert: &Alert) -> &str {
    alert.labels.get("pool").map_or("", String::as_str)
}

fn mark(alerts: &[ActiveAlert]) -> Mark {
    alerts
        .iter()
        .map(|a| (a.alert.key(), (a.starts_at, a.last_sent_at)))
        .collect()
}

/// The scope's row when it is due at `now` (its alerts changed since `written`; nothing written
/// counts as none firing), with what to remember once it is written. A row is never written at
/// or before the last one, whose instant would keep its first body.
fn due(
    alerts: &[ActiveAlert],
    written: Option<&Written>,
    now: Timestamp,
) -> Option<(String, Written)> {
    let mark = mark(alerts);
    if written.map_or(mark.is_empty(), |w| w.mark == mark) {
        return None;
    }
    let at = written.map_or(now, |w| now.max(w.at + chrono::Duration::milliseconds(1)));
    serde_json::to_string(alerts)
        .ok()
        .map(|body| (body, Written { at, mark }))
}

impl Engine {
    /// Writes the alerts of each of `scopes` (those this process evaluated) whose set changed.
    pub(super) async fn persist_alert_book(
        &self,
        scopes: &[&str],
        now: Timestamp,
    ) -> Result<(), EngineError> {
        let rows: Vec<(String, String, Written)> = {
            let memory = lock(&self.alerting);
            scopes
                .iter()
                .filter_map(|scope| {
                    let alerts = memory.book.active_in(|a| scope_of(a) == *scope);
                    due(&alerts, memory.written.get(*scope), now)
                        .map(|(body, written)| (scope.to_string(), body, written))
                })
                .collect()
        };
        for (scope, body, written) in rows {
            self.ledger
                .record_alert_book(&scope, written.at, &body)
                .await?;
            lock(&self.alerting).written.insert(scope, written);
        }
        Ok(())
    }

    /// Reads `scope`'s alerts back from the ledger when this process takes its pool, into the
    /// book without notifying. The ledger's replace what this process holds only when they are
    /// newer than what it last wrote (another owner evaluated meanwhile). A row that does not
    /// read back is logged and left: its alerts then fire afresh, as without one.
    pub(super) async fn restore_alert_book(&self, scope: &str) -> Result<(), EngineError> {
        let Some((at, body)) = self.ledger.alert_book(scope).await? else {
            return Ok(());
        };
        let alerts: Vec<ActiveAlert> = match serde_json::from_str(&body) {
            Ok(alerts) => alerts,
            Err(e) => {
                tracing::warn!(scope = %scope, written_at = %at, error = %e, "the alert book in the ledger does not read back; its alerts fire afresh");
                return Ok(());
            }
        };
        let mut memory = lock(&self.alerting);
        if memory.written.get(scope).is_some_and(|w| at <= w.at) {
            return Ok(());
        }
        memory.book.restore(|a| scope_of(a) == scope, alerts);
        let mark = mark(&memory.book.active_in(|a| scope_of(a) == scope));
        memory
            .written
            .insert(scope.to_string(), Written { at, mark });
        tracing::info!(scope = %scope, written_at = %at, "alert book read back from the ledger");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::Timestamp;

    use super::due;
    use crate::alerts::{ActiveAlert, Alert};

    fn at(s: i64) -> Timestamp {
        "2026-11-30T09:00:00Z".parse::<Timestamp>().unwrap() + chrono::Duration::seconds(s)
    }

    fn firing(starts: i64, sent: i64, resent: i64) -> ActiveAlert {
        ActiveAlert {
            alert: Alert::new(
                "PoolSignalsMissing",
                "warning",
                &[("pool", "llm".to_string())],
                "no signal".to_string(),
            ),
            starts_at: at(starts),
            last_sent_at: at(sent),
            last_resent_at: at(resent),
        }
    }

    /// A row for a firing, a repeat and a resolution; none for an empty scope never written
    /// nor for a keep-alive; never at or before the last row's instant; the body reads back.
    #[test]
    fn a_scope_is_written_when_its_alerts_change() {
        assert!(
            due(&[], None, at(0)).is_none(),
            "nothing firing, nothing written"
        );
        let alerts = vec![firing(0, 0, 0)];
        let (body, written) = due(&alerts, None, at(0)).expect("a firing");
        assert_eq!(
            serde_json::from_str::<Vec<ActiveAlert>>(&body).unwrap(),
            alerts
        );
        assert!(
            due(&[firing(0, 0, 60)], Some(&written), at(60)).is_none(),
            "a keep-alive"
        );
        let (_, repeated) = due(&[firing(0, 3600, 3600)], Some(&written), at(3600)).unwrap();
        let (body, resolved) = due(&[], Some(&repeated), at(3600)).expect("a resolution");
        assert_eq!(body, "[]");
        assert!(resolved.at > repeated.at, "after the last row's instant");
    }
}
