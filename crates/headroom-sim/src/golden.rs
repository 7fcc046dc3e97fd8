//! Golden files: the built-in suite as readable text a reviewer diffs. One file per scenario
//! with Headroom's decisions, and `scoreboard.md`, the README's table. `headroom simulate
//! --suite --golden DIR` writes them (and `--check` compares instead); the README's table is
//! spliced from `scoreboard.md` by `scripts/scoreboard`, never pasted by hand.

use std::fmt::Write as _;

use serde_json::Value;

use crate::run::Report;

/// The scoreboard's file name in a golden directory.
pub const SCOREBOARD: &str = "scoreboard.md";

/// The file of `scenario`'s decisions in a golden directory.
pub fn decisions_file(scenario: &str) -> String {
    format!("{scenario}.txt")
}

/// A JSON value as one short token: strings bare, `null` as `-`, the rest as JSON.
fn token(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Headroom's run of `scenario` as a reviewer reads it: the scenario and seed, Headroom's
/// figures, then one line a decision (seconds into the run, pool, rule, desired replicas and
/// what the rules asked before limits, scaling hold, limit, activations folded in, the
/// reason). `None` when the report has no Headroom run.
pub fn decisions(scenario: &str, report: &Report) -> Option<String> {
    let p = report.policies.iter().find(|p| p.policy == "headroom")?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {scenario}, seed {}: Headroom's decisions (headroom simulate --suite --golden DIR; scripts/scoreboard rewrites)",
        report.seed
    );
    let _ = writeln!(
        out,
        "# requests {} within objective {} ({:.4}), shed {}, cost ${:.2}, gpu-hours {:.3}, peak ready {}, direction changes {}",
        p.requests_total,
        p.requests_within_slo,
        p.slo_attainment,
        p.shed,
        p.cost_usd,
        p.gpu_hours,
        p.peak_ready_replicas,
        p.scale_direction_changes
    );
    let _ = writeln!(
        out,
        "# refusals {:?}, fallbacks {:?}",
        p.refusals, p.fallbacks
    );
    let _ = writeln!(
        out,
        "#      t_s pool rule desired(unclamped) hold limited xrepeated | reason"
    );
    for d in &p.decisions {
        let t_s = d.get("t_s").and_then(Value::as_f64).unwrap_or(f64::NAN);
        let _ = writeln!(
            out,
            "{t_s:>10.1} {} {} {}({}) {} {} x{} | {}",
            token(d.get("pool")),
            token(d.get("rule")),
            token(d.get("target")),
            token(d.get("unclamped")),
            token(d.get("hold")),
            token(d.get("limited")),
            token(d.get("repeated")),
            token(d.get("reason")),
        );
    }
    Some(out)
}

/// The first line where `want` and `got` differ, both shown; `None` when they are equal.
pub fn first_difference(want: &str, got: &str) -> Option<String> {
    if want == got {
        return None;
    }
    let (mut w, mut g) = (want.lines(), got.lines());
    for n in 1.. {
        match (w.next(), g.next()) {
            (None, None) => break,
            (a, b) if a == b => continue,
            (a, b) => {
                return Some(format!(
                    "line {n}:\n  golden: {}\n  now:    {}",
                    a.unwrap_or("(end)"),
                    b.unwrap_or("(end)")
                ));
            }
        }
    }
    Some("no line differs (line endings?)".into())
}

#[cfg(test)]
mod tests {
    use super::first_difference;

    #[test]
    fn the_first_difference_names_its_line_and_both_sides() {
        assert_eq!(first_difference("a\nb\n", "a\nb\n"), None);
        let d = first_difference("a\nb\nc\n", "a\nx\nc\n").unwrap();
        assert!(d.starts_with("line 2:"), "{d}");
        assert!(d.contains("golden: b") && d.contains("now:    x"), "{d}");
        let shorter = first_difference("a\nb\n", "a\n").unwrap();
        assert!(shorter.contains("now:    (end)"), "{shorter}");
    }
}
