//! `headroom what-if`: the controller's rules as a planning calculator, running the same code.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use headroom_core::controller::{drain_rule, hpa_rule};
use serde::Serialize;

use crate::BadInput;

#[derive(Debug, Args)]
#[command(
    allow_negative_numbers = true,
    after_help = "Examples:\n  \
    headroom what-if --ready 8 --per-replica-rps 2.5 --arrival-rps 20 --burst-rps 32 --burst-s 30 --drain-s 60\n  \
    headroom what-if --current 4 --metric 8 --target 4\n  \
    headroom what-if --unit tokens --ready 2 --per-replica-tps 2000 --arrival-tps 100000 --backlog 200000"
)]
pub struct WhatIfArgs {
    /// Backlog form: ready replicas now.
    #[arg(long)]
    ready: Option<u32>,
    /// Backlog form: successful requests (with `--unit tokens`, tokens) per second one ready
    /// replica sustains.
    #[arg(long, visible_alias = "per-replica-tps")]
    per_replica_rps: Option<f64>,
    /// Backlog form: arrivals per second once the burst is over (default: what the ready
    /// replicas serve).
    #[arg(long, visible_alias = "arrival-tps")]
    arrival_rps: Option<f64>,
    /// Backlog form: requests already queued.
    #[arg(long, conflicts_with_all = ["burst_rps", "burst_s"])]
    backlog: Option<f64>,
    /// Backlog form: a burst's arrival rate...
    #[arg(long, requires = "burst_s")]
    burst_rps: Option<f64>,
    /// ...and how long it lasts, in seconds.
    #[arg(long, requires = "burst_rps")]
    burst_s: Option<f64>,
    /// Backlog form: what the rates and the backlog count. `tokens` sizes a pool as one with
    /// `replica_throughput_tps` and token counts in its signals is sized: the rates are tokens
    /// per second and the backlog is tokens.
    #[arg(long, value_enum, default_value_t = Unit::Requests)]
    unit: Unit,
    /// Backlog form: drain the backlog within this many seconds.
    #[arg(long, default_value_t = 60.0)]
    drain_s: f64,
    /// HPA form: current replicas.
    #[arg(long, conflicts_with_all = ["ready", "per_replica_rps", "arrival_rps", "backlog", "burst_rps", "burst_s"])]
    current: Option<u32>,
    /// HPA form: the metric's average over ready replicas (e.g. waiting requests per replica).
    #[arg(long, requires = "current")]
    metric: Option<f64>,
    /// HPA form: the metric's target value.
    #[arg(long, requires = "current")]
    target: Option<f64>,
    /// HPA form: a usage ratio within this of 1 changes nothing.
    #[arg(long, default_value_t = 0.1)]
    tolerance: f64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Unit {
    Requests,
    Tokens,
}

impl Unit {
    fn rate(self) -> &'static str {
        match self {
            Unit::Requests => "req/s",
            Unit::Tokens => "tok/s",
        }
    }
}

#[derive(Debug, Serialize)]
struct Answer {
    rule: &'static str,
    desired_replicas: u32,
    additional_replicas: i64,
    reasoning: Vec<String>,
}

fn finite_non_negative(flag: &str, value: f64) -> Result<f64, BadInput> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(BadInput(format!(
            "{flag}: must be a number zero or more, got {value}"
        )))
    }
}

pub fn run(args: WhatIfArgs) -> anyhow::Result<ExitCode> {
    let answer = match args.current {
        Some(current) => hpa(&args, current)?,
        None => backlog(&args)?,
    };
    if args.json {
        println!("{}", serde_json::to_string(&answer)?);
    } else {
        for line in &answer.reasoning {
            println!("{line}");
        }
        println!(
            "desired replicas: {} ({:+}) by the {} rule",
            answer.desired_replicas, answer.additional_replicas, answer.rule
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn hpa(args: &WhatIfArgs, current: u32) -> Result<Answer, BadInput> {
    let (Some(metric), Some(target)) = (args.metric, args.target) else {
        return Err(BadInput(
            "--current needs --metric and --target (the HPA form)".into(),
        ));
    };
    let metric = finite_non_negative("--metric", metric)?;
    if !(target.is_finite() && target > 0.0) {
        return Err(BadInput(format!(
            "--target: must be a positive number, got {target}"
        )));
    }
    let tolerance = finite_non_negative("--tolerance", args.tolerance)?;
    let desired = hpa_rule(current, metric, target, tolerance);
    let ratio = metric / target;
    let mut reasoning = vec![format!("usage ratio = {metric} / {target} = {ratio:.3}")];
    if desired == current {
        reasoning.push(format!("within the tolerance of {tolerance}: no change"));
    } else {
        reasoning.push(format!(
            "desired = ceil({current} × {ratio:.3}) = {desired}"
        ));
    }
    Ok(Answer {
        rule: "hpa",
        desired_replicas: desired,
        additional_replicas: desired as i64 - current as i64,
        reasoning,
    })
}

fn backlog(args: &WhatIfArgs) -> Result<Answer, BadInput> {
    let (Some(ready), Some(per_replica)) = (args.ready, args.per_replica_rps) else {
        return Err(BadInput(
            "give --ready and --per-replica-rps (the backlog form), or --current, --metric and --target (the HPA form)".into(),
        ));
    };
    let per_replica = finite_non_negative("--per-replica-rps", per_replica)?;
    if per_replica == 0.0 {
        return Err(BadInput("--per-replica-rps: must be more than zero".into()));
    }
    let drain_s = finite_non_negative("--drain-s", args.drain_s)?.max(1.0);
    let capacity = ready as f64 * per_replica;
    let mut reasoning = vec![format!(
        "capacity = {ready} × {per_replica} = {capacity} {}",
        args.unit.rate()
    )];
    let backlog = match (args.backlog, args.burst_rps, args.burst_s) {
        (Some(b), _, _) => finite_non_negative("--backlog", b)?,
        (None, Some(rps), Some(s)) => {
            let (rps, s) = (
                finite_non_negative("--burst-rps", rps)?,
                finite_non_negative("--burst-s", s)?,
            );
            let growth = (rps - capacity).max(0.0);
            let backlog = growth * s;
            reasoning.push(format!(
                "backlog = ({rps} - {capacity}) × {s} s = {backlog}"
            ));
            backlog
        }
        _ => 0.0,
    };
    let arrivals = match args.arrival_rps {
        Some(a) => finite_non_negative("--arrival-rps", a)?,
        None => capacity,
    };
    let steady = (arrivals / per_replica).ceil();
    let extra = (backlog / drain_s / per_replica).ceil();
    reasoning.push(format!(
        "arrivals need ceil({arrivals} / {per_replica}) = {steady} replicas"
    ));
    reasoning.push(format!(
        "draining {backlog} within {drain_s} s needs ceil({backlog} / {drain_s} / {per_replica}) = {extra} more"
    ));
    let desired = drain_rule(
        arrivals,
        backlog,
        Duration::from_secs_f64(drain_s),
        per_replica,
    );
    Ok(Answer {
        rule: "backlog_drain",
        desired_replicas: desired,
        additional_replicas: desired as i64 - ready as i64,
        reasoning,
    })
}
