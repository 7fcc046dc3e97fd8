//! The [`Coordination`] role: pool leases, shared signals, the revision, the ping.

use std::collections::BTreeSet;

use async_trait::async_trait;
use headroom_core::PoolName;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use super::{DbRow, SqlLedger};
use crate::dialect::Dialect;
use crate::{Coordination, LedgerError, Revision};

#[async_trait]
impl<D: Dialect> Coordination for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn pool_leases(&self, pools: &[PoolName]) -> Result<BTreeSet<PoolName>, LedgerError> {
        self.dialect.pool_leases(pools).await
    }

    async fn share_signal(&self, payload: &str) -> Result<(), LedgerError> {
        if payload.len() > crate::MAX_SIGNAL_PAYLOAD {
            return Err(LedgerError::Corrupt(format!(
                "a shared signal of {} bytes exceeds {}",
                payload.len(),
                crate::MAX_SIGNAL_PAYLOAD
            )));
        }
        D::share_signal(&self.pool, payload).await
    }

    async fn shared_signals(&self) -> Result<Option<crate::SignalFeed>, LedgerError> {
        self.dialect.shared_signals().await
    }

    async fn revision(&self) -> Result<Revision, LedgerError> {
        let row = Self::query(D::REVISION).fetch_one(&self.pool).await?;
        Ok(Revision {
            budgets: row.try_get("budgets")?,
            windows: row.try_get("windows")?,
            requests: row.try_get("requests")?,
        })
    }

    async fn ping(&self) -> Result<(), LedgerError> {
        Self::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
