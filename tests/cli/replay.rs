//! `headroom replay`: a fleet's history recorded by a real Prometheus, replayed through the
//! controller, with the promotion report; and its bad input refused in one line.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use headroom_testkit::prometheus::{Pod, Prometheus};
use serde_json::Value;

use super::BIN;

const CONFIG: &str = r#"
cluster_id = "replay-test"
[[offerings]]
id = "od"
provider = "sim"
region = "us-east-1"
zone = "use1-az1"
instance_type = "g6.xlarge"
market = "on-demand"
price_usd_per_hour = "0.8048"
gpus = 1
[[pools]]
name = "llm"
account = "ml"
offerings = ["od"]
min_replicas = 1
max_replicas = 30
[pools.ladder]
node_acquisition = "2s"
image_pull = "1s"
weight_load = "1s"
compile = "1s"
warmup = "1s"
[pools.signals]
source = "prometheus"
url = "http://127.0.0.1:9"
[pools.signals.queries]
queue_depth = 'sum(vllm:num_requests_waiting{model_name="llama-70b"})'
arrival_rate_rps = 'sum(rate(vllm:request_success_total{model_name="llama-70b"}[5s]))'
[pools.scaling]
replica_throughput_rps = 5.0
target_utilization = 1.0
signal_max_age = "2s"
breach_window = "1s"
"#;

/// `headroom replay --config CONFIG ARGS...`, run to its end.
fn replay(config: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("replay")
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap()
}

/// The wall clock, as Prometheus stamps its samples with it.
fn now() -> chrono::DateTime<chrono::Utc> {
    use headroom_cloud::Clock;
    headroom_cloud::SystemClock::new().now()
}

#[test]
fn replay_steps_a_recorded_fleet_through_the_controller_and_reports_for_promotion() {
    let pods = [Pod::start(0), Pod::start(0), Pod::start(0)];
    let stop = Arc::new(AtomicBool::new(false));
    let serving = (pods.clone(), stop.clone());
    // Each pod serves 10 requests a second: 30 in all.
    let server = std::thread::spawn(move || {
        while !serving.1.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
            for pod in &serving.0 {
                pod.served.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let prometheus = Prometheus::start(&pods.iter().map(|p| p.port).collect::<Vec<_>>());
    // Quiet, then a queue of 60 on each pod, then every pod gone (the metric missing), then
    // back and quiet.
    std::thread::sleep(Duration::from_secs(6));
    let from = now();
    std::thread::sleep(Duration::from_secs(3));
    for pod in &pods {
        pod.waiting.store(60, Ordering::SeqCst);
    }
    std::thread::sleep(Duration::from_secs(6));
    for pod in &pods {
        pod.gone.store(true, Ordering::SeqCst);
    }
    std::thread::sleep(Duration::from_secs(6));
    for pod in &pods {
        pod.waiting.store(0, Ordering::SeqCst);
        pod.gone.store(false, Ordering::SeqCst);
    }
    std::thread::sleep(Duration::from_secs(4));
    let to = now();
    stop.store(true, Ordering::SeqCst);
    server.join().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("headroom.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let decisions = dir.path().join("replay.jsonl");
    let (from, to, url) = (from.to_rfc3339(), to.to_rfc3339(), prometheus.url());
    let range = [
        "--prometheus",
        &url,
        "--from",
        &from,
        "--to",
        &to,
        "--step",
        "1s",
    ];
    let json = [
        "--format",
        "json",
        "--decisions",
        decisions.to_str().unwrap(),
    ];
    let out = replay(&config, &[&range[..], &json[..]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: Value = serde_json::from_slice(&out.stdout).unwrap();
    let report = &reports[0];
    assert_eq!(report["pool"], "llm");
    let steps = report["steps"].as_u64().unwrap();
    assert!((20..=30).contains(&steps), "{report}");
    assert!(
        report["missing_signal_steps"].as_u64().unwrap() >= 3,
        "the pods were gone for 6 s: {report}"
    );
    assert!(report["held_minutes"].as_f64().unwrap() > 0.0, "{report}");
    assert_eq!(report["scale_ups_on_missing_signal"], 0, "{report}");
    assert!(report["history_queue_request_minutes"].as_f64().unwrap() > 0.0);

    let lines: Vec<Value> = std::fs::read_to_string(&decisions)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len() as u64, steps);
    let quiet_target = lines[0]["target"].as_u64().unwrap();
    let busy: Vec<&Value> = lines.iter().filter(|l| l["queue_depth"] == 180).collect();
    assert!(!busy.is_empty(), "the recorded queue of 3 x 60 is replayed");
    assert!(
        busy.iter()
            .any(|l| l["target"].as_u64().unwrap() > quiet_target),
        "a queue of 180 at 5/s a replica scales the pool up: {busy:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["signal"] == false && !l["hold"].is_null()),
        "the replay holds once the missing metric is stale"
    );

    // The table a person reads says whether the policy may be promoted.
    let out = replay(&config, &range);
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{table}");
    assert!(
        table.contains("pool llm:") && table.contains("promotion"),
        "{table}"
    );
    assert!(table.contains("scale-ups on a missing signal 0"), "{table}");
}

#[test]
fn replay_refuses_bad_input_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("headroom.toml");
    std::fs::write(&config, CONFIG).unwrap();
    for (args, flag) in [
        (
            vec![
                "--from",
                "2026-12-01T10:00:00Z",
                "--to",
                "2026-12-01T09:00:00Z",
            ],
            "--to",
        ),
        (
            vec!["--from", "yesterday", "--to", "2026-12-01T09:00:00Z"],
            "--from",
        ),
        (
            vec![
                "--from",
                "2026-12-01T08:00:00Z",
                "--to",
                "2026-12-01T09:00:00Z",
                "--step",
                "0s",
            ],
            "--step",
        ),
        (
            vec![
                "--from",
                "2020-01-01T00:00:00Z",
                "--to",
                "2026-12-01T09:00:00Z",
                "--step",
                "1s",
            ],
            "--step",
        ),
        (
            vec![
                "--from",
                "2026-12-01T08:00:00Z",
                "--to",
                "2026-12-01T09:00:00Z",
                "--pool",
                "nope",
            ],
            "--pool",
        ),
        (
            vec![
                "--from",
                "2026-12-01T08:00:00Z",
                "--to",
                "2026-12-01T09:00:00Z",
                "--prometheus",
                "prom:9090",
            ],
            "--prometheus",
        ),
    ] {
        let out = replay(&config, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with(&format!("error: {flag}: ")), "{stderr}");
    }
}

/// The pool of [`CONFIG`] with a queue-only signal, launching as much as the controller asks in
/// one tick (the replay's capacity model launches every replica a decision adds at once).
fn live_config(prometheus_url: &str) -> String {
    CONFIG
        .replace("http://127.0.0.1:9", prometheus_url)
        .replace(
            "arrival_rate_rps = 'sum(rate(vllm:request_success_total{model_name=\"llama-70b\"}[5s]))'\n",
            "",
        )
        // The simulated cloud climbs the ladder the pool estimates, which the replay's capacity
        // model assumes (a launch serves one cold start after it is decided).
        .replace(
            "gpus = 1\n",
            "gpus = 1\nsim_capacity = 64\n[offerings.sim_ladder]\nnode_acquisition = \"2s\"\nimage_pull = \"1s\"\nweight_load = \"1s\"\ncompile = \"1s\"\nwarmup = \"1s\"\n",
        )
        .replace(
            "min_replicas = 1\n",
            "min_replicas = 0\nmax_scale_up_per_step = 30\n",
        )
        // No warm pool: the replay does not model one (a warm pool sized by the demand's rises
        // makes scale-in park replicas sooner than the replay, which has none, releases them).
        .replace(
            "[pools.ladder]\n",
            "[pools.supply]\nwarm_pool_max = 0\n[pools.ladder]\n",
        )
        // Without arrivals the pool is sized as the HPA sizes pods: a queue per replica.
        .replace(
            "target_utilization = 1.0\n",
            "target_utilization = 1.0\ntarget_queue_per_replica = 10.0\n",
        )
}

/// The decisions a live engine made on the signals it read from a real Prometheus are the
/// decisions `headroom replay` makes on that Prometheus's record of the same window: the same
/// targets, rules, holds and reasons at the same instants, on the same replica counts.
///
/// The live engine ticks once every `STEP`, at the instants the replay steps through (its clock
/// is set to each one as the wall clock passes it), and reads its signal as its scraper loop does
/// (`prometheus::read` then `push_signal`) just before each tick. Exact equality rests on two
/// things the test arranges rather than on luck:
/// - an instant query sent a few milliseconds after a step's instant answers what a range query
///   answers at the instant itself only while no new sample lands in between: the pods' queues
///   change just after a tick, so the scrape that records the change (Prometheus scrapes every
///   second) lands well before the next step, three seconds on, and none changes the value near
///   a step;
/// - a `rate()` is extrapolated to the query's own evaluation time, so it differs by those few
///   milliseconds: the pool reads the queue alone (a rate would make the reasons' numbers, and
///   near a threshold the targets, differ by the offset between a live read and its step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_of_a_live_runs_history_gives_the_live_runs_decisions() {
    use headroom_cloud::{Clock, ManualClock, SystemClock};
    const STEP: Duration = Duration::from_secs(3);
    const STEPS: usize = 12;
    // Each pod's queue, set just after the tick of the step given: a rise the pool scales for
    // from zero, a quiet spell, a larger rise once the first launches serve, quiet again.
    const QUEUES: [(usize, u64); 4] = [(1, 20), (4, 0), (6, 50), (9, 0)];

    let pods = [Pod::start(0), Pod::start(0), Pod::start(0)];
    let prometheus = Prometheus::start(&pods.iter().map(|p| p.port).collect::<Vec<_>>());
    let text = live_config(&prometheus.url());
    let wall = SystemClock::new();
    let rig =
        headroom_testkit::Rig::with_clock(&text, Arc::new(ManualClock::new(wall.now()))).await;
    let engine = rig.engine(rig.sim_cloud());
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    let source = rig.config.prometheus[&pool].clone();
    let max_age = rig.config.pool(&pool).unwrap().scaling.signal_max_age;
    let read = |at: chrono::DateTime<chrono::Utc>| {
        let source = source.clone();
        tokio::task::spawn_blocking(move || {
            headroom_engine::prometheus::read(&source, || at, max_age)
        })
    };

    // Prometheus has scraped every pod once the fleet's queue reads.
    let mut polls = 0;
    while read(wall.now()).await.unwrap().is_err() {
        polls += 1;
        assert!(polls < 300, "Prometheus never answered the queue's query");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The first step on a whole second.
    let start = wall.now() + chrono::Duration::seconds(1);
    let start = chrono::DateTime::from_timestamp(start.timestamp(), 0).unwrap();
    let step = chrono::Duration::from_std(STEP).unwrap();
    for i in 0..STEPS {
        let at = start + step * i as i32;
        let wait = (at - wall.now()).to_std().unwrap_or_default();
        tokio::time::sleep(wait).await;
        rig.clock.set(at);
        match read(at).await.unwrap() {
            Ok(signal) => engine.push_signal(&pool, signal),
            Err(e) => engine.signal_source_failed(&pool, e),
        }
        engine.tick().await.unwrap();
        for (after, queue) in QUEUES {
            if after == i {
                for pod in &pods {
                    pod.waiting.store(queue, Ordering::SeqCst);
                }
            }
        }
    }
    let to = start + step * (STEPS - 1) as i32;

    // The live decision log, oldest first: an entry per change of target, rule or hold, with
    // the reason and replica counts of its first step and how many steps it covers.
    let mut log = engine.decisions(&pool).await.unwrap();
    log.reverse();
    let live: Vec<Value> = log
        .iter()
        .filter(|e| e.get("target").is_some())
        .map(|e| {
            let at: chrono::DateTime<chrono::Utc> = e["at"].as_str().unwrap().parse().unwrap();
            serde_json::json!({
                "at": at.to_rfc3339(),
                "steps": e["repeated"],
                "target": e["target"],
                "rule": e["rule"],
                "hold": e["hold"],
                "reason": e["reason"],
                "ready": e["replicas"]["ready"],
                "starting": e["replicas"]["starting"].as_u64().unwrap()
                    + e["replicas"]["requested"].as_u64().unwrap(),
            })
        })
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("headroom.toml");
    std::fs::write(&config, &text).unwrap();
    let decisions = dir.path().join("replay.jsonl");
    let (from, to) = (start.to_rfc3339(), to.to_rfc3339());
    let out = replay(
        &config,
        &[
            "--from",
            &from,
            "--to",
            &to,
            "--step",
            "3s",
            "--format",
            "json",
            "--decisions",
            decisions.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The replay's steps folded as the live log folds them (a step repeating the previous
    // step's target, rule and hold adds to its entry). The log folds on `limited` too, which the
    // replay does not write: no step of this window is limited, so nothing differs for it.
    let mut replayed: Vec<Value> = Vec::new();
    for line in std::fs::read_to_string(&decisions).unwrap().lines() {
        let l: Value = serde_json::from_str(line).unwrap();
        if let Some(open) = replayed.last_mut()
            && (&open["target"], &open["rule"], &open["hold"])
                == (&l["target"], &l["rule"], &l["hold"])
        {
            open["steps"] = (open["steps"].as_u64().unwrap() + 1).into();
            continue;
        }
        let at: chrono::DateTime<chrono::Utc> = l["at"].as_str().unwrap().parse().unwrap();
        replayed.push(serde_json::json!({
            "at": at.to_rfc3339(),
            "steps": 1,
            "target": l["target"],
            "rule": l["rule"],
            "hold": l["hold"],
            "reason": l["reason"],
            "ready": l["ready"],
            "starting": l["starting"],
        }));
    }
    let shown = |d: &[Value]| {
        d.iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let steps: u64 = live.iter().map(|d| d["steps"].as_u64().unwrap()).sum();
    assert_eq!(
        steps,
        STEPS as u64,
        "one live decision a step:\n{}",
        shown(&live)
    );
    assert_eq!(
        live,
        replayed,
        "live:\n{}\nreplayed:\n{}",
        shown(&live),
        shown(&replayed)
    );
    // The window holds what the comparison is about: a scale-up from zero, launches that came
    // to serve within it, and a second scale-up on top of them.
    let targets: Vec<u64> = live.iter().map(|d| d["target"].as_u64().unwrap()).collect();
    assert_eq!(targets[0], 0, "{}", shown(&live));
    assert!(
        targets.windows(2).filter(|w| w[1] > w[0]).count() >= 2,
        "two scale-ups: {}",
        shown(&live)
    );
    assert!(
        live.iter().any(|d| d["ready"].as_u64().unwrap() > 0),
        "launches serve within the window: {}",
        shown(&live)
    );
}

/// A Prometheus source's token file is read before `serve` or `replay` starts: missing or
/// empty, it is one line naming the key (exit 2); a token the server refuses fails the replay
/// saying so, and the token is in neither.
#[test]
fn a_bearer_token_file_is_checked_before_start_and_never_printed() {
    use headroom_testkit::prometheus::BearerGate;
    let pod = Pod::start(4);
    let prometheus = Prometheus::start(&[pod.port]);
    let gate = BearerGate::start(prometheus.port, "tok-live-5e2d");
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    let config = dir.path().join("headroom.toml");
    std::fs::write(
        &config,
        CONFIG.replace("http://127.0.0.1:9", &gate.url()).replace(
            "[pools.signals.queries]",
            &format!(
                "bearer_token_file = \"{}\"\n[pools.signals.queries]",
                token.display()
            ),
        ),
    )
    .unwrap();
    let range = [
        "--from",
        "2026-12-01T08:00:00Z",
        "--to",
        "2026-12-01T08:01:00Z",
    ];
    let replay = || replay(&config, &range);
    let ledger = dir.path().join("ledger.db");
    let serve = || {
        Command::new(BIN)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--database-url")
            .arg(format!("sqlite://{}", ledger.display()))
            .output()
            .unwrap()
    };
    for (content, why) in [(None, "cannot read"), (Some("\n"), "is empty")] {
        if let Some(content) = content {
            std::fs::write(&token, content).unwrap();
        }
        for out in [replay(), serve()] {
            let stderr = String::from_utf8(out.stderr).unwrap();
            assert_eq!(out.status.code(), Some(2), "{stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(
                stderr.contains("`pools[0].signals.bearer_token_file`") && stderr.contains(why),
                "{stderr}"
            );
        }
    }
    assert!(!ledger.exists(), "serve stopped before opening its ledger");

    // A token the gate does not take: the replay fails on the 401, and does not print the token.
    std::fs::write(&token, "tok-stale-0a9f\n").unwrap();
    let out = replay();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("401"), "{stderr}");
    assert!(!stderr.contains("tok-stale"), "{stderr}");
    assert_eq!(
        gate.seen().last().map(String::as_str),
        Some("Bearer tok-stale-0a9f")
    );
    // The right one: the replay reads the history through the gate.
    std::fs::write(&token, "tok-live-5e2d\n").unwrap();
    let out = replay();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
