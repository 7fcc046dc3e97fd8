//! Who may change the PostgreSQL ledger's schema, and who may only write rows.
//!
//! Two roles: the *owner* owns every table, runs the migrations and grants; the *runtime* role
//! `serve` runs as holds SELECT and INSERT on the ledger tables and nothing else, so it can
//! neither rewrite rows (no UPDATE, DELETE or TRUNCATE privilege, and the append-only triggers
//! behind them) nor touch the triggers (ALTER, DROP and DISABLE TRIGGER need ownership). The
//! one exception is [`PRUNED_TABLES`]: DELETE on `controller_memory`, `decisions` and
//! `alert_book`, whose rows past their retention the ledger deletes (their triggers still refuse
//! to delete a row the retention keeps).

use sqlx::migrate::Migrator;
use sqlx::{PgPool, Postgres, Row, Transaction};

use crate::LedgerError;

/// The table sqlx records applied migrations in. Not a ledger table: the runtime role reads it
/// to check the schema is current and writes nothing to it.
pub(crate) const MIGRATIONS_TABLE: &str = "_sqlx_migrations";

/// Ledger tables the runtime role may also DELETE from: the engine's memory, each pruned to a
/// retention as it is written ([`crate::CONTROLLER_MEMORY_RETENTION`],
/// [`crate::DECISION_RETENTION`], [`crate::ALERT_BOOK_RETENTION`]). Their triggers refuse what
/// the retention does not allow; every other table refuses every DELETE.
pub(crate) const PRUNED_TABLES: &[&str] = &["controller_memory", "decisions", "alert_book"];

/// The role `serve` runs as, and the password `migrate` gives it.
#[derive(Clone, Copy)]
pub struct RuntimeRole<'a> {
    pub name: &'a str,
    /// When set, the role is created with LOGIN and this password if it does not exist, and its
    /// password is set to it if it does (so rotating it is one re-run).
    pub password: Option<&'a str>,
}

impl std::fmt::Debug for RuntimeRole<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeRole")
            .field("name", &self.name)
            .field("password", &self.password.map(|_| "***"))
            .finish()
    }
}

/// Whether every migration this build knows is applied.
pub(crate) enum SchemaState {
    Current,
    /// The first migration not applied yet.
    Behind(i64),
}

/// Compares the applied migrations with the build's, as `Migrator::run` would before applying
/// anything, without DDL: the runtime role can run it.
pub(crate) async fn schema_state(
    pool: &PgPool,
    migrator: &Migrator,
) -> Result<SchemaState, LedgerError> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(MIGRATIONS_TABLE)
        .fetch_one(pool)
        .await?;
    let first = migrator.iter().map(|m| m.version).min().unwrap_or(0);
    if !exists {
        return Ok(SchemaState::Behind(first));
    }
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT version, checksum, success FROM {MIGRATIONS_TABLE} ORDER BY version"
    )))
    .fetch_all(pool)
    .await
    .map_err(|source| not_readable(source, MIGRATIONS_TABLE))?;
    let mut applied = std::collections::BTreeMap::new();
    for row in &rows {
        let version: i64 = row.try_get("version")?;
        let checksum: Vec<u8> = row.try_get("checksum")?;
        let success: bool = row.try_get("success")?;
        if !success {
            return Err(sqlx::migrate::MigrateError::Dirty(version).into());
        }
        if !migrator.version_exists(version) {
            return Err(sqlx::migrate::MigrateError::VersionMissing(version).into());
        }
        applied.insert(version, checksum);
    }
    for migration in migrator.iter() {
        match applied.get(&migration.version) {
            None => return Ok(SchemaState::Behind(migration.version)),
            Some(sum) if sum.as_slice() != &*migration.checksum => {
                return Err(sqlx::migrate::MigrateError::VersionMismatch(migration.version).into());
            }
            Some(_) => {}
        }
    }
    Ok(SchemaState::Current)
}

/// A permission error reading the migration table means the runtime role was never granted.
fn not_readable(source: sqlx::Error, table: &str) -> LedgerError {
    match &source {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("42501") => {
            LedgerError::NotMigrated(format!(
                "this role cannot read {table} (never granted); run `headroom migrate --runtime-role <this role>` as the owner role"
            ))
        }
        _ => LedgerError::Database(source),
    }
}

/// Whether the connected role may apply migrations: it owns the schema's migration table (or
/// is a member of its owner), or the database has none yet and it may create tables.
pub(crate) async fn may_migrate(pool: &PgPool) -> Result<bool, LedgerError> {
    Ok(sqlx::query_scalar(
        "SELECT CASE
             WHEN to_regclass($1) IS NULL THEN has_schema_privilege(current_schema(), 'CREATE')
             ELSE pg_has_role(current_user,
                 (SELECT relowner FROM pg_class WHERE oid = to_regclass($1)), 'USAGE')
         END",
    )
    .bind(MIGRATIONS_TABLE)
    .fetch_one(pool)
    .await?)
}

/// The schema's ledger tables: every base table but the migration table. Read from the
/// catalogue, so a table a later migration adds is granted (and checked) without a list to keep.
pub(crate) async fn ledger_tables(
    tx: &mut Transaction<'_, Postgres>,
) -> Result<Vec<String>, LedgerError> {
    Ok(sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name <> $1
         ORDER BY table_name",
    )
    .bind(MIGRATIONS_TABLE)
    .fetch_all(&mut **tx)
    .await?)
}

/// Runs one statement built by the server with `format()`, so identifiers (`%I`) and literals
/// (`%L`) are quoted by PostgreSQL itself.
async fn run_formatted(
    tx: &mut Transaction<'_, Postgres>,
    template: &str,
    args: &[&str],
) -> Result<(), LedgerError> {
    let placeholders: Vec<String> = (1..=args.len()).map(|i| format!("${i}::text")).collect();
    let mut build = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!(
        "SELECT format('{template}', {})",
        placeholders.join(", ")
    )));
    for arg in args {
        build = build.bind(*arg);
    }
    let statement = build.fetch_one(&mut **tx).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Creates the runtime role if asked, checks it cannot act as the owner, and leaves it exactly
/// CONNECT, schema USAGE, SELECT and INSERT on every ledger table (and DELETE on
/// [`PRUNED_TABLES`]), SELECT on the migration table and USAGE on the sequences. One transaction; running it again changes nothing.
pub(crate) async fn grant_runtime_role(
    pool: &PgPool,
    role: RuntimeRole<'_>,
) -> Result<(), LedgerError> {
    let refuse = |why: String| LedgerError::RuntimeRole {
        role: role.name.to_string(),
        why,
    };
    let mut tx = pool.begin().await?;
    // Several tasks may start `migrate` at once (one per ECS task): one grants at a time, and
    // each later one sees the role the first created.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('headroom-runtime-grants', 0))")
        .execute(&mut *tx)
        .await?;
    let me: String = sqlx::query_scalar("SELECT current_user::text")
        .fetch_one(&mut *tx)
        .await?;
    if me == role.name {
        return Err(refuse(format!(
            "it is the role migrating ({me}), which owns the tables; name a separate role for `serve`"
        )));
    }
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)")
            .bind(role.name)
            .fetch_one(&mut *tx)
            .await?;
    // Before touching an existing role (a role made here owns nothing and is no superuser).
    if exists {
        check_not_owner(&mut tx, role.name)
            .await
            .map_err(|e| match e {
                Refusal::Why(why) => refuse(why),
                Refusal::Db(e) => e,
            })?;
    }
    // The server stores a verifier given as it is: the password never leaves this process, so
    // no statement log (Cloud SQL logs DDL) can show it.
    #[allow(clippy::disallowed_methods)] // a password's salt must be random, never seeded
    let salt = uuid::Uuid::new_v4();
    let verifier = role.password.map(|p| scram_sha256(p, salt.as_bytes()));
    match (exists, verifier.as_deref()) {
        (false, Some(verifier)) => {
            run_formatted(
                &mut tx,
                "CREATE ROLE %I LOGIN PASSWORD %L",
                &[role.name, verifier],
            )
            .await?
        }
        (true, Some(verifier)) => {
            run_formatted(
                &mut tx,
                "ALTER ROLE %I LOGIN PASSWORD %L",
                &[role.name, verifier],
            )
            .await?
        }
        (false, None) => {
            return Err(refuse(
                "no such role; create it (CREATE ROLE … LOGIN PASSWORD …) or set HEADROOM_RUNTIME_PASSWORD so migrate creates it".into(),
            ));
        }
        (true, None) => {}
    }
    grant_select_insert(&mut tx, role.name).await?;
    tx.commit().await?;
    Ok(())
}

/// Leaves `role` exactly schema USAGE, CONNECT, USAGE on the sequences, SELECT and INSERT on
/// every ledger table, DELETE on [`PRUNED_TABLES`] and SELECT on the migrations table: anything
/// granted before is revoked.
async fn grant_select_insert(
    tx: &mut Transaction<'_, Postgres>,
    role: &str,
) -> Result<(), LedgerError> {
    let tables = ledger_tables(tx).await?;
    let (schema, database): (String, String) =
        sqlx::query_as("SELECT current_schema()::text, current_database()::text")
            .fetch_one(&mut **tx)
            .await?;
    for statement in [
        "REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM %I",
        "REVOKE ALL ON ALL SEQUENCES IN SCHEMA %I FROM %I",
        "GRANT USAGE ON SCHEMA %I TO %I",
        "GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO %I",
    ] {
        run_formatted(tx, statement, &[&schema, role]).await?;
    }
    run_formatted(tx, "GRANT CONNECT ON DATABASE %I TO %I", &[&database, role]).await?;
    for table in &tables {
        run_formatted(tx, "GRANT SELECT, INSERT ON TABLE %I TO %I", &[table, role]).await?;
    }
    for table in PRUNED_TABLES {
        run_formatted(tx, "GRANT DELETE ON TABLE %I TO %I", &[table, role]).await?;
    }
    run_formatted(
        tx,
        "GRANT SELECT ON TABLE %I TO %I",
        &[MIGRATIONS_TABLE, role],
    )
    .await?;
    Ok(())
}

enum Refusal {
    Why(String),
    Db(LedgerError),
}

impl From<sqlx::Error> for Refusal {
    fn from(e: sqlx::Error) -> Refusal {
        Refusal::Db(e.into())
    }
}

/// The runtime role must not be a superuser (triggers and grants do not bind one) nor own, or
/// inherit the owner of, any table in the schema (an owner can disable or drop the triggers).
async fn check_not_owner(tx: &mut Transaction<'_, Postgres>, role: &str) -> Result<(), Refusal> {
    let superuser: bool = sqlx::query_scalar("SELECT rolsuper FROM pg_roles WHERE rolname = $1")
        .bind(role)
        .fetch_one(&mut **tx)
        .await?;
    if superuser {
        return Err(Refusal::Why(
            "it is a superuser, which no trigger or grant binds; use a plain LOGIN role".into(),
        ));
    }
    let owned: Option<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'S')
           AND pg_has_role($1, c.relowner, 'USAGE')
         ORDER BY c.relname LIMIT 1",
    )
    .bind(role)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some(table) = owned {
        return Err(Refusal::Why(format!(
            "it owns (or is a member of the owner of) {table}, so it could disable or drop the append-only triggers; \
             use a role that is not a member of the owner"
        )));
    }
    Ok(())
}

/// The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5802, RFC 7677), with the
/// server's default 4096 iterations: `SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>`, base64.
/// A password given to `CREATE ROLE` in this form is stored as it is. The password is used as
/// its bytes: SASLprep is the identity on printable ASCII, which `headroom migrate` requires.
pub fn scram_sha256(password: &str, salt: &[u8]) -> String {
    use base64::Engine;
    use hmac::{Hmac, KeyInit, Mac};
    use sha2::{Digest, Sha256};
    const ITERATIONS: u32 = 4096;
    let mac = |key: &[u8], data: &[u8]| {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
        mac.update(data);
        mac.finalize().into_bytes()
    };
    // PBKDF2-HMAC-SHA-256 for one 32-byte block: U1 = HMAC(P, salt || 1), Ui = HMAC(P, Ui-1).
    let mut u = mac(password.as_bytes(), &[salt, &1u32.to_be_bytes()].concat());
    let mut salted = u;
    for _ in 1..ITERATIONS {
        u = mac(password.as_bytes(), &u);
        for (s, b) in salted.iter_mut().zip(u.iter()) {
            *s ^= b;
        }
    }
    let stored_key = Sha256::digest(mac(&salted, b"Client Key"));
    let server_key = mac(&salted, b"Server Key");
    let b64 = base64::engine::general_purpose::STANDARD;
    format!(
        "SCRAM-SHA-256${ITERATIONS}:{}${}:{}",
        b64.encode(salt),
        b64.encode(stored_key),
        b64.encode(server_key)
    )
}

#[cfg(test)]
mod tests {
    /// Checked against an independent implementation (Python's `hashlib.pbkdf2_hmac` and
    /// `hmac`, computing what PostgreSQL's `scram_build_secret` does) for this salt and password.
    #[test]
    fn scram_verifier_matches_an_independent_implementation() {
        let salt: Vec<u8> = (0u8..16).collect();
        assert_eq!(
            super::scram_sha256("correct horse battery staple", &salt),
            "SCRAM-SHA-256$4096:AAECAwQFBgcICQoLDA0ODw==$ONYbSJBXtKl6bP6PVqw8pm9e7EiacprLnoUQPFS80Hw=:IPOtHuGJ2HifEQg74W2XXqqCrCyQG55GbPRHa6g6n9w="
        );
    }
}
