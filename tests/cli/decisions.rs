//! `headroom simulate --decisions`: Headroom's decision log of one run as JSON lines, and the
//! flag refused (one line, exit code 2) where there is no one run to explain.

use std::ffi::OsStr;

use super::{json_of, simulate_refuses};

#[test]
fn simulate_decisions_writes_one_json_object_a_line_per_decision() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("decisions.jsonl");
    let args = [
        "simulate",
        "--scenario",
        "seed-000-backlog",
        "--policy",
        "headroom",
        "--format",
        "json",
        "--decisions",
    ];
    let report = json_of(args.iter().map(OsStr::new).chain([path.as_os_str()]));
    assert_eq!(report["policies"][0]["policy"], "headroom");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The burst makes the engine change its answer: more than the entry it started with.
    assert!(lines.len() > 1, "{text}");
    let decisions: Vec<&serde_json::Value> =
        lines.iter().filter(|d| d.get("rule").is_some()).collect();
    assert!(!decisions.is_empty(), "{text}");
    for d in &decisions {
        for field in [
            "at",
            "t_s",
            "pool",
            "rule",
            "reason",
            "target",
            "hold",
            "classification",
        ] {
            assert!(d.get(field).is_some(), "{field} missing: {d}");
        }
        assert_eq!(d["pool"], "seed-000", "{d}");
    }
    let times: Vec<f64> = lines.iter().filter_map(|d| d["t_s"].as_f64()).collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "oldest first: {times:?}"
    );
    assert!(times.iter().any(|t| *t > 0.0), "{times:?}");

    let file = path.to_str().unwrap();
    simulate_refuses(&["--suite", "--decisions", file], "--decisions");
    simulate_refuses(&["--corpus", "1", "--decisions", file], "--decisions");
    simulate_refuses(
        &[
            "--scenario",
            "seed-000-backlog",
            "--policy",
            "static",
            "--decisions",
            file,
        ],
        "--decisions",
    );
}
