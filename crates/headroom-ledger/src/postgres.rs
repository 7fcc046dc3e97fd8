//! The production ledger: PostgreSQL through sqlx. Several Headroom processes may share one
//! database; what only Postgres does (advisory locks, pool leases) is here, every query is in
//! [`crate::sql`].

use std::collections::BTreeSet;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use headroom_core::{PoolName, Timestamp};
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{Pool, Postgres, Transaction};

use crate::LedgerError;
use crate::dialect::Dialect;
use crate::pg_schema::{self, RuntimeRole};
use crate::sql::SqlLedger;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

/// PostgreSQL's side of the seam. It also holds the pool leases, which need a connection of
/// their own.
#[derive(Debug)]
pub struct PgDialect {
    url: String,
    leases: tokio::sync::Mutex<Leases>,
}

/// Pool leases are session advisory locks held on one dedicated connection: if the process
/// dies, the server drops the connection and the locks with it, and another replica takes the
/// pools on its next tick.
#[derive(Debug, Default)]
struct Leases {
    connection: Option<sqlx::PgConnection>,
    owned: BTreeSet<PoolName>,
}

#[async_trait]
impl Dialect for PgDialect {
    type Db = Postgres;
    type Int = i32;
    type Time = Timestamp;
    const NUMBERED_PARAMS: bool = true;
    const TIME_SUFFIX: &'static str = "";
    const JSON_TYPE: &'static str = "JSONB";

    // INTEGER columns: u32 values past i32::MAX wrap, as they always have here.
    fn int(n: u32) -> i32 {
        n as i32
    }

    fn uint(stored: i32) -> u32 {
        stored as u32
    }

    fn time(at: Timestamp) -> Timestamp {
        at
    }

    fn timestamp(stored: Timestamp) -> Result<Timestamp, LedgerError> {
        Ok(stored)
    }

    async fn share_signal(pool: &Pool<Postgres>, payload: &str) -> Result<(), LedgerError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(crate::SIGNAL_CHANNEL)
            .bind(payload)
            .execute(pool)
            .await?;
        Ok(())
    }

    async fn shared_signals(&self) -> Result<Option<crate::SignalFeed>, LedgerError> {
        let mut listener = sqlx::postgres::PgListener::connect(&self.url).await?;
        listener.listen(crate::SIGNAL_CHANNEL).await?;
        Ok(Some(crate::SignalFeed::new(listener)))
    }

    const INSERTS_IN_WITH: bool = true;

    // Sequence numbers are drawn before commit, so only a row count says a row was added (the
    // tables are append-only). Counting is cheap on these small tables, not on the refusals.
    const REVISION: &'static str = "SELECT
        (SELECT COUNT(*) FROM budget_versions) AS budgets,
        (SELECT COUNT(*) FROM schedule_windows)
          + (SELECT COUNT(*) FROM schedule_window_cancellations) AS windows,
        CAST(NULL AS BIGINT) AS requests";

    const COMMITS_IN_SEQ_ORDER: bool = false;

    async fn begin_serialised_unguarded(
        pool: &Pool<Postgres>,
        keys: &[&str],
        seed: i64,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        // The locks end with the transaction. Under READ COMMITTED each later statement sees
        // every transaction that held one of them before. Taken in the order of their lock
        // numbers (a volatile function in the select list runs after the sort), the same for
        // every transaction: no two can wait on each other.
        const LOCKS: &str = "SELECT pg_advisory_xact_lock(lock) FROM
               (SELECT DISTINCT hashtextextended(key, $2) AS lock FROM UNNEST($1::TEXT[]) AS key) AS locks
             ORDER BY lock";
        // Keys of name characters only (account names are) can be written into the statement
        // itself, which then begins the transaction and takes the locks in one round trip.
        let plain = |key: &&str| {
            !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        };
        if keys.iter().all(plain) {
            let quoted: Vec<String> = keys.iter().map(|k| format!("'{k}'")).collect();
            let statement = format!(
                "BEGIN; {}",
                LOCKS
                    .replace("$1", &format!("ARRAY[{}]", quoted.join(", ")))
                    .replace("$2", &seed.to_string())
            );
            return pool.begin_with(sqlx::AssertSqlSafe(statement)).await;
        }
        let mut tx = pool.begin().await?;
        sqlx::query(LOCKS)
            .bind(keys)
            .bind(seed)
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    async fn pool_leases(&self, pools: &[PoolName]) -> Result<BTreeSet<PoolName>, LedgerError> {
        use sqlx::Connection;
        let mut leases = self.leases.lock().await;
        let leases = &mut *leases;
        // A lease connection that died took its locks with it: start again from nothing.
        if let Some(connection) = &mut leases.connection
            && connection.ping().await.is_err()
        {
            leases.connection = None;
            leases.owned.clear();
        }
        if leases.connection.is_none() {
            leases.owned.clear();
            leases.connection = Some(sqlx::PgConnection::connect(&self.url).await.map_err(
                |source| LedgerError::Open {
                    url: crate::database_url::redact(&self.url),
                    source,
                },
            )?);
        }
        let Some(connection) = leases.connection.as_mut() else {
            return Ok(BTreeSet::new());
        };
        let wanted: Vec<&PoolName> = pools
            .iter()
            .filter(|p| !leases.owned.contains(*p))
            .collect();
        for pool in wanted {
            let got: bool = sqlx::query_scalar(
                "SELECT pg_try_advisory_lock(hashtextextended('headroom-pool:' || $1, 0))",
            )
            .bind(pool.as_str())
            .fetch_one(&mut *connection)
            .await?;
            if got {
                leases.owned.insert(pool.clone());
            }
        }
        Ok(leases.owned.clone())
    }
}

/// The PostgreSQL ledger.
pub type PostgresLedger = SqlLedger<PgDialect>;

/// What one statement of the serving pool may run for before PostgreSQL cancels it (and the call
/// fails, its transaction rolled back). A statement stuck behind a lock or a plan gone wrong would
/// otherwise hold its connection, and the tick or the request waiting on it, without end. Every
/// ledger statement takes milliseconds; a database URL that sets its own `statement_timeout`
/// (`?options=-c%20statement_timeout%3D…`) keeps it.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

impl SqlLedger<PgDialect> {
    /// Connects to `url` (`postgres://…`) for serving. A current schema is left alone, so the
    /// runtime role (SELECT and INSERT only) can open it; a schema behind this build is migrated
    /// only by a role that owns it, otherwise [`LedgerError::NotMigrated`] names the fix.
    pub async fn connect(url: &str) -> Result<PostgresLedger, LedgerError> {
        Self::connect_bounded(url, STATEMENT_TIMEOUT).await
    }

    /// [`connect`](Self::connect) with another statement timeout.
    pub async fn connect_bounded(
        url: &str,
        statement_timeout: Duration,
    ) -> Result<PostgresLedger, LedgerError> {
        let pool = pool(url, Some(statement_timeout)).await?;
        if let pg_schema::SchemaState::Behind(version) =
            pg_schema::schema_state(&pool, &MIGRATOR).await?
        {
            if !pg_schema::may_migrate(&pool).await? {
                let role: String = sqlx::query_scalar("SELECT current_user::text")
                    .fetch_one(&pool)
                    .await?;
                return Err(LedgerError::NotMigrated(format!(
                    "migration {version} is not applied and role {role} does not own the schema; \
                     run `headroom migrate --runtime-role {role}` as the owner role"
                )));
            }
            migrate_unbounded(url).await?;
        }
        Ok(Self::from_pool(pool, url))
    }

    /// Connects to `url` as the owner role, applies every migration, and, given a runtime role,
    /// leaves it SELECT and INSERT on every ledger table and nothing else
    /// (`headroom migrate --runtime-role`). Running it again changes nothing.
    pub async fn migrate(
        url: &str,
        runtime: Option<RuntimeRole<'_>>,
    ) -> Result<PostgresLedger, LedgerError> {
        migrate_unbounded(url).await?;
        let pool = pool(url, Some(STATEMENT_TIMEOUT)).await?;
        if let Some(role) = runtime {
            pg_schema::grant_runtime_role(&pool, role).await?;
        }
        Ok(Self::from_pool(pool, url))
    }

    fn from_pool(pool: PgPool, url: &str) -> PostgresLedger {
        SqlLedger::new(
            pool,
            PgDialect {
                url: url.to_string(),
                leases: tokio::sync::Mutex::new(Leases::default()),
            },
        )
    }
}

/// Migrations may rewrite a large table or wait for a reader to let go of it: they run on a
/// connection of their own without the statement timeout.
async fn migrate_unbounded(url: &str) -> Result<(), LedgerError> {
    let unbounded = pool(url, None).await?;
    let migrated = MIGRATOR.run(&unbounded).await;
    unbounded.close().await;
    Ok(migrated?)
}

async fn pool(url: &str, statement_timeout: Option<Duration>) -> Result<PgPool, LedgerError> {
    let open_error = |source| LedgerError::Open {
        url: crate::database_url::redact(url),
        source,
    };
    let mut options = PgConnectOptions::from_str(url).map_err(open_error)?;
    let set_by_url = options
        .get_options()
        .is_some_and(|o| o.contains("statement_timeout"));
    if let Some(timeout) = statement_timeout.filter(|_| !set_by_url) {
        let millis = timeout.as_millis().max(1).to_string();
        options = options.options([("statement_timeout", millis.as_str())]);
    }
    match crate::dialect::pool_options::<Postgres>()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options.clone())
        .await
    {
        Ok(pool) => Ok(pool),
        // The pool retries a failing connect until its timeout and then says only that it timed
        // out; one plain connection attempt tells why (refused, unknown host, bad password).
        Err(sqlx::Error::PoolTimedOut) => {
            let cause = match tokio::time::timeout(
                Duration::from_secs(5),
                sqlx::ConnectOptions::connect(&options),
            )
            .await
            {
                Ok(Err(cause)) => cause,
                Ok(Ok(_)) | Err(_) => sqlx::Error::PoolTimedOut,
            };
            Err(open_error(cause))
        }
        Err(e) => Err(open_error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::PgDialect;
    use crate::dialect::{Dialect, render};

    /// The advisory locks the current transaction of `tx` holds.
    async fn advisory_locks(tx: &mut sqlx::PgConnection) -> i64 {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
        )
        .fetch_one(tx)
        .await
        .unwrap()
    }

    /// Keys written into the statement (name characters) and keys bound as parameters (any
    /// other) take the same locks: a transaction of either kind waits for the other.
    #[tokio::test]
    async fn serialised_transactions_lock_the_same_keys_however_they_are_sent() {
        let url = headroom_testkit::fresh_postgres_database("headroom_locks").await;
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let mut first =
            PgDialect::begin_serialised_unguarded(&pool, &["team-1", "team-2", "team-1"], 7)
                .await
                .unwrap();
        assert_eq!(
            advisory_locks(&mut first).await,
            2,
            "one lock per distinct key"
        );
        let second = tokio::spawn({
            let pool = pool.clone();
            async move {
                let mut tx =
                    PgDialect::begin_serialised_unguarded(&pool, &["o'brien x", "team-2"], 7)
                        .await
                        .unwrap();
                let held = advisory_locks(&mut tx).await;
                tx.commit().await.unwrap();
                held
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!second.is_finished(), "the second waits for team-2's lock");
        first.commit().await.unwrap();
        assert_eq!(second.await.unwrap(), 2);
        // Another seed is another lock: it does not wait.
        let mut outbox = PgDialect::begin_serialised_unguarded(&pool, &["team-1"], 0)
            .await
            .unwrap();
        let _other = PgDialect::begin_serialised_unguarded(&pool, &["team-1"], 7)
            .await
            .unwrap();
        assert_eq!(advisory_locks(&mut outbox).await, 1);
    }

    /// A caller that gives up while its serialised transaction waits to begin (an API request
    /// timing out behind another holder of its key) leaves no lock behind: once the
    /// holder commits, another process's transaction with the key begins.
    #[tokio::test]
    async fn a_caller_cancelled_while_beginning_leaves_no_lock_behind() {
        let url = headroom_testkit::fresh_postgres_database("headroom_locks").await;
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let holder = PgDialect::begin_serialised_unguarded(&pool, &["team-1"], 7)
            .await
            .unwrap();
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move {
                crate::dialect::begin_serialised::<PgDialect>(&pool, &["team-1"], 7)
                    .await
                    .map(drop)
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "it waits for team-1's lock");
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
        holder.commit().await.unwrap();
        // Another process: a session of the pool above would take the lock again even if it
        // still held it (advisory locks are re-entrant per session).
        let other = sqlx::PgPool::connect(&url).await.unwrap();
        let next = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            PgDialect::begin_serialised_unguarded(&other, &["team-1"], 7),
        )
        .await;
        assert!(
            matches!(next, Ok(Ok(_))),
            "team-1's lock is free once its holder committed"
        );
    }

    #[test]
    fn renders_numbered_parameters_and_plain_time_columns() {
        assert_eq!(
            render::<PgDialect>(
                "SELECT '?', {at} FROM t WHERE a = ? AND b IN (?, ?) AND j = CAST(? AS {json})"
            ),
            "SELECT '?', at FROM t WHERE a = $1 AND b IN ($2, $3) AND j = CAST($4 AS JSONB)"
        );
    }
}
