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
