//! `headroom simulate`: replay a scenario (or a trace with a scenario's pools) against Headroom
//! and the baselines users run today, in virtual time.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use headroom_sim::{Policy, SimError};

use crate::BadInput;

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// A built-in scenario (seed-000-backlog, seed-001-burst, stockout-fallback,
    /// multicloud-stockout, spot-interruptions, spot-price-spike, budget-clamp, azure-code-trace, flash-burst,
    /// slow-ramp, compressed-day, scale-to-zero, smaller-model-handover, long-context-chat) or a
    /// scenario TOML file.
    #[arg(
        long,
        value_name = "NAME_OR_FILE",
        required_unless_present_any = ["suite", "corpus"],
        conflicts_with = "suite"
    )]
    scenario: Option<String>,
    /// Generate N scenarios (1 to 10000) from the parametric family in the simulator's
    /// scenarios/README.md, deterministic in --seed (default 0), run each under every policy and
    /// print win rates and distributions.
    #[arg(long, value_name = "N")]
    corpus: Option<String>,
    /// With --corpus: write each generated scenario to DIR as TOML that --scenario replays.
    #[arg(long, value_name = "DIR", requires = "corpus")]
    corpus_dump: Option<PathBuf>,
    /// Run every built-in scenario under every policy (or those given with --policy) and print
    /// one scoreboard.
    #[arg(long, conflicts_with_all = ["trace", "timeseries", "plot"])]
    suite: bool,
    /// With --suite: write the golden files to DIR (Headroom's decisions in each scenario,
    /// `NAME.txt`, and the scoreboard, `scoreboard.md`) instead of printing the scoreboard.
    #[arg(long, value_name = "DIR", requires = "suite")]
    golden: Option<PathBuf>,
    /// With --golden: compare the run with the files in DIR instead of writing them; exits 1
    /// naming each file that differs and its first differing line.
    #[arg(long, requires = "golden")]
    check: bool,
    /// Replay this trace (CSV TIMESTAMP,ContextTokens,GeneratedTokens or JSONL) instead of the
    /// scenario's synthetic traffic, with the scenario's pools.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Replay a spot offering's availability from a SkyPilot spot trace
    /// ({"metadata": {"gap_seconds": N}, "data": [counts...]}) in place of the scenario's
    /// capacity and interruption faults on it: launches past the count are refused and a count
    /// that falls reclaims what runs above it. Repeat for several offerings.
    #[arg(long = "spot-trace", value_name = "OFFERING=FILE", conflicts_with_all = ["corpus", "suite"])]
    spot_traces: Vec<String>,
    /// headroom, hpa-utilization, hpa-queue, keda-karpenter, predictive, static or oracle; repeat
    /// for several (default: all).
    #[arg(long = "policy", value_name = "P")]
    policies: Vec<String>,
    /// Overrides the scenario's seed.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// table or json; with --suite also markdown (the README's scoreboard).
    #[arg(long, default_value = "table", value_name = "FORMAT")]
    format: String,
    /// Write every policy's queue depth, replicas and cost per tick to this CSV file.
    #[arg(long, value_name = "FILE.csv")]
    timeseries: Option<PathBuf>,
    /// Draw queue depth, desired and ready replicas and cumulative cost per policy in this SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// With --scenario: write every Headroom decision of the run to this file, one JSON object a
    /// line (t_s, pool, rule, reason, classification, hold, target, proposals, signal…), to
    /// explain a miss.
    #[arg(long, value_name = "FILE.jsonl")]
    decisions: Option<PathBuf>,
    /// Put a reservation of N nodes beside OFFERING (for PERIOD from the start, at USD per
    /// node-hour; default the whole run at the on-demand rate) and compare the run with the same
    /// run without it. Repeat for several.
    #[arg(long = "reserve", value_name = "OFFERING=N[:PERIOD][@USD]")]
    reserve: Vec<String>,
    /// Keep Headroom's ledger of the run (with the reservations, if any) in this new SQLite
    /// file, for `headroom report … --database-url sqlite://FILE`.
    #[arg(long, value_name = "FILE.db")]
    ledger: Option<PathBuf>,
}

/// Bad input becomes one line naming the flag and the fix (exit code 2).
fn bad(flag: &str, e: SimError) -> anyhow::Error {
    match e {
        SimError::Engine(_) | SimError::Io(_) => anyhow::Error::new(e),
        other => BadInput(format!("{flag}: {other}")).into(),
    }
}

/// The wall clock, read only to report how fast the simulator ran; nothing simulated reads it.
#[allow(clippy::disallowed_methods)]
fn stopwatch() -> std::time::Instant {
    std::time::Instant::now()
}

/// Runs a simulation with the engine's logs silenced (alerts firing in virtual time would bury
/// the table); RUST_LOG brings them back.
async fn quietly<T>(simulation: impl std::future::Future<Output = T>) -> T {
    if std::env::var_os("RUST_LOG").is_some() {
        simulation.await
    } else {
        use tracing::instrument::WithSubscriber;
        simulation
            .with_subscriber(tracing::subscriber::NoSubscriber::default())
            .await
    }
}

fn policies(args: &SimulateArgs) -> anyhow::Result<Vec<Policy>> {
    let mut policies = Vec::new();
    for p in &args.policies {
        let p = Policy::parse(p).map_err(|e| bad("--policy", e))?;
        if !policies.contains(&p) {
            policies.push(p);
        }
    }
    if policies.is_empty() {
        policies = Policy::ALL.to_vec();
    }
    Ok(policies)
}

pub async fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let (json, markdown) = match args.format.as_str() {
        "table" => (false, false),
        "json" => (true, false),
        "markdown" if args.suite => (false, true),
        "markdown" => {
            return Err(BadInput(
                "--format markdown: only the suite's scoreboard is Markdown; add --suite or use --format table or json".into(),
            )
            .into());
        }
        other => {
            return Err(BadInput(format!(
                "--format: {other:?} is not a format; use --format table, json or (with --suite) markdown"
            ))
            .into());
        }
    };
    let policies = policies(&args)?;
    if args.decisions.is_some() {
        decisions_apply(&args, &policies)?;
    }
    let many = [("--corpus", args.corpus.is_some()), ("--suite", args.suite)];
    let one_run = [
        ("--reserve", !args.reserve.is_empty()),
        ("--ledger", args.ledger.is_some()),
    ];
    for (flag, _) in one_run.iter().filter(|(_, given)| *given) {
        if let Some((other, _)) = many.iter().find(|(_, given)| *given) {
            return Err(BadInput(format!(
                "{flag}: cannot be combined with {other}; it concerns one run, give --scenario"
            ))
            .into());
        }
    }
    if let Some(n) = &args.corpus {
        return corpus(&args, n, &policies, json).await;
    }
    if let Some(dir) = &args.golden {
        golden_apply(&args)?;
        return golden(dir, args.check).await;
    }
    if args.suite {
        return suite(&policies, args.seed, json, markdown).await;
    }
    let reservations = reservations(&args)?;
    if let Some(path) = &args.ledger {
        if !policies.contains(&Policy::Headroom) {
            return Err(BadInput(
                "--ledger: only Headroom keeps a ledger; add --policy headroom".into(),
            )
            .into());
        }
        if path.exists() {
            return Err(BadInput(format!(
                "--ledger: {} exists; name a new file (a simulated history is never mixed into another)",
                path.display()
            ))
            .into());
        }
    }
    let name = args.scenario.as_deref().unwrap_or_default();
    let mut scenario = headroom_sim::scenario::load(name).map_err(|e| bad("--scenario", e))?;
    let spot_traces = args
        .spot_traces
        .iter()
        .map(|spec| headroom_sim::spot_trace::SpotTrace::read(spec, &scenario))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("--spot-trace", e))?;
    headroom_sim::spot_trace::apply(&mut scenario, &spot_traces);
    let trace = match &args.trace {
        Some(path) => Some(
            headroom_sim::arrivals::read_trace(path, scenario.trace_tier)
                .map_err(|e| bad("--trace", e))?,
        ),
        None => None,
    };
    let started = stopwatch();
    let mut reserved = scenario.clone();
    for spec in &reservations {
        headroom_sim::reserve::reserve(&mut reserved, spec).map_err(|e| bad("--reserve", e))?;
    }
    let without = if reservations.is_empty() {
        None
    } else {
        let run = headroom_sim::run(&scenario, trace.clone(), &policies, args.seed);
        Some(quietly(run).await.map_err(|e| bad("--scenario", e))?)
    };
    let run = headroom_sim::run_keeping_ledger(
        &reserved,
        trace,
        &policies,
        args.seed,
        args.ledger.as_deref(),
    );
    let mut report = quietly(run).await.map_err(|e| bad("--scenario", e))?;
    report.wall_time_s = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    report.simulated_requests_per_s =
        (report.simulated_requests() as f64 / report.wall_time_s.max(1e-3)).round();

    if let Some(path) = &args.timeseries {
        std::fs::write(path, headroom_sim::render::timeseries_csv(&report)).map_err(|e| {
            BadInput(format!(
                "--timeseries: cannot write {} ({e}); pass a writable path",
                path.display()
            ))
        })?;
    }
    if let Some(path) = &args.decisions {
        write_decisions(path, &report)?;
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, headroom_sim::render::svg(&report)).map_err(|e| {
            BadInput(format!(
                "--plot: cannot write {} ({e}); pass a writable path",
                path.display()
            ))
        })?;
    }
    if let Some(without) = &without {
        if json {
            let both = serde_json::json!({ "without": without, "with": report });
            println!("{}", serde_json::to_string_pretty(&both)?);
        } else {
            println!("Without the reservation:");
            print!("{}", headroom_sim::render::table(without));
            println!("\nWith {}:", args.reserve.join(", "));
            print!("{}", headroom_sim::render::table(&report));
            print!(
                "{}",
                headroom_sim::render::reservation_comparison(without, &report)
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", headroom_sim::render::table(&report));
        println!(
            "simulated {} requests in {:.2} s of wall time ({:.0} requests/s)",
            report.simulated_requests(),
            report.wall_time_s,
            report.simulated_requests_per_s
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The `--reserve` flags, each checked: one line naming the flag and the fix.
fn reservations(args: &SimulateArgs) -> anyhow::Result<Vec<headroom_sim::reserve::ReserveSpec>> {
    args.reserve
        .iter()
        .map(|text| {
            text.parse()
                .map_err(|e: String| BadInput(format!("--reserve: {e}")).into())
        })
        .collect()
}

/// `--decisions` explains one run of Headroom: refused (one line) with a suite or a corpus, or
/// when Headroom is not among the policies.
fn decisions_apply(args: &SimulateArgs, policies: &[Policy]) -> anyhow::Result<()> {
    let many = [("--suite", args.suite), ("--corpus", args.corpus.is_some())];
    if let Some((flag, _)) = many.iter().find(|(_, given)| *given) {
        return Err(BadInput(format!(
            "--decisions: cannot be combined with {flag}; it explains one run, give --scenario"
        ))
        .into());
    }
    if !policies.contains(&Policy::Headroom) {
        return Err(BadInput(
            "--decisions: Headroom's decisions need the headroom policy; add --policy headroom"
                .to_string(),
        )
        .into());
    }
    Ok(())
}

/// Headroom's decision log of the run as JSON lines.
fn write_decisions(path: &std::path::Path, report: &headroom_sim::Report) -> anyhow::Result<()> {
    let mut text = String::new();
    let log = report
        .policies
        .iter()
        .filter(|p| p.policy == Policy::Headroom.as_str())
        .flat_map(|p| &p.decisions);
    for entry in log {
        text.push_str(&serde_json::to_string(entry)?);
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|e| {
        BadInput(format!(
            "--decisions: cannot write {} ({e}); pass a writable path",
            path.display()
        ))
    })?;
    Ok(())
}

/// `--corpus N`: generate, dump if asked, run every member under `policies`, print the
/// scoreboard. The flags are checked here so each mistake is one line naming the flag.
async fn corpus(
    args: &SimulateArgs,
    n: &str,
    policies: &[Policy],
    json: bool,
) -> anyhow::Result<ExitCode> {
    use headroom_sim::corpus::{self, MAX_SCENARIOS, summary};
    let conflicting = [
        ("--scenario", args.scenario.is_some()),
        ("--suite", args.suite),
        ("--trace", args.trace.is_some()),
        ("--timeseries", args.timeseries.is_some()),
        ("--plot", args.plot.is_some()),
    ];
    if let Some((flag, _)) = conflicting.iter().find(|(_, given)| *given) {
        return Err(BadInput(format!(
            "--corpus: cannot be combined with {flag}; drop one of them"
        ))
        .into());
    }
    let n = match n.parse::<u64>() {
        Ok(k) if (1..=u64::from(MAX_SCENARIOS)).contains(&k) => k as u32,
        Ok(k) => {
            return Err(BadInput(format!(
                "--corpus: {k} scenarios is out of range; ask for 1 to {MAX_SCENARIOS}"
            ))
            .into());
        }
        Err(_) => {
            return Err(BadInput(format!(
                "--corpus: {n:?} is not a whole number; ask for 1 to {MAX_SCENARIOS} scenarios"
            ))
            .into());
        }
    };
    let seed = args.seed.unwrap_or(0);
    let members = corpus::corpus(n, seed).map_err(|e| bad("--corpus", e))?;
    if let Some(dir) = &args.corpus_dump {
        let cannot = |e: std::io::Error| {
            BadInput(format!(
                "--corpus-dump: cannot write to {} ({e}); pass a writable directory",
                dir.display()
            ))
        };
        std::fs::create_dir_all(dir).map_err(cannot)?;
        for m in &members {
            std::fs::write(dir.join(format!("{}.toml", m.params.name)), &m.toml).map_err(cannot)?;
        }
    }
    let started = stopwatch();
    let mut runs = Vec::new();
    for m in members {
        // Each member runs on its own seed, as its dumped file replays.
        let report = quietly(headroom_sim::run(&m.scenario, None, policies, None))
            .await
            .map_err(|e| bad("--corpus", e))?;
        runs.push(summary::Scored {
            traits: m.params.traits(),
            duration_s: m.scenario.duration_s,
            // A daily ceiling, and every member runs for less than a day.
            budget_usd: m.params.budget.map(|b| b.ceiling_usd),
            report,
        });
    }
    let wall = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    let report = summary::summarize(seed, &runs, wall);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", summary::table(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// Every built-in scenario under `policies`, each with its name.
async fn suite_reports(
    policies: &[Policy],
    seed: Option<u64>,
) -> anyhow::Result<Vec<(&'static str, headroom_sim::Report)>> {
    let mut reports = Vec::new();
    for name in headroom_sim::scenario::built_in_names() {
        let scenario = headroom_sim::scenario::load(name).map_err(|e| bad("--suite", e))?;
        let started = stopwatch();
        let mut report = quietly(headroom_sim::run(&scenario, None, policies, seed))
            .await
            .map_err(|e| bad("--suite", e))?;
        report.wall_time_s = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
        report.simulated_requests_per_s =
            (report.simulated_requests() as f64 / report.wall_time_s.max(1e-3)).round();
        reports.push((name, report));
    }
    Ok(reports)
}

/// Every built-in scenario under `policies`: one scoreboard.
async fn suite(
    policies: &[Policy],
    seed: Option<u64>,
    json: bool,
    markdown: bool,
) -> anyhow::Result<ExitCode> {
    let reports: Vec<_> = suite_reports(policies, seed)
        .await?
        .into_iter()
        .map(|(_, report)| report)
        .collect();
    if json {
        println!("{}", headroom_sim::render::suite_json(&reports));
    } else if markdown {
        print!("{}", headroom_sim::render::suite_markdown(&reports));
    } else {
        print!("{}", headroom_sim::render::suite_table(&reports));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--golden` keeps the suite as it is built in: every policy, each scenario's own seed, no
/// printed format.
fn golden_apply(args: &SimulateArgs) -> anyhow::Result<()> {
    let changed = [
        ("--policy", !args.policies.is_empty()),
        ("--seed", args.seed.is_some()),
        ("--format", args.format != "table"),
    ];
    match changed.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(BadInput(format!(
            "{flag}: cannot be combined with --golden; the golden files are of every policy on each scenario's own seed, drop {flag}"
        ))
        .into()),
        None => Ok(()),
    }
}

/// The suite's golden files in `dir`: written, or with `check` compared (exit 1 when any
/// differs, each named with its first differing line).
async fn golden(dir: &std::path::Path, check: bool) -> anyhow::Result<ExitCode> {
    use headroom_sim::golden;
    let reports = suite_reports(&Policy::ALL, None).await?;
    let mut files = Vec::new();
    for (name, report) in &reports {
        let text = golden::decisions(name, report)
            .ok_or_else(|| anyhow::anyhow!("the suite ran no Headroom policy on {name}"))?;
        files.push((golden::decisions_file(name), text));
    }
    let boards: Vec<_> = reports.into_iter().map(|(_, report)| report).collect();
    files.push((
        golden::SCOREBOARD.to_string(),
        headroom_sim::render::suite_markdown(&boards),
    ));
    if !check {
        std::fs::create_dir_all(dir).map_err(|e| {
            BadInput(format!(
                "--golden: cannot create {} ({e}); pass a writable directory",
                dir.display()
            ))
        })?;
        for (file, text) in &files {
            let path = dir.join(file);
            std::fs::write(&path, text).map_err(|e| {
                BadInput(format!(
                    "--golden: cannot write {} ({e}); pass a writable directory",
                    path.display()
                ))
            })?;
        }
        println!("wrote {} golden files to {}", files.len(), dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let mut differ = Vec::new();
    for (file, text) in &files {
        let path = dir.join(file);
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some(difference) = golden::first_difference(&kept, text) {
            differ.push(format!("{}: {difference}", path.display()));
        }
    }
    if differ.is_empty() {
        println!(
            "{} golden files in {} agree with the run",
            files.len(),
            dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "{} of {} golden files differ from the run; review the change, then rewrite them (and the README's table) with scripts/scoreboard:\n{}",
        differ.len(),
        files.len(),
        differ.join("\n")
    );
    Ok(ExitCode::from(1))
}

#[cfg(test)]
mod tests {
    use clap::Args;

    #[test]
    fn the_help_names_every_built_in_scenario() {
        let command = super::SimulateArgs::augment_args(clap::Command::new("simulate"));
        let help = command
            .get_arguments()
            .find(|a| a.get_id() == "scenario")
            .and_then(|a| a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        for name in headroom_sim::scenario::built_in_names() {
            assert!(
                help.contains(name),
                "--scenario's help lacks {name}: {help}"
            );
        }
    }
}
