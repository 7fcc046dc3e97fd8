//! Node events appended in batches ([`crate::batch`]): concurrent
//! [`crate::Ledger::append_node_event`] calls (nodes of many pools and accounts changing state at
//! once) share one `INSERT` and one commit. One event per node per batch, so a node's history is
//! written in the order its events arrived.

use async_trait::async_trait;
use headroom_core::NodeId;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Type};

use crate::batch::{Answer, Batched, WriteBatch};
use crate::dialect::Dialect;
use crate::sql::{DbRow, SqlLedger};
use crate::{LedgerError, NodeEvent};

/// A node event to append, as a batch sees it (a budget admission batches the same event type by
/// account instead).
#[derive(Debug, Clone)]
pub(crate) struct Appended(pub(crate) NodeEvent);

impl Batched for Appended {
    type Key = NodeId;
    type Answer = ();
    fn batch_key(&self) -> NodeId {
        self.0.node.clone()
    }
}

#[async_trait]
impl<D: Dialect> WriteBatch<Appended> for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    /// One statement for the whole batch; an event recorded before (a write repeated after a
    /// lost answer) is skipped by its event key, so writing a batch again is harmless.
    async fn write_batch(
        &self,
        writes: &[&Appended],
    ) -> Result<Vec<Answer<Appended>>, LedgerError> {
        let events: Vec<&NodeEvent> = writes.iter().map(|w| &w.0).collect();
        let mut conn = self.pool().acquire().await?;
        Self::insert_events(&mut conn, &events).await?;
        Ok(writes.iter().map(|_| Ok(())).collect())
    }
}
