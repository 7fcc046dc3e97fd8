//! `headroom report budget`: the finance report from any ledger, to a file or stdout.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use chrono::{Datelike, TimeZone, Utc};
use clap::Args;
use headroom_cloud::{Clock, SystemClock};
use headroom_core::Timestamp;
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
    let ledger = crate::open_existing_ledger(&args.database_url).await?;
    let (report, events) =
        headroom_report::from_ledger(ledger.as_ref(), from, to, group_by, now, None).await?;
    let text = headroom_report::render(&report, &events, format)?;
    match &args.out {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("--out: cannot write {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}
