//! The [`EngineMemory`] role: per pool, the decision log, demand, controller memory, alert book.

use async_trait::async_trait;
use headroom_core::{PoolName, Timestamp};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use super::{DbRow, SqlLedger};
use crate::dialect::{self, Dialect};
use crate::{
    ALERT_BOOK_RETENTION, CONTROLLER_MEMORY_RETENTION, DECISION_RETENTION, EngineMemory,
    LedgerError, Sequenced,
};

#[async_trait]
impl<D: Dialect> EngineMemory for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn append_decision(
        &self,
        pool: &PoolName,
        at: Timestamp,
        record: &str,
    ) -> Result<(), LedgerError> {
        let mut tx = dialect::begin_serialised::<D>(&self.pool, &[], 0).await?;
        Self::query("INSERT INTO decisions (pool, {at}, record) VALUES (?, ?, CAST(? AS {json}))")
            .bind(pool.as_str())
            .bind(D::time(at))
            .bind(record)
            .execute(&mut *tx)
            .await?;
        Self::prune(
            &mut tx,
            "decisions",
            "pool",
            pool.as_str(),
            at,
            DECISION_RETENTION,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn decisions(&self, pool: &PoolName, limit: i64) -> Result<Vec<String>, LedgerError> {
        Self::query(
            "SELECT CAST(record AS TEXT) AS record FROM decisions
             WHERE pool = ? ORDER BY seq DESC LIMIT ?",
        )
        .bind(pool.as_str())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| Ok(row.try_get("record")?))
        .collect()
    }

    async fn decision_page(
        &self,
        pool: &PoolName,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Sequenced<String>>, LedgerError> {
        Self::query(
            "SELECT seq, CAST(record AS TEXT) AS record FROM decisions
             WHERE pool = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
        )
        .bind(pool.as_str())
        .bind(before.unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| {
            Ok(Sequenced {
                seq: row.try_get("seq")?,
                row: row.try_get("record")?,
            })
        })
        .collect()
    }

    async fn record_demand_minutes(
        &self,
        pool: &PoolName,
        minutes: &[(i64, u32)],
    ) -> Result<(), LedgerError> {
        // A few hundred rows a statement at most: well under either database's parameter limit.
        for chunk in minutes.chunks(300) {
            let rows = vec!["(?, ?, ?)"; chunk.len()].join(", ");
            let mut query = Self::query(&format!(
                "INSERT INTO demand_minutes (pool, minute, replicas) VALUES {rows}
                 ON CONFLICT DO NOTHING"
            ));
            for (minute, replicas) in chunk {
                query = query
                    .bind(pool.as_str())
                    .bind(*minute)
                    .bind(i64::from(*replicas));
            }
            query.execute(&self.pool).await?;
        }
        Ok(())
    }

    async fn demand_minutes(
        &self,
        pool: &PoolName,
        since: i64,
    ) -> Result<Vec<(i64, u32)>, LedgerError> {
        Self::query(
            "SELECT minute, replicas FROM demand_minutes
             WHERE pool = ? AND minute >= ? ORDER BY minute",
        )
        .bind(pool.as_str())
        .bind(since)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| {
            let replicas: i64 = row.try_get("replicas")?;
            Ok((
                row.try_get("minute")?,
                u32::try_from(replicas).unwrap_or(u32::MAX),
            ))
        })
        .collect()
    }

    async fn record_controller_memory(
        &self,
        pool: &PoolName,
        at: Timestamp,
        body: &str,
    ) -> Result<(), LedgerError> {
        self.record_body(
            "controller_memory",
            "pool",
            pool.as_str(),
            at,
            body,
            CONTROLLER_MEMORY_RETENTION,
        )
        .await
    }

    async fn controller_memory(
        &self,
        pool: &PoolName,
    ) -> Result<Option<(Timestamp, String)>, LedgerError> {
        self.latest_body("controller_memory", "pool", pool.as_str())
            .await
    }

    async fn record_alert_book(
        &self,
        scope: &str,
        at: Timestamp,
        body: &str,
    ) -> Result<(), LedgerError> {
        self.record_body("alert_book", "scope", scope, at, body, ALERT_BOOK_RETENTION)
            .await
    }

    async fn alert_book(&self, scope: &str) -> Result<Option<(Timestamp, String)>, LedgerError> {
        self.latest_body("alert_book", "scope", scope).await
    }
}
