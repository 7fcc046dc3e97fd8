//! The one SQL implementation of [`crate::Ledger`] (each of its roles, an impl block a role) for
//! every [`Dialect`]: each query is written here once, with `?` parameters and `{name}` timestamp
//! columns (see [`dialect::render`]).
//!
//! Lists of core values a query filters on (closing refusal reasons, final node states) are
//! bound from the core's own definitions, never written out in SQL, so the two cannot drift.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use headroom_core::budget::BudgetStanding;
use headroom_core::planner::Destination;
use headroom_core::{
    AccountName, Budget, CapacityRequest, NodeId, NodeState, PoolName, RefusalReason, RequestId,
    RequestState, Timestamp,
};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, Pool, Row, Type};

use crate::admission::{EventWrite, Heads};
use crate::batch::Batches;
use crate::dialect::{self, Dialect, render};
use crate::ids::IdSource;
use crate::requests::RequestWrite;
use crate::{
    ACTIVATION_REASONS, AlertOutbox, ApiToken, ApiTokens, Budgets, CONTROLLER_MEMORY_RETENTION,
    Coordination, EngineMemory, HOLD_RENEWAL, History, HoldOutcome, LedgerError, LedgerSummary,
    NewCapacityRequest, NodeEvent, NodeEvents, PendingAlert, RefusalRecord, RequestOutcome,
    RequestPageQuery, Requests, Revision, Schedules, Sequenced, StoredWindow, derive,
};

/// A ledger on the database `D` speaks to. [`crate::SqliteLedger`] and
/// [`crate::PostgresLedger`] are this with their dialects.
#[derive(Debug, Clone)]
pub struct SqlLedger<D: Dialect> {
    pool: Pool<D::Db>,
    dialect: D,
    event_writes: Arc<Batches<EventWrite>>,
    request_writes: Arc<Batches<RequestWrite>>,
    heads: Arc<Heads>,
    /// Where capacity request ids come from (random unless [`SqlLedger::with_ids`]).
    ids: IdSource,
}

pub(crate) type DbRow<D> = <<D as Dialect>::Db as Database>::Row;
/// A query on `D`, with values bound that live for `'q`.
pub(crate) type Statement<'q, D> =
    Query<'q, <D as Dialect>::Db, <<D as Dialect>::Db as Database>::Arguments>;

/// The states a node's history ends in, as the core defines them.
fn final_states() -> Vec<&'static str> {
    NodeState::ALL
        .into_iter()
        .filter(|s| s.is_final())
        .map(NodeState::as_str)
        .collect()
}

/// Values bound into one `IN (…)` list at most: well under every backend's parameter limit,
/// and 250 node ids (about 10 KiB) stay within one TLS record (see [`crate::batch::BATCH_BYTES`]).
pub(crate) const IN_LIST_CHUNK: usize = 250;

/// Events inserted by one statement at most: 1,280 parameters, well under every backend's limit.
pub(crate) const EVENTS_PER_INSERT: usize = 64;

/// What admitting `event` adds to its account's holds: its hold, less what its node (whose
/// events so far are `node_history`) still holds, since every hold replaces the node's last.
pub(crate) fn admitted_increment(
    node_history: &[&NodeEvent],
    event: &NodeEvent,
) -> headroom_core::Money {
    let still_held = derive::node_held(node_history, event.at);
    debug_assert!(still_held >= headroom_core::Money::ZERO);
    event
        .hold
        .saturating_sub(still_held)
        .max(headroom_core::Money::ZERO)
}

/// Batches of one kind of write that run at once. One: while it runs, the next gathers
/// every write that arrives, so each commit carries as many as wait. Two or more split those
/// writes into smaller batches that pay a round trip each, and measured slower on PostgreSQL
/// (budget admissions at 8 clients: 0.53x pgbench with two against 0.70x with one, and at 32
/// clients 0.94x against 1.51x, `headroom bench admissions`).
const BATCHES_AT_ONCE: usize = 1;

impl<D: Dialect> SqlLedger<D> {
    pub(crate) fn new(pool: Pool<D::Db>, dialect: D) -> Self {
        SqlLedger {
            pool,
            dialect,
            event_writes: Arc::new(Batches::new(BATCHES_AT_ONCE)),
            request_writes: Arc::new(Batches::new(BATCHES_AT_ONCE)),
            heads: Arc::default(),
            ids: IdSource::random(),
        }
    }

    /// This ledger minting its capacity request ids from `ids` (a seeded source replays them).
    pub fn with_ids(mut self, ids: IdSource) -> Self {
        self.ids = ids;
        self
    }

    pub(crate) fn ids(&self) -> &IdSource {
        &self.ids
    }

    pub(crate) fn pool(&self) -> &Pool<D::Db> {
        &self.pool
    }

    /// The node events, appended or admitted, waiting for a batch ([`crate::admission`]),
    /// shared by every clone.
    pub(crate) fn event_writes(&self) -> &Batches<EventWrite> {
        &self.event_writes
    }

    /// The heads of the accounts' checkpoint chains as this process last wrote them
    /// ([`crate::admission`]).
    pub(crate) fn heads(&self) -> &Heads {
        &self.heads
    }

    /// The capacity requests waiting for a batch ([`crate::requests`]), shared by every clone.
    pub(crate) fn request_writes(&self) -> &Batches<RequestWrite> {
        &self.request_writes
    }
}

// The same bounds again on each role's impl below: Rust does not carry a where clause from one
// impl to another, and these are what every backend's sqlx driver provides.
impl<D: Dialect> SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    /// A query written once, in `D`'s SQL.
    pub(crate) fn query(template: &str) -> Statement<'static, D> {
        sqlx::query(AssertSqlSafe(render::<D>(template)))
    }

    /// Adds a `(key, at, body)` row to `table` (a state kept as JSON, the latest row per key
    /// standing); an instant already recorded for the key keeps its first body (a retried
    /// write).
    async fn record_body(
        &self,
        table: &str,
        key_column: &str,
        key: &str,
        at: Timestamp,
        body: &str,
    ) -> Result<(), LedgerError> {
        Self::query(&format!(
            "INSERT INTO {table} ({key_column}, {{at}}, body) VALUES (?, ?, ?)
             ON CONFLICT DO NOTHING"
        ))
        .bind(key)
        .bind(D::time(at))
        .bind(body)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// `key`'s latest row in `table` (see [`Self::record_body`]) with its instant, if any.
    async fn latest_body(
        &self,
        table: &str,
        key_column: &str,
        key: &str,
    ) -> Result<Option<(Timestamp, String)>, LedgerError> {
        let row = Self::query(&format!(
            "SELECT {{at}}, body FROM {table} WHERE {key_column} = ? ORDER BY {{at}} DESC LIMIT 1"
        ))
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            let at: D::Time = row.try_get(format!("at{}", D::TIME_SUFFIX).as_str())?;
            Ok((D::timestamp(at)?, row.try_get("body")?))
        })
        .transpose()
    }

    /// Closes an outbox notification with `outcome`; the first outcome recorded stands.
    async fn close_alert(&self, seq: i64, outcome: &str, at: Timestamp) -> Result<(), LedgerError> {
        Self::query(
            "INSERT INTO alert_deliveries (outbox_seq, outcome, {at}) VALUES (?, ?, ?)
             ON CONFLICT DO NOTHING",
        )
        .bind(seq)
        .bind(outcome)
        .bind(D::time(at))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Inserts events, many to a statement; the sequence numbers of those not recorded
    /// before, by event key.
    pub(crate) async fn insert_events(
        conn: &mut <D::Db as Database>::Connection,
        events: &[&NodeEvent],
    ) -> Result<BTreeMap<String, i64>, LedgerError> {
        let mut seqs = BTreeMap::new();
        for chunk in events.chunks(EVENTS_PER_INSERT) {
            let keys: Vec<String> = chunk.iter().map(|e| e.key()).collect();
            let query = Self::query(&format!(
                "{} RETURNING seq, event_key",
                Self::events_insert(chunk.len())
            ));
            for row in Self::bind_events(query, chunk, &keys)
                .fetch_all(&mut *conn)
                .await?
            {
                seqs.insert(row.try_get("event_key")?, row.try_get("seq")?);
            }
        }
        Ok(seqs)
    }

    /// The statement that inserts `rows` events (at most [`EVENTS_PER_INSERT`]), each skipped
    /// when recorded before, for [`Self::bind_events`].
    pub(crate) fn events_insert(rows: usize) -> String {
        debug_assert!(rows <= EVENTS_PER_INSERT);
        format!(
            "INSERT INTO node_events (node_id, pool, account, offering_id, provider, region, zone,
                instance_type, market, request_id, destination, state, instance_id, client_token,
                price_micros, parked_price_micros, gpus, hold_micros, reason, {{at}}, event_key)
             VALUES {}
             ON CONFLICT DO NOTHING",
            dialect::rows(rows, 21)
        )
    }

    /// `query` ([`Self::events_insert`]) bound with `events` and their `keys`.
    pub(crate) fn bind_events<'q>(
        mut query: Statement<'q, D>,
        events: &[&'q NodeEvent],
        keys: &'q [String],
    ) -> Statement<'q, D> {
        for (e, key) in events.iter().zip(keys) {
            query = query
                .bind(e.node.0.as_str())
                .bind(e.pool.as_str())
                .bind(e.account.as_str())
                .bind(e.offering.as_str())
                .bind(e.provider.as_str())
                .bind(e.region.as_str())
                .bind(e.zone.as_str())
                .bind(e.instance_type.as_str())
                .bind(e.market.as_str())
                .bind(e.request.as_ref().map(|r| r.0.as_str()))
                .bind(e.destination.as_str())
                .bind(e.state.as_str())
                .bind(e.instance.as_deref())
                .bind(e.client_token.as_str())
                .bind(e.price_usd_per_hour.micros())
                .bind(e.parked_usd_per_hour.micros())
                .bind(D::int(e.gpus))
                .bind(e.hold.micros())
                .bind(e.reason.as_deref())
                .bind(D::time(e.at))
                .bind(key.as_str());
        }
        query
    }

    async fn tokens_where(&self, id: Option<&str>) -> Result<Vec<ApiToken>, LedgerError> {
        Self::query(
            "SELECT t.*, r.{at} AS {revoked} FROM api_tokens t
             LEFT JOIN api_token_revocations r ON r.token_id = t.id
             WHERE CAST(? AS TEXT) IS NULL OR t.id = ?
             ORDER BY t.{created}, t.id",
        )
        .bind(id)
        .bind(id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(Self::token_from_row)
        .collect()
    }

    async fn request_by_id(&self, id: &RequestId) -> Result<Option<CapacityRequest>, LedgerError> {
        Self::query("SELECT * FROM capacity_requests WHERE id = ?")
            .bind(id.0.as_str())
            .fetch_optional(&self.pool)
            .await?
            .map(|row| Self::request_from_row(&row))
            .transpose()
    }

    async fn count(&self, query: Statement<'_, D>) -> Result<u64, LedgerError> {
        let row = query.fetch_one(&self.pool).await?;
        Ok(row.try_get::<i64, _>("n")? as u64)
    }

    async fn outcome(&self, request: CapacityRequest) -> Result<RequestOutcome, LedgerError> {
        let delivered = self
            .count(
                Self::query(
                    "SELECT COUNT(DISTINCT node_id) AS n FROM node_events
                     WHERE request_id = ? AND state = ?",
                )
                .bind(request.id.0.as_str())
                .bind(NodeState::Serving.as_str()),
            )
            .await?;
        let cancelled = self
            .count(
                Self::query("SELECT COUNT(*) AS n FROM request_cancellations WHERE request_id = ?")
                    .bind(request.id.0.as_str()),
            )
            .await?;
        let refusals = Self::query("SELECT * FROM refusals WHERE request_id = ? ORDER BY seq")
            .bind(request.id.0.as_str())
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(Self::refusal_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let closed = refusals.iter().any(|r| r.reason.closes_request());
        let delivered = (delivered as u32).min(request.replicas);
        Ok(RequestOutcome {
            state: RequestState::derive(request.replicas, delivered, closed, cancelled > 0),
            delivered,
            refusals,
            request,
        })
    }

    async fn events(&self, query: Statement<'_, D>) -> Result<Vec<NodeEvent>, LedgerError> {
        query
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(Self::event_from_row)
            .collect()
    }

    async fn sequenced_events(
        &self,
        query: Statement<'_, D>,
    ) -> Result<Vec<Sequenced<NodeEvent>>, LedgerError> {
        query
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| {
                Ok(Sequenced {
                    seq: row.try_get("seq")?,
                    row: Self::event_from_row(row)?,
                })
            })
            .collect()
    }

    /// The latest event of every live node with its sequence number, in ledger order.
    async fn live_heads(&self) -> Result<Vec<Sequenced<NodeEvent>>, LedgerError> {
        let finals = final_states();
        // Walk the node ids through the (node_id, seq) index, one probe per
        // node, then each node's last event, so the cost grows with the nodes ever made and not
        // with their events (a node running a week has thousands of renewals); a GROUP BY over
        // the whole table grew with every renewal and made each tick slower than the last.
        let mut query = Self::query(&format!(
            "WITH RECURSIVE nodes(id) AS (
               SELECT MIN(node_id) FROM node_events
               UNION ALL
               SELECT (SELECT MIN(n.node_id) FROM node_events n WHERE n.node_id > nodes.id)
               FROM nodes WHERE nodes.id IS NOT NULL
             ), heads(seq) AS (
               SELECT (SELECT MAX(x.seq) FROM node_events x WHERE x.node_id = nodes.id)
               FROM nodes WHERE nodes.id IS NOT NULL
             )
             SELECT e.* FROM heads JOIN node_events e ON e.seq = heads.seq
             WHERE e.state NOT IN ({})
             ORDER BY e.seq",
            dialect::params(finals.len())
        ));
        for state in finals {
            query = query.bind(state);
        }
        self.sequenced_events(query).await
    }

    async fn refusals_by_reason(&self) -> Result<BTreeMap<String, u64>, LedgerError> {
        let rows = Self::query(
            "SELECT reason, CAST(SUM(replicas) AS BIGINT) AS n FROM refusals GROUP BY reason",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut by_reason = BTreeMap::new();
        for row in rows {
            by_reason.insert(row.try_get("reason")?, row.try_get::<i64, _>("n")? as u64);
        }
        Ok(by_reason)
    }
}

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

#[async_trait]
impl<D: Dialect> Budgets for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn put_budget(&self, b: &Budget, at: Timestamp) -> Result<(), LedgerError> {
        Self::query(
            "INSERT INTO budget_versions (account, period, ceiling_micros, soft_threshold_percent, hard_action, {at})
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(b.account.as_str())
        .bind(b.period.as_str())
        .bind(b.ceiling.micros())
        .bind(D::int(u32::from(b.soft_threshold_percent)))
        .bind(b.hard_action.as_str())
        .bind(D::time(at))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn budgets(&self) -> Result<Vec<Budget>, LedgerError> {
        Self::query(
            "SELECT b.* FROM budget_versions b
             JOIN (SELECT account, MAX(seq) AS seq FROM budget_versions GROUP BY account) last
               ON b.seq = last.seq
             ORDER BY b.account",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(Self::budget_from_row)
        .collect()
    }

    async fn account_events(&self, account: &AccountName) -> Result<Vec<NodeEvent>, LedgerError> {
        self.events(
            Self::query("SELECT * FROM node_events WHERE account = ? ORDER BY seq")
                .bind(account.as_str()),
        )
        .await
    }

    async fn budget_standing(
        &self,
        budget: &Budget,
        now: Timestamp,
    ) -> Result<BudgetStanding, LedgerError> {
        let mut conn = self.pool.acquire().await?;
        Self::checkpointed_standings(&mut conn, &[(budget, now)])
            .await?
            .into_iter()
            .next()
            .map(|s| s.standing)
            .ok_or_else(|| LedgerError::Corrupt(format!("no standing for {}", budget.account)))
    }
}

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
        Self::query("INSERT INTO decisions (pool, {at}, record) VALUES (?, ?, CAST(? AS {json}))")
            .bind(pool.as_str())
            .bind(D::time(at))
            .bind(record)
            .execute(&self.pool)
            .await?;
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
        let mut tx = dialect::begin_serialised::<D>(&self.pool, &[], 0).await?;
        Self::query(
            "INSERT INTO controller_memory (pool, {at}, body) VALUES (?, ?, ?)
             ON CONFLICT DO NOTHING",
        )
        .bind(pool.as_str())
        .bind(D::time(at))
        .bind(body)
        .execute(&mut *tx)
        .await?;
        // The row just recorded (or the one already at `at`) is newer than every row this
        // deletes, so the pool's newest row is never among them. One range of the primary key
        // (pool, at): usually one row, the one that has just aged past the retention.
        if let Some(cutoff) = at.checked_sub_signed(CONTROLLER_MEMORY_RETENTION) {
            Self::query("DELETE FROM controller_memory WHERE pool = ? AND {at} < ?")
                .bind(pool.as_str())
                .bind(D::time(cutoff))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
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
        self.record_body("alert_book", "scope", scope, at, body)
            .await
    }

    async fn alert_book(&self, scope: &str) -> Result<Option<(Timestamp, String)>, LedgerError> {
        self.latest_body("alert_book", "scope", scope).await
    }
}

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

#[async_trait]
impl<D: Dialect> ApiTokens for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn create_token(&self, t: &ApiToken) -> Result<(), LedgerError> {
        Self::query(
            "INSERT INTO api_tokens (id, secret_sha256, accounts, scopes, {created}) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(t.id.as_str())
        .bind(t.secret_sha256.as_str())
        .bind(t.accounts.join(",").as_str())
        .bind(t.scopes.join(",").as_str())
        .bind(D::time(t.created_at))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn token(&self, id: &str) -> Result<Option<ApiToken>, LedgerError> {
        Ok(self.tokens_where(Some(id)).await?.into_iter().next())
    }

    async fn tokens(&self) -> Result<Vec<ApiToken>, LedgerError> {
        self.tokens_where(None).await
    }

    async fn revoke_token(&self, id: &str, now: Timestamp) -> Result<bool, LedgerError> {
        if self.token(id).await?.is_none() {
            return Ok(false);
        }
        Self::query(
            "INSERT INTO api_token_revocations (token_id, {at}) VALUES (?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(D::time(now))
        .execute(&self.pool)
        .await?;
        Ok(true)
    }
}

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

#[cfg(test)]
mod tests {
    use super::final_states;

    /// The schema's one-end-per-node index lists the final states itself, and deployed schemas
    /// do not change: it must name exactly the states the core calls final, or a node could end
    /// twice (or a live one be refused its end).
    #[test]
    fn the_one_end_index_names_the_final_states() {
        let quoted: Vec<String> = final_states().iter().map(|s| format!("'{s}'")).collect();
        let clause = format!("WHERE state IN ({})", quoted.join(", "));
        for migration in [
            include_str!("../../../migrations/sqlite/0001_ledger.sql"),
            include_str!("../../../migrations/postgres/0001_ledger.sql"),
        ] {
            let index = migration
                .lines()
                .find(|l| l.contains("INDEX node_events_one_end"))
                .expect("the one-end index");
            assert!(index.contains(&clause), "{index} should say {clause}");
        }
    }
}
