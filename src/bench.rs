//! `headroom bench admissions`: capacity-request admissions per second through the HTTP API, and
//! budget admissions (`Ledger::place_hold`, the governor's transactional check) on a given
//! ledger, optionally after preloading `--prior-rows` rows of ledger history, beside pgbench
//! running a comparable single-row insert transaction on the same server. Figures, not
//! assertions: these machines are shared and noisy.

// Benchmarks measure wall time; nothing here feeds a decision.
#![allow(clippy::disallowed_methods)]

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use headroom_cloud::{Clock, SystemClock};
use headroom_config::Config;
use headroom_engine::{Engine, sim_cloud_for};
use serde::Serialize;

use crate::EXAMPLE_CONFIG;

#[derive(Debug, Args)]
pub struct AdmissionsArgs {
    /// The ledger to write to (a scratch database: the benchmark adds requests to it).
    #[arg(long, value_name = "URL", env = "HEADROOM_DATABASE_URL")]
    database_url: String,
    /// Capacity requests, and budget admissions, of each round.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    requests: u32,
    /// Clients sending at once, each over one keep-alive connection.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    concurrency: u32,
    /// Node events to preload as history before measuring (PostgreSQL only): terminated nodes of
    /// the accounts the budget admissions charge, in the current budget period.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    prior_rows: u64,
    /// Rounds of budget admissions, API admissions and pgbench, one after the other; the
    /// figures are the medians, each ratio taken within its round.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Admissions of each kind run untimed first (then, on PostgreSQL, ANALYZE), so that the
    /// figures are those of a ledger in service rather than of empty tables.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    warmup: u32,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Figures {
    /// Capacity requests sent in all rounds.
    requests: u32,
    concurrency: u32,
    rounds: u32,
    /// The median of the rounds' rates.
    admissions_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// pgbench on the same server, a single-row insert transaction (None without pgbench or
    /// for a SQLite ledger).
    pgbench_tps: Option<f64>,
    pgbench_latency_ms: Option<f64>,
    /// The median of the rounds' API / pgbench ratios.
    ratio: Option<f64>,
    /// Each round's API / pgbench ratio.
    api_ratios: Vec<f64>,
    /// Ledger rows preloaded before measuring.
    prior_rows: u64,
    /// Budget admissions (`Ledger::place_hold`), one account per client, each hold then ended.
    holds_per_s: f64,
    holds_p50_ms: f64,
    holds_p99_ms: f64,
    /// The median of the rounds' budget admissions / pgbench ratios.
    holds_ratio: Option<f64>,
    /// Each round's budget admissions / pgbench ratio.
    holds_ratios: Vec<f64>,
    /// The first admission of every account, untimed above: it seeds the account's standing
    /// checkpoint from its whole history, once.
    checkpoint_seed_ms: f64,
}

/// Ratios as a reader scans them: `1.02, 0.97, 1.10`.
fn listed(ratios: &[f64]) -> String {
    let parts: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    parts.join(", ")
}

/// One round's figures.
struct Round {
    holds: Vec<Duration>,
    holds_per_s: f64,
    latencies: Vec<Duration>,
    admissions_per_s: f64,
    /// (tps, average latency in ms)
    pgbench: Option<(f64, f64)>,
}

/// The median of `values` (the lower middle of an even count); 0 for none.
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values
        .get(values.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0.0)
}

/// Nearest-rank percentile of sorted latencies, in milliseconds.
fn percentile_ms(sorted: &[Duration], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[(sorted.len() * p).div_ceil(100).max(1) - 1].as_secs_f64() * 1000.0
}

pub async fn admissions(args: AdmissionsArgs) -> anyhow::Result<ExitCode> {
    let config = Arc::new(Config::parse(EXAMPLE_CONFIG, "built-in configuration")?);
    let ledger = crate::open_ledger(&args.database_url).await?;
    let run = format!(
        "{}-{}",
        std::process::id(),
        SystemClock::new().now().timestamp_millis()
    );
    if args.prior_rows > 0 {
        anyhow::ensure!(
            args.database_url.starts_with("postgres"),
            crate::BadInput(
                "--prior-rows: preloading history needs a postgres:// --database-url".into()
            )
        );
        let started = Instant::now();
        preload(&args.database_url, &run, args.prior_rows, args.concurrency).await?;
        eprintln!(
            "preloaded {} ledger rows in {:.1} s",
            args.prior_rows,
            started.elapsed().as_secs_f64()
        );
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let cloud = Arc::new(sim_cloud_for(&config, clock.clone()));
    // The reconcile loop is not started: this measures the admission paths alone.
    let engine = Engine::new(config, ledger.clone(), cloud, clock);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    // The listener `serve` runs, with its connection limits.
    let state = headroom_api::AppState::new(
        engine,
        false,
        // The benchmark measures admissions, not the rate limiter.
        headroom_api::Limits {
            requests_per_second: 1_000_000,
            burst: 1_000_000,
            max_requests_in_flight: 100_000,
            ..headroom_api::Limits::default()
        },
    );
    let server = tokio::spawn(headroom_api::server::serve(
        listener,
        headroom_api::app(state.clone()),
        state,
        std::future::pending(),
    ));
    let url = format!("http://{addr}/v1/capacity-requests");
    let per_client = args.requests.div_ceil(args.concurrency);

    if args.warmup > 0 {
        // A ledger in service has rows and statistics: PostgreSQL plans its statements from
        // them, and plans made on empty tables (sequential scans) stay cached for the
        // connection's life. Both paths run untimed first, then ANALYZE does what autovacuum
        // does within its first minute on a ledger in service.
        let started = Instant::now();
        let count = args.warmup.div_ceil(args.concurrency);
        hold_admissions(&ledger, &format!("{run}w"), "", args.concurrency, count).await?;
        run_clients(&url, "warmup".into(), args.concurrency, count).await?;
        if args.database_url.starts_with("postgres") {
            psql(&args.database_url, "ANALYZE")?;
        }
        eprintln!(
            "warmed up with {} admissions of each kind in {:.1} s",
            count * args.concurrency,
            started.elapsed().as_secs_f64()
        );
    }

    // Rounds of the three, each ratio taken within its round: on a shared machine the rate of
    // everything drifts within seconds, and a ratio of phases minutes apart measures the drift.
    let mut rounds = Vec::new();
    let mut seed = Duration::ZERO;
    for round in 0..args.rounds {
        let (holds, holds_elapsed, seeded) = hold_admissions(
            &ledger,
            &run,
            &format!("r{round}-"),
            args.concurrency,
            per_client,
        )
        .await?;
        seed += seeded;
        let started = Instant::now();
        let latencies =
            run_clients(&url, format!("r{round}"), args.concurrency, per_client).await?;
        let elapsed = started.elapsed();
        let pgbench = if args.database_url.starts_with("postgres") {
            run_pgbench(&args.database_url, args.concurrency, per_client)?
        } else {
            None
        };
        rounds.push(Round {
            holds_per_s: holds.len() as f64 / holds_elapsed.as_secs_f64(),
            holds,
            admissions_per_s: latencies.len() as f64 / elapsed.as_secs_f64(),
            latencies,
            pgbench,
        });
    }
    server.abort();
    let mut latencies: Vec<Duration> = rounds.iter().flat_map(|r| r.latencies.clone()).collect();
    let mut holds: Vec<Duration> = rounds.iter().flat_map(|r| r.holds.clone()).collect();
    latencies.sort();
    holds.sort();
    let pick = |p: usize| percentile_ms(&latencies, p);
    let admissions_per_s = median(rounds.iter().map(|r| r.admissions_per_s));
    let holds_per_s = median(rounds.iter().map(|r| r.holds_per_s));
    let api_ratios: Vec<f64> = rounds
        .iter()
        .filter_map(|r| Some(r.admissions_per_s / r.pgbench?.0))
        .collect();
    let holds_ratios: Vec<f64> = rounds
        .iter()
        .filter_map(|r| Some(r.holds_per_s / r.pgbench?.0))
        .collect();
    let pgbench = (api_ratios.len() == rounds.len()).then(|| {
        (
            median(rounds.iter().filter_map(|r| Some(r.pgbench?.0))),
            median(rounds.iter().filter_map(|r| Some(r.pgbench?.1))),
        )
    });
    let figures = Figures {
        requests: latencies.len() as u32,
        concurrency: args.concurrency,
        rounds: args.rounds,
        admissions_per_s,
        p50_ms: pick(50),
        p99_ms: pick(99),
        pgbench_tps: pgbench.map(|p| p.0),
        pgbench_latency_ms: pgbench.map(|p| p.1),
        ratio: pgbench.map(|_| median(api_ratios.iter().copied())),
        api_ratios,
        prior_rows: args.prior_rows,
        holds_per_s,
        holds_p50_ms: percentile_ms(&holds, 50),
        holds_p99_ms: percentile_ms(&holds, 99),
        holds_ratio: pgbench.map(|_| median(holds_ratios.iter().copied())),
        holds_ratios,
        checkpoint_seed_ms: seed.as_secs_f64() * 1000.0,
    };
    if args.json {
        println!("{}", serde_json::to_string(&figures)?);
    } else {
        println!(
            "admissions through the API: {:.0}/s (median of {} rounds), p50 {:.2} ms, p99 {:.2} ms ({} requests, {} clients)",
            figures.admissions_per_s,
            figures.rounds,
            figures.p50_ms,
            figures.p99_ms,
            figures.requests,
            figures.concurrency
        );
        println!(
            "budget admissions (place_hold) after {} prior ledger rows: {:.0}/s, p50 {:.2} ms, p99 {:.2} ms ({} holds, {} accounts at once)",
            figures.prior_rows,
            figures.holds_per_s,
            figures.holds_p50_ms,
            figures.holds_p99_ms,
            holds.len(),
            figures.concurrency
        );
        if let Some(ratio) = figures.holds_ratio {
            println!(
                "budget admissions / pgbench = {ratio:.2} (median of rounds: {})",
                listed(&figures.holds_ratios)
            );
        }
        println!(
            "first admission of each of {} accounts, before timing (seeds its checkpoint from its history once): {:.0} ms in all",
            figures.concurrency, figures.checkpoint_seed_ms
        );
        match (
            figures.pgbench_tps,
            figures.pgbench_latency_ms,
            figures.ratio,
        ) {
            (Some(tps), Some(lat), Some(ratio)) => println!(
                "pgbench single-row insert transaction, same server and clients: {tps:.0} tps, {lat:.2} ms average; API / pgbench = {ratio:.2} (median of rounds: {})",
                listed(&figures.api_ratios)
            ),
            _ => {
                println!("pgbench baseline: not run (needs a postgres:// URL and pgbench on PATH)")
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The account the `client`-th budget-admission client charges.
fn bench_account(run: &str, client: u32) -> String {
    format!("bench-{}-{client}", run.replace('-', ""))
}

/// Budget admissions: `clients` accounts at once (those of `run`), `count` holds each (their
/// nodes named with `tag`), every hold placed through
/// `Ledger::place_hold` against a budget (timed) and its node then ended (a refused launch)
/// beside the next admissions, so that what an account has open stays what a real one has.
/// Returns the latencies, sorted, the wall time of the admissions, and the time the untimed
/// first admissions took.
async fn hold_admissions(
    ledger: &Arc<dyn headroom_ledger::Ledger>,
    run: &str,
    tag: &str,
    clients: u32,
    count: u32,
) -> anyhow::Result<(Vec<Duration>, Duration, Duration)> {
    use headroom_core::{Budget, BudgetPeriod, HardAction};
    let clock = SystemClock::new();
    for c in 0..clients {
        let budget = Budget {
            account: bench_account(run, c).parse()?,
            period: BudgetPeriod::Day,
            ceiling: "1000000000".parse()?,
            soft_threshold_percent: 80,
            hard_action: HardAction::Clamp,
        };
        ledger.put_budget(&budget, clock.now()).await?;
    }
    // Each account's first admission seeds its standing checkpoint from its whole history,
    // once: done before the clock starts, so the figures are the steady state that every later
    // admission pays. The seed's time is reported on its own.
    let seeding = Instant::now();
    for c in 0..clients {
        let account: headroom_core::AccountName = bench_account(run, c).parse()?;
        admit_once(ledger.as_ref(), run, &account, c, &format!("{tag}seed")).await?;
    }
    let seed = seeding.elapsed();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let ledger = ledger.clone();
        let account: headroom_core::AccountName = bench_account(run, c).parse()?;
        let run = run.to_string();
        let tag = tag.to_string();
        tasks.spawn(async move {
            // Each node ends (a refused launch) beside the admissions, as nodes of a real
            // fleet end while others launch: a client's next admission does not wait for its
            // last node's end, and at most a few of its nodes are open at once.
            let (ends, mut ending) = tokio::sync::mpsc::channel::<headroom_ledger::NodeEvent>(2);
            let ender = {
                let ledger = ledger.clone();
                tokio::spawn(async move {
                    while let Some(end) = ending.recv().await {
                        ledger.append_node_event(&end).await?;
                    }
                    anyhow::Ok(())
                })
            };
            let mut latencies = Vec::with_capacity(count as usize);
            for n in 0..count {
                let (latency, end) =
                    admit_timed(ledger.as_ref(), &run, &account, c, &format!("{tag}{n}")).await?;
                latencies.push(latency);
                ends.send(end).await?;
            }
            drop(ends);
            ender.await??;
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.context("bench client")??);
    }
    let elapsed = started.elapsed();
    latencies.sort();
    Ok((latencies, elapsed, seed))
}

/// One budget admission for `account` (timed), then its node ended as a refused launch.
async fn admit_once(
    ledger: &dyn headroom_ledger::Ledger,
    run: &str,
    account: &headroom_core::AccountName,
    client: u32,
    n: &str,
) -> anyhow::Result<Duration> {
    let (latency, end) = admit_timed(ledger, run, account, client, n).await?;
    ledger.append_node_event(&end).await?;
    Ok(latency)
}

/// One budget admission for `account`, timed, and the event that ends its node (a refused
/// launch), for the caller to write.
async fn admit_timed(
    ledger: &dyn headroom_ledger::Ledger,
    run: &str,
    account: &headroom_core::AccountName,
    client: u32,
    n: &str,
) -> anyhow::Result<(Duration, headroom_ledger::NodeEvent)> {
    use headroom_core::{Market, Money, NodeId, NodeState, ProviderKind};
    let clock = SystemClock::new();
    let node = NodeId(format!("bench-{run}-{client}-{n}"));
    let intent = headroom_ledger::NodeEvent {
        client_token: format!("hr-{}", node.0),
        node,
        pool: "bench".parse()?,
        account: account.clone(),
        offering: "bench-offering".parse()?,
        provider: ProviderKind::Sim,
        region: "r".into(),
        zone: "z".into(),
        instance_type: "t".into(),
        market: Market::OnDemand,
        request: None,
        destination: headroom_ledger::Destination::Serve,
        state: NodeState::Requested,
        instance: None,
        price_usd_per_hour: Money::from_micros(1_000_000),
        parked_usd_per_hour: Money::ZERO,
        gpus: 1,
        hold: Money::from_micros(1_000_000),
        reason: Some(headroom_ledger::LAUNCH.to_string()),
        at: clock.now(),
    };
    let one = Instant::now();
    let outcome = ledger.place_hold(&intent).await?;
    let latency = one.elapsed();
    anyhow::ensure!(
        outcome == headroom_ledger::HoldOutcome::Placed,
        "bench hold refused: {outcome:?}"
    );
    Ok((
        latency,
        intent.next(NodeState::Refused, "bench", clock.now()),
    ))
}

/// Preloads `rows` node events as history of the benchmark's accounts, in one statement: nodes
/// that launched, served a minute and were released, within today's budget period.
async fn preload(url: &str, run: &str, rows: u64, clients: u32) -> anyhow::Result<()> {
    // Every value below is made here (digits, dashes, letters), never taken from input.
    let accounts: Vec<String> = (0..clients)
        .map(|c| format!("'{}'", bench_account(run, c)))
        .collect();
    let sql = format!(
        "INSERT INTO node_events (node_id, pool, account, offering_id, provider, region, zone,
            instance_type, market, request_id, destination, state, instance_id, client_token,
            price_micros, gpus, hold_micros, reason, at, event_key)
         SELECT 'hist-{run}-' || (i / 3), 'bench',
                (ARRAY[{accounts}])[1 + (i / 3) % {clients}],
                'bench-offering', 'sim', 'r', 'z', 't', 'on-demand', NULL, 'serve',
                (ARRAY['requested', 'serving', 'terminated'])[1 + i % 3], NULL,
                'hr-hist-{run}-' || (i / 3), 1000000, 1,
                CASE WHEN i % 3 = 0 THEN 1000 ELSE 0 END,
                (ARRAY['launch', 'ready', 'released'])[1 + i % 3],
                date_trunc('day', now()) + make_interval(secs => (i % 3) * 0.06),
                'hist-{run}-' || i
         FROM generate_series(0, {last}) AS i; ANALYZE node_events;",
        accounts = accounts.join(", "),
        last = rows - 1,
    );
    psql(url, &sql).context("preloading history")?;
    Ok(())
}

/// `clients` API clients at once, `count` requests each: every latency, unsorted.
async fn run_clients(
    url: &str,
    phase: String,
    clients: u32,
    count: u32,
) -> anyhow::Result<Vec<Duration>> {
    let mut sending = Vec::new();
    for c in 0..clients {
        let (url, phase) = (url.to_string(), phase.clone());
        sending.push(tokio::task::spawn_blocking(move || {
            send(&url, &phase, c, count)
        }));
    }
    let mut latencies = Vec::new();
    for client in sending {
        latencies.extend(client.await.context("bench client")??);
    }
    Ok(latencies)
}

/// Runs `sql` on `url` with psql.
fn psql(url: &str, sql: &str) -> anyhow::Result<()> {
    let out = std::process::Command::new(which("psql")?)
        .args([url, "-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .context("running psql")?;
    anyhow::ensure!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// One client: `count` requests over one keep-alive connection, each with its own key.
fn send(url: &str, phase: &str, client: u32, count: u32) -> anyhow::Result<Vec<Duration>> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut latencies = Vec::with_capacity(count as usize);
    for n in 0..count {
        let body = r#"{"pool":"mistral-7b-batch","replicas":1,"priority":"low"}"#;
        let started = Instant::now();
        let mut response = agent
            .post(url)
            .header("content-type", "application/json")
            .header(
                "idempotency-key",
                &format!("bench-{phase}-{client}-{n}-{}", std::process::id()),
            )
            .send(body)
            .context("bench request")?;
        // Read to the end, as a client does: only then does the agent keep the connection for
        // the next request (a body left unread closes it, and every request would pay a new
        // connection and the server's per-connection set-up).
        response
            .body_mut()
            .read_to_vec()
            .context("bench response")?;
        latencies.push(started.elapsed());
        anyhow::ensure!(
            response.status().as_u16() == 201,
            "bench request answered {}",
            response.status()
        );
    }
    Ok(latencies)
}

/// Runs pgbench with a transaction shaped like a capacity request's: look up the idempotency
/// key, insert one row. Returns (tps, average latency in ms).
fn run_pgbench(url: &str, clients: u32, per_client: u32) -> anyhow::Result<Option<(f64, f64)>> {
    let Ok(pgbench) = which("pgbench") else {
        return Ok(None);
    };
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("admission.sql");
    std::fs::write(
        &script,
        "\\set n random(1, 1000000000)\n\
         BEGIN;\n\
         SELECT id FROM headroom_bench WHERE key = 'k' || :client_id || '-' || :n;\n\
         INSERT INTO headroom_bench (id, pool, replicas, priority, key, created_at) VALUES (gen_random_uuid()::text, 'mistral-7b-batch', 1, 'low', 'k' || :client_id || '-' || :n || '-' || random(), now());\n\
         END;\n",
    )?;
    psql(
        url,
        "CREATE TABLE IF NOT EXISTS headroom_bench (id TEXT PRIMARY KEY, pool TEXT NOT NULL, replicas INTEGER NOT NULL, priority TEXT NOT NULL, key TEXT UNIQUE, created_at TIMESTAMPTZ NOT NULL)",
    )?;
    let out = std::process::Command::new(pgbench)
        .args(["-n", "-f"])
        .arg(&script)
        .args([
            "-c",
            &clients.to_string(),
            "-j",
            &clients.min(2).to_string(),
            "-t",
            &per_client.to_string(),
            url,
        ])
        .output()
        .context("running pgbench")?;
    psql(url, "DROP TABLE IF EXISTS headroom_bench")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let number_after = |label: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(label))
            .and_then(|l| l.split('=').nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    Ok(number_after("tps").zip(number_after("latency average")))
}

/// `program` on PATH, or in a Debian PostgreSQL installation's bin folder (pgbench is not on PATH
/// there).
fn which(program: &str) -> anyhow::Result<std::path::PathBuf> {
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|version| version.path().join("bin"));
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .chain(debian)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .with_context(|| format!("{program} is not on PATH"))
}
