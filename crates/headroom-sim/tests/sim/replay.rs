//! A seed replays a whole run of the real engine, node ids included; and the built-in
//! scenarios' decisions as golden files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use headroom_ledger::SqliteLedger;
use headroom_ledger::prelude::*;
use headroom_sim::{Policy, Report, golden, scenario};

/// Headroom's run of `sc` with `seed`: its report and every node id its ledger minted, in the
/// order they were first written.
async fn run_with_ids(sc: &scenario::Scenario, seed: u64) -> (Report, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.db");
    let report =
        headroom_sim::run_keeping_ledger(sc, None, &[Policy::Headroom], Some(seed), Some(&path))
            .await
            .unwrap();
    let ledger = SqliteLedger::open_path(&path).await.unwrap();
    let mut seen = BTreeSet::new();
    let ids = ledger
        .node_events()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.node.0)
        .filter(|id| seen.insert(id.clone()))
        .collect();
    (report, ids)
}

/// The same scenario and seed give the same decision log and the same node ids; another seed
/// mints other ids. (Node ids were random `Uuid::new_v4`s before the engine took an
/// `IdSource`, so the ids' equality failed.)
#[tokio::test]
async fn a_seed_replays_headrooms_decisions_and_node_ids() {
    let mut sc = scenario::load("stockout-fallback").unwrap();
    sc.duration_s = 4.0 * 60.0;
    let (a, a_ids) = run_with_ids(&sc, sc.seed).await;
    let (b, b_ids) = run_with_ids(&sc, sc.seed).await;
    assert!(
        a_ids.len() > 8,
        "the run launched too little to tell: {a_ids:?}"
    );
    assert!(
        a_ids
            .iter()
            .all(|id| id.starts_with("n-") && id.len() == 34)
    );
    assert_eq!(a_ids, b_ids);
    let (a, b) = (&a.policies[0], &b.policies[0]);
    assert!(!a.decisions.is_empty());
    assert_eq!(a.decisions, b.decisions);
    assert_eq!(
        serde_json::to_string(a).unwrap(),
        serde_json::to_string(b).unwrap()
    );

    let (_, c_ids) = run_with_ids(&sc, sc.seed + 1).await;
    let a_ids: BTreeSet<_> = a_ids.into_iter().collect();
    assert!(c_ids.iter().all(|id| !a_ids.contains(id)), "{c_ids:?}");
}

/// The built-in scenarios whose golden decisions this test checks: those whose Headroom run
/// (with the hindsight planner and the bound every run computes) is short in a debug build.
/// Measured (each run timed once) on a shared two-core machine under a
/// load of about 6: seed-000-backlog 1.2 s, flash-burst 4.7 s, smaller-model-handover 4.7 s.
/// Every built-in scenario has its golden file; `scripts/test` checks them all with
/// `headroom simulate --suite --golden crates/headroom-sim/golden --check`.
const GOLDEN: &[&str] = &["seed-000-backlog", "flash-burst", "smaller-model-handover"];

fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(golden::decisions_file(name))
}

/// Every scenario in [`GOLDEN`] decides as its golden file says (the files `headroom simulate
/// --suite --golden` writes); `HEADROOM_BLESS=1` rewrites these three. Each runs with its own
/// seed, Headroom alone: its decisions do not depend on which other policies run beside it.
#[tokio::test]
async fn golden_decisions_of_the_built_in_scenarios() {
    let bless = std::env::var("HEADROOM_BLESS").is_ok_and(|v| v == "1");
    let mut differ = Vec::new();
    for name in GOLDEN {
        let sc = scenario::load(name).unwrap();
        let report = headroom_sim::run(&sc, None, &[Policy::Headroom], None)
            .await
            .unwrap();
        let got = golden::decisions(name, &report).unwrap();
        let path = golden_path(name);
        if bless {
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some(difference) = golden::first_difference(&want, &got) {
            differ.push(format!("{}: {difference}", path.display()));
        }
    }
    assert!(
        differ.is_empty(),
        "decisions differ from the golden files; review the change, then rewrite them with \
         `scripts/scoreboard` and diff them in git:\n{}",
        differ.join("\n")
    );
    // Every built-in scenario has its golden file, and nothing else is kept beside them.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
    let mut kept: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(kept.remove(golden::SCOREBOARD), "{kept:?}");
    let built_in: BTreeSet<String> = scenario::BUILT_IN
        .iter()
        .map(|(n, _)| golden::decisions_file(n))
        .collect();
    assert_eq!(kept, built_in);
}
