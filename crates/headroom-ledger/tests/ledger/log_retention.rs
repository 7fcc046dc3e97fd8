//! The decision log (`decisions`) and the alert book (`alert_book`) are kept for a retention,
//! not for ever: each key (a pool, a scope) keeps its rows less than [`DECISION_RETENTION`]
//! ([`ALERT_BOOK_RETENTION`]) older than the row just recorded, the ledger deleting older ones
//! as it records, and the database refuses to delete a row inside the retention.

use super::*;
use headroom_ledger::{ALERT_BOOK_RETENTION, DECISION_RETENTION};

/// Rows the test writes a retention.
const STEPS: i32 = 40;

/// A table pruned to a retention, and how the ledger writes and reads it.
#[derive(Debug, Clone, Copy)]
enum Pruned {
    Decisions,
    AlertBook,
}

impl Pruned {
    fn table(self) -> &'static str {
        match self {
            Pruned::Decisions => "decisions",
            Pruned::AlertBook => "alert_book",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Pruned::Decisions => "pool",
            Pruned::AlertBook => "scope",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Pruned::Decisions => "record",
            Pruned::AlertBook => "body",
        }
    }

    fn retention(self) -> chrono::TimeDelta {
        match self {
            Pruned::Decisions => DECISION_RETENTION,
            Pruned::AlertBook => ALERT_BOOK_RETENTION,
        }
    }

    async fn record(self, ledger: &dyn Ledger, key: &str, at: Timestamp, body: &str) {
        match self {
            Pruned::Decisions => ledger
                .append_decision(&key.parse().unwrap(), at, body)
                .await
                .unwrap(),
            Pruned::AlertBook => ledger.record_alert_book(key, at, body).await.unwrap(),
        }
    }

    /// What a reader gets back of `key`, newest first: a pool's whole decision log, a scope's
    /// alert book (its newest row).
    async fn read(self, ledger: &dyn Ledger, key: &str) -> Vec<String> {
        match self {
            Pruned::Decisions => ledger
                .decisions(&key.parse().unwrap(), i64::MAX)
                .await
                .unwrap(),
            Pruned::AlertBook => ledger
                .alert_book(key)
                .await
                .unwrap()
                .into_iter()
                .map(|(_, body)| body)
                .collect(),
        }
    }
}

/// Row `i`'s body: JSON both backends read back as written (PostgreSQL's JSONB included).
fn body(i: i64) -> String {
    format!(r#"{{"n": {i}}}"#)
}

/// A key written every retention / [`STEPS`] for three retentions keeps exactly its rows of the
/// last retention (`1 + STEPS`) and reads them back; a key written once, long before, keeps its
/// row; another key's rows are untouched. Nobody, with a SQL shell, updates a row or deletes
/// one inside the retention; one more than the retention older than a later row of its key (rows
/// recorded out of order) may go, as the ledger's own pruning deletes them.
async fn keeps_its_retention(ledger: &dyn Ledger, pruned: Pruned, raw: &RawDb) {
    let (table, key, body_column) = (pruned.table(), pruned.key(), pruned.body());
    let rows = async |k: &str| {
        let count = format!("SELECT count(*) FROM {table} WHERE {key} = '{k}'");
        raw.run(&count).await.unwrap()[0]
    };
    let retention = pruned.retention();
    let step = retention / STEPS;
    let start = t("2026-11-30T09:00:00.250Z");
    pruned
        .record(ledger, "idle", start - retention * 3, &body(-1))
        .await;
    let bound = 1 + i64::from(STEPS);
    let writes = 3 * i64::from(STEPS) + 1;
    for i in 0..writes {
        let at = start + step * i32::try_from(i).unwrap();
        pruned.record(ledger, "llama", at, &body(i)).await;
        if i == writes / 2 {
            pruned.record(ledger, "other", at, &body(0)).await;
        }
        assert!(rows("llama").await <= bound, "{table}: after write {i}");
    }
    assert_eq!(
        rows("llama").await,
        bound,
        "{table}: the last retention's rows"
    );
    let kept: Vec<String> = match pruned {
        Pruned::Decisions => (writes - bound..writes).rev().map(body).collect(),
        Pruned::AlertBook => vec![body(writes - 1)],
    };
    assert_eq!(pruned.read(ledger, "llama").await, kept, "{table}");
    // Other keys: written once each, kept, though far older than the busy key's cut-off.
    assert_eq!((rows("idle").await, rows("other").await), (1, 1), "{table}");
    assert_eq!(pruned.read(ledger, "idle").await, [body(-1)], "{table}");

    // By hand: every row, a key's rows, the oldest kept (exactly the retention older than the
    // newest) and any rewrite are refused, and nothing goes.
    let oldest = writes - bound;
    for sql in [
        format!("DELETE FROM {table}"),
        format!("DELETE FROM {table} WHERE {key} = 'idle'"),
        format!("DELETE FROM {table} WHERE {key} = 'llama'"),
        format!(
            "DELETE FROM {table} WHERE {key} = 'llama' AND CAST({body_column} AS TEXT) = '{}'",
            body(oldest)
        ),
        format!("UPDATE {table} SET {key} = 'moved' WHERE {key} = 'idle'"),
    ] {
        let err = raw.run(&sql).await.expect_err(&sql);
        assert!(err.contains("append-only"), "{sql}: {err}");
    }
    assert_eq!(
        (rows("llama").await, rows("idle").await, rows("other").await),
        (bound, 1, 1),
        "{table}"
    );

    // The trigger's edge, on rows recorded out of order (the ledger deletes only what is older
    // than the row it records less the retention): a row the retention and a millisecond older
    // than a later one may go; one exactly the retention older may not.
    let edge = start + retention * 5;
    let ms = chrono::TimeDelta::milliseconds(1);
    for (at, i) in [(edge + retention + ms, 1), (edge, 2), (edge + ms, 3)] {
        pruned.record(ledger, "edge", at, &body(i)).await;
    }
    assert_eq!(
        rows("edge").await,
        3,
        "{table}: recording deletes none of these"
    );
    let delete = |i: i64| {
        format!(
            "DELETE FROM {table} WHERE {key} = 'edge' AND CAST({body_column} AS TEXT) = '{}' RETURNING CAST(1 AS BIGINT)",
            body(i)
        )
    };
    let err = raw.run(&delete(3)).await.expect_err("inside the retention");
    assert!(err.contains("append-only"), "{table}: {err}");
    assert_eq!(raw.run(&delete(2)).await, Ok(vec![1]), "{table}");
    assert_eq!(rows("edge").await, 2, "{table}");
}

#[tokio::test]
async fn sqlite_decisions_keep_their_retention() {
    let (dir, ledger) = sqlite().await;
    keeps_its_retention(&ledger, Pruned::Decisions, &RawDb::sqlite(&dir).await).await;
}

#[tokio::test]
async fn sqlite_alert_book_keeps_its_retention() {
    let (dir, ledger) = sqlite().await;
    keeps_its_retention(&ledger, Pruned::AlertBook, &RawDb::sqlite(&dir).await).await;
}

#[tokio::test]
async fn postgres_decisions_keep_their_retention() {
    let (db_url, ledger) = postgres_ledger().await;
    let raw = RawDb::postgres(&db_url).await;
    keeps_its_retention(ledger.as_ref(), Pruned::Decisions, &raw).await;
}

#[tokio::test]
async fn postgres_alert_book_keeps_its_retention() {
    let (db_url, ledger) = postgres_ledger().await;
    let raw = RawDb::postgres(&db_url).await;
    keeps_its_retention(ledger.as_ref(), Pruned::AlertBook, &raw).await;
}
