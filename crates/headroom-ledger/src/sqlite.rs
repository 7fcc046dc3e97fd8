//! The embedded ledger: SQLite through sqlx. One file; WAL so the API reads while the engine
//! writes. Every query is in [`crate::sql`]; this is how SQLite differs.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::TimeZone;
use headroom_core::Timestamp;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{Pool, Sqlite, Transaction};

use crate::LedgerError;
use crate::dialect::Dialect;
use crate::sql::SqlLedger;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

/// SQLite's side of the seam.
#[derive(Debug, Clone, Copy)]
pub struct SqliteDialect;

#[async_trait]
impl Dialect for SqliteDialect {
    type Db = Sqlite;
    type Int = i64;
    type Time = i64;
    const NUMBERED_PARAMS: bool = false;
    const TIME_SUFFIX: &'static str = "_ms";
    const JSON_TYPE: &'static str = "TEXT";

    fn int(n: u32) -> i64 {
        i64::from(n)
    }

    fn uint(stored: i64) -> u32 {
        stored as u32
    }

    fn time(at: Timestamp) -> i64 {
        at.timestamp_millis()
    }

    fn timestamp(ms: i64) -> Result<Timestamp, LedgerError> {
        chrono::Utc
            .timestamp_millis_opt(ms)
            .single()
            .ok_or_else(|| LedgerError::Corrupt(format!("timestamp {ms}")))
    }

    const INSERTS_IN_WITH: bool = false;

    // One writer at a time and row ids never reused (the tables are append-only): a table's
    // largest row id grows with every commit that adds to it, and only then.
    const REVISION: &'static str = "SELECT
        COALESCE((SELECT MAX(seq) FROM budget_versions), 0) AS budgets,
        COALESCE((SELECT MAX(rowid) FROM schedule_windows), 0)
          + COALESCE((SELECT MAX(rowid) FROM schedule_window_cancellations), 0) AS windows,
        COALESCE((SELECT MAX(rowid) FROM capacity_requests), 0)
          + COALESCE((SELECT MAX(rowid) FROM request_cancellations), 0)
          + COALESCE((SELECT MAX(seq) FROM refusals), 0) AS requests";

    const COMMITS_IN_SEQ_ORDER: bool = true;

    /// IMMEDIATE takes the file's write lock up front, so two of these never read the same
    /// remaining budget. SQLite has no lock on one key: this one serialises every writer, in
    /// every process that has the file open.
    async fn begin_serialised_unguarded(
        pool: &Pool<Sqlite>,
        _keys: &[&str],
        _seed: i64,
    ) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        pool.begin_with("BEGIN IMMEDIATE").await
    }
}

/// The SQLite ledger.
pub type SqliteLedger = SqlLedger<SqliteDialect>;

impl SqlLedger<SqliteDialect> {
    /// Opens (creating if needed) the ledger at `url` (`sqlite://path` or `sqlite::memory:`) and
    /// applies migrations.
    pub async fn connect(url: &str) -> Result<SqliteLedger, LedgerError> {
        Self::connect_as(url, Durability::Durable).await
    }

    async fn connect_as(url: &str, durability: Durability) -> Result<SqliteLedger, LedgerError> {
        let open = |source| LedgerError::Open {
            url: url.to_string(),
            source,
        };
        let options = SqliteConnectOptions::from_str(url)
            .map_err(open)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        let (options, connections) = match durability {
            Durability::Durable => (options, 4),
            // Nobody reads it after the process: no fsync.
            Durability::Scratch => (options.synchronous(sqlx::sqlite::SqliteSynchronous::Off), 4),
        };
        let pool = crate::dialect::pool_options::<Sqlite>()
            .max_connections(connections)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await
            .map_err(open)?;
        MIGRATOR.run(&pool).await?;
        Ok(SqlLedger::new(pool, SqliteDialect))
    }

    /// Opens a ledger file by path.
    pub async fn open_path(path: &std::path::Path) -> Result<SqliteLedger, LedgerError> {
        Self::connect(&format!("sqlite://{}", path.display())).await
    }

    /// A throwaway ledger file (the simulator's): the same schema and queries, no fsync. A crash may lose its last writes, which is what throwaway means.
    pub async fn open_scratch(path: &std::path::Path) -> Result<SqliteLedger, LedgerError> {
        Self::connect_as(&format!("sqlite://{}", path.display()), Durability::Scratch).await
    }
}

/// Whether a ledger must survive a crash of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durability {
    Durable,
    Scratch,
}

#[cfg(test)]
mod tests {
    use super::SqliteDialect;
    use crate::dialect::render;

    #[test]
    fn renders_question_marks_and_millisecond_columns() {
        assert_eq!(
            render::<SqliteDialect>(
                "SELECT t.{at} AS {revoked} FROM t WHERE a = ? AND j = CAST(? AS {json})"
            ),
            "SELECT t.at_ms AS revoked_ms FROM t WHERE a = ? AND j = CAST(? AS TEXT)"
        );
    }
}
