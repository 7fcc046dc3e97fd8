//! The [`History`] role: the node record read back, for ticks, the API and the reports.

use async_trait::async_trait;
use headroom_core::planner::Destination;
use headroom_core::{NodeState, PoolName, Timestamp};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use super::{DbRow, SqlLedger};
use crate::dialect::{self, Dialect};
use crate::{
    ACTIVATION_REASONS, HOLD_RENEWAL, History, LedgerError, LedgerSummary, NodeEvent,
    RefusalRecord, Sequenced, derive,
};

#[async_trait]
impl<D: Dialect> History for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn live_nodes(&self) -> Result<Vec<NodeEvent>, LedgerError> {
        Ok(self
            .live_heads()
            .await?
            .into_iter()
            .map(|e| e.row)
            .collect())
    }

    async fn live_nodes_through(
        &self,
    ) -> Result<Option<(i64, Vec<Sequenced<NodeEvent>>)>, LedgerError> {
        if !D::COMMITS_IN_SEQ_ORDER {
            return Ok(None);
        }
        // The number first: the heads read after it include every event up to it.
        let through: Option<i64> = Self::query("SELECT MAX(seq) AS seq FROM node_events")
            .fetch_one(&self.pool)
            .await?
            .try_get("seq")?;
        Ok(Some((through.unwrap_or(0), self.live_heads().await?)))
    }

    async fn node_events_after(
        &self,
        seq: i64,
        limit: u32,
    ) -> Result<Vec<Sequenced<NodeEvent>>, LedgerError> {
        self.sequenced_events(
            Self::query("SELECT * FROM node_events WHERE seq > ? ORDER BY seq LIMIT ?")
                .bind(seq)
                .bind(i64::from(limit)),
        )
        .await
    }

    async fn node_events(&self) -> Result<Vec<NodeEvent>, LedgerError> {
        self.events(Self::query("SELECT * FROM node_events ORDER BY seq"))
            .await
    }

    async fn pool_events(&self, pool: &PoolName) -> Result<Vec<NodeEvent>, LedgerError> {
        self.events(
            Self::query("SELECT * FROM node_events WHERE pool = ? ORDER BY seq")
                .bind(pool.as_str()),
        )
        .await
    }

    async fn pool_event_page(
        &self,
        pool: &PoolName,
        from: Timestamp,
        to: Timestamp,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Sequenced<NodeEvent>>, LedgerError> {
        self.sequenced_events(
            Self::query(
                "SELECT * FROM node_events
                 WHERE pool = ? AND {at} >= ? AND {at} < ? AND seq > ?
                 ORDER BY seq LIMIT ?",
            )
            .bind(pool.as_str())
            .bind(D::time(from))
            .bind(D::time(to))
            .bind(after.unwrap_or(i64::MIN))
            .bind(i64::from(limit)),
        )
        .await
    }

    async fn refusals_between(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<RefusalRecord>, LedgerError> {
        Self::query("SELECT * FROM refusals WHERE {at} >= ? AND {at} < ? ORDER BY seq")
            .bind(D::time(from))
            .bind(D::time(to))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(Self::refusal_from_row)
            .collect()
    }

    async fn summary(&self, now: Timestamp) -> Result<LedgerSummary, LedgerError> {
        let capacity_requests = self
            .count(Self::query("SELECT COUNT(*) AS n FROM capacity_requests"))
            .await?;
        let mut requested = Self::query(&format!(
            "SELECT COUNT(*) AS n FROM node_events WHERE destination = ? AND reason IN ({})",
            dialect::params(ACTIVATION_REASONS.len())
        ))
        .bind(Destination::Serve.as_str());
        for reason in ACTIVATION_REASONS {
            requested = requested.bind(reason);
        }
        let capacity_requested = self.count(requested).await?;
        // A renewal repeats a serving node's state: it is not new capacity.
        let capacity_delivered = self
            .count(
                Self::query(
                    "SELECT COUNT(*) AS n FROM node_events
                     WHERE state = ? AND (reason IS NULL OR reason <> ?)",
                )
                .bind(NodeState::Serving.as_str())
                .bind(HOLD_RENEWAL),
            )
            .await?;
        let refusals_by_reason = self.refusals_by_reason().await?;
        // Every event there is, to price every node's whole life; see `derive::spend`.
        let events = self.node_events().await?;
        let as_of = derive::as_of(&events, now);
        Ok(LedgerSummary {
            capacity_requests,
            capacity_requested,
            capacity_delivered,
            refusals: refusals_by_reason.values().sum(),
            refusals_by_reason,
            spend: derive::spend(&events, None, None, as_of),
            as_of,
        })
    }
}
