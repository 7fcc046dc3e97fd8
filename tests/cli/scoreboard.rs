//! The README's scoreboard is generated, not pasted: it is the golden `scoreboard.md` that
//! `headroom simulate --suite --golden` writes (spliced by `scripts/scoreboard`), and
//! `scripts/test` checks the golden files against a run of the suite.

use super::simulate_refuses;

const BEGIN: &str = "<!-- scoreboard: begin";
const END: &str = "<!-- scoreboard: end -->";

/// The README's text between its scoreboard markers (the marker lines excluded).
fn readme_scoreboard(readme: &str) -> &str {
    let begin = readme
        .find(BEGIN)
        .expect("the README has a scoreboard begin marker");
    let body = begin + readme[begin..].find('\n').unwrap() + 1;
    let end = readme
        .find(END)
        .expect("the README has a scoreboard end marker");
    assert!(end > body, "the end marker comes after the begin marker");
    &readme[body..end]
}

#[test]
fn the_readme_scoreboard_is_the_golden_one_with_every_built_in_scenario() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let golden =
        std::fs::read_to_string(format!("{root}/crates/headroom-sim/golden/scoreboard.md"))
            .unwrap();
    assert_eq!(
        readme_scoreboard(&readme),
        golden,
        "the README's scoreboard is not the golden file: run scripts/scoreboard"
    );
    // One row per built-in scenario and policy, in the suite's order.
    let rows: Vec<(&str, &str)> = golden
        .lines()
        .skip(2)
        .map(|line| {
            let mut cells = line.trim_matches('|').split('|').map(str::trim);
            (cells.next().unwrap(), cells.next().unwrap())
        })
        .collect();
    let mut want = Vec::new();
    for name in headroom_sim::scenario::built_in_names() {
        for policy in headroom_sim::Policy::ALL {
            want.push((name, policy.as_str()));
        }
    }
    assert_eq!(rows, want);
}

#[test]
fn golden_flags_that_would_change_the_suite_are_one_line_and_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    simulate_refuses(
        &["--suite", "--golden", dir, "--policy", "headroom"],
        "--policy",
    );
    simulate_refuses(&["--suite", "--golden", dir, "--seed", "4"], "--seed");
    simulate_refuses(
        &["--suite", "--golden", dir, "--format", "markdown"],
        "--format",
    );
}
