//! The seam between the one SQL implementation ([`crate::sql`]) and a backend: only what the two
//! databases really do differently. Everything else, every query included, is written once.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use headroom_core::{PoolName, Timestamp};
use sqlx::{Database, Decode, Encode, IntoArguments, Pool, Transaction, Type};

use crate::LedgerError;

/// A backend. Queries are written with `?` parameters and `{name}` for a timestamp column;
/// [`render`] turns them into this backend's SQL.
#[async_trait]
pub trait Dialect: Debug + Send + Sync + 'static {
    type Db: Database<Arguments: IntoArguments<Self::Db>>;

    /// What an `INTEGER` column holds: 32 bits on Postgres, 64 on SQLite.
    type Int: for<'q> Encode<'q, Self::Db>
        + for<'r> Decode<'r, Self::Db>
        + Type<Self::Db>
        + Send
        + Sync
        + 'static;

    /// What a timestamp column holds: `TIMESTAMPTZ` on Postgres, integer milliseconds on SQLite.
    type Time: for<'q> Encode<'q, Self::Db>
        + for<'r> Decode<'r, Self::Db>
        + Type<Self::Db>
        + Send
        + Sync
        + 'static;

    /// Postgres numbers its parameters (`$1`, `$2`, …); SQLite takes `?` as written.
    const NUMBERED_PARAMS: bool;

    /// Appended to a timestamp column's name: the SQLite schema says `at_ms` where Postgres says
    /// `at`, and deployed ledgers keep their schemas.
    const TIME_SUFFIX: &'static str;

    /// The column type of a decision's JSON document, to cast a text parameter to.
    const JSON_TYPE: &'static str;

    fn int(n: u32) -> Self::Int;

    fn uint(stored: Self::Int) -> u32;

    fn time(at: Timestamp) -> Self::Time;

    fn timestamp(stored: Self::Time) -> Result<Timestamp, LedgerError>;

    /// Begins a transaction that runs alone among those begun with any of the same `keys` and
    /// `seed`, across every process sharing the database (the alert outbox; with no keys, a
    /// plain transaction on PostgreSQL and SQLite's one writer). Several keys are taken in one
    /// order everywhere, so two transactions can never wait on each other's. Callers go
    /// through [`begin_serialised`]: cancelling this future while the database begins can
    /// leave the transaction open.
    async fn begin_serialised_unguarded(
        pool: &Pool<Self::Db>,
        keys: &[&str],
        seed: i64,
    ) -> Result<Transaction<'static, Self::Db>, sqlx::Error>;

    /// Whether a statement may insert in a `WITH` clause (PostgreSQL): inserts that must land
    /// together then go as one statement, one round trip that commits alone. Otherwise they
    /// share a transaction (SQLite, in-process, where a round trip costs nothing).
    const INSERTS_IN_WITH: bool;

    /// One statement giving [`crate::Revision`]'s fields as the columns `budgets`, `windows` and
    /// `requests` (a null where the backend gives none).
    const REVISION: &'static str;

    /// Whether node events commit in the order of their sequence numbers, so the events after
    /// one a reader saw are exactly those with larger numbers: true with one writer at a time
    /// (SQLite); PostgreSQL draws the number before a transaction commits, and a smaller one may
    /// commit after a larger one was read.
    const COMMITS_IN_SEQ_ORDER: bool;

    /// See [`crate::Coordination::pool_leases`]: a backend only one process opens owns every
    /// pool.
    async fn pool_leases(&self, pools: &[PoolName]) -> Result<BTreeSet<PoolName>, LedgerError> {
        Ok(pools.iter().cloned().collect())
    }

    /// See [`crate::Coordination::share_signal`]: a backend only one process opens has nobody
    /// to tell.
    async fn share_signal(pool: &Pool<Self::Db>, payload: &str) -> Result<(), LedgerError> {
        let _ = (pool, payload);
        Ok(())
    }

    /// See [`crate::Coordination::shared_signals`].
    async fn shared_signals(&self) -> Result<Option<crate::SignalFeed>, LedgerError> {
        Ok(None)
    }
}

/// [`Dialect::begin_serialised_unguarded`], in a task of its own: a caller cancelled while the
/// database begins (an API request timing out) cannot leave the transaction open. sqlx counts a
/// transaction only once its `BEGIN` is answered, so a future dropped before that returns the
/// connection to the pool with the transaction, and every lock it took, still open on the
/// server: each later transaction with those keys would wait for ever, and the connection's
/// next user would write into a transaction nobody commits. The task always finishes the
/// begin; when nobody waits for it any more, the transaction is dropped there and rolled back.
pub(crate) async fn begin_serialised<D: Dialect>(
    pool: &Pool<D::Db>,
    keys: &[&str],
    seed: i64,
) -> Result<Transaction<'static, D::Db>, LedgerError> {
    let pool = pool.clone();
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    let begun = tokio::spawn(async move {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        D::begin_serialised_unguarded(&pool, &keys, seed).await
    })
    .await
    // Only a panic inside sqlx ends the task early.
    .map_err(|_| sqlx::Error::WorkerCrashed)?;
    Ok(begun?)
}

/// How long a pooled connection may sit idle and still be handed out without a ping.
const UNTESTED_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Connections still to ping when handed out, however briefly idle: set when a statement
/// found its connection lost, as every connection a pool holds is when the server restarts or
/// fails over. More than any pool of the ledger holds.
static SUSPECT_CONNECTIONS: AtomicU32 = AtomicU32::new(0);
const POOL_AT_MOST: u32 = 32;

/// Whether `error` says the connection is gone (rather than the statement refused): the
/// pool's other idle connections are then suspect too.
pub(crate) fn note_if_connection_lost(error: &sqlx::Error) {
    let lost = match error {
        // 08: connection exception; 57P: the server is shutting down or ended the session.
        sqlx::Error::Database(e) => e
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        _ => false,
    };
    if lost {
        SUSPECT_CONNECTIONS.store(POOL_AT_MOST, Ordering::Relaxed);
    }
}

/// The pool options every backend starts from. sqlx pings each connection it takes from the
/// pool by default: a second round trip before every statement the ledger sends, which
/// halved the rate of every write. A connection is pinged now only when it sat idle for
/// longer than [`UNTESTED_IDLE`] (the server may have dropped it meanwhile) or after a
/// statement found its connection lost, so a restarted server costs one failed statement,
/// not one per pooled connection.
pub(crate) fn pool_options<DB: Database>() -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                let suspect = SUSPECT_CONNECTIONS
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok();
                if suspect || meta.idle_for > UNTESTED_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

/// The name a timestamp column has in `D`'s schema.
pub fn time_column<D: Dialect>(name: &str) -> String {
    format!("{name}{}", D::TIME_SUFFIX)
}

/// `template` in `D`'s SQL: `{json}` becomes the JSON column type, any other `{name}` the
/// timestamp column `name`, and each `?` outside a string literal `D`'s parameter.
pub fn render<D: Dialect>(template: &str) -> String {
    let mut sql = String::with_capacity(template.len() + 16);
    let mut rest = template;
    let mut params = 0;
    let mut in_literal = false;
    while let Some(c) = rest.chars().next() {
        rest = &rest[c.len_utf8()..];
        match c {
            '\'' => {
                in_literal = !in_literal;
                sql.push(c);
            }
            '?' if !in_literal && D::NUMBERED_PARAMS => {
                params += 1;
                sql.push_str(&format!("${params}"));
            }
            '{' if !in_literal => {
                let (name, after) = rest.split_once('}').unwrap_or((rest, ""));
                rest = after;
                if name == "json" {
                    sql.push_str(D::JSON_TYPE);
                } else {
                    sql.push_str(&time_column::<D>(name));
                }
            }
            _ => sql.push(c),
        }
    }
    sql
}

/// `n` parameters for an `IN (…)` list, to be rendered with the rest of the query.
pub fn params(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// `rows` rows of `columns` parameters each, for a multi-row `VALUES` list.
pub fn rows(rows: usize, columns: usize) -> String {
    vec![format!("({})", params(columns)); rows].join(", ")
}

/// The latest row (highest `seq`) of each of `accounts` accounts in `table`, to be bound with
/// the account names. Each account's row is found by its own `MAX(seq)` on the `(account, seq)`
/// index, one index probe per account on both backends, however long the table grows (a
/// `GROUP BY` over the accounts would read every row they have).
pub fn latest_per_account(table: &str, accounts: usize) -> String {
    let probes = vec![format!("(SELECT MAX(seq) FROM {table} WHERE account = ?)"); accounts];
    format!("SELECT * FROM {table} WHERE seq IN ({})", probes.join(", "))
}
