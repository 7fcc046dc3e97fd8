//! The [`Schedules`] role: scheduled windows added, cancelled and read.

use async_trait::async_trait;
use headroom_core::{PoolName, Timestamp};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use super::{DbRow, SqlLedger};
use crate::dialect::Dialect;
use crate::{LedgerError, Schedules, StoredWindow};

#[async_trait]
impl<D: Dialect> Schedules for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn add_schedule_window(
        &self,
        id: &str,
        pool: &PoolName,
        at: Timestamp,
        spec: &str,
    ) -> Result<(), LedgerError> {
        Self::query(
            "INSERT INTO schedule_windows (id, pool, {at}, spec) VALUES (?, ?, ?, CAST(? AS {json}))
             ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(pool.as_str())
        .bind(D::time(at))
        .bind(spec)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn cancel_schedule_window(
        &self,
        pool: &PoolName,
        id: &str,
        at: Timestamp,
    ) -> Result<bool, LedgerError> {
        let in_force = Self::query(
            "SELECT w.id FROM schedule_windows w
             LEFT JOIN schedule_window_cancellations c ON c.window_id = w.id
             WHERE w.id = ? AND w.pool = ? AND c.window_id IS NULL",
        )
        .bind(id)
        .bind(pool.as_str())
        .fetch_optional(&self.pool)
        .await?;
        if in_force.is_none() {
            return Ok(false);
        }
        Self::query(
            "INSERT INTO schedule_window_cancellations (window_id, {at}) VALUES (?, ?)
             ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(D::time(at))
        .execute(&self.pool)
        .await?;
        Ok(true)
    }

    async fn schedule_windows(&self) -> Result<Vec<StoredWindow>, LedgerError> {
        Self::query(
            "SELECT w.id, w.pool, w.{at} AS {created}, CAST(w.spec AS TEXT) AS spec
             FROM schedule_windows w
             LEFT JOIN schedule_window_cancellations c ON c.window_id = w.id
             WHERE c.window_id IS NULL
             ORDER BY w.{at}, w.id",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| {
            let pool: String = row.try_get("pool")?;
            let created: D::Time = row.try_get(format!("created{}", D::TIME_SUFFIX).as_str())?;
            Ok(StoredWindow {
                id: row.try_get("id")?,
                pool: pool
                    .parse()
                    .map_err(|e| LedgerError::Corrupt(format!("schedule window pool: {e}")))?,
                at: D::timestamp(created)?,
                spec: row.try_get("spec")?,
            })
        })
        .collect()
    }
}
