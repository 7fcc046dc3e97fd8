//! Nobody rewrites the ledger: every table refuses UPDATE, DELETE and TRUNCATE, whoever asks
//! (the tables pruned to a retention refuse to DELETE what it keeps, every row written here),
//! and the role `serve` runs as (made by `headroom migrate --runtime-role`) can add rows but
//! cannot change grants, triggers or tables.

use super::*;
use headroom_ledger::{ApiToken, RuntimeRole};

/// Writes at least one row to every ledger table through the ledger's own API, as `serve` does:
/// a request and its cancellation, a held launch, a refusal, a budget, an alert queued and
/// delivered, a token and its revocation, a decision, demand minutes, a scheduled window and
/// its cancellation, a controller memory, an alert book.
async fn fill_every_table(ledger: &dyn Ledger) {
    let (req, _) = ledger
        .record_capacity_request(&new_request(Some("fill"), 1))
        .await
        .unwrap();
    let (cancelled, _) = ledger
        .record_capacity_request(&new_request(Some("fill-cancelled"), 1))
        .await
        .unwrap();
    ledger
        .cancel_capacity_request(&cancelled.id, t("2026-11-30T09:00:00Z"))
        .await
        .unwrap();
    ledger
        .put_budget(
            &Budget {
                account: "ml".parse().unwrap(),
                period: BudgetPeriod::Day,
                ceiling: "100".parse().unwrap(),
                soft_threshold_percent: 80,
                hard_action: HardAction::Refuse,
            },
            t("2026-11-30T08:00:00Z"),
        )
        .await
        .unwrap();
    let mut intent = event(
        "fill-n1",
        NodeState::Requested,
        "2026-11-30T09:00:00Z",
        Some(&req.id),
        "launch",
    );
    intent.hold = "1".parse().unwrap();
    assert_eq!(
        ledger.place_hold(&intent).await.unwrap(),
        HoldOutcome::Placed
    );
    ledger
        .append_node_event(&intent.next(NodeState::Booting, "launched", t("2026-11-30T09:01:00Z")))
        .await
        .unwrap();
    ledger
        .append_refusal(&RefusalRecord {
            pool: "llama".parse().unwrap(),
            request: Some(req.id.clone()),
            node: None,
            offering: None,
            replicas: 1,
            reason: RefusalReason::MaxReplicas,
            detail: "pool llama is at max_replicas 1".into(),
            at: t("2026-11-30T09:00:00Z"),
        })
        .await
        .unwrap();
    ledger
        .enqueue_alert("https://hooks.example/a", "{}", t("2026-11-30T09:00:00Z"))
        .await
        .unwrap();
    let pending = ledger.pending_alerts(10).await.unwrap();
    ledger
        .alert_delivered(pending[0].seq, t("2026-11-30T09:00:05Z"))
        .await
        .unwrap();
    ledger.create_token(&token("fill-tok")).await.unwrap();
    assert!(
        ledger
            .revoke_token("fill-tok", t("2026-11-30T10:00:00Z"))
            .await
            .unwrap()
    );
    ledger
        .append_decision(
            &"llama".parse().unwrap(),
            t("2026-11-30T09:00:00Z"),
            r#"{"n": 1}"#,
        )
        .await
        .unwrap();
    ledger
        .record_demand_minutes(&"llama".parse().unwrap(), &[(29_400_000, 3)])
        .await
        .unwrap();
    let llama = "llama".parse().unwrap();
    let at = t("2026-11-30T09:00:00Z");
    let window = r#"{"name": "launch", "min_replicas": 2}"#;
    ledger
        .add_schedule_window("w-fill", &llama, at, window)
        .await
        .unwrap();
    assert!(
        ledger
            .cancel_schedule_window(&llama, "w-fill", at)
            .await
            .unwrap()
    );
    ledger
        .record_controller_memory(&llama, at, r#"{"target": 1}"#)
        .await
        .unwrap();
    ledger.record_alert_book("llama", at, "[]").await.unwrap();
    let leases = ledger
        .pool_leases(&["llama".parse().unwrap()])
        .await
        .unwrap();
    assert_eq!(leases.len(), 1, "the pool lease is taken");
}

fn token(id: &str) -> ApiToken {
    ApiToken {
        id: id.into(),
        secret_sha256: format!("sha-{id}"),
        accounts: vec!["ml".into()],
        scopes: vec!["admin".into()],
        created_at: t("2026-11-30T09:00:00Z"),
        revoked_at: None,
    }
}

/// Every base table of the schema but sqlx's migration table, from the catalogue: a table a
/// later migration adds is checked without anyone listing it here.
async fn postgres_ledger_tables(pool: &sqlx::PgPool) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT t.table_name::text, c.column_name::text
         FROM information_schema.tables t
         JOIN information_schema.columns c
           ON c.table_schema = t.table_schema AND c.table_name = t.table_name AND c.ordinal_position = 1
         WHERE t.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
           AND t.table_name <> '_sqlx_migrations'
         ORDER BY t.table_name",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn pg_count(pool: &sqlx::PgPool, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Each rewrite of `table` (keyed by its first column) that must be refused.
fn rewrites(table: &str, column: &str) -> [String; 3] {
    [
        format!("UPDATE {table} SET {column} = {column}"),
        format!("DELETE FROM {table}"),
        format!("TRUNCATE {table} CASCADE"),
    ]
}

#[tokio::test]
async fn postgres_every_ledger_table_refuses_update_delete_and_truncate() {
    let (db_url, ledger) = postgres_ledger().await;
    fill_every_table(ledger.as_ref()).await;
    // The superuser: even a role that may do anything is refused by the triggers.
    let raw = sqlx::PgPool::connect(&db_url).await.unwrap();
    let tables = postgres_ledger_tables(&raw).await;
    assert!(tables.len() >= 10, "ledger tables: {tables:?}");
    for (table, column) in &tables {
        let before = pg_count(&raw, table).await;
        assert!(
            before > 0,
            "fill_every_table writes no row to {table}: add one, so its triggers are exercised"
        );
        for sql in rewrites(table, column) {
            let err = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&raw)
                .await
                .expect_err(&sql);
            assert!(err.to_string().contains("append-only"), "{sql}: {err}");
        }
        assert_eq!(pg_count(&raw, table).await, before, "{table} kept its rows");
    }
}

#[tokio::test]
async fn sqlite_every_ledger_table_refuses_update_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = SqliteLedger::open_path(&path).await.unwrap();
    fill_every_table(&ledger).await;
    let raw = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table'
         AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations' ORDER BY name",
    )
    .fetch_all(&raw)
    .await
    .unwrap();
    assert!(tables.len() >= 10, "ledger tables: {tables:?}");
    for table in &tables {
        let column: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT name FROM pragma_table_info('{table}') ORDER BY cid LIMIT 1"
        )))
        .fetch_one(&raw)
        .await
        .unwrap();
        let count = format!("SELECT count(*) FROM {table}");
        let before: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(count.clone()))
            .fetch_one(&raw)
            .await
            .unwrap();
        assert!(before > 0, "fill_every_table writes no row to {table}");
        for sql in &rewrites(table, &column)[..2] {
            let err = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&raw)
                .await
                .expect_err(sql);
            assert!(err.to_string().contains("append-only"), "{sql}: {err}");
        }
        let after: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(count))
            .fetch_one(&raw)
            .await
            .unwrap();
        assert_eq!(after, before, "{table} kept its rows");
    }
}

/// Deleting a revocation must not bring a revoked token back.
async fn revocation_cannot_be_undone(ledger: &dyn Ledger, delete: impl AsyncFnOnce() -> String) {
    ledger.create_token(&token("tok-r")).await.unwrap();
    assert!(
        ledger
            .revoke_token("tok-r", t("2026-11-30T10:00:00Z"))
            .await
            .unwrap()
    );
    let err = delete().await;
    assert!(err.contains("append-only"), "{err}");
    let kept = ledger.token("tok-r").await.unwrap().unwrap();
    assert_eq!(
        kept.revoked_at,
        Some(t("2026-11-30T10:00:00Z")),
        "still revoked"
    );
}

#[tokio::test]
async fn postgres_revoked_token_stays_revoked() {
    let (db_url, ledger) = postgres_ledger().await;
    revocation_cannot_be_undone(ledger.as_ref(), async || {
        let raw = sqlx::PgPool::connect(&db_url).await.unwrap();
        let sql = "DELETE FROM api_token_revocations WHERE token_id = 'tok-r'";
        sqlx::query(sql)
            .execute(&raw)
            .await
            .expect_err(sql)
            .to_string()
    })
    .await;
}

#[tokio::test]
async fn sqlite_revoked_token_stays_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = SqliteLedger::open_path(&path).await.unwrap();
    revocation_cannot_be_undone(&ledger, async || {
        let raw = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        let sql = "DELETE FROM api_token_revocations WHERE token_id = 'tok-r'";
        sqlx::query(sql)
            .execute(&raw)
            .await
            .expect_err(sql)
            .to_string()
    })
    .await;
}

/// A database owned by a fresh owner role (as an RDS master user or Cloud SQL's built-in user
/// would be), with URLs to log in as any role; roles are per server, so their names are unique.
struct Roles {
    db_url: String,
    owner: String,
    runtime: String,
}

impl Roles {
    async fn new() -> Roles {
        let db_url = headroom_testkit::fresh_postgres_database("headroom_roles").await;
        let suffix = db_url.rsplit('_').next().unwrap()[..12].to_string();
        let roles = Roles {
            owner: format!("hr_owner_{suffix}"),
            runtime: format!("hr_runtime_{suffix}"),
            db_url,
        };
        let admin = sqlx::PgPool::connect(&roles.db_url).await.unwrap();
        for sql in [
            format!(
                "CREATE ROLE {} LOGIN CREATEROLE PASSWORD 'owner-pw'",
                roles.owner
            ),
            format!(
                "ALTER DATABASE {} OWNER TO {}",
                roles.db_url.rsplit('/').next().unwrap(),
                roles.owner
            ),
            // PostgreSQL 14 and older let every role create in `public`; 15 only its owner.
            format!("ALTER SCHEMA public OWNER TO {}", roles.owner),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&admin)
                .await
                .unwrap();
        }
        admin.close().await;
        roles
    }

    /// The database URL logged in as `role`.
    fn url_as(&self, role: &str, password: &str) -> String {
        let (scheme, rest) = self.db_url.split_once("://").unwrap();
        let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
        format!("{scheme}://{role}:{password}@{host}")
    }

    fn owner_url(&self) -> String {
        self.url_as(&self.owner, "owner-pw")
    }

    fn runtime_url(&self) -> String {
        self.url_as(&self.runtime, "runtime-pw")
    }

    async fn migrate(&self, runtime: &str, password: Option<&str>) -> Result<(), LedgerError> {
        PostgresLedger::migrate(
            &self.owner_url(),
            Some(RuntimeRole {
                name: runtime,
                password,
            }),
        )
        .await
        .map(drop)
    }

    /// (privilege, held) for each table privilege PostgreSQL has, for the runtime role on `table`.
    async fn privileges(&self, pool: &sqlx::PgPool, table: &str) -> Vec<(String, bool)> {
        let mut held = Vec::new();
        for privilege in [
            "SELECT",
            "INSERT",
            "UPDATE",
            "DELETE",
            "TRUNCATE",
            "REFERENCES",
            "TRIGGER",
        ] {
            let has: bool = sqlx::query_scalar("SELECT has_table_privilege($1, $2, $3)")
                .bind(&self.runtime)
                .bind(table)
                .bind(privilege)
                .fetch_one(pool)
                .await
                .unwrap();
            held.push((privilege.to_string(), has));
        }
        held
    }
}

/// The tables the runtime role may DELETE from, pruned to a retention by the ledger (the
/// ledger's `PRUNED_TABLES`): their triggers refuse what the retention keeps.
const PRUNED: [&str; 3] = ["controller_memory", "decisions", "alert_book"];

#[tokio::test]
async fn runtime_role_adds_rows_and_cannot_rewrite_or_unprotect_the_ledger() {
    let roles = Roles::new().await;
    roles
        .migrate(&roles.runtime, Some("runtime-pw"))
        .await
        .unwrap();
    let owner = sqlx::PgPool::connect(&roles.owner_url()).await.unwrap();
    // A privilege granted by hand is taken back by the next migrate: SELECT and INSERT only
    // (DELETE on the pruned tables alone).
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "GRANT UPDATE, DELETE ON node_events TO {}",
        roles.runtime
    )))
    .execute(&owner)
    .await
    .unwrap();
    roles
        .migrate(&roles.runtime, Some("runtime-pw"))
        .await
        .unwrap();
    roles.migrate(&roles.runtime, None).await.unwrap();
    // The role logs in with the password it was given (a SCRAM verifier of it is stored).
    let admin = sqlx::PgPool::connect(&roles.db_url).await.unwrap();
    let stored: String = sqlx::query_scalar("SELECT rolpassword FROM pg_authid WHERE rolname = $1")
        .bind(&roles.runtime)
        .fetch_one(&admin)
        .await
        .unwrap();
    let salt = stored
        .strip_prefix("SCRAM-SHA-256$4096:")
        .and_then(|rest| rest.split('$').next())
        .unwrap_or_else(|| panic!("not a SCRAM verifier: {stored}"));
    use base64::Engine;
    let salt = base64::engine::general_purpose::STANDARD
        .decode(salt)
        .unwrap();
    assert_eq!(stored, headroom_ledger::scram_sha256("runtime-pw", &salt));

    // What `serve` does, as the runtime role: open the ledger (no DDL) and record.
    let ledger = PostgresLedger::connect(&roles.runtime_url()).await.unwrap();
    fill_every_table(&ledger).await;
    assert_eq!(ledger.node_events().await.unwrap().len(), 2);

    let tables = postgres_ledger_tables(&owner).await;
    assert!(tables.len() >= 10, "ledger tables: {tables:?}");
    let expected: Vec<(String, bool)> = [
        "SELECT",
        "INSERT",
        "UPDATE",
        "DELETE",
        "TRUNCATE",
        "REFERENCES",
        "TRIGGER",
    ]
    .iter()
    .map(|p| (p.to_string(), matches!(*p, "SELECT" | "INSERT")))
    .collect();
    let runtime = sqlx::PgPool::connect(&roles.runtime_url()).await.unwrap();
    for (table, column) in &tables {
        // The engine's memory, pruned to a retention: DELETE too, which the tables' triggers
        // refuse for a key's newest row (every row `fill_every_table` wrote).
        let pruned = PRUNED.contains(&table.as_str());
        let expected: Vec<(String, bool)> = expected
            .iter()
            .map(|(p, held)| (p.clone(), *held || (pruned && p == "DELETE")))
            .collect();
        assert_eq!(roles.privileges(&owner, table).await, expected, "{table}");
        let mut attempts = rewrites(table, column).to_vec();
        attempts.extend([
            format!("ALTER TABLE {table} DISABLE TRIGGER ALL"),
            format!("ALTER TABLE {table} OWNER TO {}", roles.runtime),
            format!("DROP TABLE {table} CASCADE"),
        ]);
        for sql in attempts {
            let err = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&runtime)
                .await
                .expect_err(&sql);
            let text = err.to_string();
            let refused = if pruned && sql.starts_with("DELETE") {
                "append-only"
            } else {
                "permission denied"
            };
            assert!(
                text.contains(refused) || text.contains("must be owner"),
                "{sql}: {text}"
            );
        }
    }
    let triggers: Vec<(String, String)> = sqlx::query_as(
        "SELECT t.tgname::text, c.relname::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace",
    )
    .fetch_all(&owner)
    .await
    .unwrap();
    assert_eq!(
        triggers.len(),
        2 * tables.len(),
        "an append-only and a no-truncate trigger a table: {triggers:?}"
    );
    for (trigger, table) in &triggers {
        let sql = format!("DROP TRIGGER {trigger} ON {table}");
        let err = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&runtime)
            .await
            .expect_err(&sql);
        assert!(err.to_string().contains("must be owner"), "{sql}: {err}");
    }
    for sql in [
        "ALTER FUNCTION headroom_append_only() RENAME TO gone",
        "ALTER FUNCTION headroom_controller_memory_keeps_newest() RENAME TO gone",
        "ALTER FUNCTION headroom_keeps_retention() RENAME TO gone",
    ] {
        sqlx::query(sql).execute(&runtime).await.expect_err(sql);
    }
    // Still exactly what was written.
    assert_eq!(ledger.node_events().await.unwrap().len(), 2);
    assert!(
        ledger
            .token("fill-tok")
            .await
            .unwrap()
            .unwrap()
            .revoked_at
            .is_some()
    );
}

#[tokio::test]
async fn migrate_refuses_a_runtime_role_that_could_act_as_the_owner() {
    let roles = Roles::new().await;
    let admin = sqlx::PgPool::connect(&roles.db_url).await.unwrap();
    let member = format!("{}_member", roles.runtime);
    let superuser = format!("{}_super", roles.runtime);
    for sql in [
        format!("CREATE ROLE {member} LOGIN IN ROLE {}", roles.owner),
        format!("CREATE ROLE {superuser} LOGIN SUPERUSER"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&admin)
            .await
            .unwrap();
    }
    for (role, password, why) in [
        (roles.owner.as_str(), None, "the role migrating"),
        (member.as_str(), Some("pw"), "member of the owner"),
        (superuser.as_str(), Some("pw"), "superuser"),
        (roles.runtime.as_str(), None, "no such role"),
    ] {
        let err = roles.migrate(role, password).await.expect_err(role);
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("--runtime-role {role}: ")),
            "{text}"
        );
        assert!(text.contains(why), "{role}: {text}");
    }
}

#[tokio::test]
async fn serve_as_the_runtime_role_names_the_fix_when_the_schema_is_not_current() {
    let roles = Roles::new().await;
    let admin = sqlx::PgPool::connect(&roles.db_url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {} LOGIN PASSWORD 'runtime-pw'",
        roles.runtime
    )))
    .execute(&admin)
    .await
    .unwrap();
    // Migrated without granting: the runtime role cannot read the migration table.
    PostgresLedger::migrate(&roles.owner_url(), None)
        .await
        .unwrap();
    let err = PostgresLedger::connect(&roles.runtime_url())
        .await
        .unwrap_err();
    assert!(matches!(err, LedgerError::NotMigrated(_)), "{err:?}");
    assert!(
        err.to_string().contains("headroom migrate --runtime-role"),
        "{err}"
    );

    // Granted, then a migration this build knows goes missing (as when a new version is
    // deployed before `headroom migrate` ran): refused without DDL, naming the fix.
    roles.migrate(&roles.runtime, None).await.unwrap();
    PostgresLedger::connect(&roles.runtime_url()).await.unwrap();
    sqlx::query(
        "DELETE FROM _sqlx_migrations WHERE version = (SELECT max(version) FROM _sqlx_migrations)",
    )
    .execute(&admin)
    .await
    .unwrap();
    let err = PostgresLedger::connect(&roles.runtime_url())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("is not applied") && text.contains(&roles.runtime),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "headroom migrate --runtime-role {}",
            roles.runtime
        )),
        "{text}"
    );
}

/// Every task of a deployment runs `migrate` as it starts: run at once, they all succeed (the
/// role is created once, the grants are applied one at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_migrates_all_succeed() {
    let roles = std::sync::Arc::new(Roles::new().await);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let roles = roles.clone();
        tasks.spawn(async move { roles.migrate(&roles.runtime, Some("runtime-pw")).await });
    }
    while let Some(result) = tasks.join_next().await {
        result.unwrap().unwrap();
    }
    PostgresLedger::connect(&roles.runtime_url()).await.unwrap();
}
