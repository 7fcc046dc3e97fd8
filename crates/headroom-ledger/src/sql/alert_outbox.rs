//! The [`AlertOutbox`] role: alert notifications queued, taken and closed.

use async_trait::async_trait;
use headroom_core::Timestamp;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use super::{DbRow, SqlLedger};
use crate::dialect::{self, Dialect};
use crate::{AlertOutbox, LedgerError, PendingAlert};

#[async_trait]
impl<D: Dialect> AlertOutbox for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn enqueue_alert(
        &self,
        webhook: &str,
        body: &str,
        at: Timestamp,
    ) -> Result<u64, LedgerError> {
        let mut tx =
            dialect::begin_serialised::<D>(&self.pool, &["headroom-alert-outbox"], 0).await?;
        Self::query("INSERT INTO alert_outbox (webhook, body, {created}) VALUES (?, ?, ?)")
            .bind(webhook)
            .bind(body)
            .bind(D::time(at))
            .execute(&mut *tx)
            .await?;
        // SQLite has no OFFSET without a LIMIT and Postgres no negative LIMIT: the largest one
        // stands for "all the rest" on both.
        let dropped = Self::query(
            "INSERT INTO alert_deliveries (outbox_seq, outcome, {at})
             SELECT seq, 'dropped', ? FROM alert_outbox o
             WHERE NOT EXISTS (SELECT 1 FROM alert_deliveries d WHERE d.outbox_seq = o.seq)
             ORDER BY seq DESC LIMIT ? OFFSET ?
             RETURNING outbox_seq",
        )
        .bind(D::time(at))
        .bind(i64::MAX)
        .bind(crate::ALERT_OUTBOX_BOUND)
        .fetch_all(&mut *tx)
        .await?
        .len() as u64;
        tx.commit().await?;
        Ok(dropped)
    }

    async fn pending_alerts(&self, limit: i64) -> Result<Vec<PendingAlert>, LedgerError> {
        let rows = Self::query(
            "SELECT seq, webhook, body FROM alert_outbox o
             WHERE NOT EXISTS (SELECT 1 FROM alert_deliveries d WHERE d.outbox_seq = o.seq)
             ORDER BY seq LIMIT ?",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(PendingAlert {
                    seq: r.try_get("seq")?,
                    webhook: r.try_get("webhook")?,
                    body: r.try_get("body")?,
                })
            })
            .collect()
    }

    async fn pending_alert_count(&self) -> Result<u64, LedgerError> {
        self.count(Self::query(
            "SELECT COUNT(*) AS n FROM alert_outbox o
             WHERE NOT EXISTS (SELECT 1 FROM alert_deliveries d WHERE d.outbox_seq = o.seq)",
        ))
        .await
    }

    async fn alert_delivered(&self, seq: i64, at: Timestamp) -> Result<(), LedgerError> {
        self.close_alert(seq, "delivered", at).await
    }

    async fn alert_dropped(&self, seq: i64, at: Timestamp) -> Result<(), LedgerError> {
        self.close_alert(seq, "dropped", at).await
    }
}
