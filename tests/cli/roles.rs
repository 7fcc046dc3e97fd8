//! The deployment the Terraform modules make: the owner role migrates and grants, `serve` and
//! `token` run as the runtime role, which can add rows and nothing more.

use super::*;

/// Runs SQL as the server's superuser on `db` (roles are per server, databases per test).
fn admin_sql(db: &str, statements: &[String]) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let admin = sqlx::PgPool::connect(db).await.unwrap();
            for sql in statements {
                sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .execute(&admin)
                    .await
                    .unwrap();
            }
        });
}

/// `db` logged in as `role`.
fn as_role(db: &str, role: &str, password: &str) -> String {
    let (scheme, rest) = db.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{role}:{password}@{host}")
}

#[test]
fn serve_runs_as_the_runtime_role_that_migrate_creates() {
    let db = fresh_postgres_database();
    let suffix = &db.rsplit('_').next().unwrap()[..12];
    let (owner, runtime) = (
        format!("cli_owner_{suffix}"),
        format!("cli_runtime_{suffix}"),
    );
    let name = db.rsplit('/').next().unwrap();
    admin_sql(
        &db,
        &[
            format!("CREATE ROLE {owner} LOGIN CREATEROLE PASSWORD 'owner-pw'"),
            format!("ALTER DATABASE {name} OWNER TO {owner}"),
            format!("ALTER SCHEMA public OWNER TO {owner}"),
        ],
    );
    let owner_url = as_role(&db, &owner, "owner-pw");
    let runtime_url = as_role(&db, &runtime, "runtime-pw");

    let migrate = || {
        Command::new(BIN)
            .args([
                "migrate",
                "--database-url",
                &owner_url,
                "--runtime-role",
                &runtime,
            ])
            .env("HEADROOM_RUNTIME_PASSWORD", "runtime-pw")
            .output()
            .unwrap()
    };
    // Twice: the second run changes nothing and succeeds.
    for _ in 0..2 {
        let out = migrate();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("role {runtime} may SELECT and INSERT")),
            "{stdout}"
        );
    }

    // Tokens are minted and the service runs with the runtime role's URL only.
    let (mut child, base, token) = start_serve(&runtime_url);
    let agent = agent_with(&token);
    let created = call(
        &agent,
        "POST",
        &format!("{base}/v1/capacity-requests"),
        Some(&json!({"pool": "mistral-7b-batch", "replicas": 1}).to_string()),
    );
    assert_eq!(created.status, 201, "{:?}", created.body);
    let launched = eventually(100, || {
        let pool = call(
            &agent,
            "GET",
            &format!("{base}/v1/pools/mistral-7b-batch"),
            None,
        );
        pool.body["requested"].as_u64().unwrap_or(0) + pool.body["starting"].as_u64().unwrap_or(0)
            >= 1
    });
    assert!(
        launched,
        "the loop launched for the request as the runtime role"
    );
    child.kill().unwrap();
    child.wait().unwrap();

    // The runtime role is refused as the owner's replacement, in one line, exit code 2.
    let out = Command::new(BIN)
        .args([
            "migrate",
            "--database-url",
            &owner_url,
            "--runtime-role",
            &owner,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!("error: --runtime-role {owner}: ")),
        "{stderr}"
    );
}

#[test]
fn serve_as_an_ungranted_role_fails_in_one_line_naming_migrate() {
    let db = fresh_postgres_database();
    let suffix = &db.rsplit('_').next().unwrap()[..12];
    let role = format!("cli_nogrant_{suffix}");
    admin_sql(&db, &[format!("CREATE ROLE {role} LOGIN")]);
    let migrated = Command::new(BIN)
        .args(["migrate", "--database-url", &db])
        .output()
        .unwrap();
    assert!(migrated.status.success());
    let out = Command::new(BIN)
        .args([
            "serve",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/headroom.example.toml"),
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--database-url",
            &as_role(&db, &role, "x"),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("headroom migrate --runtime-role"),
        "{stderr}"
    );
}

#[test]
fn runtime_role_options_are_checked_in_one_line() {
    for (args, env, says) in [
        (
            vec![
                "--database-url",
                "sqlite:///tmp/never.db",
                "--runtime-role",
                "r",
            ],
            None,
            "--runtime-role: only a PostgreSQL",
        ),
        (
            vec![
                "--database-url",
                "postgres://u@127.0.0.1:1/d",
                "--runtime-role",
                "Bad-Name",
            ],
            None,
            "--runtime-role: \"Bad-Name\"",
        ),
        (
            vec![
                "--database-url",
                "postgres://u@127.0.0.1:1/d",
                "--runtime-role",
                "r",
            ],
            Some("has space"),
            "HEADROOM_RUNTIME_PASSWORD: ",
        ),
    ] {
        let mut command = Command::new(BIN);
        command.arg("migrate").args(&args);
        if let Some(password) = env {
            command.env("HEADROOM_RUNTIME_PASSWORD", password);
        }
        let out = command.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(&format!("error: {says}")),
            "{args:?}: {stderr}"
        );
    }
}
