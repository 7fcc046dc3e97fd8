//! End-to-end tests of the `headroom` binary: the demo over real HTTP, and the CLI's errors; and
//! the workspace's rule that its pure crates link no I/O crate (`cli/purity.rs`).

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_headroom");

/// Polls `check` up to `polls` times, 100 ms apart, until it holds: a bounded wait.
fn eventually(polls: usize, mut check: impl FnMut() -> bool) -> bool {
    (0..polls).any(|_| {
        let ok = check();
        if !ok {
            std::thread::sleep(Duration::from_millis(100));
        }
        ok
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An agent that sends `Authorization: Bearer <token>` on every request.
fn agent_with(token: &str) -> ureq::Agent {
    let header = format!("Bearer {token}");
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .middleware(
            move |mut request: ureq::http::Request<ureq::SendBody>,
                  next: ureq::middleware::MiddlewareNext| {
                request
                    .headers_mut()
                    .insert("authorization", header.parse().unwrap());
                next.handle(request)
            },
        )
        .build()
        .into()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// Sends SIGTERM to a running `serve` and waits for it to stop.
fn stop_with_sigterm(child: &mut std::process::Child) -> std::process::ExitStatus {
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    child.wait().unwrap()
}

struct Reply {
    status: u16,
    content_type: String,
    retry_after: Option<String>,
    body: Value,
}

fn call(agent: &ureq::Agent, method: &str, url: &str, body: Option<&str>) -> Reply {
    let mut response = match (method, body) {
        ("GET", _) => agent.get(url).call(),
        ("POST", Some(b)) => agent
            .post(url)
            .header("content-type", "application/json")
            .send(b),
        _ => unreachable!("test helper used with {method}"),
    }
    .unwrap();
    let header = |name| {
        response
            .headers()
            .get(name)
            .map(|v: &ureq::http::HeaderValue| v.to_str().unwrap().to_string())
    };
    let content_type = header("content-type").unwrap_or_default();
    let retry_after = header("retry-after");
    let text = response.body_mut().read_to_string().unwrap();
    Reply {
        status: response.status().as_u16(),
        content_type,
        retry_after,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
    }
}

/// Without `--seconds` the demo tells its story and ends by itself: the batch pool idle at zero
/// replicas, warm nodes woken (the batch job's first requests held while one wakes), the batch
/// tier shed with 429 (its arrivals honour the admission answer), nodes landing, the backlogs
/// drained, scale-in, the batch pool back at zero; then the summary.
#[test]
fn the_demo_tells_a_finite_story_and_ends_by_itself() {
    let port = free_port();
    let mut child = Command::new(BIN)
        .args(["demo", "--json", "--speedup", "50", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Bounded: the story is about 12 virtual minutes, under 15 s of real time at 50x.
    let ended = eventually(1200, || child.try_wait().unwrap().is_some());
    if !ended {
        child.kill().unwrap();
    }
    assert!(ended, "the demo did not end by itself within 120 s");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    let summary: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(summary["story_complete"], true, "{summary}");
    assert_eq!(summary["requests_waiting"], 0, "every backlog drained");
    assert!(summary["requests_shed"].as_u64().unwrap() > 0, "{summary}");
    let story: Vec<&str> = summary["story"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let at = |needle: &str| {
        story
            .iter()
            .position(|t| t.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in the story: {story:#?}"))
    };
    assert!(
        at("llama-70b-interactive: 4 parked warm nodes woken")
            < at("llama-70b-interactive: backlog drained")
    );
    assert!(
        at("mistral-7b-batch: shedding the low tier")
            < at("mistral-7b-batch: low tier admitted again")
    );
    assert!(at("nodes landing") < at("scaling in"));
    // Scale to zero: the pool without a floor starts with none, holds its job's first requests
    // while a parked node wakes, and ends with none again.
    assert!(
        at("mistral-7b-batch: idle at zero replicas")
            < at("mistral-7b-batch: 1 parked warm nodes woken")
    );
    assert!(
        at("mistral-7b-batch: idle at zero replicas")
            < at("first requests held (not shed) while a node wakes")
    );
    assert!(at("mistral-7b-batch: scaling in") < at("mistral-7b-batch: back at zero replicas"));
    let batch = summary["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "mistral-7b-batch")
        .unwrap();
    assert_eq!(
        (batch["ready"].as_u64(), batch["desired"].as_u64()),
        (Some(0), Some(0)),
        "{batch}"
    );
    assert!(batch["warm"].as_u64().unwrap() >= 1, "{batch}");
    assert!(
        !story
            .iter()
            .any(|t| t.contains("shedding the critical tier"))
    );
}

#[test]
fn demo_serves_the_api_while_it_runs_and_prints_a_json_summary() {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let mut child = Command::new(BIN)
        .args([
            "demo",
            "--seconds",
            "15",
            "--json",
            "--speedup",
            "20",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .arg("--database")
        .arg(&db)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let agent = agent();
    // Bounded wait for the listener: 300 polls, 100 ms apart.
    let up = eventually(300, || agent.get(format!("{base}/healthz")).call().is_ok());
    assert!(up, "demo did not start listening within 30 s");

    let pools = call(&agent, "GET", &format!("{base}/v1/pools"), None);
    assert_eq!(pools.status, 200);
    let names: Vec<&str> = pools.body["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["llama-70b-interactive", "mistral-7b-batch"]);
    let interactive = &pools.body["pools"][0];
    assert!(
        interactive["ready"].as_u64().unwrap() >= 8,
        "the demo fills the pool's floor first: {interactive}"
    );

    let created = call(
        &agent,
        "POST",
        &format!("{base}/v1/capacity-requests"),
        Some(&json!({"pool": "mistral-7b-batch", "replicas": 1}).to_string()),
    );
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = created.body["id"].as_str().unwrap();
    let read = call(
        &agent,
        "GET",
        &format!("{base}/v1/capacity-requests/{id}"),
        None,
    );
    assert_eq!(read.status, 200);
    assert_eq!(read.body["id"], id);

    let malformed = call(
        &agent,
        "POST",
        &format!("{base}/v1/capacity-requests"),
        Some("{\"pool\": \"mistral-7b-batch\", \"replicas\": "),
    );
    assert_eq!(malformed.status, 400);
    assert_eq!(malformed.content_type, "application/problem+json");
    assert_eq!(malformed.body["status"], 400);

    let status = child.wait().unwrap();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "demo failed: {stderr}");
    let summary: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {stdout}"));
    for key in [
        "requests_total",
        "capacity_requested",
        "capacity_delivered",
        "refusals",
    ] {
        assert!(summary[key].is_u64(), "{key} missing: {summary}");
    }
    assert!(
        summary["requests_total"].as_u64().unwrap() > 1000,
        "{summary}"
    );
    assert!(
        summary["capacity_delivered"].as_u64().unwrap() >= 10,
        "the floors were delivered: {summary}"
    );
    let spend: f64 = summary["spend_usd"].as_str().unwrap().parse().unwrap();
    assert!(spend > 0.0, "{summary}");
    assert!(
        summary["capacity_requests"].as_u64().unwrap() == 1,
        "{summary}"
    );
    assert!(
        stderr.contains("llama-70b-interactive q="),
        "interval lines go to stderr with --json: {stderr}"
    );
    assert!(db.exists(), "--database keeps the ledger");
}

#[test]
fn config_check_reports_each_problem_on_one_line_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/headroom.example.toml"
    ))
    .unwrap();
    let ok = Command::new(BIN)
        .args([
            "config",
            "check",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/headroom.example.toml"),
        ])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        example
            .replace("min_replicas = 8", "min_replicas = 99")
            .replace("hold_horizon = \"1h\"", "hold_horizon = \"soon\""),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["config", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("pools[0].min_replicas") && l.contains("fix:")),
        "{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("engine.hold_horizon") && l.contains("fix:")),
        "{stderr}"
    );

    let missing = Command::new(BIN)
        .args(["config", "check", "/no/such/file.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(missing.stderr).unwrap().lines().count(),
        1
    );
}

/// A fresh database on the PostgreSQL server `DATABASE_URL` names.
fn fresh_postgres_database() -> String {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(headroom_testkit::fresh_postgres_database("headroom_cli"))
}

#[test]
fn serve_runs_on_postgres_and_stops_gracefully_on_sigterm() {
    let db = fresh_postgres_database();
    let migrated = Command::new(BIN)
        .args(["migrate", "--database-url", &db])
        .output()
        .unwrap();
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );

    let (mut child, base, token) = start_serve(&db);
    // Authentication is on: no token, no capacity.
    let refused = call(
        &agent(),
        "POST",
        &format!("{base}/v1/capacity-requests"),
        Some(r#"{"pool":"mistral-7b-batch","replicas":1}"#),
    );
    assert_eq!(refused.status, 401);
    let agent = agent_with(&token);

    let body = json!({"pool": "mistral-7b-batch", "replicas": 2}).to_string();
    let created = call(
        &agent,
        "POST",
        &format!("{base}/v1/capacity-requests"),
        Some(&body),
    );
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    // The reconcile loop launches for it at once: two nodes starting on the simulated cloud.
    let starting = (0..100).any(|_| {
        let pool = call(
            &agent,
            "GET",
            &format!("{base}/v1/pools/mistral-7b-batch"),
            None,
        );
        let n = pool.body["requested"].as_u64().unwrap_or(0)
            + pool.body["starting"].as_u64().unwrap_or(0);
        if n < 2 {
            std::thread::sleep(Duration::from_millis(100));
        }
        n >= 2
    });
    assert!(starting, "the loop did not launch for the request");
    let budget = call(&agent, "GET", &format!("{base}/v1/budgets/research"), None);
    assert_eq!(budget.status, 200, "{:?}", budget.body);
    assert_ne!(
        budget.body["held"], "0.000000",
        "the launches hold money: {:?}",
        budget.body
    );

    let status = stop_with_sigterm(&mut child);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        status.success(),
        "serve did not exit cleanly on SIGTERM: {status:?} {stderr}"
    );

    // The ledger outlives the process: a new one answers for the same request.
    let (mut again, base, token) = start_serve(&db);
    let agent = agent_with(&token);
    let read = call(
        &agent,
        "GET",
        &format!("{base}/v1/capacity-requests/{id}"),
        None,
    );
    assert_eq!(read.status, 200, "{:?}", read.body);
    assert_eq!(read.body["replicas"], 2);
    again.kill().unwrap();
    again.wait().unwrap();
}

/// Starts `headroom serve` on the example configuration and `db`; returns once it is ready.
fn start_serve(db: &str) -> (std::process::Child, String, String) {
    start_serve_with(
        concat!(env!("CARGO_MANIFEST_DIR"), "/config/headroom.example.toml"),
        db,
    )
}

/// Starts `headroom serve` on `config` and `db`; returns once it is ready.
/// Mints an admin token for `db` with the CLI, as an operator would.
fn mint_admin_token(db: &str) -> String {
    let out = Command::new(BIN)
        .args([
            "token",
            "create",
            "--database-url",
            db,
            "--account",
            "*",
            "--scope",
            "admin",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Starts `headroom serve` on `config` and `db` with authentication on; returns once it is
/// ready, with its URL and an admin token.
fn start_serve_with(config: &str, db: &str) -> (std::process::Child, String, String) {
    let token = mint_admin_token(db);
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let child = Command::new(BIN)
        .args(["serve", "--config", config])
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--database-url",
            db,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let agent = agent();
    let up = eventually(300, || agent.get(format!("{base}/readyz")).call().is_ok());
    assert!(up, "serve did not become ready");
    (child, base, token)
}

#[test]
fn a_bad_database_url_is_one_line_and_exit_code_2() {
    let out = Command::new(BIN)
        .args(["migrate", "--database-url", "mysql://nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--database-url") && stderr.contains("postgres://"),
        "{stderr}"
    );
}

/// A report or token listing on a mistyped SQLite path is one line naming it, and no empty ledger
/// is left behind (it used to print a $0 report).
#[test]
fn a_missing_sqlite_ledger_is_one_line_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledgr.db");
    let url = format!("sqlite://{}", path.display());
    for args in [
        vec!["report", "budget", "--database-url", url.as_str()],
        vec!["token", "list", "--database-url", url.as_str()],
    ] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("--database-url: no ledger at") && stderr.contains("ledgr.db"),
            "{stderr}"
        );
        assert!(!path.exists(), "{args:?} created {}", path.display());
    }
}

/// Signals pushed to a replica that does not reconcile the pool reach the one that does: two
/// replicas on one PostgreSQL database, every push sent only to the non-owner.
#[test]
fn signals_pushed_to_any_replica_reach_the_pool_s_owner() {
    let db = fresh_postgres_database();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("shared.toml");
    std::fs::write(
        &config,
        r#"
cluster_id = "shared-signals"
[engine]
tick = "200ms"
[[offerings]]
id = "use1-g6-od"
provider = "sim"
region = "us-east-1"
zone = "use1-az1"
instance_type = "g6.xlarge"
market = "on-demand"
price_usd_per_hour = "0.8048"
gpus = 1
[[pools]]
name = "shared-pool"
account = "ml"
offerings = ["use1-g6-od"]
max_replicas = 8
[pools.ladder]
node_acquisition = "1s"
image_pull = "1s"
weight_load = "1s"
compile = "1s"
warmup = "1s"
[pools.scaling]
replica_throughput_rps = 5.0
"#,
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let (mut a, a_url, token) = start_serve_with(config, &db);
    let (mut b, b_url, _) = start_serve_with(config, &db);
    let agent = agent_with(&token);
    let pool = |url: &str| call(&agent, "GET", &format!("{url}/v1/pools/shared-pool"), None).body;
    let mut owners = (false, false);
    let one_owner = eventually(100, || {
        owners = (
            pool(&a_url)["reconciled_here"] == true,
            pool(&b_url)["reconciled_here"] == true,
        );
        owners.0 != owners.1
    });
    assert!(
        one_owner,
        "exactly one replica must own the pool: {owners:?}"
    );
    let (owner_url, other_url) = if owners.0 {
        (&a_url, &b_url)
    } else {
        (&b_url, &a_url)
    };
    let signal = json!({"queue_depth": 37, "oldest_age_s": 12.0, "arrival_rate_rps": 20.0});
    let reached = eventually(100, || {
        let pushed = call(
            &agent,
            "POST",
            &format!("{other_url}/v1/pools/shared-pool/signals"),
            Some(&signal.to_string()),
        );
        assert_eq!(pushed.status, 202, "{:?}", pushed.body);
        let status = pool(owner_url);
        status["last_signal"]["queue_depth"] == 37 && status["demand"].as_u64().unwrap_or(0) > 0
    });
    let status = pool(owner_url);
    a.kill().unwrap();
    b.kill().unwrap();
    a.wait().unwrap();
    b.wait().unwrap();
    assert!(
        reached,
        "the owner never saw the signals pushed to the other replica: {status}"
    );
    assert!(status["hold"].is_null(), "no signal_missing hold: {status}");
}

/// Two replicas share a database and a simulated cloud; the one that owns the pool is killed
/// with SIGKILL; the other takes the pool over and nothing is launched twice.
#[test]
fn a_killed_replica_s_pools_are_taken_over_without_duplicate_launches() {
    let db = fresh_postgres_database();
    let dir = tempfile::tempdir().unwrap();
    let state_file = dir.path().join("cloud.json");
    let config = dir.path().join("ha.toml");
    std::fs::write(
        &config,
        format!(
            r#"
cluster_id = "ha-test"
[engine]
tick = "200ms"
[sim]
state_file = "{}"
[[offerings]]
id = "use1-g6-od"
provider = "sim"
region = "us-east-1"
zone = "use1-az1"
instance_type = "g6.xlarge"
market = "on-demand"
price_usd_per_hour = "0.8048"
gpus = 1
[offerings.sim_ladder]
node_acquisition = "300ms"
image_pull = "300ms"
weight_load = "300ms"
compile = "300ms"
warmup = "300ms"
[[pools]]
name = "ha-pool"
account = "ml"
offerings = ["use1-g6-od"]
max_replicas = 8
[pools.ladder]
node_acquisition = "1s"
image_pull = "1s"
weight_load = "1s"
compile = "1s"
warmup = "1s"
[pools.scaling]
replica_throughput_rps = 5.0
"#,
            state_file.display()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let (mut a, a_url, token) = start_serve_with(config, &db);
    let (mut b, b_url, _) = start_serve_with(config, &db);
    let agent = agent_with(&token);
    let owner_of = |url: &str| {
        call(&agent, "GET", &format!("{url}/v1/pools/ha-pool"), None).body["reconciled_here"]
            == true
    };
    let wait_delivered = |url: &str, id: &str| {
        eventually(150, || {
            let r = call(
                &agent,
                "GET",
                &format!("{url}/v1/capacity-requests/{id}"),
                None,
            );
            r.body["state"] == "delivered"
        })
    };

    let body = json!({"pool": "ha-pool", "replicas": 2}).to_string();
    let first = call(
        &agent,
        "POST",
        &format!("{b_url}/v1/capacity-requests"),
        Some(&body),
    );
    let first_id = first.body["id"].as_str().unwrap().to_string();
    assert!(
        wait_delivered(&a_url, &first_id),
        "the first request was not delivered"
    );
    let (owner, survivor, survivor_url) = match (owner_of(&a_url), owner_of(&b_url)) {
        (true, false) => (&mut a, &mut b, b_url.clone()),
        (false, true) => (&mut b, &mut a, a_url.clone()),
        other => panic!("exactly one replica must own the pool, got {other:?}"),
    };

    owner.kill().unwrap(); // SIGKILL
    owner.wait().unwrap();
    let taken_over = eventually(100, || owner_of(&survivor_url));
    assert!(
        taken_over,
        "the surviving replica did not take the pool over within 10 s"
    );

    let second = call(
        &agent,
        "POST",
        &format!("{survivor_url}/v1/capacity-requests"),
        Some(&body),
    );
    let second_id = second.body["id"].as_str().unwrap().to_string();
    assert!(
        wait_delivered(&survivor_url, &second_id),
        "the survivor did not deliver the second request"
    );
    // Give the survivor a few ticks to do anything extra it would wrongly do.
    std::thread::sleep(Duration::from_secs(1));
    survivor.kill().unwrap();
    survivor.wait().unwrap();

    let state: Value = serde_json::from_slice(&std::fs::read(&state_file).unwrap()).unwrap();
    let instances = state["instances"].as_object().unwrap();
    let running: Vec<&Value> = instances
        .values()
        .filter(|i| i["life"]["Running"].is_object())
        .collect();
    assert_eq!(
        running.len(),
        4,
        "two requests of two replicas: four instances, none twice: {state}"
    );
    let tokens: std::collections::BTreeSet<&str> = instances
        .values()
        .map(|i| i["instance"]["client_token"].as_str().unwrap())
        .collect();
    assert_eq!(
        tokens.len(),
        instances.len(),
        "one instance per client token"
    );
}

/// `headroom ARGS…` succeeds; its standard output as JSON.
fn json_of<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Value {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn what_if(args: &[&str]) -> Value {
    json_of(["what-if"].iter().chain(args).chain(&["--json"]))
}

#[test]
fn what_if_reproduces_the_seed_numbers() {
    let burst = what_if(&[
        "--ready",
        "8",
        "--per-replica-rps",
        "2.5",
        "--arrival-rps",
        "20",
        "--burst-rps",
        "32",
        "--burst-s",
        "30",
        "--drain-s",
        "60",
    ]);
    assert_eq!(
        (
            burst["desired_replicas"].as_u64(),
            burst["additional_replicas"].as_i64()
        ),
        (Some(11), Some(3))
    );
    assert_eq!(burst["rule"], "backlog_drain");
    assert!(burst["reasoning"].to_string().contains("360"), "{burst}");
    assert_eq!(
        what_if(&["--current", "4", "--metric", "8", "--target", "4"])["desired_replicas"],
        8
    );
    assert_eq!(
        what_if(&["--current", "4", "--metric", "8", "--target", "1"])["desired_replicas"],
        32
    );
    let steady = what_if(&["--current", "4", "--metric", "1.1", "--target", "1"]);
    assert_eq!(
        (
            steady["desired_replicas"].as_u64(),
            steady["additional_replicas"].as_i64()
        ),
        (Some(4), Some(0))
    );

    // Tokens as the unit: 100,000 tok/s at 2,000 per replica is 50 replicas, and 200,000 queued
    // tokens drained within 60 s two more.
    let tokens = what_if(&[
        "--unit",
        "tokens",
        "--ready",
        "2",
        "--per-replica-tps",
        "2000",
        "--arrival-tps",
        "100000",
        "--backlog",
        "200000",
    ]);
    assert_eq!(tokens["desired_replicas"], 52, "{tokens}");
    assert!(
        tokens["reasoning"].to_string().contains("tok/s"),
        "{tokens}"
    );

    let bad = Command::new(BIN)
        .args([
            "what-if",
            "--current",
            "4",
            "--metric",
            "8",
            "--target",
            "-1",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8(bad.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--target"), "{stderr}");
}

/// Serves `body` as a Prometheus text page to at most `max_requests` connections, then stops.
fn metrics_server(body: &'static str, max_requests: usize) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(max_requests) {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
fn serve_scrapes_vllm_metrics_into_signals() {
    let url = metrics_server(
        "# TYPE vllm:num_requests_waiting gauge\n\
         vllm:num_requests_waiting{model_name=\"llama\"} 42\n\
         vllm:num_requests_waiting{model_name=\"other\"} 1000\n\
         DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 96\n",
        500,
    );
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/headroom.example.toml"
    ))
    .unwrap();
    let scrape = format!(
        "\n[pools.scrape]\nurl = \"{url}\"\ninterval = \"1s\"\ntimeout = \"1s\"\n[pools.scrape.series]\n\
         queue_depth = 'vllm:num_requests_waiting{{model_name=\"llama\"}}'\n\
         gpu_utilization_percent = 'DCGM_FI_DEV_GPU_UTIL'\n"
    );
    // Attach the scrape target to the first pool (it follows its [pools.scaling] table).
    let config_text = example.replacen(
        "\n[[pools]]\nname = \"mistral-7b-batch\"",
        &format!("{scrape}\n[[pools]]\nname = \"mistral-7b-batch\""),
        1,
    );
    let config = dir.path().join("scrape.toml");
    std::fs::write(&config, config_text).unwrap();
    let db = format!("sqlite://{}", dir.path().join("l.db").display());
    let (mut child, base, token) = start_serve_with(config.to_str().unwrap(), &db);
    let agent = agent_with(&token);
    let seen = (0..100).any(|_| {
        let pool = call(
            &agent,
            "GET",
            &format!("{base}/v1/pools/llama-70b-interactive"),
            None,
        );
        let ok = pool.body["last_signal"]["queue_depth"] == 42;
        if ok {
            assert_eq!(pool.body["last_signal"]["gpu_utilization"], 0.96);
        } else {
            std::thread::sleep(Duration::from_millis(100));
        }
        ok
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen, "the scraped queue depth never reached the pool");
}

/// Runs the demo for four seconds keeping its ledger in `dir` (`--database-url`, as the reports
/// read it): its JSON summary and the ledger's URL.
fn demo_ledger(dir: &std::path::Path) -> (Value, String) {
    let url = format!("sqlite://{}", dir.join("demo.db").display());
    let demo = Command::new(BIN)
        .args([
            "demo",
            "--seconds",
            "4",
            "--json",
            "--speedup",
            "20",
            "--listen",
        ])
        .arg(format!("127.0.0.1:{}", free_port()))
        .args(["--database-url", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&demo.stderr);
    assert!(demo.status.success(), "{stderr}");
    let summary = serde_json::from_slice(&demo.stdout).unwrap();
    (summary, url)
}

/// The finance report from a demo's ledger: FOCUS sums to the report's spend, and the HTML page,
/// rendered by headless Chromium, shows the same total.
#[test]
fn budget_report_formats_agree_and_the_html_renders_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let (summary, url) = demo_ledger(dir.path());
    let report = |format: &str, out: &std::path::Path| {
        let status = Command::new(BIN)
            .args([
                "report",
                "budget",
                "--database-url",
                &url,
                "--from",
                "2000-01-01",
                "--to",
                "2100-01-01",
            ])
            .args(["--group-by", "pool", "--format", format, "--out"])
            .arg(out)
            .status()
            .unwrap();
        assert!(status.success(), "report --format {format}");
        std::fs::read_to_string(out).unwrap()
    };
    let json: Value = serde_json::from_str(&report("json", &dir.path().join("r.json"))).unwrap();
    let total = json["totals"]["spend"].as_str().unwrap().to_string();
    assert_ne!(total, "0.000000", "the demo spent money");
    // The demo's own summary, written on its scaled clock, and the report read afterwards on the
    // wall clock are one figure: the demo ends its nodes when it ends.
    assert_eq!(
        summary["spend_usd"].as_str().unwrap(),
        total,
        "the demo's summary and the report disagree"
    );
    assert_eq!(
        json["generated_at"], summary["spend_as_of"],
        "the report is computed to the instant the demo ended"
    );
    let csv = report("csv", &dir.path().join("r.csv"));
    let total_line = csv.lines().last().unwrap();
    assert!(total_line.starts_with("total,"), "{csv}");
    assert_eq!(total_line.split(',').nth(4).unwrap(), total, "{csv}");
    let names: Vec<&str> = json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["group"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["llama-70b-interactive", "mistral-7b-batch"]);

    // FOCUS: BilledCost sums to the total, in exact micro-dollars.
    let focus = report("focus", &dir.path().join("r.focus.csv"));
    let mut lines = focus.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let billed = header.iter().position(|h| *h == "BilledCost").unwrap();
    assert_eq!(billed, 0, "BilledCost leads, so a plain split reads it");
    let micros: i64 = lines
        .map(|l| {
            let (whole, frac) = l.split(',').next().unwrap().split_once('.').unwrap();
            whole.parse::<i64>().unwrap() * 1_000_000 + frac.parse::<i64>().unwrap()
        })
        .sum();
    assert_eq!(
        format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000),
        total
    );
    // FOCUS's identities, exactly as written, on every row of the demo's report: the list and
    // contracted costs are their unit prices times the quantity, the billed and effective costs
    // the same, the list cost rounded half up to the micro-dollar.
    let exact = |s: &str| -> (i128, u32) {
        let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
        (format!("{whole}{frac}").parse().unwrap(), frac.len() as u32)
    };
    let at = |(v, d): (i128, u32), to: u32| v * 10i128.pow(to - d);
    let mut rows = csv::Reader::from_reader(focus.as_bytes());
    let mut checked = 0;
    for row in rows.deserialize::<std::collections::BTreeMap<String, String>>() {
        let row = row.unwrap();
        let quantity = exact(&row["PricingQuantity"]);
        for (cost, unit) in [
            ("ListCost", "ListUnitPrice"),
            ("ContractedCost", "ContractedUnitPrice"),
        ] {
            let (price, cost_value) = (exact(&row[unit]), exact(&row[cost]));
            let product = (price.0 * quantity.0, price.1 + quantity.1);
            let d = product.1.max(cost_value.1);
            assert_eq!(
                at(product, d),
                at(cost_value, d),
                "{cost} ≠ {unit} × PricingQuantity: {row:?}"
            );
        }
        assert_eq!(row["BilledCost"], row["EffectiveCost"], "{row:?}");
        let list = exact(&row["ListCost"]);
        let unit = 10i128.pow(list.1 - 6);
        assert_eq!(
            (list.0 + unit / 2).div_euclid(unit),
            exact(&row["BilledCost"]).0,
            "{row:?}"
        );
        checked += 1;
    }
    assert!(checked > 20, "{checked} FOCUS rows");

    // HTML, as a browser sees it.
    let html_path = dir.path().join("r.html");
    report("html", &html_path);
    let chromium = ["chromium", "/usr/bin/chromium", "chromium-browser"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("chromium is missing: ./scripts/test installs it (apt-get install chromium)");
    // The page with a script that measures every spend chart's label as laid out and lists the pairs
    // that overprint each other.
    let measured = dir.path().join("r-measured.html");
    std::fs::write(
        &measured,
        std::fs::read_to_string(&html_path).unwrap().replace(
            "</body>",
            r##"<pre id="overprints"></pre><script>
const found = [];
for (const svg of document.querySelectorAll("#spend-chart, .budget-chart")) {
  const labels = [...svg.querySelectorAll("text")].map(t => [t.textContent, t.getBoundingClientRect()]);
  for (let i = 0; i < labels.length; i++) for (let j = i + 1; j < labels.length; j++) {
    const [a, p] = labels[i], [b, q] = labels[j];
    if (p.left < q.right && q.left < p.right && p.top < q.bottom && q.top < p.bottom) found.push(a + " / " + b);
  }
}
const out = document.getElementById("overprints");
out.setAttribute("data-labels", document.querySelectorAll("#spend-chart text, .budget-chart text").length);
out.textContent = found.join("; ");
</script></body>"##,
        ),
    )
    .unwrap();
    let profile = dir.path().join("chromium-profile");
    let dom = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", html_path.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains(&format!(r#"id="total-spend" title="{total}""#)),
        "the rendered page shows another total: {dom}"
    );
    assert!(
        dom.contains("<svg id=\"spend-chart\""),
        "the spend chart rendered"
    );
    assert!(dom.contains(r#"data-group="llama-70b-interactive""#));
    // The chart plots against time: the line starts at the x axis's origin and its last point
    // (the spend to now) sits on the "now" marker; both axes are labelled; every budget's
    // ceiling is drawn however far above the spend; fill is a percentage; periods are named.
    let attr = |tag_start: &str, name: &str| -> String {
        let at = dom
            .find(tag_start)
            .unwrap_or_else(|| panic!("{tag_start} missing: {dom}"));
        let rest = &dom[at..];
        let rest = &rest[..rest.find('>').unwrap()];
        let key = format!(" {name}=\"");
        let from = rest
            .find(&key)
            .unwrap_or_else(|| panic!("{name} in {rest}"))
            + key.len();
        rest[from..from + rest[from..].find('"').unwrap()].to_string()
    };
    let now_x: f64 = attr(r#"<line id="now-marker""#, "x1").parse().unwrap();
    let origin_x: f64 = attr(r#"<line id="x-axis""#, "x1").parse().unwrap();
    let points = attr(r#"<polyline id="spend-line""#, "points");
    let xs: Vec<f64> = points
        .split(' ')
        .map(|p| p.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(xs[0], origin_x, "{points}");
    assert!(
        (xs.last().unwrap() - now_x).abs() < 0.5,
        "{points} ends at now ({now_x})"
    );
    assert!(dom.contains(">time (UTC)</text>") && dom.contains(">cumulative spend (USD)</text>"));
    // Each budget's ceiling is drawn against its own account's spend over its own period (the
    // demo's are daily), as a line near the data or named above a scale fitted to the spend;
    // the range's chart of all spend carries none.
    let range_chart = &dom[dom.find(r#"<svg id="spend-chart""#).unwrap()..];
    let range_chart = &range_chart[..range_chart.find("</svg>").unwrap()];
    assert!(!range_chart.contains("ceiling"), "{range_chart}");
    for account in ["ml-platform", "research"] {
        let at = dom
            .find(&format!(
                r#"class="budget-chart" data-account="{account}" data-period="daily""#
            ))
            .unwrap_or_else(|| panic!("{account}'s daily chart: {dom}"));
        let chart = &dom[at..at + dom[at..].find("</svg>").unwrap()];
        assert!(
            chart.contains(&format!(r#"class="ceiling" data-account="{account}""#))
                || chart.contains(&format!(
                    r#"class="ceiling-off-scale" data-account="{account}""#
                )),
            "{account}'s ceiling is drawn: {chart}"
        );
    }
    let laid_out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", measured.display()))
        .output()
        .unwrap();
    let laid_out = String::from_utf8_lossy(&laid_out.stdout);
    let verdict = &laid_out[laid_out
        .find(r#"<pre id="overprints" data-labels=""#)
        .expect("the measuring script ran")..];
    let verdict = &verdict[..verdict.find("</pre>").unwrap()];
    let (labels, overprints) = verdict[34..].split_once('"').unwrap();
    assert!(labels.parse::<u32>().unwrap() > 20, "{verdict}");
    assert_eq!(
        overprints, ">",
        "labels overprint each other as Chromium lays them out: {verdict}"
    );
    let fill = attr(r#"<span id="total-fill-ratio""#, "id");
    assert_eq!(fill, "total-fill-ratio");
    let fill_text = &dom[dom.find(r#"id="total-fill-ratio">"#).unwrap() + 22..];
    let fill_text = &fill_text[..fill_text.find('<').unwrap()];
    assert!(
        fill_text.ends_with(" %"),
        "fill as a percentage: {fill_text}"
    );
    let expected = json["totals"]["fill_ratio"].as_f64().unwrap() * 100.0;
    assert_eq!(fill_text, format!("{expected:.1} %"));
    assert!(
        dom.contains(r#"<td class="period">daily from "#),
        "period named: {dom}"
    );
    // The page ends with the reservations the same history advises, a heat map per family.
    assert!(dom.contains(r#"<section id="reservations">"#), "{dom}");
    assert!(
        dom.contains(r#"<svg id="heat-map-0" class="heat-map""#),
        "{dom}"
    );

    // With the deployment's configuration, a reservation it names is paid whether used or not:
    // a day of two idle nodes (long before the demo) is spend, charged to the one pool listing it.
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/headroom.example.toml"
    ))
    .unwrap();
    let config = headroom_testkit::with_reserved_g6(
        &example,
        "reservation_starts = \"2001-01-01T00:00:00Z\"\nreservation_ends = \"2001-01-02T00:00:00Z\"",
    );
    let config_path = dir.path().join("reserved.toml");
    std::fs::write(&config_path, config).unwrap();
    let with_config = Command::new(BIN)
        .args(["report", "budget", "--database-url", &url])
        .args(["--from", "2000-01-01", "--to", "2100-01-01"])
        .args(["--group-by", "pool", "--format", "json", "--config"])
        .arg(&config_path)
        .output()
        .unwrap();
    assert!(
        with_config.status.success(),
        "{}",
        String::from_utf8_lossy(&with_config.stderr)
    );
    let booked: Value = serde_json::from_slice(&with_config.stdout).unwrap();
    let money = |v: &Value| v.as_str().unwrap().parse::<f64>().unwrap();
    assert_eq!(booked["totals"]["reserved_idle_node_hours"], 48.0);
    assert_eq!(booked["totals"]["reserved_idle"], "24.000000");
    let batch = booked["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["group"] == "mistral-7b-batch")
        .unwrap();
    assert_eq!(batch["reserved_idle"], "24.000000", "{booked}");
    assert!(
        (money(&booked["totals"]["spend"]) - money(&json["totals"]["spend"]) - 24.0).abs() < 1e-9,
        "the idle day is added to what ran"
    );
    let missing = Command::new(BIN)
        .args(["report", "budget", "--database-url", &url, "--config"])
        .arg(dir.path().join("no-such.toml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert!(stderr.contains("no-such.toml"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// `report reservations` on a demo's ledger: every family that ran is listed with what it spent
/// (together the budget report's total), and a history of minutes is too short for a term.
#[test]
fn reservations_are_advised_from_a_demo_s_ledger_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let (summary, url) = demo_ledger(dir.path());
    let report = |format: &str| {
        let out = Command::new(BIN)
            .args([
                "report",
                "reservations",
                "--database-url",
                &url,
                "--format",
                format,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let json: Value = serde_json::from_str(&report("json")).unwrap();
    let families = json["families"].as_array().unwrap();
    let pools: std::collections::BTreeSet<&str> = families
        .iter()
        .map(|f| f["pool"].as_str().unwrap())
        .collect();
    assert_eq!(
        pools.into_iter().collect::<Vec<_>>(),
        ["llama-70b-interactive", "mistral-7b-batch"]
    );
    let micros = |m: &Value| -> i64 {
        let (whole, frac) = m.as_str().unwrap().split_once('.').unwrap();
        whole.parse::<i64>().unwrap() * 1_000_000 + frac.parse::<i64>().unwrap()
    };
    assert_eq!(
        families.iter().map(|f| micros(&f["spend"])).sum::<i64>(),
        micros(&summary["spend_usd"]),
        "the families' spend is the demo's"
    );
    for f in families {
        assert!(
            f["why"]
                .as_str()
                .unwrap()
                .contains("a term commitment is weighed on a week at least"),
            "{f}"
        );
        assert_eq!(f["profile"].as_array().unwrap().len(), 7);
    }
    let table = report("table");
    assert!(table.contains("llama-70b-interactive sim/"), "{table}");
    let csv = report("csv");
    assert_eq!(csv.lines().count(), families.len() + 1, "{csv}");
    assert!(report("html").contains("<section id=\"reservations\">"));

    // Bad input: one line naming the flag, exit code 2.
    let terms = dir.path().join("terms.toml");
    std::fs::write(&terms, "[[commitment]]\nprovider = \"azure\"\n").unwrap();
    for (args, flag) in [
        (vec!["--format", "xml"], "--format"),
        (vec!["--from", "2030-01-01"], "--from"),
        (
            vec!["--commitments", terms.to_str().unwrap()],
            "--commitments",
        ),
    ] {
        let out = Command::new(BIN)
            .args(["report", "reservations", "--database-url", &url])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("error: {flag}")) && stderr.lines().count() == 1,
            "{stderr}"
        );
    }
}

#[test]
fn tokens_are_printed_once_listed_without_secrets_and_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("t.db").display());
    let token = Command::new(BIN)
        .args([
            "token",
            "create",
            "--database-url",
            &db,
            "--account",
            "research",
            "--scope",
            "capacity",
            "--scope",
            "reports",
        ])
        .output()
        .unwrap();
    assert!(token.status.success());
    let text = String::from_utf8(token.stdout).unwrap().trim().to_string();
    let (id, secret) = text.strip_prefix("hr_").unwrap().split_once('_').unwrap();
    let list = Command::new(BIN)
        .args(["token", "list", "--database-url", &db])
        .output()
        .unwrap();
    let list = String::from_utf8(list.stdout).unwrap();
    assert!(
        list.contains(id)
            && list.contains("accounts=research")
            && list.contains("scopes=capacity,reports"),
        "{list}"
    );
    assert!(!list.contains(secret), "list must never show a secret");
    let revoke = Command::new(BIN)
        .args(["token", "revoke", "--database-url", &db, id])
        .output()
        .unwrap();
    assert!(revoke.status.success());
    let list = String::from_utf8(
        Command::new(BIN)
            .args(["token", "list", "--database-url", &db])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(list.contains("revoked"), "{list}");
    for bad in [
        vec!["token", "revoke", "--database-url", &db, "nope"],
        vec![
            "token",
            "create",
            "--database-url",
            &db,
            "--account",
            "Bad Name",
            "--scope",
            "admin",
        ],
        vec![
            "token",
            "create",
            "--database-url",
            &db,
            "--account",
            "a",
            "--scope",
            "root",
        ],
    ] {
        let out = Command::new(BIN).args(&bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert_eq!(
            String::from_utf8(out.stderr).unwrap().lines().count(),
            1,
            "{bad:?}"
        );
    }
    let open = Command::new(BIN)
        .args([
            "serve",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/headroom.example.toml"),
        ])
        .args(["--listen", "0.0.0.0:0", "--database-url", &db, "--no-auth"])
        .output()
        .unwrap();
    assert_eq!(open.status.code(), Some(2));
    assert!(String::from_utf8(open.stderr).unwrap().contains("loopback"));
}

/// The simulated cloud's state file and the client tokens of its running instances, checking
/// that no two running instances share one (a token is one launch intent).
fn running_tokens(state_file: &std::path::Path) -> (Value, std::collections::BTreeSet<String>) {
    let state: Value = serde_json::from_slice(&std::fs::read(state_file).unwrap()).unwrap();
    let running: Vec<String> = state["instances"]
        .as_object()
        .unwrap()
        .values()
        .filter(|i| i["life"]["Running"].is_object())
        .map(|i| i["instance"]["client_token"].as_str().unwrap().to_string())
        .collect();
    let tokens: std::collections::BTreeSet<String> = running.iter().cloned().collect();
    assert_eq!(
        tokens.len(),
        running.len(),
        "two instances share a client token"
    );
    (state, tokens)
}

/// The crash tests' configuration: one pool of one on-demand offering on the simulated cloud
/// (its state in `state_file`, shared by every life of `serve`), the cloud's rungs `rung` long,
/// `sim_extra` added to `[sim]`, and a clamping budget.
fn crash_config(
    cluster_id: &str,
    state_file: &std::path::Path,
    rung: &str,
    sim_extra: &str,
) -> String {
    format!(
        r#"
cluster_id = "{cluster_id}"
[engine]
tick = "100ms"
[sim]
state_file = "{}"
{sim_extra}[[offerings]]
id = "o"
provider = "sim"
region = "us-east-1"
zone = "use1-az1"
instance_type = "g6.xlarge"
market = "on-demand"
price_usd_per_hour = "0.8048"
gpus = 1
sim_capacity = 100
[offerings.sim_ladder]
node_acquisition = "{rung}"
image_pull = "{rung}"
weight_load = "{rung}"
compile = "{rung}"
warmup = "{rung}"
[[pools]]
name = "p"
account = "ml"
offerings = ["o"]
max_replicas = 40
max_scale_up_per_step = 40
[pools.ladder]
node_acquisition = "1s"
image_pull = "1s"
weight_load = "1s"
compile = "1s"
warmup = "1s"
[pools.scaling]
replica_throughput_rps = 5.0
[[budgets]]
account = "ml"
period = "day"
ceiling_usd = "1000"
hard_action = "clamp"
"#,
        state_file.display()
    )
}

/// `headroom serve` killed with SIGKILL at many points while it provisions, restarted each time:
/// afterwards no instance leaked, none was launched twice, no ledger entry was lost or doubled,
/// and every request was delivered.
#[test]
fn sigkill_at_any_point_loses_nothing_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state_file = dir.path().join("cloud.json");
    let config = dir.path().join("crash.toml");
    std::fs::write(
        &config,
        crash_config("crash-test", &state_file, "200ms", ""),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_string();
    let db_path = dir.path().join("crash.db");
    let db = format!("sqlite://{}", db_path.display());
    let kill_after_ms = [0u64, 40, 90, 160, 260, 420, 700];
    for (round, wait) in kill_after_ms.iter().enumerate() {
        let (mut child, base, token) = start_serve_with(&config, &db);
        let agent = agent_with(&token);
        let body = json!({"pool": "p", "replicas": 2}).to_string();
        let r = agent
            .post(format!("{base}/v1/capacity-requests"))
            .header("content-type", "application/json")
            .header("idempotency-key", &format!("round-{round}"))
            .send(&body)
            .unwrap();
        assert!(r.status().is_success(), "round {round}: {}", r.status());
        std::thread::sleep(Duration::from_millis(*wait));
        child.kill().unwrap(); // SIGKILL: no shutdown code runs
        child.wait().unwrap();
    }
    // One last life, long enough to reconcile everything, then a clean stop.
    let (mut child, base, token) = start_serve_with(&config, &db);
    let agent = agent_with(&token);
    let settled = (0..100).any(|_| {
        let pool = call(&agent, "GET", &format!("{base}/v1/pools/p"), None);
        let ready = pool.body["ready"].as_u64().unwrap_or(0);
        let moving = pool.body["requested"].as_u64().unwrap_or(0)
            + pool.body["starting"].as_u64().unwrap_or(0);
        if ready == 14 && moving == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
        false
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        settled,
        "seven requests of two replicas were not all delivered after the restarts"
    );

    // The cloud's side: one running instance per client token, each one the ledger knows.
    let (state, tokens) = running_tokens(&state_file);
    assert_eq!(tokens.len(), 14, "leaked or missing instances: {state}");

    // The ledger's side, read with plain SQL.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
        let live: Vec<(String, String)> = sqlx::query_as(
            "SELECT e.client_token, e.state FROM node_events e
             JOIN (SELECT node_id, MAX(seq) AS seq FROM node_events GROUP BY node_id) l ON e.seq = l.seq
             WHERE e.state NOT IN ('terminated', 'refused')",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let live_tokens: std::collections::BTreeSet<String> = live.iter().map(|(t, _)| t.clone()).collect();
        assert_eq!(live_tokens, tokens, "ledger and cloud disagree about which nodes exist");
        assert!(live.iter().all(|(_, s)| s == "serving"), "{live:?}");
        let intents: Vec<(String, i64)> = sqlx::query_as(
            "SELECT node_id, COUNT(*) FROM node_events WHERE state = 'requested' GROUP BY node_id HAVING COUNT(*) > 1",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert!(intents.is_empty(), "an intent was written twice: {intents:?}");
        let requests: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM capacity_requests").fetch_one(&pool).await.unwrap();
        assert_eq!(requests, 7, "one request per round, none lost or doubled");
        pool.close().await;
    });
}

/// A pseudo-random number below `n`, different every call (no seed to hard-code results).
fn random_below(n: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    h.finish() % n.max(1)
}

/// Client tokens the simulated cloud made an instance for, from its state file (`None` while
/// the file is being replaced).
fn cloud_tokens(state_file: &std::path::Path) -> Option<std::collections::BTreeSet<String>> {
    let state: Value = serde_json::from_slice(&std::fs::read(state_file).ok()?).ok()?;
    Some(
        state["instances"]
            .as_object()?
            .values()
            .filter_map(|i| i["instance"]["client_token"].as_str().map(str::to_string))
            .collect(),
    )
}

/// Client tokens whose intent has an outcome in the ledger.
async fn tokens_with_outcome(db: &str) -> std::collections::BTreeSet<String> {
    let Ok(pool) = sqlx::SqlitePool::connect(db).await else {
        return Default::default();
    };
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT DISTINCT client_token FROM node_events WHERE state <> 'requested'")
            .fetch_all(&pool)
            .await
            .unwrap_or_default();
    pool.close().await;
    rows.into_iter().map(|(t,)| t).collect()
}

/// Issue 19: the simulated cloud answers each launch 300 ms after the instance exists
/// (`sim.launch_answer_delay`), and `serve` is killed with SIGKILL inside that window — an
/// instance the cloud made whose outcome the ledger does not have — at a random point of it,
/// round after round. Afterwards: no leaked instance, none twice, no request lost.
#[test]
fn sigkill_between_the_cloud_call_and_its_outcome_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state_file = dir.path().join("cloud.json");
    let config = dir.path().join("window.toml");
    std::fs::write(
        &config,
        crash_config(
            "window-test",
            &state_file,
            "100ms",
            "launch_answer_delay = \"300ms\"\n",
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_string();
    let db = format!("sqlite://{}", dir.path().join("window.db").display());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let in_window = || {
        let made = cloud_tokens(&state_file).unwrap_or_default();
        let known = runtime.block_on(tokens_with_outcome(&db));
        made.iter().any(|t| !known.contains(t))
    };
    let rounds = 10;
    let mut killed_in_window = 0;
    for round in 0..rounds {
        let (mut child, base, token) = start_serve_with(&config, &db);
        let body = json!({"pool": "p", "replicas": 2}).to_string();
        let r = agent_with(&token)
            .post(format!("{base}/v1/capacity-requests"))
            .header("content-type", "application/json")
            .header("idempotency-key", &format!("round-{round}"))
            .send(&body)
            .unwrap();
        assert!(r.status().is_success(), "round {round}: {}", r.status());
        // Wait for the window to open, then kill at a random point of its 300 ms.
        eventually(500, &in_window);
        std::thread::sleep(Duration::from_millis(random_below(250)));
        child.kill().unwrap(); // SIGKILL: no shutdown code runs
        child.wait().unwrap();
        if in_window() {
            killed_in_window += 1;
        }
    }
    eprintln!("{killed_in_window} of {rounds} kills landed between a cloud call and its outcome");
    assert!(
        killed_in_window * 2 >= rounds,
        "only {killed_in_window} of {rounds} kills landed inside the window"
    );

    let (mut child, base, token) = start_serve_with(&config, &db);
    let agent = agent_with(&token);
    let wanted = 2 * rounds as u64;
    let settled = (0..300).any(|_| {
        let pool = call(&agent, "GET", &format!("{base}/v1/pools/p"), None);
        let ready = pool.body["ready"].as_u64().unwrap_or(0);
        let moving = pool.body["requested"].as_u64().unwrap_or(0)
            + pool.body["starting"].as_u64().unwrap_or(0);
        if ready == wanted && moving == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
        false
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(settled, "not every request was delivered after the kills");

    let (state, tokens) = running_tokens(&state_file);
    assert_eq!(
        tokens.len() as u64,
        wanted,
        "leaked or missing instances: {state}"
    );
    runtime.block_on(async {
        let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
        let live: Vec<(String, String)> = sqlx::query_as(
            "SELECT e.client_token, e.state FROM node_events e
             JOIN (SELECT node_id, MAX(seq) AS seq FROM node_events GROUP BY node_id) l ON e.seq = l.seq
             WHERE e.state NOT IN ('terminated', 'refused')",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let live_tokens: std::collections::BTreeSet<String> =
            live.iter().map(|(t, _)| t.clone()).collect();
        assert_eq!(live_tokens, tokens, "ledger and cloud disagree about which nodes exist");
        assert!(live.iter().all(|(_, s)| s == "serving"), "{live:?}");
        let requests: Vec<(String, i64)> = sqlx::query_as(
            "SELECT idempotency_key, replicas FROM capacity_requests ORDER BY idempotency_key",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(requests.len(), rounds, "one request per round, none lost or doubled");
        pool.close().await;
    });
}

/// A TCP proxy in front of PostgreSQL that a test can cut and restore.
struct Proxy {
    port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Proxy {
    fn start(target: String) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (cut2, open2) = (cut.clone(), open.clone());
        std::thread::spawn(move || {
            // Bounded: a test opens far fewer connections than this.
            for client in listener.incoming().take(500) {
                let Ok(client) = client else { continue };
                if cut2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(&target) else {
                    continue;
                };
                {
                    let mut open = open2.lock().unwrap();
                    open.push(client.try_clone().unwrap());
                    open.push(server.try_clone().unwrap());
                }
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, cut, open }
    }

    /// The database goes away: every open connection drops and new ones are refused.
    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn a_database_outage_answers_503_pauses_the_loop_and_loses_nothing() {
    let direct = fresh_postgres_database();
    // postgres://user@host:PORT/db → the same through the proxy.
    let (head, db_name) = direct.rsplit_once('/').unwrap();
    let (user_host, target_port) = head.rsplit_once(':').unwrap();
    let host = user_host
        .rsplit_once('@')
        .map_or(user_host, |(_, h)| h)
        .trim_start_matches("postgres://");
    let proxy = Proxy::start(format!("{host}:{target_port}"));
    let proxied = format!("{user_host}:{}/{db_name}", proxy.port);

    // Tokens are rechecked every second here, so the outage outlasts the cached verification
    // and read-only calls must ride on the outage grace.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("headroom.toml");
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/headroom.example.toml"
    ))
    .unwrap();
    std::fs::write(
        &config,
        example.replace(
            "# [api]\n",
            "[api]\ntoken_recheck_interval = \"1s\"\ntoken_outage_grace = \"5m\"\n",
        ),
    )
    .unwrap();
    let (mut child, base, token) = start_serve_with(config.to_str().unwrap(), &proxied);
    let agent = agent_with(&token);
    let body = json!({"pool": "mistral-7b-batch", "replicas": 1}).to_string();
    let before = call(
        &agent,
        "POST",
        &format!("{base}/v1/capacity-requests"),
        Some(&body),
    );
    assert_eq!(before.status, 201);
    let id = before.body["id"].as_str().unwrap().to_string();

    proxy.cut();
    let ready = call(&agent, "GET", &format!("{base}/readyz"), None);
    assert_eq!(ready.status, 503, "{:?}", ready.body);
    assert_eq!(ready.content_type, "application/problem+json");
    let during = call(
        &agent,
        "POST",
        &format!("{base}/v1/capacity-requests"),
        Some(&body),
    );
    // A write is never let through on a cached token: the ledger must answer for it.
    assert_eq!(during.status, 503, "{:?}", during.body);
    assert_eq!(during.content_type, "application/problem+json");
    assert_eq!(
        during.retry_after.as_deref(),
        Some("5"),
        "a 503 says when to come back"
    );
    // Several seconds down: the loop's ticks fail and are retried; nothing exits.
    std::thread::sleep(Duration::from_secs(5));
    // Past the recheck interval, read-only status still answers on the verified token.
    for path in [
        "/v1/pools/mistral-7b-batch",
        "/v1/pools/mistral-7b-batch/admission",
    ] {
        let status = call(&agent, "GET", &format!("{base}{path}"), None);
        assert_eq!(
            status.status, 200,
            "{path} during the outage: {:?}",
            status.body
        );
    }
    let write = call(
        &agent,
        "POST",
        &format!("{base}/v1/capacity-requests"),
        Some(&body),
    );
    assert_eq!(write.status, 503, "{:?}", write.body);
    assert_eq!(
        call(&agent, "GET", &format!("{base}/readyz"), None).status,
        503
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "serve must ride out the outage"
    );

    proxy.restore();
    let back = eventually(150, || {
        call(&agent, "GET", &format!("{base}/readyz"), None).status == 200
    });
    assert!(back, "serve did not recover when the database came back");
    let read = call(
        &agent,
        "GET",
        &format!("{base}/v1/capacity-requests/{id}"),
        None,
    );
    assert_eq!(
        read.status, 200,
        "the request made before the outage is still there"
    );
    let after = call(
        &agent,
        "POST",
        &format!("{base}/v1/capacity-requests"),
        Some(&body),
    );
    assert_eq!(after.status, 201);
    // The control loop resumed: the pool is being worked on again.
    let resumed = eventually(100, || {
        let pool = call(
            &agent,
            "GET",
            &format!("{base}/v1/pools/mistral-7b-batch"),
            None,
        );
        pool.body["reconciled_here"] == true
            && pool.body["requested"].as_u64().unwrap_or(0)
                + pool.body["starting"].as_u64().unwrap_or(0)
                + pool.body["ready"].as_u64().unwrap_or(0)
                >= 2
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(resumed, "the control loop did not resume after the outage");
}

/// Collects the bodies POSTed to it (an OTLP/HTTP receiver), answering 200; stops after `max`.
fn collector(max: usize) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(max) {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok() {
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&body).into_owned());
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
        }
    });
    (port, bodies)
}

/// One exported span, as the OTLP/JSON bodies carry it.
#[derive(Debug, Clone)]
struct Exported {
    trace: String,
    name: String,
    kind: Value,
    status: Value,
    attributes: std::collections::BTreeMap<String, String>,
}

/// The spans and the resources' service names in the bodies an OTLP/HTTP receiver got.
fn exported(bodies: &[String]) -> (Vec<Exported>, std::collections::BTreeSet<String>) {
    let mut spans = Vec::new();
    let mut services = std::collections::BTreeSet::new();
    for text in bodies {
        let Ok(doc) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        for rs in doc["resourceSpans"].as_array().into_iter().flatten() {
            for attr in rs["resource"]["attributes"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if attr["key"] == "service.name" {
                    services.insert(attr["value"]["stringValue"].to_string());
                }
            }
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for span in ss["spans"].as_array().into_iter().flatten() {
                    let attributes = span["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            // One of stringValue, intValue (a string in OTLP/JSON), ...
                            let value = a["value"]
                                .as_object()
                                .and_then(|v| v.values().next())
                                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                                .unwrap_or_default();
                            (a["key"].as_str().unwrap_or("").to_string(), value)
                        })
                        .collect();
                    spans.push(Exported {
                        trace: span["traceId"].as_str().unwrap_or("").to_ascii_lowercase(),
                        name: span["name"].as_str().unwrap_or("").to_string(),
                        kind: span["kind"].clone(),
                        status: span["status"].clone(),
                        attributes,
                    });
                }
            }
        }
    }
    (spans, services)
}

/// With the standard OTEL variables set, one trace follows a capacity request from the API call
/// through the ledger admission to the cloud call, and reaches the collector while `serve` runs
/// (spans are sent as they end, not at shutdown). The API call is a SERVER span named and
/// attributed by the OpenTelemetry HTTP semantic conventions.
#[test]
fn one_trace_spans_a_capacity_request_from_the_api_to_the_cloud() {
    let (otlp_port, bodies) = collector(200);
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("t.db").display());
    let token = mint_admin_token(&db);
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/headroom.example.toml"),
        ])
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--database-url",
            &db,
        ])
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{otlp_port}"),
        )
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("OTEL_SERVICE_NAME", "headroom-canary")
        .env_remove("OTEL_BSP_SCHEDULE_DELAY")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let agent = agent_with(&token);
    let up = eventually(300, || agent.get(format!("{base}/readyz")).call().is_ok());
    assert!(up, "serve did not start");
    let body = json!({"pool": "mistral-7b-batch", "replicas": 1}).to_string();
    // The caller's W3C trace context: Headroom's spans join the caller's trace.
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let created = agent
        .post(format!("{base}/v1/capacity-requests"))
        .header("content-type", "application/json")
        .header(
            "traceparent",
            format!("00-{caller_trace}-00f067aa0ba902b7-01"),
        )
        .send(&body)
        .unwrap();
    assert_eq!(created.status(), 201);
    // While serve runs: the request's whole trace, the launch made for it included.
    let wanted = [
        "POST /v1/capacity-requests",
        "api.create_capacity_request",
        "engine.action",
        "ledger.place_hold",
        "cloud.call",
    ];
    let arrived = eventually(300, || {
        let (spans, _) = exported(&bodies.lock().unwrap());
        wanted.iter().all(|name| {
            spans
                .iter()
                .any(|s| s.trace == caller_trace && s.name == *name)
        })
    });
    let (spans, services) = exported(&bodies.lock().unwrap());
    stop_with_sigterm(&mut child);
    let in_trace: std::collections::BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.trace == caller_trace)
        .map(|s| s.name.as_str())
        .collect();
    assert!(
        arrived,
        "not every span of the request reached the collector while serve ran: {in_trace:?}"
    );
    assert_eq!(
        services.into_iter().collect::<Vec<_>>(),
        [r#""headroom-canary""#],
        "OTEL_SERVICE_NAME names the service"
    );
    let http = spans
        .iter()
        .find(|s| s.name == "POST /v1/capacity-requests")
        .unwrap();
    assert!(
        http.kind == 2 || http.kind == "SPAN_KIND_SERVER",
        "a SERVER span: {http:?}"
    );
    for (key, value) in [
        ("http.request.method", "POST"),
        ("http.route", "/v1/capacity-requests"),
        ("http.response.status_code", "201"),
        ("url.path", "/v1/capacity-requests"),
        ("server.address", "127.0.0.1"),
        ("network.protocol.version", "1.1"),
    ] {
        assert_eq!(
            http.attributes.get(key).map(String::as_str),
            Some(value),
            "{key}: {http:?}"
        );
    }
    assert!(
        http.status
            .get("code")
            .is_none_or(|c| c == 0 || c == "STATUS_CODE_UNSET"),
        "a 201 is no error: {http:?}"
    );
}

/// `serve` takes its configuration from a file, standard input (`--config -`) or the
/// HEADROOM_CONFIG variable, and says so in one line when it has none.
#[test]
fn serve_reads_its_configuration_from_stdin_or_the_environment() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/headroom.example.toml"
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (i, from_stdin) in [true, false].into_iter().enumerate() {
        let port = free_port();
        let db = format!("sqlite://{}", dir.path().join(format!("{i}.db")).display());
        let mut command = Command::new(BIN);
        command
            .arg("serve")
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--database-url",
                &db,
            ])
            .arg("--no-auth")
            .env_remove("HEADROOM_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if from_stdin {
            command.args(["--config", "-"]).stdin(Stdio::piped());
        } else {
            command.env("HEADROOM_CONFIG", &text).stdin(Stdio::null());
        }
        let mut child = command.spawn().unwrap();
        if let Some(mut stdin) = child.stdin.take() {
            std::io::Write::write_all(&mut stdin, text.as_bytes()).unwrap();
        }
        let agent = agent();
        let ready = eventually(300, || {
            agent
                .get(format!("http://127.0.0.1:{port}/readyz"))
                .call()
                .is_ok_and(|r| r.status() == 200)
        });
        let pools = call(
            &agent,
            "GET",
            &format!("http://127.0.0.1:{port}/v1/pools"),
            None,
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            ready,
            "serve from {} never became ready",
            ["stdin", "HEADROOM_CONFIG"][i]
        );
        assert_eq!(pools.body["pools"].as_array().unwrap().len(), 2);
    }
    let out = Command::new(BIN)
        .arg("serve")
        .env_remove("HEADROOM_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --config: missing;") && stderr.contains("HEADROOM_CONFIG"),
        "{stderr}"
    );
    let bad = Command::new(BIN)
        .args(["serve", "--config", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut bad = bad;
        std::io::Write::write_all(bad.stdin.as_mut().unwrap(), b"[engine]\ntick = \"soon\"\n")
            .unwrap();
        drop(bad.stdin.take());
        let out = bad.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("standard input"),
            "the origin is named: {stderr}"
        );
    }
}

/// The demo's progress lines are not interleaved with logs unless RUST_LOG asks for them.
#[test]
fn the_demo_keeps_logs_out_of_its_progress_lines_unless_asked() {
    let run = |rust_log: Option<&str>| {
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(BIN);
        command
            .args(["demo", "--seconds", "5", "--speedup", "20", "--listen"])
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--database")
            .arg(dir.path().join("d.db"))
            .env_remove("RUST_LOG");
        if let Some(level) = rust_log {
            command.env("RUST_LOG", level);
        }
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let logs = all.lines().filter(|l| l.starts_with('{')).count();
        let progress = all.lines().filter(|l| l.starts_with("[+")).count();
        (logs, progress)
    };
    let (logs, progress) = run(None);
    assert!(progress > 0, "progress lines are printed");
    assert_eq!(logs, 0, "no log lines among the progress lines by default");
    let (logs, _) = run(Some("warn"));
    assert!(logs > 0, "RUST_LOG=warn brings the warnings back");
}

/// An OTLP protocol this binary cannot speak is refused at start, naming the variable, rather
/// than exporting over another protocol.
#[test]
fn an_otlp_protocol_that_is_not_built_in_is_refused_naming_the_variable() {
    for (protocol, says) in [
        ("grpc", "not built into this binary"),
        ("carrier-pigeon", "not an OTLP protocol"),
    ] {
        let out = Command::new(BIN)
            .arg("openapi")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{protocol}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("error: OTEL_EXPORTER_OTLP_PROTOCOL: ") && stderr.contains(says),
            "{stderr}"
        );
    }
}

/// `headroom simulate`: the JSON shape the issue lists, files written, and bad input as one line
/// naming the flag, exit code 2.
#[test]
fn simulate_prints_each_policy_and_reports_bad_input_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("ts.csv");
    let svg = dir.path().join("plot.svg");
    let out = Command::new(BIN)
        .args([
            "simulate",
            "--scenario",
            "seed-000-backlog",
            "--format",
            "json",
        ])
        .args(["--policy", "static", "--policy", "oracle", "--seed", "3"])
        .arg("--timeseries")
        .arg(&csv)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["scenario"], "seed-000-backlog");
    assert_eq!(v["seed"], 3);
    assert!(v["bound"]["cost_usd"].as_f64().unwrap() > 0.0);
    assert!(
        v["hindsight"]["cost_usd"].as_f64().unwrap() >= v["bound"]["cost_usd"].as_f64().unwrap()
    );
    assert!(v["hindsight"]["beaten_by"].is_array());
    assert!(v["wall_time_s"].is_number() && v["simulated_requests_per_s"].is_number());
    let policies = v["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 2);
    let keys: Vec<&str> = policies[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for key in [
        "policy",
        "requests_total",
        "requests_within_slo",
        "slo_attainment",
        "queue_delay_minutes",
        "shed",
        "gpu_hours",
        "idle_gpu_hours",
        "cost_usd",
        "reservation_idle_usd",
        "bound_usd",
        "cost_vs_bound",
        "cost_vs_hindsight",
        "refusals",
        "fallbacks",
        "scale_direction_changes",
        "peak_queue_depth",
        "peak_ready_replicas",
        "tiers",
        "pools",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    assert_eq!(keys.len(), 20, "{keys:?}");
    // One pool's share per simulated pool, adding up to the policy's requests.
    let pools = policies[0]["pools"].as_array().expect("pools is a list");
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0]["requests"], policies[0]["requests_total"]);
    // Each tier's row adds up to the policy's totals.
    let tiers = policies[0]["tiers"].as_array().expect("tiers is a list");
    assert!(!tiers.is_empty());
    let tier_total: u64 = tiers.iter().map(|t| t["requests"].as_u64().unwrap()).sum();
    assert_eq!(tier_total, policies[0]["requests_total"].as_u64().unwrap());
    let series = std::fs::read_to_string(&csv).unwrap();
    assert!(series.starts_with("policy,t_s,queue_depth,desired,ready,starting,cost_usd\n"));
    assert!(series.lines().any(|l| l.starts_with("oracle,")));
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));

    for (bad, flag) in [
        (vec!["--scenario", "seed-999"], "--scenario"),
        (
            vec!["--scenario", "seed-000-backlog", "--policy", "kubectl"],
            "--policy",
        ),
        (
            vec!["--scenario", "seed-000-backlog", "--format", "xml"],
            "--format",
        ),
        (
            vec![
                "--scenario",
                "seed-000-backlog",
                "--trace",
                "/nonexistent.csv",
            ],
            "--trace",
        ),
        (
            vec![
                "--scenario",
                "spot-interruptions",
                "--spot-trace",
                "use1-p4d-od=/nonexistent.json",
            ],
            "--spot-trace",
        ),
        (
            vec![
                "--scenario",
                "spot-interruptions",
                "--spot-trace",
                "p4d.json",
            ],
            "--spot-trace",
        ),
    ] {
        simulate_refuses(&bad, flag);
    }
}

/// `headroom simulate ARGS` fails with one line naming `flag`, exit code 2.
fn simulate_refuses(args: &[&str], flag: &str) {
    let out = Command::new(BIN)
        .arg("simulate")
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.starts_with(&format!("error: {flag}: ")), "{stderr}");
}

/// `[kube]` needs the `kube` feature; the default build says so in one line instead of running
/// without the cluster it was asked to use.
#[cfg(not(feature = "kube"))]
#[test]
fn kube_enabled_without_the_kube_feature_is_one_line_and_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/headroom.example.toml"
    ))
    .unwrap();
    let path = dir.path().join("kube.toml");
    std::fs::write(&path, format!("{example}\n[kube]\nenabled = true\n")).unwrap();
    let out = Command::new(BIN)
        .args(["config", "check"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("kube.enabled") && stderr.contains("--features kube"),
        "{stderr}"
    );
    // Disabled, it is accepted (and ignored).
    std::fs::write(&path, format!("{example}\n[kube]\nenabled = false\n")).unwrap();
    let ok = Command::new(BIN)
        .args(["config", "check"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

/// Offerings on two clouds, one of which this build lacks: `config check` and `serve` refuse
/// alike, in one line naming the provider and the rebuild command. (Before, `config check` said
/// ok to what `serve` refused.)
#[cfg(not(feature = "aws"))]
#[test]
fn a_cloud_the_build_lacks_is_refused_alike_by_config_check_and_serve() {
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/headroom.example.toml"
    ))
    .unwrap();
    let two_clouds = example.replacen("\nprovider = \"sim\"\n", "\nprovider = \"aws\"\n", 1);
    assert_ne!(two_clouds, example);
    let path = dir.path().join("two-clouds.toml");
    std::fs::write(&path, two_clouds).unwrap();
    let check = Command::new(BIN)
        .args(["config", "check"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(2));
    let check_err = String::from_utf8(check.stderr).unwrap();
    assert_eq!(check_err.lines().count(), 1, "{check_err}");
    assert!(
        check_err.contains("offerings: provider \"aws\"")
            && check_err.contains("cargo build --release --features aws"),
        "{check_err}"
    );
    let db = format!("sqlite://{}", dir.path().join("h.db").display());
    let serve = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--database-url", &db])
        .output()
        .unwrap();
    assert_eq!(serve.status.code(), Some(2));
    assert_eq!(String::from_utf8(serve.stderr).unwrap(), check_err);
}

#[path = "cli/corpus.rs"]
mod corpus;
#[path = "cli/decisions.rs"]
mod decisions;
#[path = "cli/external_metrics.rs"]
mod external_metrics;
#[path = "cli/messages.rs"]
mod messages;
#[path = "cli/purity.rs"]
mod purity;
#[path = "cli/roles.rs"]
mod roles;
#[path = "cli/scoreboard.rs"]
mod scoreboard;

/// `bench admissions` on PostgreSQL, as a reader of its figures would check them: every round's
/// budget admissions and API admissions are counted and timed beside a pgbench run of its own,
/// each headline ratio is the median of the rounds', and everything the bench admitted is in
/// the ledger: the benchmark writes through the same paths as `serve`.
#[test]
fn bench_admissions_reports_each_rounds_ratio_and_their_median() {
    let db = fresh_postgres_database();
    let migrated = Command::new(BIN)
        .args(["migrate", "--database-url", &db])
        .output()
        .unwrap();
    assert!(migrated.status.success(), "{migrated:?}");
    let out = Command::new(BIN)
        .args(["bench", "admissions", "--database-url", &db])
        .args(["--requests", "40", "--concurrency", "4", "--rounds", "3"])
        .args(["--warmup", "8", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let figures: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(figures["rounds"], 3);
    assert_eq!(figures["requests"], 120, "40 requests in each of 3 rounds");
    for (ratios, median) in [("holds_ratios", "holds_ratio"), ("api_ratios", "ratio")] {
        let mut each: Vec<f64> = figures[ratios]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_f64().unwrap())
            .collect();
        assert_eq!(each.len(), 3, "{ratios}: one per round: {figures}");
        assert!(each.iter().all(|r| *r > 0.0), "{figures}");
        each.sort_by(f64::total_cmp);
        assert_eq!(figures[median].as_f64().unwrap(), each[1], "{figures}");
    }
    assert!(figures["holds_p50_ms"].as_f64().unwrap() <= figures["holds_p99_ms"].as_f64().unwrap());
    // 4 accounts: in the warm-up one untimed first hold each and 8 holds, then in each round
    // one untimed first hold each and 40 holds; every hold's node then ended (refused).
    let count = |sql: &str| -> i64 {
        let out = Command::new("psql")
            .args([db.as_str(), "-At", "-c", sql])
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(
        count("SELECT COUNT(*) FROM node_events WHERE pool = 'bench' AND state = 'requested'"),
        (4 + 8) + 3 * (4 + 40)
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM node_events WHERE pool = 'bench' AND state = 'refused'"),
        (4 + 8) + 3 * (4 + 40)
    );
    assert_eq!(count("SELECT COUNT(*) FROM capacity_requests"), 8 + 120);
}

#[test]
fn a_token_revoked_while_serve_runs_writes_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("t.db").display());
    let (mut serve, base, _admin) = start_serve(&db);
    let out = Command::new(BIN)
        .args(["token", "create", "--database-url", &db])
        .args(["--account", "research", "--scope", "capacity"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let agent = agent_with(&token);
    let url = format!("{base}/v1/capacity-requests");
    let body = r#"{"pool": "mistral-7b-batch", "replicas": 1}"#;
    // Verified, and so cached for reads, before the revocation.
    assert_eq!(call(&agent, "POST", &url, Some(body)).status, 201);
    let id = token.split('_').nth(1).unwrap();
    let revoke = Command::new(BIN)
        .args(["token", "revoke", "--database-url", &db, id])
        .output()
        .unwrap();
    assert!(revoke.status.success());
    let said = String::from_utf8(revoke.stdout).unwrap();
    assert!(
        said.contains("writes with it are refused at once")
            && said.contains("api.token_recheck_interval"),
        "{said}"
    );
    let after = call(&agent, "POST", &url, Some(body));
    assert_eq!(after.status, 401, "{:?}", after.body);
    assert_eq!(after.content_type, "application/problem+json");
    serve.kill().unwrap();
    serve.wait().unwrap();
}
#[path = "cli/replay.rs"]
mod replay;
