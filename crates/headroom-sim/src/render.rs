//! Output: the comparison table, the time series as CSV and the SVG plot.

use std::fmt::Write;

use crate::run::{Report, Sample};

fn refusals_cell(map: &std::collections::BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "-".to_string();
    }
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// ", beaten by P, Q" when policies served as well as the hindsight planner for less.
fn beaten(by: &[String]) -> String {
    if by.is_empty() {
        String::new()
    } else {
        format!(", beaten by {}", by.join(", "))
    }
}

const SUITE_HEADER: [&str; 10] = [
    "scenario",
    "policy",
    "slo",
    "slo_top_tier",
    "slo_by_tier",
    "cost_usd",
    "vs_bound",
    "vs_hindsight",
    "idle_gpu_h",
    "shed",
];

/// The scoreboard's cells, the header first: one row per scenario and policy.
fn suite_rows(reports: &[Report]) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = vec![SUITE_HEADER.iter().map(|h| h.to_string()).collect()];
    for r in reports {
        for p in &r.policies {
            let top = p.top_tier_slo();
            let by_tier = p
                .tiers
                .iter()
                .map(|t| format!("{}={:.4}", t.tier, t.slo_attainment))
                .collect::<Vec<_>>()
                .join(",");
            rows.push(vec![
                r.scenario.clone(),
                p.policy.clone(),
                format!("{:.4}", p.slo_attainment),
                format!("{top:.4}"),
                by_tier,
                format!("{:.2}", p.cost_usd),
                format!("{:.2}", p.cost_vs_bound),
                format!("{:.2}", p.cost_vs_hindsight),
                format!("{:.2}", p.idle_gpu_hours),
                p.shed.to_string(),
            ]);
        }
    }
    rows
}

/// The scoreboard as the README's Markdown table (`--suite --format markdown`): the same
/// cells but the per-tier breakdown, so the README is written by the command, not by hand.
pub fn suite_markdown(reports: &[Report]) -> String {
    let mut out = String::from(
        "| scenario | policy | SLO | top tier | cost, $ | vs bound | vs hindsight | idle GPU-h | shed |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in suite_rows(reports).iter().skip(1) {
        let cells: Vec<&str> = row
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 4)
            .map(|(_, c)| c.as_str())
            .collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out
}

/// The scoreboard: one row per scenario and policy — SLO attainment (and the highest tier's),
/// cost, cost against the certified lower bound and against the hindsight planner, idle
/// GPU-hours, shed — then the simulator's speed.
pub fn suite_table(reports: &[Report]) -> String {
    let mut out = String::new();
    let rows = suite_rows(reports);
    let widths: Vec<usize> = (0..SUITE_HEADER.len())
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i < 2 || i == 4 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    let requests: u64 = reports.iter().map(Report::simulated_requests).sum();
    let wall: f64 = reports.iter().map(|r| r.wall_time_s).sum();
    let _ = writeln!(
        out,
        "simulated {requests} requests in {wall:.2} s of wall time ({:.0} requests/s over the suite; slowest scenario {})",
        requests as f64 / wall.max(1e-3),
        reports
            .iter()
            .min_by(|a, b| a
                .simulated_requests_per_s
                .total_cmp(&b.simulated_requests_per_s))
            .map_or(String::new(), |r| format!(
                "{} at {:.0} requests/s",
                r.scenario, r.simulated_requests_per_s
            ))
    );
    out
}

/// The scoreboard as JSON: every scenario's report, and the suite's speed.
pub fn suite_json(reports: &[Report]) -> String {
    let requests: u64 = reports.iter().map(Report::simulated_requests).sum();
    let wall: f64 = reports.iter().map(|r| r.wall_time_s).sum();
    serde_json::to_string_pretty(&serde_json::json!({
        "scenarios": reports,
        "simulated_requests": requests,
        "wall_time_s": wall,
        "simulated_requests_per_s": (requests as f64 / wall.max(1e-3)).round(),
    }))
    .unwrap_or_default()
}

/// One column per policy, one row per measure.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scenario {} (seed {}): lower bound ${:.2} for every request within its objective; hindsight planner ${:.2}{}",
        report.scenario,
        report.seed,
        report.bound.cost_usd,
        report.hindsight.cost_usd,
        beaten(&report.hindsight.beaten_by)
    );
    let tier_rows: Vec<String> = report
        .policies
        .first()
        .map(|p| {
            p.tiers
                .iter()
                .map(|t| format!("  slo_attainment[{}]", t.tier))
                .collect()
        })
        .unwrap_or_default();
    // With several pools, each one's share: what it served (for other pools too), cost, peak.
    let pool_rows: Vec<String> = report
        .policies
        .first()
        .filter(|p| p.pools.len() > 1)
        .map(|p| {
            p.pools
                .iter()
                .flat_map(|pool| {
                    ["served", "taken_over", "cost_usd", "peak_ready_replicas"]
                        .map(|m| format!("  {}.{m}", pool.pool))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut rows: Vec<(&str, Vec<String>)> = vec![("policy", Vec::new())];
    let mut names = vec!["requests_total", "requests_within_slo", "slo_attainment"];
    names.extend(tier_rows.iter().map(String::as_str));
    names.extend([
        "queue_delay_minutes",
        "shed",
        "gpu_hours",
        "idle_gpu_hours",
        "cost_usd",
        "bound_usd",
        "cost_vs_bound",
        "cost_vs_hindsight",
        "refusals",
        "fallbacks",
        "scale_direction_changes",
        "peak_queue_depth",
        "peak_ready_replicas",
    ]);
    names.extend(pool_rows.iter().map(String::as_str));
    for n in names {
        rows.push((n, Vec::new()));
    }
    for p in &report.policies {
        let mut cells = vec![
            p.policy.clone(),
            p.requests_total.to_string(),
            p.requests_within_slo.to_string(),
            format!("{:.4}", p.slo_attainment),
        ];
        cells.extend(p.tiers.iter().map(|t| format!("{:.4}", t.slo_attainment)));
        cells.extend([
            format!("{:.1}", p.queue_delay_minutes),
            p.shed.to_string(),
            format!("{:.2}", p.gpu_hours),
            format!("{:.2}", p.idle_gpu_hours),
            format!("{:.2}", p.cost_usd),
            format!("{:.2}", p.bound_usd),
            format!("{:.2}", p.cost_vs_bound),
            format!("{:.2}", p.cost_vs_hindsight),
            refusals_cell(&p.refusals),
            refusals_cell(&p.fallbacks),
            p.scale_direction_changes.to_string(),
            p.peak_queue_depth.to_string(),
            p.peak_ready_replicas.to_string(),
        ]);
        if !pool_rows.is_empty() {
            for pool in &p.pools {
                cells.extend([
                    pool.served.to_string(),
                    pool.taken_over.to_string(),
                    format!("{:.2}", pool.cost_usd),
                    pool.peak_ready_replicas.to_string(),
                ]);
            }
        }
        for (row, cell) in rows.iter_mut().zip(cells) {
            row.1.push(cell);
        }
    }
    let first = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..report.policies.len())
        .map(|i| rows.iter().map(|r| r.1[i].len()).max().unwrap_or(0).max(8))
        .collect();
    for (name, cells) in &rows {
        let _ = write!(out, "{name:<first$}");
        for (c, w) in cells.iter().zip(&widths) {
            let _ = write!(out, "  {c:>w$}");
        }
        out.push('\n');
    }
    out
}

/// `policy,t_s,queue_depth,desired,ready,starting,cost_usd`, one row per policy and tick.
pub fn timeseries_csv(report: &Report) -> String {
    let mut out = String::from("policy,t_s,queue_depth,desired,ready,starting,cost_usd\n");
    for (policy, samples) in &report.series {
        for s in samples {
            let _ = writeln!(
                out,
                "{policy},{},{},{},{},{},{:.6}",
                s.t_s, s.queue_depth, s.desired, s.ready, s.starting, s.cost_usd
            );
        }
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

const PANEL_W: f64 = 300.0;
const PANEL_H: f64 = 110.0;
const LEFT: f64 = 120.0;
const TOP: f64 = 56.0;
const GAP_X: f64 = 40.0;
const GAP_Y: f64 = 34.0;

fn polyline(points: &[(f64, f64)], x0: f64, y0: f64, sx: f64, sy: f64, style: &str) -> String {
    let mut d = String::new();
    // Keep the file small on long runs: at most ~600 points per line, keeping every change.
    let every = (points.len() / 600).max(1);
    for (i, (x, y)) in points.iter().enumerate() {
        if i % every == 0 || i + 1 == points.len() {
            let _ = write!(d, "{:.1},{:.1} ", x0 + x * sx, y0 + PANEL_H - y * sy);
        }
    }
    format!(
        r#"<polyline fill="none" {style} points="{}"/>"#,
        d.trim_end()
    )
}

/// Per policy (a row), three panels sharing their scale down the column: queue depth, desired
/// and ready replicas, cumulative cost.
pub fn svg(report: &Report) -> String {
    let series = &report.series;
    let t_max = series
        .iter()
        .flat_map(|(_, s)| s.last().map(|x| x.t_s))
        .fold(1.0_f64, f64::max);
    let max_of = |f: &dyn Fn(&Sample) -> f64| {
        series
            .iter()
            .flat_map(|(_, s)| s.iter().map(f))
            .fold(1.0_f64, f64::max)
    };
    let q_max = max_of(&|s| s.queue_depth as f64);
    let r_max = max_of(&|s| s.desired.max(s.ready) as f64);
    let c_max = max_of(&|s| s.cost_usd);
    let width = LEFT + 3.0 * PANEL_W + 2.0 * GAP_X + 20.0;
    let height = TOP + series.len() as f64 * (PANEL_H + GAP_Y) + 20.0;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" font-family="system-ui, sans-serif" font-size="11" role="img" aria-label="Simulation of {name}">"#,
        name = esc(&report.scenario)
    );
    let _ = write!(
        svg,
        r##"<rect width="100%" height="100%" fill="#fff"/><text x="{LEFT}" y="20" font-size="14" font-weight="600">{} — seed {}, {:.0} min</text>"##,
        esc(&report.scenario),
        report.seed,
        t_max / 60.0
    );
    let titles = [
        format!("queue depth (max {q_max:.0})"),
        format!("replicas: desired (dashed), ready (max {r_max:.0})"),
        format!("cumulative cost, $ (max {c_max:.0})"),
    ];
    for (col, title) in titles.iter().enumerate() {
        let x = LEFT + col as f64 * (PANEL_W + GAP_X);
        let _ = write!(
            svg,
            r#"<text x="{x}" y="42" font-weight="600">{}</text>"#,
            esc(title)
        );
    }
    let sx = PANEL_W / t_max;
    for (row, (policy, samples)) in series.iter().enumerate() {
        let y0 = TOP + row as f64 * (PANEL_H + GAP_Y);
        let _ = write!(
            svg,
            r#"<text x="8" y="{:.1}" font-weight="600">{}</text>"#,
            y0 + PANEL_H / 2.0,
            esc(policy)
        );
        for col in 0..3 {
            let x0 = LEFT + col as f64 * (PANEL_W + GAP_X);
            let _ = write!(
                svg,
                r##"<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="#f7f7f7" stroke="#ccc"/><text x="{x0}" y="{:.1}" fill="#666" font-size="9">0</text><text x="{:.1}" y="{:.1}" fill="#666" font-size="9" text-anchor="end">{:.0} min</text>"##,
                y0 + PANEL_H + 11.0,
                x0 + PANEL_W,
                y0 + PANEL_H + 11.0,
                t_max / 60.0
            );
        }
        let pts = |f: &dyn Fn(&Sample) -> f64| -> Vec<(f64, f64)> {
            samples.iter().map(|s| (s.t_s, f(s))).collect()
        };
        let x1 = LEFT + PANEL_W + GAP_X;
        let x2 = LEFT + 2.0 * (PANEL_W + GAP_X);
        svg.push_str(&polyline(
            &pts(&|s| s.queue_depth as f64),
            LEFT,
            y0,
            sx,
            PANEL_H / q_max,
            r##"stroke="#c0392b" stroke-width="1.5""##,
        ));
        svg.push_str(&polyline(
            &pts(&|s| s.desired as f64),
            x1,
            y0,
            sx,
            PANEL_H / r_max,
            r##"stroke="#7f8c8d" stroke-width="1.5" stroke-dasharray="4 3""##,
        ));
        svg.push_str(&polyline(
            &pts(&|s| s.ready as f64),
            x1,
            y0,
            sx,
            PANEL_H / r_max,
            r##"stroke="#2471a3" stroke-width="1.8""##,
        ));
        svg.push_str(&polyline(
            &pts(&|s| s.cost_usd),
            x2,
            y0,
            sx,
            PANEL_H / c_max,
            r##"stroke="#1e8449" stroke-width="1.8""##,
        ));
        if let Some(p) = report.policies.iter().find(|p| &p.policy == policy) {
            let _ = write!(
                svg,
                r##"<text x="{:.1}" y="{:.1}" fill="#333" font-size="10">SLO {:.1} % · peak queue {} · ready ≤ {} · ${:.0}</text>"##,
                LEFT,
                y0 + PANEL_H + 24.0,
                p.slo_attainment * 100.0,
                p.peak_queue_depth,
                p.peak_ready_replicas,
                p.cost_usd
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// `--reserve`: per policy, what the reservation changed — cost (its idle hours included),
/// SLO attainment and refusals — between the run without it and the run with it.
pub fn reservation_comparison(without: &Report, with: &Report) -> String {
    let mut out = String::from(
        "\nWhat the reservation changed (cost with it includes its idle node-hours):\npolicy            cost without   cost with  of which idle  SLO without  SLO with  refusals without  refusals with\n",
    );
    for (a, b) in without.policies.iter().zip(&with.policies) {
        let refused = |p: &crate::run::PolicyReport| p.refusals.values().sum::<u64>();
        let _ = writeln!(
            out,
            "{:<16}  {:>12.2}  {:>10.2}  {:>13.2}  {:>11.4}  {:>8.4}  {:>16}  {:>13}",
            a.policy,
            a.cost_usd,
            b.cost_usd,
            b.reservation_idle_usd,
            a.slo_attainment,
            b.slo_attainment,
            refused(a),
            refused(b)
        );
    }
    out
}
