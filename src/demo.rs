//! `headroom demo`: the whole loop on a laptop, with no account and no set-up. Its logs are
//! errors only unless RUST_LOG asks for more, so they stay out of its progress lines.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use headroom_cloud::{Clock, ScaledClock, SystemClock};
use headroom_config::Config;
use headroom_core::{PoolName, Priority};
use headroom_engine::{Engine, SignalInput, sim_cloud_for};
use headroom_ledger::{History, Ledger, SqliteLedger};
use headroom_sim::{BurstProfile, QueueModel};
use serde::Serialize;

use crate::EXAMPLE_CONFIG;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where the API listens.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR", value_parser = crate::listen_addr)]
    listen: SocketAddr,
    /// Keep the SQLite ledger here: sqlite://PATH, as every other command's --database-url
    /// (default: a temporary file, removed at exit). `--database PATH` is the older spelling.
    #[arg(long, value_name = "URL", alias = "database")]
    database_url: Option<String>,
    /// Stop after this many real seconds (default: when the story is over — the bursts served,
    /// the backlog drained and the pools scaled back in — or at Ctrl-C).
    #[arg(long, value_name = "N", value_parser = seconds)]
    seconds: Option<u64>,
    /// Print the summary as one JSON object on stdout (interval lines go to stderr).
    #[arg(long)]
    json: bool,
    /// Virtual seconds per real second.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    speedup: u32,
}

/// One pool's traffic in the demo.
struct Traffic {
    pool: PoolName,
    /// The priority tier of the pool's requests: the serving layer admits or sheds them as the
    /// pool's admission answer says for this tier.
    tier: Priority,
    profile: BurstProfile,
    queue: QueueModel,
    replica_rps: f64,
    /// Arrivals turned away (answered 429) while the tier was shed.
    shed_total: f64,
}

impl Traffic {
    /// When this pool's burst is over.
    fn burst_end_s(&self) -> f64 {
        self.profile.start_s + self.profile.ramp_s + self.profile.hold_s
    }

    /// Advances the pool's queue by `dt` seconds, admitting arrivals as the pool's admission
    /// answer says for the traffic's tier.
    fn step(&mut self, dt: f64, t: f64, status: Option<&headroom_engine::PoolStatus>) {
        let arriving = self.profile.rps_at(t) * dt;
        let answer = status.and_then(|s| s.admission.iter().find(|a| a.priority == self.tier));
        let admitted = match answer {
            Some(a) if !a.admit => 0.0,
            Some(a) => match a.max_queued {
                Some(cap) => arriving.min((cap as f64 - self.queue.waiting).max(0.0)),
                None => arriving,
            },
            None => arriving,
        };
        self.shed_total += arriving - admitted;
        let ready = status.map_or(0, |s| s.ready);
        let rps = if dt > 0.0 { admitted / dt } else { 0.0 };
        self.queue.step(dt, rps, ready, self.replica_rps);
    }
}

#[derive(Debug, Serialize)]
struct Summary {
    virtual_seconds: i64,
    requests_total: u64,
    requests_served: u64,
    requests_waiting: u64,
    /// Requests turned away (429) while their tier was shed.
    requests_shed: u64,
    /// The story's turns, in order, as printed: warm nodes woken, a tier shed and admitted again,
    /// cold nodes landing, the backlog drained, scale-in.
    story: Vec<String>,
    /// True when the demo ended because the story did (not `--seconds` or Ctrl-C).
    story_complete: bool,
    capacity_requests: u64,
    capacity_requested: u64,
    capacity_delivered: u64,
    refusals: u64,
    refusals_by_reason: std::collections::BTreeMap<String, u64>,
    spend_usd: String,
    /// The instant `spend_usd` is computed to: the demo's (virtual) end, when its nodes ended.
    spend_as_of: headroom_core::Timestamp,
    ledger: String,
    pools: Vec<headroom_engine::PoolStatus>,
}

/// `--seconds`: a whole number of seconds, or a duration that is one (`90`, `90s`, `2m`).
fn seconds(text: &str) -> Result<u64, String> {
    let parsed = text.parse::<u64>().ok().or_else(|| {
        humantime::parse_duration(text)
            .ok()
            .filter(|d| d.subsec_nanos() == 0)
            .map(|d| d.as_secs())
    });
    match parsed {
        Some(0) => Err("is zero; run for 1 second or more, e.g. 30 or 2m".into()),
        Some(n) => Ok(n),
        None => Err("is not a whole number of seconds; use e.g. 30, 30s or 2m".into()),
    }
}

/// The SQLite file a `--database-url` names: `sqlite://PATH` (or `sqlite:PATH`), or a plain path
/// (what `--database` took). The demo's ledger is SQLite only.
fn demo_ledger_path(url: &str) -> Result<PathBuf, crate::BadInput> {
    if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        return Err(crate::BadInput(
            "--database-url: the demo keeps its ledger in SQLite; pass sqlite://PATH (serve and migrate take PostgreSQL)".into(),
        ));
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let path = path.split('?').next().unwrap_or(path);
    if path.is_empty() || path.starts_with(':') {
        return Err(crate::BadInput(format!(
            "--database-url: {url:?} names no file; pass sqlite://PATH, e.g. sqlite://headroom-demo.db"
        )));
    }
    Ok(PathBuf::from(path))
}

/// Virtual time at which the traffic starts, after the pools were filled.
const BURST_START_S: f64 = 30.0;

pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let mut config = Config::parse(EXAMPLE_CONFIG, "built-in demo configuration")?;
    // One reconcile tick per virtual second, so sped-up time does not coarsen the controller.
    config.engine.tick = Duration::from_millis((1000 / args.speedup as u64).max(50));
    let config = Arc::new(config);
    let temp_dir = tempfile::tempdir().context("creating a temporary directory for the ledger")?;
    let ledger_path = match &args.database_url {
        Some(url) => demo_ledger_path(url)?,
        None => temp_dir.path().join("headroom-demo.db"),
    };
    let ledger = Arc::new(
        SqliteLedger::open_path(&ledger_path)
            .await
            .with_context(|| format!("--database-url: cannot open {}", ledger_path.display()))?,
    );
    // `--seconds` counts real seconds: the deadline reads the real clock the scaled one runs on
    // (the scaled clock's skip through the fill would move a deadline on it).
    let real_clock = SystemClock::new();
    let clock = Arc::new(ScaledClock::new(real_clock, args.speedup));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let cloud = Arc::new(sim_cloud_for(&config, dyn_clock.clone()));
    let engine = Engine::new(config.clone(), ledger.clone(), cloud.clone(), dyn_clock);

    let mut traffic = demo_traffic(&config)?;
    push_signals(&engine, &traffic);

    // Fill the pools to their floors and warm pools before the clock starts: skip ahead through
    // the cold-start ladder in virtual time.
    for _ in 0..30 {
        push_signals(&engine, &traffic);
        engine.tick().await.context("filling the pools")?;
        let filled = engine
            .pool_statuses()
            .iter()
            .all(|s| s.ready >= s.min_replicas && s.warm >= s.warm_pool_size);
        if filled {
            break;
        }
        clock.skip(Duration::from_secs(30));
    }
    let start = clock.now();

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| {
            format!(
                "--listen: cannot listen on {}; pass a free address, e.g. --listen 127.0.0.1:8081",
                args.listen
            )
        })?;
    eprintln!(
        "headroom demo: API on http://{} (open, loopback only; `serve` requires a config), ledger {}, simulated cloud, {}x speed",
        args.listen,
        ledger_path.display(),
        args.speedup
    );
    eprintln!("  try: curl -s http://{}/v1/pools", args.listen);
    let server_engine = engine.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let stop = async move {
            let _ = stop_rx.await;
        };
        crate::serve_until(server_engine, listener, false, None, stop).await
    });

    let began = real_clock.now();
    let past_deadline = || {
        args.seconds.is_some_and(|s| {
            (real_clock.now() - began).num_seconds() >= i64::try_from(s).unwrap_or(i64::MAX)
        })
    };
    let mut step = tokio::time::interval(Duration::from_millis(100));
    let mut last = clock.now();
    let mut lines = 0u64;
    let mut ticks = 0u64;
    let ctrl_c = crate::shutdown_signal();
    tokio::pin!(ctrl_c);
    let mut story = Story::new(&engine, &traffic);
    let story_end = traffic.iter().map(Traffic::burst_end_s).fold(0.0, f64::max);
    let mut story_complete = false;
    loop {
        tokio::select! {
            _ = step.tick() => {}
            _ = &mut ctrl_c => break,
        }
        if past_deadline() || server.is_finished() {
            break;
        }
        let now = clock.now();
        let dt = (now - last).num_milliseconds() as f64 / 1000.0;
        last = now;
        let t = (now - start).num_milliseconds() as f64 / 1000.0;
        for tr in &mut traffic {
            let status = engine.pool_status(&tr.pool);
            tr.step(dt, t, status.as_ref());
        }
        push_signals_at(&engine, &traffic, t);
        for turn in story.observe(&engine, &traffic, t, story_end) {
            if args.json {
                eprintln!("{turn}");
            } else {
                println!("{turn}");
            }
        }
        if args.seconds.is_none() && story.over(t, story_end) {
            story_complete = true;
            break;
        }
        ticks += 1;
        if ticks.is_multiple_of(10) {
            lines += 1;
            let line = interval_line(&engine, ledger.as_ref(), &traffic, t, now).await?;
            if args.json {
                eprintln!("{line}");
            } else {
                println!("{line}");
            }
        }
    }
    // Stop the loop (it ends its tick), then close the ledger: the simulated cloud ends with
    // this process, so every node ends here, and the ledger's figures stay what this summary says
    // whenever a report reads them.
    let _ = stop_tx.send(());
    server.await.context("demo server task")??;
    // To the millisecond, the ledger's resolution, so the summary names the instant it holds.
    let now = chrono::SubsecRound::trunc_subsecs(clock.now(), 3);
    close_fleet(ledger.as_ref(), cloud.as_ref(), now).await?;
    let totals = ledger.summary(now).await?;
    let summary = Summary {
        virtual_seconds: (now - start).num_seconds(),
        requests_total: traffic
            .iter()
            .map(|t| t.queue.arrived_total.round() as u64)
            .sum(),
        requests_served: traffic
            .iter()
            .map(|t| t.queue.served_total.round() as u64)
            .sum(),
        requests_waiting: traffic.iter().map(|t| t.queue.depth()).sum(),
        requests_shed: traffic.iter().map(|t| t.shed_total.round() as u64).sum(),
        story: story.turns.clone(),
        story_complete,
        capacity_requests: totals.capacity_requests,
        capacity_requested: totals.capacity_requested,
        capacity_delivered: totals.capacity_delivered,
        refusals: totals.refusals,
        refusals_by_reason: totals.refusals_by_reason,
        spend_usd: totals.spend.to_string(),
        spend_as_of: totals.as_of,
        ledger: ledger_path.display().to_string(),
        pools: engine.pool_statuses(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print_summary(&summary, &traffic, lines);
    }
    Ok(ExitCode::SUCCESS)
}

/// Terminates every node still live and records its end at `at`, with the reason `demo_ended`.
async fn close_fleet(
    ledger: &dyn Ledger,
    cloud: &dyn headroom_cloud::CloudProvider,
    at: headroom_core::Timestamp,
) -> anyhow::Result<()> {
    for last in ledger.live_nodes().await? {
        if let Some(id) = last.instance.clone() {
            match cloud.terminate(&headroom_cloud::InstanceId(id)).await {
                Ok(()) | Err(headroom_cloud::CloudError::NotFound(_)) => {}
                Err(e) => return Err(e).context("terminating the demo's nodes"),
            }
        }
        let end = last.next(headroom_core::NodeState::Terminated, "demo_ended", at);
        ledger.append_node_event(&end).await?;
    }
    Ok(())
}

fn demo_traffic(config: &Config) -> anyhow::Result<Vec<Traffic>> {
    let pool = |name: &str| -> anyhow::Result<(PoolName, f64)> {
        let name: PoolName = name.parse()?;
        let spec = config
            .pool(&name)
            .with_context(|| format!("the demo configuration lacks pool {name}"))?;
        Ok((name, spec.scaling.replica_throughput_rps))
    };
    let (interactive, interactive_rps) = pool("llama-70b-interactive")?;
    let (batch, batch_rps) = pool("mistral-7b-batch")?;
    Ok(vec![
        // Seed 001's 09:00 burst: 20 → 200 requests/s within ten seconds, for five minutes.
        Traffic {
            pool: interactive,
            tier: Priority::Critical,
            profile: BurstProfile::seed_001(BURST_START_S, 300.0),
            queue: QueueModel::default(),
            replica_rps: interactive_rps,
            shed_total: 0.0,
        },
        // A batch job that outgrows its pool's cheapest spot offerings, to show fallback; before
        // and after it the pool has no traffic and, with no floor, no replica.
        Traffic {
            pool: batch,
            tier: Priority::Low,
            profile: BurstProfile {
                base_rps: 0.0,
                peak_rps: 40.0,
                start_s: BURST_START_S + 30.0,
                ramp_s: 20.0,
                hold_s: 240.0,
            },
            queue: QueueModel::default(),
            replica_rps: batch_rps,
            shed_total: 0.0,
        },
    ])
}

fn push_signals(engine: &Engine, traffic: &[Traffic]) {
    push_signals_at(engine, traffic, 0.0);
}

/// Each pool's queue and arrivals, in all and for its one tier (which a pool with shed deadlines
/// sheds by).
fn push_signals_at(engine: &Engine, traffic: &[Traffic], t: f64) {
    for tr in traffic {
        let rps = tr.profile.rps_at(t);
        engine.push_signal(
            &tr.pool,
            SignalInput {
                queue_depth: tr.queue.depth(),
                arrival_rate_rps: Some(rps),
                queue_depth_by_priority: [(tr.tier, tr.queue.depth())].into(),
                arrival_rate_by_priority_rps: [(tr.tier, rps)].into(),
                ..SignalInput::default()
            },
        );
    }
}

async fn interval_line(
    engine: &Engine,
    ledger: &dyn History,
    traffic: &[Traffic],
    t: f64,
    now: headroom_core::Timestamp,
) -> anyhow::Result<String> {
    let mut line = clock_stamp(t);
    for tr in traffic {
        if let Some(s) = engine.pool_status(&tr.pool) {
            line.push_str(&format!(
                " {} q={} desired={} starting={} ready={} warm={} |",
                tr.pool,
                tr.queue.depth(),
                s.desired,
                s.requested + s.starting,
                s.ready,
                s.warm
            ));
        }
    }
    let spend = ledger.summary(now).await?.spend;
    line.push_str(&format!(" spend ${spend}"));
    Ok(line)
}

/// Prints the summary a person reads at the end.
fn print_summary(summary: &Summary, traffic: &[Traffic], intervals: u64) {
    let secs = summary.virtual_seconds.max(0);
    println!(
        "{} after {}m{:02}s of virtual time ({intervals} intervals):",
        if summary.story_complete {
            "the story is over"
        } else {
            "stopped"
        },
        secs / 60,
        secs % 60
    );
    for tr in traffic {
        println!(
            "  {} ({} tier): {:.0} requests, {:.0} served, {:.0} shed with 429, {} still waiting",
            tr.pool,
            tr.tier.as_str(),
            tr.queue.arrived_total + tr.shed_total,
            tr.queue.served_total,
            tr.shed_total,
            tr.queue.depth()
        );
    }
    println!(
        "  capacity: {} replicas requested, {} delivered, {} refused; spend ${} as of {}",
        summary.capacity_requested,
        summary.capacity_delivered,
        summary.refusals,
        summary.spend_usd,
        summary.spend_as_of.format("%H:%M:%S UTC")
    );
}

/// What a pool looked like at the last step, to tell the story's turns as they happen.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    warm: u32,
    desired: u32,
    peak_ready: u32,
    shedding: bool,
    backlog: bool,
    /// The story's one-off turns, once told.
    shed_told: bool,
    admitted_told: bool,
    drained_told: bool,
    scaled_in: bool,
    /// No replica serving, starting or wanted (a pool without a floor, idle).
    at_zero: bool,
    /// The pool has no floor (`min_replicas = 0`): its story ends back at zero.
    floorless: bool,
    held_told: bool,
}

/// The story's turns: each is told once as it happens (a tier shed and admitted again each
/// time it changes).
struct Story {
    seen: Vec<Seen>,
    turns: Vec<String>,
}

impl Story {
    fn new(engine: &Engine, traffic: &[Traffic]) -> Story {
        let seen = traffic
            .iter()
            .map(|tr| {
                engine
                    .pool_status(&tr.pool)
                    .map_or(Seen::default(), |s| Seen {
                        warm: s.warm,
                        desired: s.desired,
                        peak_ready: s.ready,
                        floorless: s.min_replicas == 0,
                        ..Seen::default()
                    })
            })
            .collect();
        Story {
            seen,
            turns: Vec::new(),
        }
    }

    fn observe(&mut self, engine: &Engine, traffic: &[Traffic], t: f64, end: f64) -> Vec<String> {
        let stamp = clock_stamp(t);
        let mut told = Vec::new();
        for (tr, seen) in traffic.iter().zip(self.seen.iter_mut()) {
            let Some(s) = engine.pool_status(&tr.pool) else {
                continue;
            };
            let pool = &tr.pool;
            let shedding = s
                .admission
                .iter()
                .any(|a| a.priority == tr.tier && a.sheds());
            let at_zero = s.ready + s.starting + s.requested == 0 && s.desired == 0;
            if at_zero && !seen.at_zero {
                told.push(format!(
                    "{stamp} {pool}: {} zero replicas, {} parked warm node{}; the next request wakes one",
                    if seen.peak_ready > 0 { "back at" } else { "idle at" },
                    s.warm,
                    if s.warm == 1 { "" } else { "s" }
                ));
            }
            let waking = s.starting + s.requested > 0;
            if s.ready == 0 && waking && tr.queue.depth() > 0 && !seen.held_told {
                told.push(format!(
                    "{stamp} {pool}: {} first requests held (not shed) while a node wakes for them",
                    tr.queue.depth()
                ));
                seen.held_told = true;
            }
            if s.warm < seen.warm {
                told.push(format!(
                    "{stamp} {pool}: {} parked warm nodes woken (they skip the cold start's first rungs); {} wanted, {} ready",
                    seen.warm - s.warm,
                    s.desired,
                    s.ready
                ));
            }
            if s.ready > seen.peak_ready {
                told.push(format!(
                    "{stamp} {pool}: nodes landing, {} ready (wanted {})",
                    s.ready, s.desired
                ));
            }
            let burst_over = t > tr.burst_end_s();
            if shedding && !seen.shed_told {
                let retry = s
                    .admission
                    .iter()
                    .find(|a| a.priority == tr.tier)
                    .and_then(|a| a.retry_after_s)
                    .map_or(String::new(), |r| format!(" with Retry-After {r}s"));
                told.push(format!(
                    "{stamp} {pool}: shedding the {} tier: arrivals beyond what the capacity on its way can start in time get 429{retry}",
                    tr.tier.as_str()
                ));
                seen.shed_told = true;
            }
            if !shedding && seen.shed_told && burst_over && !seen.admitted_told {
                told.push(format!(
                    "{stamp} {pool}: {} tier admitted again",
                    tr.tier.as_str()
                ));
                seen.admitted_told = true;
            }
            let backlog = tr.queue.depth() > 0;
            if !backlog && burst_over && !seen.drained_told {
                told.push(format!("{stamp} {pool}: backlog drained"));
                seen.drained_told = true;
            }
            if t > end && s.desired < seen.desired && !seen.scaled_in {
                told.push(format!(
                    "{stamp} {pool}: scaling in, {} wanted (was {}), {} ready",
                    s.desired, seen.desired, s.ready
                ));
                seen.scaled_in = true;
            }
            *seen = Seen {
                warm: s.warm,
                desired: s.desired,
                peak_ready: seen.peak_ready.max(s.ready),
                shedding,
                backlog,
                at_zero,
                ..*seen
            };
        }
        self.turns.extend(told.iter().cloned());
        told
    }

    /// Over once every burst has passed, nothing waits and every pool has scaled in, a pool
    /// without a floor back to zero (or, at the latest, fifteen virtual minutes after the last
    /// burst).
    fn over(&self, t: f64, end: f64) -> bool {
        t > end + STORY_TAIL_S
            || (t > end
                && self.seen.iter().all(|s| {
                    s.scaled_in && !s.backlog && !s.shedding && (s.at_zero || !s.floorless)
                }))
    }
}

/// The most the demo waits for scale-in after the last burst, in virtual seconds.
const STORY_TAIL_S: f64 = 900.0;

fn clock_stamp(t: f64) -> String {
    let secs = t.max(0.0) as u64;
    format!(
        "[+{:02}:{:02}:{:02}]",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}
