//! `controller_memory` is the engine's working state, not the money ledger: each pool keeps its
//! newest row plus its rows younger than [`CONTROLLER_MEMORY_RETENTION`], the ledger deleting
//! older ones as it records, and the database refuses to delete a pool's newest row.

use super::*;
use headroom_ledger::CONTROLLER_MEMORY_RETENTION;

/// How often the test writes the busy pool's memory.
const STEP: chrono::TimeDelta = chrono::TimeDelta::seconds(30);

/// A pool written every [`STEP`] for three retentions keeps exactly its rows of the last
/// retention (the bound, `1 + retention / step`) and reads back its newest; a pool written once,
/// long before, keeps its one row; another pool's memory is untouched. Nobody, with a SQL
/// shell, deletes a pool's newest row. `raw(sql)` runs a statement on the same database outside
/// the ledger: the integers it returns (a count, or a row a `DELETE … RETURNING` removed), its
/// error as text.
async fn memory_is_bounded_per_pool(
    ledger: &dyn Ledger,
    raw: impl AsyncFn(&str) -> Result<Vec<i64>, String>,
) {
    let rows = async |pool: &str| {
        let count = format!("SELECT count(*) FROM controller_memory WHERE pool = '{pool}'");
        raw(&count).await.unwrap()[0]
    };
    let (busy, idle, other): (
        headroom_core::PoolName,
        headroom_core::PoolName,
        headroom_core::PoolName,
    ) = (
        "llama".parse().unwrap(),
        "idle".parse().unwrap(),
        "other".parse().unwrap(),
    );
    let start = t("2026-11-30T09:00:00.250Z");
    ledger
        .record_controller_memory(
            &idle,
            start - chrono::TimeDelta::days(2),
            r#"{"target": 7}"#,
        )
        .await
        .unwrap();
    let bound = 1 + CONTROLLER_MEMORY_RETENTION.num_seconds() / STEP.num_seconds();
    let writes = 3 * (bound - 1);
    let body = |i: i64| {
        format!(
            r#"{{"target": {i}, "levels": [{}]}}"#,
            "[1, 2], ".repeat(50)
        )
    };
    for i in 0..writes {
        let at = start + STEP * i32::try_from(i).unwrap();
        ledger
            .record_controller_memory(&busy, at, &body(i))
            .await
            .unwrap();
        if i == writes / 2 {
            ledger
                .record_controller_memory(&other, at, r#"{"target": 1}"#)
                .await
                .unwrap();
        }
        assert!(rows("llama").await <= bound, "after write {i}");
    }
    let last = start + STEP * i32::try_from(writes - 1).unwrap();
    assert_eq!(rows("llama").await, bound, "the last retention's rows");
    assert_eq!(
        ledger.controller_memory(&busy).await.unwrap(),
        Some((last, body(writes - 1))),
        "the newest row reads back"
    );
    // A retried write of the newest instant changes nothing.
    ledger
        .record_controller_memory(&busy, last, r#"{"target": 0}"#)
        .await
        .unwrap();
    assert_eq!(rows("llama").await, bound);
    assert_eq!(
        ledger.controller_memory(&busy).await.unwrap(),
        Some((last, body(writes - 1)))
    );
    // Other pools: written once each, kept, though far older than the busy pool's cut-off.
    assert_eq!((rows("idle").await, rows("other").await), (1, 1));
    assert_eq!(
        ledger.controller_memory(&idle).await.unwrap(),
        Some((
            start - chrono::TimeDelta::days(2),
            r#"{"target": 7}"#.to_string()
        ))
    );
    assert_eq!(
        ledger.controller_memory(&other).await.unwrap().unwrap().1,
        r#"{"target": 1}"#
    );

    // By hand: every row of a pool, or its newest alone, is refused, and nothing goes.
    for sql in [
        "DELETE FROM controller_memory",
        "DELETE FROM controller_memory WHERE pool = 'idle'",
        "DELETE FROM controller_memory WHERE pool = 'llama'",
    ] {
        let err = raw(sql).await.expect_err(sql);
        assert!(err.contains("append-only"), "{sql}: {err}");
    }
    assert_eq!(
        (rows("llama").await, rows("idle").await, rows("other").await),
        (bound, 1, 1)
    );
    // A superseded row may go, as the ledger's own pruning deletes them: the oldest kept.
    let oldest = format!(
        "DELETE FROM controller_memory WHERE pool = 'llama' AND body LIKE '{{\"target\": {},%' RETURNING CAST(1 AS BIGINT)",
        writes - bound
    );
    assert_eq!(raw(&oldest).await, Ok(vec![1]), "{oldest}");
    assert_eq!(rows("llama").await, bound - 1);
}

#[tokio::test]
async fn sqlite_controller_memory_is_bounded_per_pool() {
    let (dir, ledger) = sqlite().await;
    let raw = RawDb::sqlite(&dir).await;
    memory_is_bounded_per_pool(&ledger, async |sql| raw.run(sql).await).await;
}

#[tokio::test]
async fn postgres_controller_memory_is_bounded_per_pool() {
    let (db_url, ledger) = postgres_ledger().await;
    // The superuser: the trigger binds even a role that may do anything.
    let raw = RawDb::postgres(&db_url).await;
    memory_is_bounded_per_pool(ledger.as_ref(), async |sql| raw.run(sql).await).await;
}
