//! A self-contained HTML report: inline SVG charts and tables, no script, no server, no network.

use std::fmt::Write;

use headroom_core::Money;

use crate::BudgetReport;

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(crate) fn usd(m: Money) -> String {
    // Cents for reading; the exact figure stays in the title attribute.
    format!("${:.2}", m.micros() as f64 / 1_000_000.0)
}

const W: f64 = 640.0;
const H: f64 = 220.0;
const PAD: f64 = 40.0;

fn percent(ratio: f64) -> String {
    format!("{:.1} %", ratio * 100.0)
}

fn period_name(period: headroom_core::BudgetPeriod) -> &'static str {
    match period {
        headroom_core::BudgetPeriod::Hour => "hourly",
        headroom_core::BudgetPeriod::Day => "daily",
        headroom_core::BudgetPeriod::Month => "monthly",
    }
}

fn stamp(t: headroom_core::Timestamp) -> String {
    esc(&t.format("%Y-%m-%d %H:%M").to_string())
}

/// Cumulative spend against time over the report's range, every budget's ceiling as a line
/// (the scale always reaches the highest), "now" marked, both axes labelled with ticks.
fn spend_chart(report: &BudgetReport) -> String {
    let points = &report.spend_series;
    let max_spend = points
        .iter()
        .map(|p| p.cumulative_spend.as_f64_lossy())
        .fold(0.0, f64::max);
    let ceilings: Vec<(String, f64)> = report
        .budgets
        .iter()
        .map(|b| (b.account.clone(), b.ceiling.as_f64_lossy()))
        .collect();
    let top = ceilings
        .iter()
        .map(|(_, c)| *c)
        .fold(max_spend, f64::max)
        .max(1.0)
        * 1.1;
    let range_ms = (report.to - report.from).num_milliseconds().max(1) as f64;
    let (left, right, bottom, upper) = (PAD + 30.0, W - PAD, H - PAD, PAD / 2.0);
    let x = |t: headroom_core::Timestamp| {
        left + (right - left)
            * ((t - report.from).num_milliseconds() as f64 / range_ms).clamp(0.0, 1.0)
    };
    let y = |v: f64| bottom - (bottom - upper) * v / top;
    let mut svg = format!(
        r#"<svg id="spend-chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="Cumulative spend against time">"#
    );
    let _ = write!(
        svg,
        r##"<line id="x-axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/><line id="y-axis" x1="{left}" y1="{upper}" x2="{left}" y2="{bottom}" stroke="#888"/>"##
    );
    // Ticks: the range's start, middle and end; zero, half and the top of the scale.
    let mid = report.from + (report.to - report.from) / 2;
    for (t, anchor) in [(report.from, "start"), (mid, "middle"), (report.to, "end")] {
        let _ = write!(
            svg,
            r##"<text class="x-tick" x="{:.1}" y="{}" font-size="10" text-anchor="{anchor}">{}</text>"##,
            x(t),
            bottom + 13.0,
            stamp(t)
        );
    }
    for v in [0.0, top / 2.0, top] {
        let _ = write!(
            svg,
            r##"<text class="y-tick" x="{}" y="{:.1}" font-size="10" text-anchor="end">${v:.0}</text>"##,
            left - 4.0,
            y(v) + 3.0
        );
    }
    let _ = write!(
        svg,
        r##"<text id="x-label" x="{:.1}" y="{}" font-size="11" text-anchor="middle">time (UTC)</text><text id="y-label" x="12" y="{:.1}" font-size="11" text-anchor="middle" transform="rotate(-90 12 {:.1})">cumulative spend (USD)</text>"##,
        (left + right) / 2.0,
        H - 4.0,
        (upper + bottom) / 2.0,
        (upper + bottom) / 2.0
    );
    let path: Vec<String> = std::iter::once(format!("{:.1},{:.1}", x(report.from), y(0.0)))
        .chain(
            points
                .iter()
                .map(|p| format!("{:.1},{:.1}", x(p.at), y(p.cumulative_spend.as_f64_lossy()))),
        )
        .collect();
    let _ = write!(
        svg,
        r##"<polyline id="spend-line" fill="none" stroke="#2563eb" stroke-width="2" points="{}"/>"##,
        path.join(" ")
    );
    for (account, ceiling) in &ceilings {
        let _ = write!(
            svg,
            r##"<line class="ceiling" data-account="{4}" x1="{left}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#dc2626" stroke-dasharray="4 3"/><text x="{2}" y="{3:.1}" font-size="10" fill="#dc2626">{4} ceiling ${5:.0}</text>"##,
            y(*ceiling),
            right,
            left + 4.0,
            y(*ceiling) - 3.0,
            esc(account),
            ceiling
        );
    }
    let now = report.generated_at;
    if now >= report.from && now <= report.to {
        let _ = write!(
            svg,
            r##"<line id="now-marker" x1="{0:.1}" y1="{upper}" x2="{0:.1}" y2="{bottom}" stroke="#111" stroke-dasharray="2 2"/><text x="{1:.1}" y="{2}" font-size="10">now</text>"##,
            x(now),
            x(now) + 3.0,
            upper + 10.0
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Horizontal bars, one per label, for one or two series.
fn bars(id: &str, title: &str, rows: &[(String, Vec<f64>)], legend: &[&str]) -> String {
    let colours = ["#2563eb", "#16a34a"];
    let max = rows
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0, f64::max)
        .max(1e-9);
    let row_h = 14.0 * legend.len() as f64 + 8.0;
    let height = PAD + row_h * rows.len().max(1) as f64;
    let mut svg = format!(
        r#"<svg id="{id}" viewBox="0 0 {W} {height}" width="{W}" height="{height}" role="img" aria-label="{}">"#,
        esc(title)
    );
    for (k, name) in legend.iter().enumerate() {
        let _ = write!(
            svg,
            r#"<rect x="{}" y="6" width="10" height="10" fill="{}"/><text x="{}" y="15" font-size="10">{}</text>"#,
            200.0 + 120.0 * k as f64,
            colours[k % 2],
            214.0 + 120.0 * k as f64,
            esc(name)
        );
    }
    for (i, (label, values)) in rows.iter().enumerate() {
        let top = 24.0 + row_h * i as f64;
        let _ = write!(
            svg,
            r#"<text x="4" y="{:.1}" font-size="10">{}</text>"#,
            top + 11.0,
            esc(label)
        );
        for (k, v) in values.iter().enumerate() {
            let w = (W - 260.0) * v / max;
            let _ = write!(
                svg,
                r#"<rect x="180" y="{:.1}" width="{w:.1}" height="12" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="10">{v:.2}</text>"#,
                top + 14.0 * k as f64,
                colours[k % 2],
                184.0 + w,
                top + 10.0 + 14.0 * k as f64
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// The whole report as one HTML page.
pub fn to_html(report: &BudgetReport) -> String {
    to_html_with(report, None)
}

/// The page with the reservations advice as its last section.
pub fn to_html_with(
    report: &BudgetReport,
    reservations: Option<&crate::reservations::ReservationReport>,
) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Headroom budget report</title>
<style>body{{font:14px system-ui,sans-serif;margin:24px;color:#111}}table{{border-collapse:collapse;margin:8px 0 24px}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}th:first-child,td:first-child{{text-align:left}}.warn{{color:#b45309}}</style></head><body>
<h1>Headroom budget report</h1>
<p>{} to {} · grouped by {} · generated {} · all amounts in USD</p>
<p>Total spend <strong id="total-spend" title="{}">{}</strong> · requested <span id="total-requested-gpu-hours">{:.2}</span> GPU-hours, delivered <span id="total-delivered-gpu-hours">{:.2}</span> (fill <span id="total-fill-ratio">{}</span>)</p>
"#,
        esc(&report.from.to_rfc3339()),
        esc(&report.to.to_rfc3339()),
        report.group_by,
        esc(&report.generated_at.to_rfc3339()),
        report.totals.spend,
        usd(report.totals.spend),
        report.totals.requested_gpu_hours,
        report.totals.delivered_gpu_hours,
        percent(report.totals.fill_ratio),
    );

    h.push_str("<h2>Spend against budget</h2>");
    h.push_str(&spend_chart(report));
    h.push_str("<table id=\"budgets\"><tr><th>account</th><th>period</th><th>ceiling</th><th>spent</th><th>held</th><th>remaining</th><th>forecast</th></tr>");
    for b in &report.budgets {
        let class = if b.soft_threshold_reached {
            " class=\"warn\""
        } else {
            ""
        };
        let _ = write!(
            h,
            r#"<tr{class} data-account="{}"><td>{}</td><td class="period">{} from {}</td><td>{}</td><td class="spent" title="{}">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(&b.account),
            esc(&b.account),
            period_name(b.period),
            stamp(b.period_start),
            usd(b.ceiling),
            b.spent,
            usd(b.spent),
            usd(b.held),
            usd(b.remaining),
            usd(b.forecast)
        );
    }
    h.push_str("</table>");

    h.push_str(&format!("<h2>Spend by {}</h2>", report.group_by));
    h.push_str("<table id=\"rows\"><tr><th>group</th><th>spend</th><th>on-demand</th><th>spot</th><th>reserved</th><th>reserved idle</th><th>warm idle premium</th><th>requested GPU-h</th><th>delivered GPU-h</th><th>fill</th><th>refusals</th></tr>");
    for row in report.rows.iter().chain(std::iter::once(&report.totals)) {
        let refusals: Vec<String> = row
            .refusals_by_reason
            .iter()
            .map(|(r, n)| format!("{r}: {n}"))
            .collect();
        let _ = write!(
            h,
            r#"<tr data-group="{}"><td>{}</td><td class="spend" title="{}">{}</td><td>{}</td><td>{}</td><td>{}</td><td class="reserved-idle" title="{:.2} idle node-hours of {:.2} reserved">{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td>{}</td></tr>"#,
            esc(&row.group),
            esc(&row.group),
            row.spend,
            usd(row.spend),
            usd(row.on_demand),
            usd(row.spot),
            usd(row.reserved),
            row.reserved_idle_node_hours,
            row.reserved_idle_node_hours + row.reserved_used_node_hours,
            usd(row.reserved_idle),
            usd(row.warm_idle_premium),
            row.requested_gpu_hours,
            row.delivered_gpu_hours,
            percent(row.fill_ratio),
            esc(&refusals.join(", "))
        );
    }
    h.push_str("</table>");

    h.push_str("<h2>Requested versus delivered GPU-hours</h2>");
    let fill: Vec<(String, Vec<f64>)> = report
        .rows
        .iter()
        .map(|r| {
            (
                r.group.clone(),
                vec![r.requested_gpu_hours, r.delivered_gpu_hours],
            )
        })
        .collect();
    h.push_str(&bars(
        "fill-chart",
        "Requested versus delivered GPU-hours",
        &fill,
        &["requested", "delivered"],
    ));

    h.push_str("<h2>Refusals by reason</h2>");
    let refusals: Vec<(String, Vec<f64>)> = report
        .totals
        .refusals_by_reason
        .iter()
        .map(|(r, n)| (r.clone(), vec![*n as f64]))
        .collect();
    if refusals.is_empty() {
        h.push_str("<p id=\"no-refusals\">No refusals in this range.</p>");
    } else {
        h.push_str(&bars(
            "refusal-chart",
            "Refusals by reason",
            &refusals,
            &["replicas refused"],
        ));
    }
    if let Some(advice) = reservations {
        h.push_str(&crate::reservations::html_section(advice));
    }
    h.push_str("</body></html>\n");
    h
}
