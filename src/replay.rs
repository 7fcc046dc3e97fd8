//! `headroom replay`: the shadow experiment on history. A pool's signals are read back from
//! Prometheus over a range (`/api/v1/query_range`) and stepped through the real controller in
//! virtual time (`headroom_sim::replay`); the decisions go to a JSONL file and the promotion
//! report to standard output.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use headroom_config::Config;
use headroom_config::prometheus::{PrometheusAuth, PrometheusSource, SignalQueries};
use headroom_core::{PoolName, Timestamp};
use headroom_engine::prometheus;
use headroom_sim::replay::{self, HistoryStep, ReplayReport};

use crate::BadInput;

/// The most steps one replay reads per pool (a year at 30 s).
const MAX_STEPS: i64 = 1_100_000;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The configuration whose pools are replayed (their `[pools.signals]` queries, or the
    /// PromQL equivalent of their `[pools.scrape]` series).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The Prometheus server holding the history; overrides each `[pools.signals] url`, and is
    /// needed for pools that scrape (`[pools.scrape]`).
    #[arg(long, value_name = "URL")]
    prometheus: Option<String>,
    /// The start of the range (RFC 3339).
    #[arg(long, value_name = "TIME")]
    from: String,
    /// The end of the range (RFC 3339).
    #[arg(long, value_name = "TIME")]
    to: String,
    /// The replay's step (1s to 1h), as a controller tick.
    #[arg(long, value_name = "DURATION", default_value = "15s")]
    step: String,
    /// Replay this pool only (default: every pool with a signal source).
    #[arg(long, value_name = "NAME")]
    pool: Option<String>,
    /// Write every replayed decision to FILE as JSON lines (one per pool and step).
    #[arg(long, value_name = "FILE")]
    decisions: Option<PathBuf>,
    /// The rate window of the PromQL derived from `[pools.scrape]` counters.
    #[arg(long, value_name = "DURATION", default_value = "1m")]
    rate_window: String,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Json,
}

/// One pool's source of history, as the replay reads it.
fn history_source(
    config: &Config,
    pool: &PoolName,
    prometheus_url: Option<&str>,
    rate_window: &str,
) -> Result<Option<PrometheusSource>, BadInput> {
    if let Some(source) = config.prometheus.get(pool) {
        let mut source = source.clone();
        if let Some(url) = prometheus_url {
            source.url = url.to_string();
        }
        return Ok(Some(source));
    }
    let Some(target) = config.scrape.get(pool) else {
        return Ok(None);
    };
    let Some(url) = prometheus_url else {
        return Err(BadInput(format!(
            "--prometheus: pool {pool} scrapes its pages itself ([pools.scrape]); name the Prometheus that scrapes them too, e.g. --prometheus http://prometheus:9090"
        )));
    };
    Ok(Some(PrometheusSource {
        url: url.to_string(),
        interval: target.interval,
        timeout: Duration::from_secs(30),
        auth: PrometheusAuth::None,
        ca_file: None,
        queries: SignalQueries::from_selectors(&target.selectors, target.age, rate_window),
    }))
}

fn parse_time(flag: &str, text: &str) -> Result<Timestamp, BadInput> {
    text.parse().map_err(|_| {
        BadInput(format!(
            "{flag}: {text:?} is not an RFC 3339 time; use e.g. 2026-12-01T09:00:00Z"
        ))
    })
}

/// A duration flag within `range`: a malformed value and one out of range are told apart, each
/// in one line naming the flag and the form it takes.
fn duration_flag(
    flag: &str,
    text: &str,
    range: std::ops::RangeInclusive<Duration>,
    example: &str,
) -> Result<Duration, BadInput> {
    let shown = |d: &Duration| humantime::format_duration(*d).to_string();
    let bounds = if *range.end() == Duration::MAX {
        format!("{} or more", shown(range.start()))
    } else {
        format!("{} to {}", shown(range.start()), shown(range.end()))
    };
    match humantime::parse_duration(text) {
        Ok(d) if range.contains(&d) => Ok(d),
        Ok(_) => Err(BadInput(format!(
            "{flag}: {text:?} is outside {bounds}; use e.g. {example}"
        ))),
        Err(_) => Err(BadInput(format!(
            "{flag}: {text:?} is not a duration; write a number and a unit, e.g. {example} ({bounds})"
        ))),
    }
}

pub async fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let (config, origin) = crate::load_config(Some(&args.config))?;
    prometheus::check_signal_files(&config, &origin)?;
    let from = parse_time("--from", &args.from)?;
    let to = parse_time("--to", &args.to)?;
    if to <= from {
        return Err(BadInput("--to: must be after --from".into()).into());
    }
    let step = duration_flag(
        "--step",
        &args.step,
        Duration::from_secs(1)..=Duration::from_secs(3600),
        "15s",
    )?;
    let rate_window = duration_flag(
        "--rate-window",
        &args.rate_window,
        Duration::from_secs(1)..=Duration::MAX,
        "1m",
    )
    .map(|d| format!("{}s", d.as_secs()))?;
    if let Some(url) = &args.prometheus
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(BadInput(format!(
            "--prometheus: {url:?} is not an http:// or https:// URL"
        ))
        .into());
    }
    let step_ms = i64::try_from(step.as_millis()).unwrap_or(i64::MAX);
    let steps = (to - from).num_milliseconds() / step_ms + 1;
    if steps > MAX_STEPS {
        return Err(BadInput(format!(
            "--step: {steps} steps from --from to --to; at most {MAX_STEPS}: shorten the range or lengthen the step"
        ))
        .into());
    }
    let pools: Vec<PoolName> = match &args.pool {
        Some(name) => {
            let pool: PoolName = name
                .parse()
                .map_err(|_| BadInput(format!("--pool: {name:?} is not a pool name")))?;
            if config.pool(&pool).is_none() {
                return Err(
                    BadInput(format!("--pool: the configuration has no pool {pool}")).into(),
                );
            }
            vec![pool]
        }
        None => config.pools.iter().map(|p| p.name.clone()).collect(),
    };
    let mut decisions = match &args.decisions {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| {
                BadInput(format!(
                    "--decisions: cannot create {} ({e})",
                    path.display()
                ))
            })?,
        )),
        None => None,
    };
    let mut reports = Vec::new();
    for pool_name in pools {
        let Some(source) = history_source(
            &config,
            &pool_name,
            args.prometheus.as_deref(),
            &rate_window,
        )?
        else {
            if args.pool.is_some() {
                return Err(BadInput(format!("--pool: pool {pool_name} has no [pools.signals] or [pools.scrape]: no history to replay")).into());
            }
            continue;
        };
        let pool = config
            .pool(&pool_name)
            .expect("listed from the configuration");
        let gpus = config.first_offering_gpus(pool).unwrap_or(1);
        let history = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<HistoryStep>> {
            let mut histories = Vec::new();
            for (name, query) in source.queries.named() {
                let points =
                    prometheus::read_range(&source, query, from, to, step).map_err(|e| {
                        anyhow::anyhow!("{name}: reading {} from {}: {e}", query, source.url)
                    })?;
                histories.push((name, points));
            }
            let at_steps = (0..steps).map(|i| from.timestamp_millis() + i * step_ms);
            Ok(prometheus::signals_over(&histories, at_steps)
                .into_iter()
                .map(|(ms, signal)| HistoryStep {
                    at: chrono::DateTime::from_timestamp_millis(ms).unwrap_or(from),
                    signal,
                })
                .collect())
        })
        .await??;
        let (steps, report) = replay::replay(pool, &history, step, gpus);
        if let Some(out) = decisions.as_mut() {
            for s in &steps {
                let mut line = serde_json::to_value(s)?;
                line["pool"] = serde_json::Value::String(pool_name.to_string());
                writeln!(out, "{line}")?;
            }
        }
        reports.push((report, pool.scaling.direction_cooldown));
    }
    if let Some(mut out) = decisions {
        out.flush()?;
    }
    if reports.is_empty() {
        return Err(BadInput(
            "--config: no pool has [pools.signals] or [pools.scrape]: no history to replay".into(),
        )
        .into());
    }
    match args.format {
        Format::Json => {
            let all: Vec<&ReplayReport> = reports.iter().map(|(r, _)| r).collect();
            println!("{}", serde_json::to_string_pretty(&all)?);
        }
        Format::Table => {
            for (report, cooldown) in &reports {
                print!("{}", table(report, *cooldown));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The promotion report as a person reads it.
fn table(r: &ReplayReport, cooldown: Duration) -> String {
    let or_none = |v: Option<f64>| {
        v.map_or_else(
            || "n/a (no arrival rate)".to_string(),
            |v| format!("{v:.1}"),
        )
    };
    let (p, c) = (&r.promotion, &r.capacity);
    let verdict = if p.ready {
        "ready by the promotion rules (no reversal inside a cooldown, no scale-up on a missing signal)".to_string()
    } else {
        format!("not yet: {}", p.blockers.join(", "))
    };
    format!(
        "pool {pool}: {from} .. {to}, {steps} steps of {step}s\n\
         \x20 signal missing                {missing} steps; held {held:.1} min\n\
         \x20 direction changes             {changes} ({per_hour:.2}/h), {within} sooner than the {cooldown}s cooldown\n\
         \x20 scale-ups on a missing signal {ups}\n\
         \x20 replayed capacity             {rh:.1} replica-hours, {gh:.1} GPU-hours\n\
         \x20 idle GPU-minutes              {idle}\n\
         \x20 queueing (request-minutes)    history {hq:.1}, replayed {mq}, avoided {aq}\n\
         \x20 over the age objective        {over:.1} min in the history, the replay adding capacity in {up:.1} of them\n\
         \x20 promotion                     {verdict}\n",
        pool = r.pool,
        from = r.from.to_rfc3339(),
        to = r.to.to_rfc3339(),
        steps = r.steps,
        step = r.step_s,
        missing = r.missing_signal_steps,
        held = p.held_minutes,
        changes = p.direction_changes,
        per_hour = p.direction_changes_per_hour,
        within = p.changes_within_cooldown,
        cooldown = cooldown.as_secs(),
        ups = p.scale_ups_on_missing_signal,
        rh = c.replica_hours,
        gh = c.gpu_hours,
        idle = or_none(c.idle_gpu_minutes),
        hq = c.history_queue_request_minutes,
        mq = or_none(c.modelled_queue_request_minutes),
        aq = or_none(c.avoided_queue_request_minutes),
        over = p.minutes_over_age_objective,
        up = r.minutes_over_age_objective_while_scaling_up,
    )
}
