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

/// The runtime role's password never reaches a log line or a span, whether it comes in the URL
/// or apart from it (a file, the environment), and a password apart from the URL logs in.
#[test]
fn the_database_password_never_reaches_the_log() {
    let db = fresh_postgres_database();
    let suffix = &db.rsplit('_').next().unwrap()[..12];
    let runtime = format!("cli_secret_{suffix}");
    let secret = format!("pw-{suffix}-Zq81");
    let migrated = Command::new(BIN)
        .args(["migrate", "--database-url", &db, "--runtime-role", &runtime])
        .env("HEADROOM_RUNTIME_PASSWORD", &secret)
        .output()
        .unwrap();
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let with_password = as_role(&db, &runtime, &secret);
    let (scheme, rest) = with_password.split_once("://").unwrap();
    let without_password = format!("{scheme}://{runtime}@{}", rest.rsplit_once('@').unwrap().1);
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("db-password");
    std::fs::write(&secret_file, format!("{secret}\n")).unwrap();

    // In the URL, from a file, and from the environment: each serves, and logs no secret.
    let ways: [(&str, &str, Option<&str>); 3] = [
        (&with_password, "", None),
        (
            &without_password,
            "HEADROOM_DATABASE_PASSWORD_FILE",
            secret_file.to_str(),
        ),
        (
            &without_password,
            "HEADROOM_DATABASE_PASSWORD",
            Some(&secret),
        ),
    ];
    for (i, (url, var, value)) in ways.into_iter().enumerate() {
        // To files, not pipes: a trace-level log fills a pipe nobody reads and stalls serve.
        let (out_path, err_path) = (
            dir.path().join(format!("serve-{i}.out")),
            dir.path().join(format!("serve-{i}.err")),
        );
        let mut token = Command::new(BIN);
        token.args([
            "token",
            "create",
            "--database-url",
            url,
            "--account",
            "*",
            "--scope",
            "admin",
        ]);
        let mut serve = Command::new(BIN);
        let port = free_port();
        serve
            .args(["serve", "--config"])
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/config/headroom.example.toml"
            ))
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--database-url",
                url,
            ])
            // Every span and event there is, at every level.
            .env("RUST_LOG", "trace")
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap());
        if let Some(value) = value {
            token.env(var, value);
            serve.env(var, value);
        }
        let minted = token.output().unwrap();
        assert!(
            minted.status.success(),
            "{var}: {}",
            String::from_utf8_lossy(&minted.stderr)
        );
        let token = String::from_utf8(minted.stdout).unwrap().trim().to_string();
        let mut child = serve.spawn().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let agent = agent_with(&token);
        let up = eventually(300, || agent.get(format!("{base}/readyz")).call().is_ok());
        assert!(up, "{var}: serve did not become ready");
        let created = call(
            &agent,
            "POST",
            &format!("{base}/v1/capacity-requests"),
            Some(&json!({"pool": "mistral-7b-batch", "replicas": 1}).to_string()),
        );
        assert_eq!(created.status, 201, "{var}: {:?}", created.body);
        stop_with_sigterm(&mut child);
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&std::fs::read(&out_path).unwrap()),
            String::from_utf8_lossy(&std::fs::read(&err_path).unwrap())
        );
        assert!(log.lines().count() > 20, "{var}: a trace-level log: {log}");
        assert!(
            log.contains(&format!("{runtime}:***@")) || value.is_some(),
            "{var}: the startup line shows the URL redacted: {log}"
        );
        let leaks: Vec<&str> = log.lines().filter(|l| l.contains(&secret)).collect();
        assert!(
            leaks.is_empty(),
            "{var}: the password in the log: {leaks:#?}"
        );
    }

    // Both sources at once, or a password twice, are one-line refusals that show no secret.
    for (url, vars) in [
        (
            &with_password,
            vec![("HEADROOM_DATABASE_PASSWORD", secret.as_str())],
        ),
        (
            &without_password,
            vec![
                ("HEADROOM_DATABASE_PASSWORD", secret.as_str()),
                (
                    "HEADROOM_DATABASE_PASSWORD_FILE",
                    secret_file.to_str().unwrap(),
                ),
            ],
        ),
    ] {
        let mut report = Command::new(BIN);
        report.args(["report", "budget", "--database-url", url]);
        for (k, v) in vars {
            report.env(k, v);
        }
        let out = report.output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(!stderr.contains(&secret), "{stderr}");
    }
}
