//! The one SQL implementation of [`crate::Ledger`] (each of its roles, an impl block a role) for
//! every [`Dialect`]: each query is written here once, with `?` parameters and `{name}` timestamp
//! columns (see [`dialect::render`]).
//!
//! Lists of core values a query filters on (closing refusal reasons, final node states) are
//! bound from the core's own definitions, never written out in SQL, so the two cannot drift.

use std::collections::BTreeMap;
use std::sync::Arc;

use headroom_core::{CapacityRequest, NodeState, RequestId, RequestState, Timestamp};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, Pool, Row, Type};

use crate::admission::{EventWrite, Heads};
use crate::batch::Batches;
use crate::dialect::{self, Dialect, render};
use crate::ids::IdSource;
use crate::requests::RequestWrite;
use crate::{ApiToken, LedgerError, NodeEvent, RequestOutcome, Sequenced, derive};

mod alert_outbox;
mod api_tokens;
mod budgets;
mod coordination;
mod engine_memory;
mod history;
mod node_events;
mod requests;
mod schedules;

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
    /// standing, the only one ever read back); an instant already recorded for the key keeps its
    /// first body (a retried write). In the same transaction, deletes the key's rows older than
    /// `at` less `retention` ([`Self::prune`]).
    async fn record_body(
        &self,
        table: &str,
        key_column: &str,
        key: &str,
        at: Timestamp,
        body: &str,
        retention: chrono::TimeDelta,
    ) -> Result<(), LedgerError> {
        let mut tx = dialect::begin_serialised::<D>(&self.pool, &[], 0).await?;
        Self::query(&format!(
            "INSERT INTO {table} ({key_column}, {{at}}, body) VALUES (?, ?, ?)
             ON CONFLICT DO NOTHING"
        ))
        .bind(key)
        .bind(D::time(at))
        .bind(body)
        .execute(&mut *tx)
        .await?;
        Self::prune(&mut tx, table, key_column, key, at, retention).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Deletes `key`'s rows of `table` (a table pruned to a retention) older than `at` less
    /// `retention`, on `conn`: called in the transaction that has just recorded a row of `key` at
    /// `at`, which is newer than every row this deletes by more than the retention, as the
    /// table's trigger demands, so a key's newest row is never among them. One range of an index
    /// on (key, at): usually a row or none, those that have just aged past the retention.
    async fn prune(
        conn: &mut <D::Db as Database>::Connection,
        table: &str,
        key_column: &str,
        key: &str,
        at: Timestamp,
        retention: chrono::TimeDelta,
    ) -> Result<(), LedgerError> {
        if let Some(cutoff) = at.checked_sub_signed(retention) {
            Self::query(&format!(
                "DELETE FROM {table} WHERE {key_column} = ? AND {{at}} < ?"
            ))
            .bind(key)
            .bind(D::time(cutoff))
            .execute(&mut *conn)
            .await?;
        }
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
            include_str!("../../../../migrations/sqlite/0001_ledger.sql"),
            include_str!("../../../../migrations/postgres/0001_ledger.sql"),
        ] {
            let index = migration
                .lines()
                .find(|l| l.contains("INDEX node_events_one_end"))
                .expect("the one-end index");
            assert!(index.contains(&clause), "{index} should say {clause}");
        }
    }
}
