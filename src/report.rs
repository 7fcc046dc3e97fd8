//! `headroom report budget` and `headroom report reservations`: the finance reports from any
//! ledger, to a file or stdout.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use chrono::{Datelike, TimeZone, Utc};
use clap::Args;
use headroom_cloud::{Clock, SystemClock};
use headroom_core::Timestamp;
use headroom_ledger::report_rows;
use headroom_report::{Format, GroupBy};

use crate::BadInput;

#[derive(Debug, Args)]
pub struct BudgetReportArgs {
    /// The ledger: postgres://… or sqlite://PATH (for example the file `demo --database` keeps).
    #[arg(long, value_name = "URL", env = "HEADROOM_DATABASE_URL")]
    database_url: String,
    /// Start of the range: RFC 3339 (2026-11-01T00:00:00Z) or a date (2026-11-01). Default: the
    /// start of this month (UTC).
    #[arg(long)]
    from: Option<String>,
    /// End of the range (exclusive). Default: the start of next month.
    #[arg(long)]
    to: Option<String>,
    /// account, pool, provider, region or market.
    #[arg(long, default_value = "account")]
    group_by: String,
    /// csv, json, focus (FinOps FOCUS 1.2 CSV) or html.
    #[arg(long, default_value = "csv")]
    format: String,
    /// Write here instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// The deployment's configuration: its reservations are paid for whether nodes use them or
    /// not, and the report counts their idle hours as spend. Without it only what ran is shown.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// An instant from RFC 3339 or a plain date (midnight UTC).
pub fn parse_instant(flag: &str, text: &str) -> Result<Timestamp, BadInput> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| Utc.from_utc_datetime(&t))
        .ok_or_else(|| {
            BadInput(format!(
                "{flag}: {text:?} is not a date (2026-11-01) or an RFC 3339 instant"
            ))
        })
}

fn this_month(now: Timestamp) -> (Timestamp, Timestamp) {
    let start = Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(now);
    let (y, m) = if now.month() == 12 {
        (now.year() + 1, 1)
    } else {
        (now.year(), now.month() + 1)
    };
    (
        start,
        Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0)
            .single()
            .unwrap_or(now),
    )
}

pub async fn budget(args: BudgetReportArgs) -> anyhow::Result<ExitCode> {
    let group_by: GroupBy = args
        .group_by
        .parse()
        .map_err(|e| BadInput(format!("--{e}")))?;
    let format: Format = args
        .format
        .parse()
        .map_err(|e| BadInput(format!("--{e}")))?;
    let now = SystemClock::new().now();
    let (month_start, month_end) = this_month(now);
    let from = args
        .from
        .as_deref()
        .map(|t| parse_instant("--from", t))
        .transpose()?
        .unwrap_or(month_start);
    let to = args
        .to
        .as_deref()
        .map(|t| parse_instant("--to", t))
        .transpose()?
        .unwrap_or(month_end);
    if from >= to {
        return Err(BadInput("--from: must be before --to".into()).into());
    }
    let reservations = match &args.config {
        Some(path) => crate::load_config(Some(path))?.0.reserved_capacity(),
        None => Vec::new(),
    };
    let ledger = crate::open_existing_ledger(&args.database_url).await?;
    let rows = report_rows::budget(ledger.as_ref(), from, to, None)
        .await
        .context("reading the ledger")?;
    let report = headroom_report::from_rows(&rows, &reservations, from, to, group_by, now)?;
    let events = rows.events;
    let text = match format {
        // The finance page ends with the reservations the same history advises.
        Format::Html => {
            use headroom_report::reservations;
            let terms = reservations::parse_terms(reservations::DEFAULT_TERMS)?;
            // The advice reads the events the report read; only the refusals are read again.
            let until = report.to.min(report.generated_at);
            let refusals = ledger.refusals_between(from, until).await?;
            // A range with no history before now gets no section (advise refuses an empty one).
            let advice = reservations::advise(&reservations::ReservationInput {
                events: &events,
                refusals: &refusals,
                terms: &terms,
                from,
                until,
            })
            .ok();
            headroom_report::html::to_html_with(&report, advice.as_ref())
        }
        _ => headroom_report::render(&report, &events, &reservations, format)?,
    };
    match &args.out {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("--out: cannot write {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct ReservationsReportArgs {
    /// The ledger: postgres://… or sqlite://PATH.
    #[arg(long, value_name = "URL", env = "HEADROOM_DATABASE_URL")]
    database_url: String,
    /// Start of the history read: RFC 3339 or a date. Default: the ledger's first event.
    #[arg(long)]
    from: Option<String>,
    /// End of the history (exclusive). Default: now, or the ledger's last event if later.
    #[arg(long)]
    to: Option<String>,
    /// table, csv, json or html.
    #[arg(long, default_value = "table")]
    format: String,
    /// The commitment terms weighed (TOML, as `config/prices/commitments.toml`, which is the
    /// default): put your own quotes here.
    #[arg(long, value_name = "FILE")]
    commitments: Option<PathBuf>,
    /// Write here instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

pub async fn reservations(args: ReservationsReportArgs) -> anyhow::Result<ExitCode> {
    use headroom_report::reservations;
    let format = args.format.as_str();
    if !matches!(format, "table" | "csv" | "json" | "html") {
        return Err(BadInput(format!(
            "--format: {format:?} is not one of table, csv, json, html"
        ))
        .into());
    }
    let from = args
        .from
        .as_deref()
        .map(|t| parse_instant("--from", t))
        .transpose()?;
    let to = args
        .to
        .as_deref()
        .map(|t| parse_instant("--to", t))
        .transpose()?;
    if let (Some(from), Some(to)) = (from, to)
        && from >= to
    {
        return Err(BadInput("--from: must be before --to".into()).into());
    }
    let terms_text = match &args.commitments {
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            BadInput(format!(
                "--commitments: cannot read {}: {e}",
                path.display()
            ))
        })?,
        None => reservations::DEFAULT_TERMS.to_string(),
    };
    let terms = reservations::parse_terms(&terms_text).map_err(|e| BadInput(format!("--{e}")))?;
    let now = SystemClock::new().now();
    let ledger = crate::open_existing_ledger(&args.database_url).await?;
    let bad_input = |e: headroom_report::ReportError| -> anyhow::Error {
        match e {
            headroom_report::ReportError::InvalidArgument(line) => {
                BadInput(format!("--{line}")).into()
            }
            other => anyhow::Error::from(other),
        }
    };
    let (events, finished) = report_rows::history(ledger.as_ref(), None)
        .await
        .context("reading the ledger")?;
    let range = reservations::history_range(&events, finished, from, to, now).map_err(bad_input)?;
    let refusals =
        report_rows::visible_refusals(ledger.as_ref(), &events, range.from, range.end, None)
            .await
            .context("reading the ledger")?;
    let advice = reservations::from_rows(&events, &refusals, &terms, &range).map_err(bad_input)?;
    let text = match format {
        "csv" => reservations::to_csv(&advice)?,
        "json" => serde_json::to_string_pretty(&advice)? + "\n",
        "html" => reservations::to_html(&advice),
        _ => reservations::to_table(&advice),
    };
    match &args.out {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("--out: cannot write {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}
