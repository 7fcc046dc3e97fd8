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

/// A scale's top and tick step for values up to `max`: the step is 1, 2, 2.5 or 5 times a power
/// of ten cutting the range into at most five parts, the top its first multiple at or above
/// `max`, so the data fills most of the height under a round figure.
pub(crate) fn nice_scale(max: f64) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let pow = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * pow)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * pow);
    let top = ((max / step) * (1.0 - 1e-9)).ceil().max(1.0) * step;
    (top, step)
}

/// Dollars to as many decimals as the tick step needs (`$2.5`, `$0.25`, `$500`).
fn tick_usd(v: f64, step: f64) -> String {
    let decimals = (0..=6)
        .find(|d| {
            let scaled = step * 10f64.powi(*d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
        })
        .unwrap_or(6) as usize;
    format!("${v:.decimals$}")
}

/// How far above the data a ceiling may be and still set the scale: beyond it the line would
/// squash the spend flat, so the ceiling is named at the top of the chart instead.
const CEILING_IN_SCALE: f64 = 2.0;

/// One chart of cumulative spend against time: the axes, nice ticks, the line, "now".
struct Chart<'a> {
    /// The `<svg>` element's identifying attributes.
    ident: String,
    label: String,
    from: headroom_core::Timestamp,
    to: headroom_core::Timestamp,
    now: headroom_core::Timestamp,
    points: &'a [crate::SpendPoint],
    /// Whether this is the page's main chart (whose parts carry ids) or a budget's.
    main: bool,
    budget: Option<&'a crate::BudgetLine>,
}

impl Chart<'_> {
    fn render(&self) -> String {
        let id = |name: &str| {
            if self.main {
                format!(r#"id="{name}""#)
            } else {
                format!(r#"class="{name}""#)
            }
        };
        let spend_max = self
            .points
            .iter()
            .map(|p| p.cumulative_spend.as_f64_lossy())
            .fold(0.0, f64::max);
        let data_max = self
            .budget
            .map_or(spend_max, |b| spend_max.max(b.forecast.as_f64_lossy()));
        // A ceiling sets the scale when the data comes near it (or passes it).
        let ceiling = self.budget.map(|b| b.ceiling.as_f64_lossy());
        let ceiling_in_scale = ceiling.filter(|c| *c <= data_max * CEILING_IN_SCALE);
        let (top, step) = nice_scale(data_max.max(ceiling_in_scale.unwrap_or(0.0)));
        let range_ms = (self.to - self.from).num_milliseconds().max(1) as f64;
        let (left, right, bottom, upper) = (PAD + 30.0, W - PAD, H - PAD, PAD / 2.0);
        let x = |t: headroom_core::Timestamp| {
            left + (right - left)
                * ((t - self.from).num_milliseconds() as f64 / range_ms).clamp(0.0, 1.0)
        };
        let y = |v: f64| bottom - (bottom - upper) * v / top;
        let mut svg = format!(
            r#"<svg {} viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{}">"#,
            self.ident,
            esc(&self.label)
        );
        let _ = write!(
            svg,
            r##"<line {} x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/><line {} x1="{left}" y1="{upper}" x2="{left}" y2="{bottom}" stroke="#888"/>"##,
            id("x-axis"),
            id("y-axis")
        );
        // Ticks: the range's start, middle and end; every step of the scale.
        let mid = self.from + (self.to - self.from) / 2;
        for (t, anchor) in [(self.from, "start"), (mid, "middle"), (self.to, "end")] {
            let _ = write!(
                svg,
                r##"<text class="x-tick" x="{:.1}" y="{}" font-size="10" text-anchor="{anchor}">{}</text>"##,
                x(t),
                bottom + 13.0,
                stamp(t)
            );
        }
        let ticks = (top / step).round() as usize;
        for k in 0..=ticks {
            let v = step * k as f64;
            let _ = write!(
                svg,
                r##"<text class="y-tick" x="{}" y="{:.1}" font-size="10" text-anchor="end">{}</text>"##,
                left - 4.0,
                y(v) + 3.0,
                tick_usd(v, step)
            );
        }
        let _ = write!(
            svg,
            r##"<text {} x="{:.1}" y="{}" font-size="11" text-anchor="middle">time (UTC)</text><text {} x="12" y="{:.1}" font-size="11" text-anchor="middle" transform="rotate(-90 12 {:.1})">cumulative spend (USD)</text>"##,
            id("x-label"),
            (left + right) / 2.0,
            H - 4.0,
            id("y-label"),
            (upper + bottom) / 2.0,
            (upper + bottom) / 2.0
        );
        let path: Vec<String> = std::iter::once(format!("{:.1},{:.1}", x(self.from), y(0.0)))
            .chain(
                self.points
                    .iter()
                    .map(|p| format!("{:.1},{:.1}", x(p.at), y(p.cumulative_spend.as_f64_lossy()))),
            )
            .collect();
        let _ = write!(
            svg,
            r##"<polyline {} fill="none" stroke="#2563eb" stroke-width="2" points="{}"/>"##,
            id("spend-line"),
            path.join(" ")
        );
        if let Some(b) = self.budget {
            let account = esc(&b.account);
            let period = period_name(b.period);
            let _ = write!(
                svg,
                r##"<line class="forecast" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#2563eb" stroke-dasharray="3 3"/>"##,
                x(self.now),
                y(b.spent.as_f64_lossy()),
                x(self.to),
                y(b.forecast.as_f64_lossy())
            );
            match ceiling_in_scale {
                Some(c) => {
                    // The label sits above its line, or below it when the line is the top.
                    let label_y = if y(c) - 3.0 < upper + 11.0 {
                        y(c) + 11.0
                    } else {
                        y(c) - 3.0
                    };
                    let _ = write!(
                        svg,
                        r##"<line class="ceiling" data-account="{account}" x1="{left}" y1="{0:.1}" x2="{right}" y2="{0:.1}" stroke="#dc2626" stroke-dasharray="4 3"/><text class="ceiling-label" x="{1}" y="{2:.1}" font-size="10" fill="#dc2626">{account} {period} ceiling {3}</text>"##,
                        y(c),
                        left + 4.0,
                        label_y,
                        usd(b.ceiling)
                    );
                }
                None => {
                    let used = b.spent.as_f64_lossy() / b.ceiling.as_f64_lossy().max(1e-9);
                    let _ = write!(
                        svg,
                        r##"<text class="ceiling-off-scale" data-account="{account}" x="{}" y="{}" font-size="10" fill="#dc2626">{account} {period} ceiling {} is above this scale ({} spent)</text>"##,
                        left + 4.0,
                        upper + 11.0,
                        usd(b.ceiling),
                        percent(used)
                    );
                }
            }
        }
        if self.now >= self.from && self.now <= self.to {
            // "now" sits in the top margin, over the plot: clear of the axes' labels (left of
            // and under the plot) and of the ceiling's (inside it), leaning away from the edge.
            let (label_x, anchor) = if x(self.now) > (left + right) / 2.0 {
                (x(self.now) - 3.0, "end")
            } else {
                (x(self.now) + 3.0, "start")
            };
            let _ = write!(
                svg,
                r##"<line {marker} x1="{now_x:.1}" y1="{upper}" x2="{now_x:.1}" y2="{bottom}" stroke="#111" stroke-dasharray="2 2"/><text class="now-label" x="{label_x:.1}" y="{label_y}" font-size="10" text-anchor="{anchor}">now</text>"##,
                marker = id("now-marker"),
                now_x = x(self.now),
                label_y = upper - 6.0,
            );
        }
        svg.push_str("</svg>");
        svg
    }
}

/// Cumulative spend of every account over the report's range. No ceiling is drawn here: each
/// is an account's, for a day, an hour or a month, and this line is all accounts over the
/// range; [`budget_chart`] draws each against its own account's spend in its own period.
fn spend_chart(report: &BudgetReport) -> String {
    Chart {
        ident: r#"id="spend-chart""#.to_string(),
        label: "Cumulative spend against time".to_string(),
        from: report.from,
        to: report.to,
        now: report.generated_at,
        points: &report.spend_series,
        main: true,
        budget: None,
    }
    .render()
}

/// A budget's current period: its account's cumulative spend from the period's start to now,
/// the forecast to the period's end, and the ceiling (named at the top when far above).
fn budget_chart(b: &crate::BudgetLine, now: headroom_core::Timestamp) -> String {
    Chart {
        ident: format!(
            r#"class="budget-chart" data-account="{}" data-period="{}""#,
            esc(&b.account),
            period_name(b.period)
        ),
        label: format!(
            "{}: {} spend against its ceiling",
            b.account,
            period_name(b.period)
        ),
        from: b.period_start,
        to: b.period_end,
        now,
        points: &b.spend_series,
        main: false,
        budget: Some(b),
    }
    .render()
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

    h.push_str("<h2>Spend over the range</h2>");
    h.push_str(&spend_chart(report));
    h.push_str("<h2>Spend against budget</h2>");
    for b in &report.budgets {
        h.push_str(&budget_chart(b, report.generated_at));
    }
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
    h.push_str("<table id=\"rows\"><tr><th>group</th><th>spend</th><th>on-demand</th><th>spot</th><th>reserved</th><th>reserved idle</th><th>parked volumes</th><th>warm idle premium</th><th>requested GPU-h</th><th>delivered GPU-h</th><th>fill</th><th>refusals</th></tr>");
    for row in report.rows.iter().chain(std::iter::once(&report.totals)) {
        let refusals: Vec<String> = row
            .refusals_by_reason
            .iter()
            .map(|(r, n)| format!("{r}: {n}"))
            .collect();
        let _ = write!(
            h,
            r#"<tr data-group="{}"><td>{}</td><td class="spend" title="{}">{}</td><td>{}</td><td>{}</td><td>{}</td><td class="reserved-idle" title="{:.2} idle node-hours of {:.2} reserved">{}</td><td class="parked">{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td>{}</td></tr>"#,
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
            usd(row.parked),
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
