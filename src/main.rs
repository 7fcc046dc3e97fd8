//! The `headroom` command.

mod bench;
mod cloud;
mod cluster;
mod demo;
mod migrate;
mod replay;
mod report;
mod simulate;
mod telemetry;
mod tls;
mod token;
mod whatif;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use headroom_cloud::{Clock, SystemClock};
use headroom_config::Config;
use headroom_engine::Engine;
use headroom_ledger::{Ledger, PostgresLedger, SqliteLedger};

/// The built-in configuration `demo` runs: the documented example.
pub const EXAMPLE_CONFIG: &str = include_str!("../config/headroom.example.toml");

#[derive(Debug, Parser)]
#[command(
    name = "headroom",
    version,
    about = "GPU capacity orchestrator: warm pools, fallback and budgets on an append-only ledger"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the API, the simulated cloud and a traffic burst, with no set-up.
    Demo(demo::DemoArgs),
    /// Run the API and the reconcile loop from a configuration file.
    Serve {
        /// The TOML configuration: a file, or `-` for standard input. Without it, the
        /// configuration is the text of the environment variable HEADROOM_CONFIG.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Overrides the file's `listen` (HOST:PORT).
        #[arg(long, value_name = "ADDR", value_parser = listen_addr)]
        listen: Option<SocketAddr>,
        /// Overrides the file's `database_url` (sqlite://PATH or postgres://…).
        #[arg(long, value_name = "URL", env = "HEADROOM_DATABASE_URL")]
        database_url: Option<String>,
        /// Serve without authentication; allowed on a loopback address only.
        #[arg(long)]
        no_auth: bool,
        #[command(flatten)]
        external_metrics: ExternalMetricsArgs,
    },
    /// Measure Headroom on this machine.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Reports for finance.
    Report {
        #[command(subcommand)]
        command: ReportCommand,
    },
    /// How many replicas a backlog or an HPA metric calls for, and why (the controller's rules).
    WhatIf(whatif::WhatIfArgs),
    /// Replay a scenario or a trace against Headroom and the baselines, in virtual time.
    Simulate(simulate::SimulateArgs),
    /// Replay a pool's recorded signals from Prometheus through the controller (the shadow
    /// experiment on history) and print the promotion report.
    Replay(replay::ReplayArgs),
    /// Create, list and revoke API tokens.
    Token {
        #[command(subcommand)]
        command: token::TokenCommand,
    },
    /// Print the API's OpenAPI document (the committed `openapi.json` must match it).
    Openapi,
    /// Create or upgrade the ledger's schema (PostgreSQL: as the role that owns it), and grant
    /// the role `serve` runs as SELECT and INSERT only (and DELETE on the tables pruned to a
    /// retention).
    Migrate(migrate::MigrateArgs),
    /// Work with configuration files.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ReportCommand {
    /// Spend, holds, forecast, requested versus delivered and refusals, for any range and grouping.
    Budget(report::BudgetReportArgs),
    /// What capacity to commit to, per pool and instance family: the demand profile, the
    /// refusals a reservation would have avoided, the savings and the risk.
    Reservations(report::ReservationsReportArgs),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Capacity-request admissions per second through the HTTP API, beside pgbench.
    Admissions(bench::AdmissionsArgs),
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file; each problem is one line naming the key and the fix.
    Check {
        /// The file, or `-` for standard input.
        file: PathBuf,
    },
}

/// Exit code for bad input (configuration or arguments), as clap uses for usage errors.
const EXIT_BAD_INPUT: u8 = 2;

/// A listen address: `IP:PORT`, or `HOST:PORT` for a name that resolves (`localhost:8080`).
pub(crate) fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let port = text
        .rsplit_once(':')
        .map(|(host, port)| (host, port.parse::<u16>()));
    match port {
        Some((host, Ok(_))) if !host.is_empty() => std::net::ToSocketAddrs::to_socket_addrs(text)
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| {
                format!("host {host:?} does not resolve; use an IP address, e.g. 127.0.0.1:8080")
            }),
        Some(_) => {
            Err("is not HOST:PORT with a port from 0 to 65535; use e.g. 127.0.0.1:8080".to_string())
        }
        None => Err(format!(
            "needs a port; use HOST:PORT, e.g. {}:8080",
            text.trim_matches(['[', ']'])
        )),
    }
}

/// Parses the command line; a value clap refuses is one line naming the flag, exit code 2.
fn parse_cli() -> Cli {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let e = match Cli::try_parse() {
        Ok(cli) => return cli,
        Err(e) => e,
    };
    if !matches!(
        e.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        e.exit();
    }
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    let flag = context(ContextKind::InvalidArg).unwrap_or_default();
    let flag = flag.split_whitespace().next().unwrap_or("");
    let value = context(ContextKind::InvalidValue).unwrap_or_default();
    let why = match (e.kind(), std::error::Error::source(&e)) {
        (ErrorKind::ValueValidation, Some(source)) => source.to_string(),
        _ => match e.get(ContextKind::ValidValue) {
            Some(ContextValue::Strings(valid)) => format!("use one of {}", valid.join(", ")),
            _ => "is not accepted".to_string(),
        },
    };
    // A parser's own message may start with the value (clap's ranges do): not twice.
    if why.starts_with(&value) {
        eprintln!("error: {flag}: {why}");
    } else {
        eprintln!("error: {flag}: {value:?} {why}");
    }
    std::process::exit(i32::from(EXIT_BAD_INPUT));
}

fn main() -> ExitCode {
    let cli = parse_cli();
    // The demo prints its own progress lines: its logs stay out of them (errors only) unless
    // RUST_LOG asks for more.
    let default_level = match cli.command {
        Command::Demo(_) => "error",
        _ => "warn",
    };
    let telemetry = match telemetry::init(default_level) {
        Ok(telemetry) => telemetry,
        Err(line) => {
            eprintln!("error: {line}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    // The simulator is one sequential loop in virtual time: on a single thread it does not pay
    // a cross-thread wake-up for every ledger query. Everything else serves concurrently.
    let runtime = if matches!(cli.command, Command::Simulate(_)) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => demo::run(args).await,
            Command::Serve {
                config,
                listen,
                database_url,
                no_auth,
                external_metrics,
            } => {
                serve(
                    config.as_deref(),
                    listen,
                    database_url,
                    no_auth,
                    external_metrics.settings()?,
                )
                .await
            }
            Command::Migrate(args) => migrate::run(args).await,
            Command::WhatIf(args) => whatif::run(args),
            Command::Simulate(args) => simulate::run(args).await,
            Command::Replay(args) => replay::run(args).await,
            Command::Openapi => {
                print!("{}", headroom_api::openapi());
                Ok(ExitCode::SUCCESS)
            }
            Command::Token { command } => token::run(command).await,
            Command::Report {
                command: ReportCommand::Budget(args),
            } => report::budget(args).await,
            Command::Report {
                command: ReportCommand::Reservations(args),
            } => report::reservations(args).await,
            Command::Bench {
                command: BenchCommand::Admissions(args),
            } => bench::admissions(args).await,
            Command::Config {
                command: ConfigCommand::Check { file },
            } => config_check(&file),
        }
    });
    drop(runtime);
    drop(telemetry);
    match result {
        Ok(code) => code,
        Err(e) => {
            if let Some(BadInput(line)) = e.downcast_ref::<BadInput>() {
                eprintln!("error: {line}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            if let Some(errors) = e.downcast_ref::<headroom_config::ConfigErrors>() {
                for line in &errors.0 {
                    eprintln!("error: {line}");
                }
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, a cause left out when the message before it already
/// ends with it (an I/O error's text is repeated by the database error that wraps it).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain().map(|c| c.to_string().replace('\n', " ")) {
        if line.is_empty() {
            line = cause;
        } else if !line.ends_with(&cause) {
            line = format!("{line}: {cause}");
        }
    }
    line
}

/// A mistake in what the user typed: reported as one line, exit code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// The environment variable `serve` reads its configuration from when `--config` is not given.
const CONFIG_VAR: &str = "HEADROOM_CONFIG";

/// A configuration's text and where it came from (named in every message about it): a file,
/// standard input (`-`), or, with no path, the variable [`CONFIG_VAR`].
fn config_text(path: Option<&Path>) -> Result<(String, String), BadInput> {
    match path {
        Some(p) if p == Path::new("-") => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(|e| {
                BadInput(format!("--config -: cannot read standard input ({e})"))
            })?;
            Ok((text, "standard input".to_string()))
        }
        Some(p) => std::fs::read_to_string(p)
            .map(|text| (text, p.display().to_string()))
            .map_err(|e| BadInput(format!("--config: cannot read {} ({e}); pass the path of a TOML configuration such as config/headroom.example.toml", p.display()))),
        None => match std::env::var(CONFIG_VAR) {
            Ok(text) if !text.trim().is_empty() => Ok((text, CONFIG_VAR.to_string())),
            _ => Err(BadInput(format!(
                "--config: missing; pass a TOML file, `--config -` to read it from standard input, or set {CONFIG_VAR} to its text"
            ))),
        },
    }
}

pub(crate) fn load_config(path: Option<&Path>) -> anyhow::Result<(Config, String)> {
    let (text, origin) = config_text(path)?;
    Ok((Config::parse(&text, &origin)?, origin))
}

fn config_check(path: &Path) -> anyhow::Result<ExitCode> {
    let (config, origin) = load_config(Some(path))?;
    cloud::check(&config)?;
    cluster::check(&config, &origin)?;
    println!(
        "{origin}: ok ({} offerings, {} pools, {} budgets)",
        config.offerings.len(),
        config.pools.len(),
        config.budgets.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Opens the ledger a reading command (`report`, `token list` and `revoke`) names, which must
/// exist: a mistyped SQLite path is an error, not a new empty ledger and a $0 report.
pub async fn open_existing_ledger(url: &str) -> anyhow::Result<Arc<dyn Ledger>> {
    if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .map(|rest| rest.split('?').next().unwrap_or(rest))
        .filter(|path| !path.is_empty() && !path.starts_with(':'))
        && !Path::new(path).exists()
    {
        return Err(BadInput(format!(
            "--database-url: no ledger at {path}; pass the SQLite file `serve` or `demo --database-url` wrote (only serve, migrate and demo create one)"
        ))
        .into());
    }
    open_ledger(url).await
}

pub async fn open_ledger(url: &str) -> anyhow::Result<Arc<dyn Ledger>> {
    let with_password = database_password()?
        .map(|password| headroom_ledger::database_url::with_password(url, &password))
        .transpose()
        .map_err(|e| BadInput(format!("--database-url: {e}")))?;
    let url = with_password.as_deref().unwrap_or(url);
    if url.starts_with("sqlite:") {
        let ledger = SqliteLedger::connect(url)
            .await
            .with_context(|| format!("opening ledger {url}"))?;
        return Ok(Arc::new(ledger));
    }
    if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let ledger = PostgresLedger::connect(url)
            .await
            .context("opening the PostgreSQL ledger")?;
        return Ok(Arc::new(ledger));
    }
    Err(BadInput(format!(
        "--database-url: {:?} is not a ledger URL; use sqlite://PATH or postgres://USER@HOST:PORT/DB",
        url.chars().take(40).collect::<String>()
    ))
    .into())
}

/// The ledger's password, when it is given apart from the URL: the contents of the file
/// `HEADROOM_DATABASE_PASSWORD_FILE` names (a mounted secret; one trailing newline dropped), or
/// `HEADROOM_DATABASE_PASSWORD`. Never both.
fn database_password() -> anyhow::Result<Option<String>> {
    let file = std::env::var_os("HEADROOM_DATABASE_PASSWORD_FILE");
    let value = std::env::var("HEADROOM_DATABASE_PASSWORD").ok();
    match (file, value) {
        (Some(_), Some(_)) => Err(BadInput(
            "HEADROOM_DATABASE_PASSWORD_FILE and HEADROOM_DATABASE_PASSWORD are both set; set one"
                .into(),
        )
        .into()),
        (Some(path), None) => {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                BadInput(format!(
                    "HEADROOM_DATABASE_PASSWORD_FILE: cannot read {}: {e}; point it at the file holding the ledger's password",
                    Path::new(&path).display()
                ))
            })?;
            let password = text.strip_suffix('\n').unwrap_or(&text);
            let password = password.strip_suffix('\r').unwrap_or(password);
            Ok(Some(password.to_string()))
        }
        (None, value) => Ok(value),
    }
}

/// The External Metrics API's TLS listener (`serve`), all four flags or none.
#[derive(Debug, clap::Args)]
struct ExternalMetricsArgs {
    /// Also serve the Kubernetes External Metrics API here over HTTPS, to the kube-apiserver's
    /// aggregation layer (an APIService); needs --tls-cert, --tls-key and --client-ca.
    #[arg(long, value_name = "ADDR", value_parser = listen_addr)]
    external_metrics_listen: Option<SocketAddr>,
    /// The serving certificate chain (PEM) for --external-metrics-listen.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The serving certificate's private key (PEM).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// The CA (PEM) whose client certificates may call: the cluster's
    /// requestheader-client-ca-file, which signs the aggregator's front-proxy certificate.
    #[arg(long, value_name = "FILE")]
    client_ca: Option<PathBuf>,
}

impl ExternalMetricsArgs {
    fn settings(self) -> anyhow::Result<Option<tls::ExternalMetricsTls>> {
        match (
            self.external_metrics_listen,
            self.tls_cert,
            self.tls_key,
            self.client_ca,
        ) {
            (None, None, None, None) => Ok(None),
            (Some(listen), Some(cert), Some(key), Some(client_ca)) => {
                Ok(Some(tls::ExternalMetricsTls {
                    listen,
                    cert,
                    key,
                    client_ca,
                }))
            }
            (listen, cert, key, ca) => {
                let missing: Vec<&str> = [
                    ("--external-metrics-listen", listen.is_none()),
                    ("--tls-cert", cert.is_none()),
                    ("--tls-key", key.is_none()),
                    ("--client-ca", ca.is_none()),
                ]
                .into_iter()
                .filter_map(|(flag, absent)| absent.then_some(flag))
                .collect();
                Err(BadInput(format!(
                    "{}: missing; the External Metrics listener needs --external-metrics-listen, --tls-cert, --tls-key and --client-ca together",
                    missing.join(", ")
                ))
                .into())
            }
        }
    }
}

async fn serve(
    path: Option<&Path>,
    listen: Option<SocketAddr>,
    database_url: Option<String>,
    no_auth: bool,
    external_metrics: Option<tls::ExternalMetricsTls>,
) -> anyhow::Result<ExitCode> {
    // TLS files are checked before anything starts: a bad one is one line, not a half-up server.
    let external_tls = match &external_metrics {
        Some(settings) => Some((settings.listen, tls::server_config(settings)?)),
        None => None,
    };
    let (config, origin) = load_config(path)?;
    // The signal sources' credential files too: a missing token is one line, not a pool that
    // holds forever once serving.
    headroom_engine::prometheus::check_signal_files(&config, &origin)?;
    let config = Arc::new(config);
    let url = database_url
        .or_else(|| config.database_url.clone())
        .unwrap_or_else(|| "sqlite://headroom.db".to_string());
    let ledger = open_ledger(&url).await?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let cloud = cloud::cloud_for(&config, clock.clone()).await?;
    let cloud_name = config
        .providers()
        .iter()
        .map(|p| match p {
            headroom_core::ProviderKind::Sim => "simulated",
            other => other.as_str(),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let cloud_name = if cloud_name.is_empty() {
        "simulated".to_string()
    } else {
        cloud_name
    };
    let cluster = cluster::cluster_for(&config, &origin).await?;
    let engine = Engine::with_cluster(config.clone(), ledger, cloud, clock, cluster);
    let addr = listen.unwrap_or(config.listen);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--listen: cannot listen on {addr}; choose a free address"))?;
    if no_auth && !addr.ip().is_loopback() {
        return Err(BadInput(format!(
            "--no-auth: refused on {addr}; the API spends money, so it runs open only on a loopback address"
        ))
        .into());
    }
    let auth = if no_auth {
        "OPEN, no authentication (loopback only)"
    } else {
        "bearer tokens required"
    };
    let external = match external_tls {
        Some((addr, config)) => {
            let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
                format!("--external-metrics-listen: cannot listen on {addr}; choose a free address")
            })?;
            eprintln!(
                "headroom serving the External Metrics API on https://{addr} (client certificates of --client-ca only)"
            );
            Some((listener, config))
        }
        None => None,
    };
    let shown = headroom_ledger::database_url::redact(&url);
    eprintln!("headroom serving on http://{addr} (ledger {shown}, cloud: {cloud_name}, {auth})");
    run_until_shutdown(engine, listener, !no_auth, external).await?;
    Ok(ExitCode::SUCCESS)
}

/// Serves the API and runs the reconcile loop until SIGINT or SIGTERM.
pub async fn run_until_shutdown(
    engine: Arc<Engine>,
    listener: tokio::net::TcpListener,
    require_auth: bool,
    external_metrics: Option<ExternalMetricsListener>,
) -> anyhow::Result<()> {
    serve_until(
        engine,
        listener,
        require_auth,
        external_metrics,
        shutdown_signal(),
    )
    .await
}

/// The External Metrics API's listener and its TLS settings.
pub type ExternalMetricsListener = (tokio::net::TcpListener, Arc<rustls::ServerConfig>);

/// Serves the API and runs the reconcile loop until `stop` completes; returns once the loop has
/// ended its tick, so nothing writes to the ledger after it.
pub async fn serve_until(
    engine: Arc<Engine>,
    listener: tokio::net::TcpListener,
    require_auth: bool,
    external_metrics: Option<ExternalMetricsListener>,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let loop_task = tokio::spawn(engine.clone().run(wait_for(stop_rx.clone())));
    let scrapers = tokio::spawn(engine.clone().run_scrapers(wait_for(stop_rx.clone())));
    let alerts = tokio::spawn(engine.clone().run_alert_delivery(wait_for(stop_rx.clone())));
    let shared_signals = tokio::spawn(engine.clone().run_signal_feed(wait_for(stop_rx.clone())));
    let api = engine.config().api.clone();
    let limits = headroom_api::Limits {
        requests_per_second: api.requests_per_second,
        burst: api.burst,
        client_requests_per_second: api.client_requests_per_second,
        client_burst: api.client_burst,
        request_timeout: api.request_timeout,
        token_recheck_interval: api.token_recheck_interval,
        token_outage_grace: api.token_outage_grace,
        trusted_proxies: api.trusted_proxies,
        header_read_timeout: api.header_read_timeout,
        idle_timeout: api.idle_timeout,
        max_connections: api.max_connections,
        max_connections_per_client: api.max_connections_per_client,
        max_requests_in_flight: api.max_requests_in_flight,
    };
    let state = headroom_api::AppState::new(engine, require_auth, limits);
    let external = external_metrics.map(|(listener, config)| {
        let app = headroom_api::external_metrics_app(state.clone());
        tokio::spawn(tls::serve(listener, config, app, wait_for(stop_rx.clone())))
    });
    let app = headroom_api::app(state.clone())
        .layer(axum::middleware::from_fn(telemetry::trace_incoming));
    // Our own accept loop: header, idle and connection limits axum::serve does not keep.
    let mut server = tokio::spawn(headroom_api::server::serve(
        listener,
        app,
        state,
        wait_for(stop_rx),
    ));
    tokio::select! {
        result = &mut server => {
            let _ = stop_tx.send(true);
            result.context("API server task")?.context("API server failed")?;
        }
        () = stop => {
            // Stop taking requests, let in-flight ones finish, and let the loop end its tick.
            let _ = stop_tx.send(true);
            server.await.context("API server task")?.context("API server failed")?;
        }
    }
    let _ = loop_task.await;
    let _ = scrapers.await;
    let _ = alerts.await;
    let _ = shared_signals.await;
    if let Some(external) = external {
        external
            .await
            .context("External Metrics listener task")?
            .context("External Metrics listener failed")?;
    }
    Ok(())
}

async fn wait_for(mut stop: tokio::sync::watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
