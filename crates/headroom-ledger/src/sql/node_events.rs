//! The [`NodeEvents`] role: node events appended or admitted as holds, and refusals.

use async_trait::async_trait;
use headroom_core::NodeId;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Type};

use super::{DbRow, IN_LIST_CHUNK, SqlLedger};
use crate::dialect::{self, Dialect};
use crate::{HoldOutcome, LedgerError, NodeEvent, NodeEvents, RefusalRecord};

#[async_trait]
impl<D: Dialect> NodeEvents for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn append_node_event(&self, e: &NodeEvent) -> Result<(), LedgerError> {
        self.append(e).await
    }

    async fn place_hold(&self, event: &NodeEvent) -> Result<HoldOutcome, LedgerError> {
        self.admit(event).await
    }

    async fn latest_holds(&self, nodes: &[NodeId]) -> Result<Vec<NodeEvent>, LedgerError> {
        let mut holds = Vec::with_capacity(nodes.len());
        for chunk in nodes.chunks(IN_LIST_CHUNK) {
            let mut query = Self::query(&format!(
                "SELECT e.* FROM node_events e
                 JOIN (SELECT node_id, MAX(seq) AS seq FROM node_events
                       WHERE hold_micros > 0 AND node_id IN ({}) GROUP BY node_id) last
                   ON e.seq = last.seq",
                dialect::params(chunk.len())
            ));
            for node in chunk {
                query = query.bind(node.0.as_str());
            }
            holds.extend(self.events(query).await?);
        }
        holds.sort_by_key(|e| e.at);
        Ok(holds)
    }

    async fn append_refusal(&self, r: &RefusalRecord) -> Result<(), LedgerError> {
        Self::query(
            "INSERT INTO refusals (pool, request_id, node_id, offering_id, replicas, reason, detail, {at}, refusal_key)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT DO NOTHING",
        )
        .bind(r.pool.as_str())
        .bind(r.request.as_ref().map(|x| x.0.as_str()))
        .bind(r.node.as_ref().map(|x| x.0.as_str()))
        .bind(r.offering.as_ref().map(|x| x.as_str()))
        .bind(D::int(r.replicas))
        .bind(r.reason.code().as_str())
        .bind(r.detail.as_str())
        .bind(D::time(r.at))
        .bind(r.key().as_str())
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
