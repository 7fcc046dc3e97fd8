//! The [`Requests`] role: capacity requests recorded, cancelled and read back.

use async_trait::async_trait;
use headroom_core::{
    CapacityRequest, NodeState, PoolName, RefusalReason, RequestId, RequestState, Timestamp,
};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use super::{DbRow, IN_LIST_CHUNK, SqlLedger};
use crate::dialect::{self, Dialect};
use crate::{
    LedgerError, NewCapacityRequest, NodeEvent, RequestOutcome, RequestPageQuery, Requests,
};

#[async_trait]
impl<D: Dialect> Requests for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn record_capacity_request(
        &self,
        new: &NewCapacityRequest,
    ) -> Result<(CapacityRequest, bool), LedgerError> {
        self.record_request(new).await
    }

    async fn cancel_capacity_request(
        &self,
        id: &RequestId,
        at: Timestamp,
    ) -> Result<RequestOutcome, LedgerError> {
        let request = self
            .request_by_id(id)
            .await?
            .ok_or_else(|| LedgerError::UnknownRequest(id.clone()))?;
        Self::query(
            "INSERT INTO request_cancellations (request_id, {at}) VALUES (?, ?)
             ON CONFLICT (request_id) DO NOTHING",
        )
        .bind(id.0.as_str())
        .bind(D::time(at))
        .execute(&self.pool)
        .await?;
        self.outcome(request).await
    }

    async fn capacity_request(
        &self,
        id: &RequestId,
    ) -> Result<Option<RequestOutcome>, LedgerError> {
        match self.request_by_id(id).await? {
            Some(request) => Ok(Some(self.outcome(request).await?)),
            None => Ok(None),
        }
    }

    async fn capacity_request_in(
        &self,
        id: &RequestId,
        pools: &[PoolName],
    ) -> Result<Option<RequestOutcome>, LedgerError> {
        // The outcome's reads only for a request the caller may see.
        match self
            .request_by_id(id)
            .await?
            .filter(|request| pools.contains(&request.pool))
        {
            Some(request) => Ok(Some(self.outcome(request).await?)),
            None => Ok(None),
        }
    }

    async fn cancelled_requests(
        &self,
        ids: &[RequestId],
    ) -> Result<std::collections::HashSet<RequestId>, LedgerError> {
        let mut cancelled = std::collections::HashSet::new();
        for chunk in ids.chunks(IN_LIST_CHUNK) {
            let mut query = Self::query(&format!(
                "SELECT request_id FROM request_cancellations WHERE request_id IN ({})",
                dialect::params(chunk.len())
            ));
            for id in chunk {
                query = query.bind(id.0.as_str());
            }
            for row in query.fetch_all(&self.pool).await? {
                cancelled.insert(RequestId(row.try_get("request_id")?));
            }
        }
        Ok(cancelled)
    }

    async fn capacity_requests_between(
        &self,
        pool: &PoolName,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<RequestOutcome>, LedgerError> {
        let rows = Self::query(
            "SELECT * FROM capacity_requests
             WHERE pool = ? AND {created_at} >= ? AND {created_at} < ?
             ORDER BY {created_at}, id",
        )
        .bind(pool.as_str())
        .bind(D::time(from))
        .bind(D::time(to))
        .fetch_all(&self.pool)
        .await?;
        let mut outcomes = Vec::with_capacity(rows.len());
        for row in &rows {
            outcomes.push(self.outcome(Self::request_from_row(row)?).await?);
        }
        Ok(outcomes)
    }

    async fn capacity_request_page(
        &self,
        q: &RequestPageQuery<'_>,
    ) -> Result<Vec<RequestOutcome>, LedgerError> {
        if q.pools.is_empty() || q.limit == 0 {
            return Ok(Vec::new());
        }
        // The state as `RequestState::derive` has it, in terms the planner estimates well
        // (EXISTS and NOT EXISTS become semi- and anti-joins): PostgreSQL then walks the
        // `capacity_requests_by_pool` index newest first and stops at the limit, instead of
        // deriving every request of the pool to sort them.
        enum Bind {
            Serving,
            Closing,
        }
        let closing = RefusalReason::closing_codes();
        let cancelled = "EXISTS (SELECT 1 FROM request_cancellations c WHERE c.request_id = r.id)";
        let served =
            "EXISTS (SELECT 1 FROM node_events e WHERE e.request_id = r.id AND e.state = ?)";
        let delivered = "(SELECT COUNT(DISTINCT e.node_id) FROM node_events e
                           WHERE e.request_id = r.id AND e.state = ?)";
        let closed = format!(
            "EXISTS (SELECT 1 FROM refusals f WHERE f.request_id = r.id AND f.reason IN ({}))",
            dialect::params(closing.len())
        );
        let (state, state_binds) = match q.state {
            None => (String::new(), vec![]),
            Some(RequestState::Cancelled) => (format!("AND {cancelled}"), vec![]),
            Some(RequestState::Delivered) => (
                format!("AND NOT {cancelled} AND {served} AND {delivered} >= r.replicas"),
                vec![Bind::Serving, Bind::Serving],
            ),
            Some(RequestState::PartiallyDelivered) => (
                format!("AND NOT {cancelled} AND {served} AND {delivered} < r.replicas"),
                vec![Bind::Serving, Bind::Serving],
            ),
            Some(RequestState::Refused) => (
                format!("AND NOT {cancelled} AND NOT {served} AND {closed}"),
                vec![Bind::Serving, Bind::Closing],
            ),
            Some(RequestState::Pending) => (
                format!("AND NOT {cancelled} AND NOT {served} AND NOT {closed}"),
                vec![Bind::Serving, Bind::Closing],
            ),
        };
        let mut query = Self::query(&format!(
            "SELECT r.*,
               {delivered} AS delivered_n,
               (SELECT COUNT(*) FROM request_cancellations c
                 WHERE c.request_id = r.id) AS cancelled_n,
               (SELECT COUNT(*) FROM refusals f
                 WHERE f.request_id = r.id AND f.reason IN ({})) AS closing_n
             FROM capacity_requests r
             WHERE r.pool IN ({}) {} {} {state}
             ORDER BY r.{{created_at}} DESC, r.id DESC
             LIMIT ?",
            dialect::params(closing.len()),
            dialect::params(q.pools.len()),
            if q.since.is_some() {
                "AND r.{created_at} >= ?"
            } else {
                ""
            },
            if q.before.is_some() {
                "AND (r.{created_at}, r.id) < (?, ?)"
            } else {
                ""
            },
        ))
        .bind(NodeState::Serving.as_str());
        for code in &closing {
            query = query.bind(code.as_str());
        }
        for pool in q.pools {
            query = query.bind(pool.as_str());
        }
        if let Some(since) = q.since {
            query = query.bind(D::time(since));
        }
        if let Some((at, id)) = &q.before {
            query = query.bind(D::time(*at)).bind(id.0.as_str());
        }
        for bind in state_binds {
            match bind {
                Bind::Serving => query = query.bind(NodeState::Serving.as_str()),
                Bind::Closing => {
                    for code in &closing {
                        query = query.bind(code.as_str());
                    }
                }
            }
        }
        let rows = query.bind(i64::from(q.limit)).fetch_all(&self.pool).await?;
        let mut page = Vec::with_capacity(rows.len());
        for row in &rows {
            let request = Self::request_from_row(row)?;
            let delivered = u32::try_from(row.try_get::<i64, _>("delivered_n")?)
                .unwrap_or(u32::MAX)
                .min(request.replicas);
            let cancelled = row.try_get::<i64, _>("cancelled_n")? > 0;
            let closed = row.try_get::<i64, _>("closing_n")? > 0;
            page.push(RequestOutcome {
                state: RequestState::derive(request.replicas, delivered, closed, cancelled),
                delivered,
                refusals: Vec::new(),
                request,
            });
        }
        // The page's refusals in one read per chunk, not one per request.
        let ids: Vec<String> = page.iter().map(|o| o.request.id.0.clone()).collect();
        for chunk in ids.chunks(IN_LIST_CHUNK) {
            let mut query = Self::query(&format!(
                "SELECT * FROM refusals WHERE request_id IN ({}) ORDER BY seq",
                dialect::params(chunk.len())
            ));
            for id in chunk {
                query = query.bind(id.as_str());
            }
            for row in query.fetch_all(&self.pool).await? {
                let refusal = Self::refusal_from_row(&row)?;
                if let Some(outcome) = page
                    .iter_mut()
                    .find(|o| refusal.request.as_ref() == Some(&o.request.id))
                {
                    outcome.refusals.push(refusal);
                }
            }
        }
        Ok(page)
    }

    async fn request_events(&self, id: &RequestId) -> Result<Vec<NodeEvent>, LedgerError> {
        self.events(
            Self::query("SELECT * FROM node_events WHERE request_id = ? ORDER BY seq")
                .bind(id.0.as_str()),
        )
        .await
    }

    async fn open_capacity_requests(&self) -> Result<Vec<CapacityRequest>, LedgerError> {
        let closing = RefusalReason::closing_codes();
        let mut query = Self::query(&format!(
            "SELECT * FROM capacity_requests r
             WHERE NOT EXISTS (SELECT 1 FROM request_cancellations c WHERE c.request_id = r.id)
               AND NOT EXISTS (SELECT 1 FROM refusals f WHERE f.request_id = r.id
                               AND f.reason IN ({}))
             ORDER BY {{created_at}}, id",
            dialect::params(closing.len())
        ));
        for code in &closing {
            query = query.bind(code.as_str());
        }
        query
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(Self::request_from_row)
            .collect()
    }
}
