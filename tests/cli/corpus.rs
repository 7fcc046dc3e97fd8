//! `headroom simulate --corpus`: the scoreboard's JSON shape, the dump that replays, and bad
//! flags as one line naming the flag, exit code 2.

use std::ffi::OsStr;

use super::{json_of, simulate_refuses};

/// `headroom simulate ARGS… PATH`'s JSON.
fn simulate_json(args: &[&str], path: &std::path::Path) -> serde_json::Value {
    let args = ["simulate"].iter().chain(args).map(OsStr::new);
    json_of(args.chain([path.as_os_str()]))
}

#[test]
fn simulate_corpus_prints_the_scoreboard_and_dumps_replayable_scenarios() {
    let dir = tempfile::tempdir().unwrap();
    let v = simulate_json(
        &[
            "--corpus",
            "2",
            "--seed",
            "7",
            "--format",
            "json",
            "--corpus-dump",
        ],
        dir.path(),
    );
    // serde_json's map is sorted by key: the set is what is checked here.
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "cost_tolerance",
            "headroom_losses",
            "losses_by_trait",
            "policies",
            "scenario_rows",
            "scenarios",
            "seed",
            "slo_tolerance",
            "wall_time_s"
        ]
    );
    assert_eq!(v["seed"], 7);
    assert_eq!(v["scenarios"], 2);
    let policies = v["policies"].as_array().unwrap();
    let names: Vec<&str> = policies
        .iter()
        .map(|p| p["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "headroom",
            "hpa-utilization",
            "hpa-queue",
            "keda-karpenter",
            "predictive",
            "static",
            "oracle"
        ]
    );
    for p in policies {
        let wins = p["win_rate"].as_object().unwrap();
        assert_eq!(wins.len(), 6, "{p}");
        assert!(
            wins.values()
                .all(|w| (0.0..=1.0).contains(&w.as_f64().unwrap()))
        );
        for q in [
            "slo_vs_best_baseline",
            "cost_vs_bound",
            "cost_vs_hindsight",
            "direction_changes_per_hour",
        ] {
            let q = &p[q];
            let (p10, p50, p90) = (
                q["p10"].as_f64().unwrap(),
                q["p50"].as_f64().unwrap(),
                q["p90"].as_f64().unwrap(),
            );
            assert!(p10 <= p50 && p50 <= p90, "{p}");
        }
    }
    let rows = v["scenario_rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["scenario"], "corpus-s7-0000");
    assert_eq!(rows[0]["policies"].as_array().unwrap().len(), 7);
    assert!(v["headroom_losses"].is_array() && v["losses_by_trait"].is_array());
    // The top tier where the hindsight planner reaches 0.99: each policy's count is the rows'.
    let top = |row: &serde_json::Value, policy: &str| {
        row["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["policy"] == policy)
            .unwrap()["slo_top_tier"]
            .as_f64()
            .unwrap()
    };
    let reached: Vec<&serde_json::Value> =
        rows.iter().filter(|r| top(r, "oracle") >= 0.99).collect();
    for p in policies {
        let name = p["policy"].as_str().unwrap();
        let met = reached.iter().filter(|r| top(r, name) >= 0.99).count();
        assert_eq!(p["top_tier"]["scenarios"], reached.len(), "{p}");
        assert_eq!(p["top_tier"]["met"], met, "{p}");
    }

    // The dump replays: the second member run alone gives its row's numbers.
    let file = dir.path().join("corpus-s7-0001.toml");
    let alone = simulate_json(
        &["--format", "json", "--policy", "static", "--scenario"],
        &file,
    );
    let static_row = rows[1]["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["policy"] == "static")
        .unwrap();
    assert_eq!(alone["policies"][0]["cost_usd"], static_row["cost_usd"]);
    assert_eq!(
        alone["policies"][0]["slo_attainment"],
        static_row["slo_attainment"]
    );

    for bad in [
        vec!["--corpus", "0"],
        vec!["--corpus", "10001"],
        vec!["--corpus", "many"],
        vec!["--corpus", "2", "--scenario", "seed-000-backlog"],
    ] {
        simulate_refuses(&bad, "--corpus");
    }
    // Markdown is the suite's scoreboard only.
    simulate_refuses(
        &["--scenario", "seed-000-backlog", "--format", "markdown"],
        "--format markdown",
    );
}
