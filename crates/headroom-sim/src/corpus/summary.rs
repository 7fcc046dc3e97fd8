//! The corpus scoreboard: per policy, its win rate against every other policy, its SLO against
//! the best baseline, its cost against the certified bound and the hindsight planner and its scale reversals per hour, each as a
//! distribution over the corpus; and where Headroom loses to a baseline, grouped by the family's
//! traits. A budget is a hard limit, not a cost to trade: where a scenario sets one, a policy
//! that spends past it neither beats one that keeps it nor counts as the best baseline.
//! Pure: it reads reports and writes numbers.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::run::{PolicyReport, Report};

/// Two SLO attainments within this (0.1 percentage point) are the same SLO.
pub const SLO_TOLERANCE: f64 = 0.001;
/// A cost is lower only when it is lower by more than this share (1 %).
pub const COST_TOLERANCE: f64 = 0.01;
/// The baselines users run today: what "the best baseline" is chosen among.
pub const BASELINES: [&str; 5] = [
    "hpa-utilization",
    "hpa-queue",
    "keda-karpenter",
    "predictive",
    "static",
];

/// One corpus member's run.
#[derive(Debug, Clone)]
pub struct Scored {
    pub traits: Vec<&'static str>,
    pub duration_s: f64,
    /// The account's budget ceiling for a period the run fits in, when the scenario sets one:
    /// a policy that spends more in the run spent past it.
    pub budget_usd: Option<f64>,
    pub report: Report,
}

impl Scored {
    fn outcome(&self, p: &PolicyReport) -> Outcome {
        Outcome {
            slo: p.slo_attainment,
            cost_usd: p.cost_usd,
            over_budget: self.over_budget(p),
        }
    }

    fn over_budget(&self, p: &PolicyReport) -> bool {
        self.budget_usd
            .is_some_and(|ceiling| p.cost_usd > ceiling + BUDGET_TOLERANCE_USD)
    }
}

/// Spend within half a cent of a ceiling keeps it: ceilings are given to the cent, spend to the
/// micro-dollar.
pub const BUDGET_TOLERANCE_USD: f64 = 0.005;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quantiles {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicySummary {
    pub policy: String,
    /// Against each other policy: the share of scenarios this one beats it in ([`beats`]).
    pub win_rate: BTreeMap<String, f64>,
    /// This policy's SLO attainment minus the best other baseline's, per scenario.
    pub slo_vs_best_baseline: Option<Quantiles>,
    /// Cost over the certified lower bound's, per scenario (where the bound is above zero).
    pub cost_vs_bound: Option<Quantiles>,
    /// Cost over the hindsight planner's, per scenario (where the planner paid something).
    pub cost_vs_hindsight: Option<Quantiles>,
    /// Scale-up ↔ scale-down reversals of the desired replicas per simulated hour.
    pub direction_changes_per_hour: Option<Quantiles>,
    /// Runs in which this policy spent past the scenario's budget ceiling.
    pub over_budget_runs: u32,
    /// The top tier at [`TOP_TIER_SLO`] or better wherever the hindsight planner reaches it.
    pub top_tier: TopTier,
}

/// The top tier's SLO attainment the policy issue asks for wherever the hindsight planner
/// reaches it.
pub const TOP_TIER_SLO: f64 = 0.99;

/// Of the scenarios where the hindsight planner serves the top tier at [`TOP_TIER_SLO`] or
/// better, those where a policy does too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TopTier {
    pub scenarios: u32,
    pub met: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyRow {
    pub policy: String,
    pub slo_attainment: f64,
    pub cost_usd: f64,
    pub cost_vs_bound: f64,
    pub cost_vs_hindsight: f64,
    pub direction_changes_per_hour: f64,
    /// Spent past the scenario's budget ceiling.
    pub over_budget: bool,
    /// The highest priority tier's SLO attainment.
    pub slo_top_tier: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioRow {
    pub scenario: String,
    pub traits: Vec<&'static str>,
    pub duration_s: f64,
    pub budget_usd: Option<f64>,
    pub policies: Vec<PolicyRow>,
}

/// A scenario where a baseline beats Headroom.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Loss {
    pub scenario: String,
    pub baseline: String,
    /// Headroom's SLO attainment minus the baseline's.
    pub slo_difference: f64,
    /// Headroom's cost over the baseline's.
    pub cost_ratio: f64,
    pub traits: Vec<&'static str>,
}

/// How often Headroom loses to some baseline in the scenarios with one trait.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraitLosses {
    #[serde(rename = "trait")]
    pub name: &'static str,
    pub scenarios: u32,
    pub lost: u32,
    pub loss_rate: f64,
    /// The median over these scenarios of Headroom's SLO attainment minus the best baseline's.
    pub headroom_slo_vs_best_baseline_p50: Option<f64>,
    /// The median over these scenarios of Headroom's cost over the hindsight planner's.
    pub headroom_cost_vs_hindsight_p50: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CorpusReport {
    pub seed: u64,
    pub scenarios: u32,
    pub slo_tolerance: f64,
    pub cost_tolerance: f64,
    pub policies: Vec<PolicySummary>,
    pub headroom_losses: Vec<Loss>,
    pub losses_by_trait: Vec<TraitLosses>,
    pub scenario_rows: Vec<ScenarioRow>,
    pub wall_time_s: f64,
}

/// A policy's cost over the hindsight planner's.
fn cost_ratio(p: &PolicyReport) -> f64 {
    p.cost_vs_hindsight
}

/// What a win is judged on: a policy's SLO attainment and cost in one scenario, and whether it
/// kept the scenario's budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub slo: f64,
    pub cost_usd: f64,
    pub over_budget: bool,
}

/// Whether `a` beats `b`: keeping a budget `b` broke; or, both keeping it or both breaking it,
/// a strictly better SLO (by more than [`SLO_TOLERANCE`]), or the same or better SLO (within it)
/// at a lower cost (by more than [`COST_TOLERANCE`]). At most one of two policies beats the
/// other; neither does on a tie.
pub fn beats(a: Outcome, b: Outcome) -> bool {
    if a.over_budget != b.over_budget {
        return b.over_budget;
    }
    a.slo > b.slo + SLO_TOLERANCE
        || (a.slo >= b.slo - SLO_TOLERANCE && a.cost_usd < b.cost_usd * (1.0 - COST_TOLERANCE))
}

/// The `q`-quantile by linear interpolation between the closest ranks; `None` when empty.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let pos = q.clamp(0.0, 1.0) * last as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64))
}

fn quantiles(mut xs: Vec<f64>) -> Option<Quantiles> {
    xs.retain(|x| x.is_finite());
    xs.sort_by(f64::total_cmp);
    let r = |q| quantile(&xs, q).map(round4);
    Some(Quantiles {
        p10: r(0.1)?,
        p50: r(0.5)?,
        p90: r(0.9)?,
    })
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

fn find<'a>(r: &'a Report, policy: &str) -> Option<&'a PolicyReport> {
    r.policies.iter().find(|p| p.policy == policy)
}

/// The best baseline other than `me` in a run among those that kept its budget: the highest SLO
/// attainment, the cheaper on a tie.
fn best_baseline<'a>(s: &'a Scored, me: &str) -> Option<&'a PolicyReport> {
    s.report
        .policies
        .iter()
        .filter(|p| p.policy != me && BASELINES.contains(&p.policy.as_str()))
        .filter(|p| !s.over_budget(p))
        .max_by(|a, b| {
            a.slo_attainment
                .total_cmp(&b.slo_attainment)
                .then(b.cost_usd.total_cmp(&a.cost_usd))
        })
}

fn per_hour(p: &PolicyReport, duration_s: f64) -> f64 {
    f64::from(p.scale_direction_changes) * 3600.0 / duration_s.max(1.0)
}

/// Where the hindsight planner serves the top tier at [`TOP_TIER_SLO`], whether `me` does.
fn top_tier(runs: &[Scored], me: &str) -> TopTier {
    let reached = |s: &&Scored| {
        find(&s.report, crate::Policy::Oracle.as_str())
            .is_some_and(|o| o.top_tier_slo() >= TOP_TIER_SLO)
    };
    let scenarios = runs.iter().filter(reached);
    TopTier {
        scenarios: scenarios.clone().count() as u32,
        met: scenarios
            .filter(|s| find(&s.report, me).is_some_and(|p| p.top_tier_slo() >= TOP_TIER_SLO))
            .count() as u32,
    }
}

/// The scoreboard of a corpus's runs.
pub fn summarize(seed: u64, runs: &[Scored], wall_time_s: f64) -> CorpusReport {
    let names: Vec<String> = runs
        .first()
        .map(|s| s.report.policies.iter().map(|p| p.policy.clone()).collect())
        .unwrap_or_default();
    let policies = names
        .iter()
        .map(|me| PolicySummary {
            policy: me.clone(),
            win_rate: names
                .iter()
                .filter(|other| *other != me)
                .map(|other| {
                    let wins = runs
                        .iter()
                        .filter(|s| {
                            matches!((find(&s.report, me), find(&s.report, other)),
                                (Some(a), Some(b)) if beats(s.outcome(a), s.outcome(b)))
                        })
                        .count();
                    (
                        other.clone(),
                        round4(wins as f64 / runs.len().max(1) as f64),
                    )
                })
                .collect(),
            slo_vs_best_baseline: quantiles(
                runs.iter()
                    .filter_map(|s| {
                        let p = find(&s.report, me)?;
                        Some(p.slo_attainment - best_baseline(s, me)?.slo_attainment)
                    })
                    .collect(),
            ),
            cost_vs_bound: quantiles(
                runs.iter()
                    .filter_map(|s| find(&s.report, me).map(|p| p.cost_vs_bound))
                    .filter(|x| *x > 0.0)
                    .collect(),
            ),
            cost_vs_hindsight: quantiles(
                runs.iter()
                    .filter_map(|s| find(&s.report, me).map(cost_ratio))
                    .filter(|x| *x > 0.0)
                    .collect(),
            ),
            direction_changes_per_hour: quantiles(
                runs.iter()
                    .filter_map(|s| find(&s.report, me).map(|p| per_hour(p, s.duration_s)))
                    .collect(),
            ),
            over_budget_runs: runs
                .iter()
                .filter(|s| find(&s.report, me).is_some_and(|p| s.over_budget(p)))
                .count() as u32,
            top_tier: top_tier(runs, me),
        })
        .collect();
    let headroom_losses = losses(runs);
    CorpusReport {
        seed,
        scenarios: runs.len() as u32,
        slo_tolerance: SLO_TOLERANCE,
        cost_tolerance: COST_TOLERANCE,
        policies,
        losses_by_trait: by_trait(runs, &headroom_losses),
        headroom_losses,
        scenario_rows: runs.iter().map(row).collect(),
        wall_time_s,
    }
}

/// Every (scenario, baseline) where the baseline beats Headroom.
fn losses(runs: &[Scored]) -> Vec<Loss> {
    let mut out = Vec::new();
    for s in runs {
        let Some(h) = find(&s.report, "headroom") else {
            continue;
        };
        for b in BASELINES.iter().filter_map(|b| find(&s.report, b)) {
            if beats(s.outcome(b), s.outcome(h)) {
                out.push(Loss {
                    scenario: s.report.scenario.clone(),
                    baseline: b.policy.clone(),
                    slo_difference: round4(h.slo_attainment - b.slo_attainment),
                    cost_ratio: if b.cost_usd > 0.0 {
                        round4(h.cost_usd / b.cost_usd)
                    } else {
                        0.0
                    },
                    traits: s.traits.clone(),
                });
            }
        }
    }
    out
}

/// Per trait: the scenarios with it and those of them Headroom loses to some baseline in,
/// most losing first.
fn by_trait(runs: &[Scored], losses: &[Loss]) -> Vec<TraitLosses> {
    #[derive(Default)]
    struct Tally {
        scenarios: u32,
        lost: u32,
        slo: Vec<f64>,
        cost: Vec<f64>,
    }
    let mut tallies: BTreeMap<&'static str, Tally> = BTreeMap::new();
    for s in runs {
        let lost = losses.iter().any(|l| l.scenario == s.report.scenario);
        let h = find(&s.report, "headroom");
        let slo =
            h.and_then(|h| Some(h.slo_attainment - best_baseline(s, "headroom")?.slo_attainment));
        let cost = h.map(cost_ratio).filter(|x| *x > 0.0);
        for t in &s.traits {
            let c = tallies.entry(t).or_default();
            c.scenarios += 1;
            c.lost += u32::from(lost);
            c.slo.extend(slo);
            c.cost.extend(cost);
        }
    }
    let median = |xs: Vec<f64>| quantiles(xs).map(|q| q.p50);
    let mut out: Vec<TraitLosses> = tallies
        .into_iter()
        .map(|(name, c)| TraitLosses {
            name,
            scenarios: c.scenarios,
            lost: c.lost,
            loss_rate: round4(f64::from(c.lost) / f64::from(c.scenarios.max(1))),
            headroom_slo_vs_best_baseline_p50: median(c.slo),
            headroom_cost_vs_hindsight_p50: median(c.cost),
        })
        .collect();
    out.sort_by(|a, b| {
        b.loss_rate
            .total_cmp(&a.loss_rate)
            .then(b.lost.cmp(&a.lost))
    });
    out
}

fn row(s: &Scored) -> ScenarioRow {
    ScenarioRow {
        scenario: s.report.scenario.clone(),
        traits: s.traits.clone(),
        duration_s: s.duration_s,
        budget_usd: s.budget_usd,
        policies: s
            .report
            .policies
            .iter()
            .map(|p| PolicyRow {
                policy: p.policy.clone(),
                slo_attainment: p.slo_attainment,
                cost_usd: p.cost_usd,
                cost_vs_bound: p.cost_vs_bound,
                cost_vs_hindsight: cost_ratio(p),
                direction_changes_per_hour: round4(per_hour(p, s.duration_s)),
                over_budget: s.over_budget(p),
                slo_top_tier: p.top_tier_slo(),
            })
            .collect(),
    }
}

fn q_cells(q: Option<Quantiles>, digits: usize) -> [String; 3] {
    match q {
        Some(q) => [q.p10, q.p50, q.p90].map(|x| format!("{x:.digits$}")),
        None => ["-".to_string(), "-".to_string(), "-".to_string()],
    }
}

/// Right-aligned columns, the first (and with `last_left`, the last) left-aligned.
fn columns(rows: &[Vec<String>], last_left: bool) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i == 0 || (last_left && i + 1 == n) {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

/// The scoreboard as text: the policies' distributions, then Headroom's losses and by trait.
pub fn table(r: &CorpusReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "corpus of {} scenarios (seed {}); a win is a better SLO by > {:.1} pt, or the same SLO (± {:.1} pt) at > {:.0} % lower cost; spending past a scenario's budget loses to keeping it",
        r.scenarios,
        r.seed,
        r.slo_tolerance * 100.0,
        r.slo_tolerance * 100.0,
        r.cost_tolerance * 100.0
    );
    let names: Vec<&str> = r.policies.iter().map(|p| p.policy.as_str()).collect();
    let mut header: Vec<String> = vec!["policy".into()];
    header.extend(names.iter().map(|n| format!("beats {n}")));
    let mut rows = vec![header];
    for p in &r.policies {
        let mut cells = vec![p.policy.clone()];
        cells.extend(names.iter().map(|n| {
            p.win_rate
                .get(*n)
                .map_or("-".to_string(), |w| format!("{:.0}%", w * 100.0))
        }));
        rows.push(cells);
    }
    out.push_str("\nwin rate (row beats column, share of scenarios):\n");
    out.push_str(&columns(&rows, false));
    let mut rows = vec![
        [
            "policy",
            "slo-best_baseline p10",
            "p50",
            "p90",
            "cost/bound p10",
            "p50",
            "p90",
            "cost/hindsight p10",
            "p50",
            "p90",
            "reversals/h p10",
            "p50",
            "p90",
            "over budget",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for p in &r.policies {
        let mut cells = vec![p.policy.clone()];
        cells.extend(q_cells(p.slo_vs_best_baseline, 4));
        cells.extend(q_cells(p.cost_vs_bound, 2));
        cells.extend(q_cells(p.cost_vs_hindsight, 2));
        cells.extend(q_cells(p.direction_changes_per_hour, 1));
        cells.push(p.over_budget_runs.to_string());
        rows.push(cells);
    }
    out.push_str("\ndistributions over the corpus:\n");
    out.push_str(&columns(&rows, false));
    if let Some(first) = r.policies.first() {
        let _ = writeln!(
            out,
            "\ntop tier at {TOP_TIER_SLO} or better where the hindsight planner reaches it ({} scenarios): {}",
            first.top_tier.scenarios,
            r.policies
                .iter()
                .map(|p| format!("{} {}", p.policy, p.top_tier.met))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let lost: std::collections::BTreeSet<&str> = r
        .headroom_losses
        .iter()
        .map(|l| l.scenario.as_str())
        .collect();
    let _ = writeln!(
        out,
        "\nheadroom loses to a baseline in {} of {} scenarios:",
        lost.len(),
        r.scenarios
    );
    let mut rows = vec![
        ["scenario", "baseline", "slo_diff", "cost_ratio", "traits"]
            .map(String::from)
            .to_vec(),
    ];
    for l in &r.headroom_losses {
        rows.push(vec![
            l.scenario.clone(),
            l.baseline.clone(),
            format!("{:+.4}", l.slo_difference),
            format!("{:.2}", l.cost_ratio),
            l.traits.join(","),
        ]);
    }
    out.push_str(&columns(&rows, true));
    let mut rows = vec![
        [
            "trait",
            "scenarios",
            "lost",
            "loss_rate",
            "slo-best_baseline p50",
            "cost/hindsight p50",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let cell =
        |x: Option<f64>, digits: usize| x.map_or("-".to_string(), |x| format!("{x:.digits$}"));
    for t in &r.losses_by_trait {
        rows.push(vec![
            t.name.to_string(),
            t.scenarios.to_string(),
            t.lost.to_string(),
            format!("{:.0}%", t.loss_rate * 100.0),
            cell(t.headroom_slo_vs_best_baseline_p50, 4),
            cell(t.headroom_cost_vs_hindsight_p50, 2),
        ]);
    }
    out.push_str("\nheadroom's losses by trait:\n");
    out.push_str(&columns(&rows, false));
    let _ = writeln!(out, "\nran in {:.1} s of wall time", r.wall_time_s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(slo: f64, cost_usd: f64) -> Outcome {
        Outcome {
            slo,
            cost_usd,
            over_budget: false,
        }
    }

    #[test]
    fn a_win_is_a_better_slo_or_the_same_slo_for_less() {
        let a = policy(0.99, 10.0);
        assert!(beats(a, policy(0.95, 5.0)));
        assert!(beats(a, policy(0.9905, 12.0)));
        assert!(!beats(a, policy(0.9905, 10.05)));
        assert!(!beats(a, policy(0.995, 20.0)));
        assert!(beats(policy(0.995, 20.0), a));
    }

    #[test]
    fn spending_past_the_budget_never_wins_against_keeping_it() {
        let kept = policy(0.80, 10.0);
        let broke = Outcome {
            over_budget: true,
            ..policy(1.0, 30.0)
        };
        assert!(beats(kept, broke));
        assert!(!beats(broke, kept));
        // Between two that broke it, SLO and cost decide as ever.
        let broke_cheaper = Outcome {
            over_budget: true,
            ..policy(1.0, 20.0)
        };
        assert!(beats(broke_cheaper, broke));
    }

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let xs: Vec<f64> = (0..=10).map(f64::from).collect();
        assert_eq!(quantile(&xs, 0.1), Some(1.0));
        assert_eq!(quantile(&xs, 0.55), Some(5.5));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[3.0], 0.9), Some(3.0));
    }
}
