//! The advice as a text table, CSV (one line per commitment, or per family advised nothing) and
//! HTML (a section the finance page embeds, or a page of its own).

use std::fmt::Write;

use crate::ReportError;
use crate::html::{esc, usd};

use super::{FamilyAdvice, Recommendation, ReservationReport};

const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

fn family_name(f: &FamilyAdvice) -> String {
    format!("{} {}/{} {}", f.pool, f.provider, f.region, f.instance_type)
}

fn line(r: &Recommendation) -> String {
    let when = match (r.starts_at, r.length_hours) {
        (Some(at), Some(h)) => format!(" from {} for {} days", at.format("%Y-%m-%d"), h / 24),
        _ => format!(", {}", r.term),
    };
    format!(
        "{} × {} in {}{when} at ${:.4}/node-h: saves ${:.2} per 30 days (${:.2} at 80 % demand, ${:.2} at 50 %), break-even at {:.0} % use, {:.1} refused node-h avoided",
        r.instances,
        r.product,
        r.location,
        r.usd_per_node_hour.as_f64_lossy(),
        r.savings_per_30d,
        r.savings_at_80_percent_per_30d,
        r.savings_at_50_percent_per_30d,
        r.break_even_utilisation * 100.0,
        r.refused_node_hours_avoided,
    )
}

/// A plain text summary, one block per family.
pub fn to_table(report: &ReservationReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Reservations advised from {} to {} ({:.1} hours of history)",
        report.from.format("%Y-%m-%d %H:%M"),
        report.until.format("%Y-%m-%d %H:%M"),
        report.hours
    );
    if report.families.is_empty() && report.pools_without_history.is_empty() {
        out.push_str("No node ran and nothing was refused in this range: no advice.\n");
    }
    for f in &report.families {
        let _ = writeln!(
            out,
            "\n{}\n  nodes: base {:.2}, mean {:.2}, peak {:.2}; {:.1} node-h for {}; paid ${:.4}/node-h against ${:.4} on demand; refused {:.1} node-h in {} hour(s), {} recurring",
            family_name(f),
            f.base_nodes,
            f.mean_nodes,
            f.peak_nodes,
            f.node_hours,
            usd(f.spend),
            f.paid_usd_per_hour.as_f64_lossy(),
            f.on_demand_usd_per_hour.as_f64_lossy(),
            f.refused_node_hours,
            f.refused_hours,
            f.recurring_refused_hours,
        );
        for r in &f.recommendations {
            let _ = writeln!(out, "  advise: {}", line(r));
        }
        if !f.why.is_empty() {
            let _ = writeln!(out, "  note: {}", f.why);
        }
    }
    for p in &report.pools_without_history {
        let _ = writeln!(
            out,
            "\n{}: {} ({} replicas refused)",
            p.pool, p.why, p.refused_replicas
        );
    }
    out.push_str("\nDiscounts are the clouds' published maxima (see --commitments); a quote for your instance type may be lower.\n");
    out
}

/// One CSV line per commitment advised, and one per family or pool advised none (with why).
pub fn to_csv(report: &ReservationReport) -> Result<String, ReportError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "pool",
        "provider",
        "region",
        "zone",
        "instance_type",
        "base_nodes",
        "mean_nodes",
        "peak_nodes",
        "refused_node_hours",
        "product",
        "kind",
        "instances",
        "location",
        "term",
        "starts_at",
        "length_hours",
        "usd_per_node_hour",
        "cost_without_per_30d",
        "cost_with_per_30d",
        "savings_per_30d",
        "savings_at_80_percent_per_30d",
        "savings_at_50_percent_per_30d",
        "break_even_utilisation",
        "refused_node_hours_avoided",
        "why",
    ])?;
    for f in &report.families {
        let family = [
            f.pool.clone(),
            f.provider.clone(),
            f.region.clone(),
            f.zone.clone(),
            f.instance_type.clone(),
            format!("{:.3}", f.base_nodes),
            format!("{:.3}", f.mean_nodes),
            format!("{:.3}", f.peak_nodes),
            format!("{:.3}", f.refused_node_hours),
        ];
        for r in &f.recommendations {
            let mut record = family.to_vec();
            record.extend([
                r.product.clone(),
                serde_json::to_value(r.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                r.instances.to_string(),
                r.location.clone(),
                r.term.clone(),
                r.starts_at
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                    .unwrap_or_default(),
                r.length_hours.map(|h| h.to_string()).unwrap_or_default(),
                r.usd_per_node_hour.to_string(),
                r.cost_without_per_30d.to_string(),
                r.cost_with_per_30d.to_string(),
                format!("{:.2}", r.savings_per_30d),
                format!("{:.2}", r.savings_at_80_percent_per_30d),
                format!("{:.2}", r.savings_at_50_percent_per_30d),
                format!("{:.4}", r.break_even_utilisation),
                format!("{:.3}", r.refused_node_hours_avoided),
                r.why.clone(),
            ]);
            w.write_record(&record)?;
        }
        if f.recommendations.is_empty() {
            let mut record = family.to_vec();
            record.extend(std::iter::repeat_n(String::new(), 15));
            record.push(f.why.clone());
            w.write_record(&record)?;
        }
    }
    for p in &report.pools_without_history {
        let mut record = vec![p.pool.clone()];
        record.extend(std::iter::repeat_n(String::new(), 23));
        record.push(p.why.clone());
        w.write_record(&record)?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| ReportError::Io(e.into_error()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The family's delivered GPUs by weekday and hour as an SVG heat map, darker for more.
fn heat_map(f: &FamilyAdvice, id: &str) -> String {
    let (cell_w, cell_h, left, top) = (22.0, 18.0, 40.0, 20.0);
    let most = f
        .profile
        .iter()
        .flatten()
        .flatten()
        .copied()
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let width = left + 24.0 * cell_w + 10.0;
    let height = top + 7.0 * cell_h + 30.0;
    let mut s = format!(
        r#"<svg id="{id}" class="heat-map" role="img" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}"><title>Delivered GPUs by weekday and hour of day (UTC), {}</title>"#,
        esc(&family_name(f))
    );
    for (d, row) in f.profile.iter().enumerate() {
        let y = top + d as f64 * cell_h;
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>"#,
            left - 4.0,
            y + cell_h - 5.0,
            WEEKDAYS[d]
        );
        for (hr, cell) in row.iter().enumerate() {
            let x = left + hr as f64 * cell_w;
            let (fill, label) = match cell {
                Some(v) => (
                    format!("rgba(31,119,180,{:.3})", 0.08 + 0.92 * v / most),
                    format!(
                        "{} {:02}:00 — {v:.2} GPUs delivered on average",
                        WEEKDAYS[d], hr
                    ),
                ),
                None => (
                    "#eee".to_string(),
                    format!("{} {:02}:00 — not in the history", WEEKDAYS[d], hr),
                ),
            };
            let _ = write!(
                s,
                r#"<rect x="{x}" y="{y}" width="{}" height="{}" fill="{fill}"><title>{}</title></rect>"#,
                cell_w - 1.0,
                cell_h - 1.0,
                esc(&label)
            );
        }
    }
    for hr in (0..24).step_by(3) {
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" font-size="11">{hr:02}</text>"#,
            left + hr as f64 * cell_w,
            top + 7.0 * cell_h + 14.0
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" font-size="11" text-anchor="middle">hour of day (UTC); darkest = {most:.2} GPUs</text></svg>"#,
        left + 12.0 * cell_w,
        top + 7.0 * cell_h + 28.0
    );
    s
}

/// The advice as an HTML section: per family the heat map it rests on and the commitments, with
/// their savings range.
pub fn html_section(report: &ReservationReport) -> String {
    let mut h = String::from(r#"<section id="reservations"><h2>Reservations to consider</h2>"#);
    let _ = write!(
        h,
        "<p>From the ledger's {:.1} hours ({} to {}): what to commit to, and what it would have saved. Discounts are the clouds' published maxima; a quote for your instance type may be lower.</p>",
        report.hours,
        report.from.format("%Y-%m-%d %H:%M"),
        report.until.format("%Y-%m-%d %H:%M")
    );
    if report.families.is_empty() {
        h.push_str(r#"<p id="no-advice">No node ran in this range: no advice.</p>"#);
    }
    for (i, f) in report.families.iter().enumerate() {
        let _ = write!(
            h,
            r#"<h3>{}</h3><p>Base {:.2}, mean {:.2}, peak {:.2} nodes; {:.1} node-hours refused.</p>"#,
            esc(&family_name(f)),
            f.base_nodes,
            f.mean_nodes,
            f.peak_nodes,
            f.refused_node_hours
        );
        h.push_str(&heat_map(f, &format!("heat-map-{i}")));
        if f.recommendations.is_empty() {
            let _ = write!(
                h,
                r#"<p class="no-commitment">Nothing to commit to: {}.</p>"#,
                esc(&f.why)
            );
            continue;
        }
        h.push_str(r#"<table class="commitments"><tr><th>commitment</th><th>nodes</th><th>where</th><th>term</th><th>rate</th><th>saves / 30 days</th><th>at 80 % demand</th><th>at 50 %</th><th>break-even use</th><th>refused node-h avoided</th><th>source</th></tr>"#);
        for r in &f.recommendations {
            let term = match (r.starts_at, r.length_hours) {
                (Some(at), Some(hours)) => {
                    format!("{} days from {}", hours / 24, at.format("%Y-%m-%d"))
                }
                _ => r.term.clone(),
            };
            let _ = write!(
                h,
                r#"<tr><td title="{}">{}</td><td>{}</td><td>{}</td><td>{}</td><td>${:.4}/h</td><td>${:.2}</td><td>${:.2}</td><td>${:.2}</td><td>{:.0} %</td><td>{:.1}</td><td><a href="{}">source</a></td></tr>"#,
                esc(&r.why),
                esc(&r.product),
                r.instances,
                esc(&r.location),
                esc(&term),
                r.usd_per_node_hour.as_f64_lossy(),
                r.savings_per_30d,
                r.savings_at_80_percent_per_30d,
                r.savings_at_50_percent_per_30d,
                r.break_even_utilisation * 100.0,
                r.refused_node_hours_avoided,
                esc(r.source.split(' ').next().unwrap_or_default()),
            );
        }
        h.push_str("</table>");
        if !f.why.is_empty() {
            let _ = write!(h, "<p>{}</p>", esc(&f.why));
        }
    }
    for p in &report.pools_without_history {
        let _ = write!(h, "<p>{}: {}.</p>", esc(&p.pool), esc(&p.why));
    }
    h.push_str("</section>");
    h
}

/// The section as a page of its own.
pub fn to_html(report: &ReservationReport) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Headroom reservations</title><style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 6px}}</style></head><body><h1>Headroom reservations</h1>{}</body></html>\n",
        html_section(report)
    )
}
