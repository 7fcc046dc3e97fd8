//! A pool whose signals come from a real Prometheus (Debian's `prometheus` package, started here
//! on a free loopback port) scraping three vLLM-shaped exporters whose queues the test drives.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headroom_cloud::SystemClock;
use headroom_config::Config;
use headroom_core::controller::ScalingHold;
use headroom_engine::prometheus::check_signal_files;
use headroom_engine::{Engine, PoolStatus};
use headroom_testkit::prometheus::{Pod, Prometheus};

fn config(prometheus_port: u16) -> String {
    super::CONFIG.replacen(
        "[pools.ladder]",
        &format!(
            "[pools.signals]\nsource = \"prometheus\"\nurl = \"http://127.0.0.1:{prometheus_port}\"\ninterval = \"1s\"\ntimeout = \"1s\"\n[pools.signals.queries]\nqueue_depth = 'sum(vllm:num_requests_waiting{{model_name=\"llama-70b\"}})'\narrival_rate_rps = 'sum(rate(vllm:request_success_total{{model_name=\"llama-70b\"}}[5s]))'\n[pools.ladder]"
        ),
        1,
    ) + "signal_max_age = \"4s\"\n"
}

/// An engine on `text` on the real clock (Prometheus stamps its samples with it), with the
/// rig that holds its ledger.
async fn live_engine(text: &str) -> (headroom_testkit::Rig, Arc<Engine>) {
    let rig = headroom_testkit::Rig::new(super::CONFIG).await;
    let engine = Engine::new(
        Arc::new(Config::parse(text, "test").unwrap()),
        rig.ledger.clone(),
        rig.sim_cloud(),
        Arc::new(SystemClock::new()),
    );
    (rig, engine)
}

/// Ticks the engine (on the real clock: Prometheus stamps its samples with it) until `wanted`
/// holds for the pool's status, or fails after `within`, showing the last status.
async fn tick_until(
    engine: &Engine,
    within: Duration,
    what: &str,
    wanted: impl Fn(&PoolStatus) -> bool,
) -> PoolStatus {
    let pool = "llm".parse().unwrap();
    // Attempts a quarter-second apart, rather than a deadline on a clock the tests may not read.
    let attempts = within.as_millis() / 250;
    let mut attempt = 0;
    loop {
        engine.tick().await.unwrap();
        let status = engine.pool_status(&pool).unwrap();
        if wanted(&status) {
            return status;
        }
        attempt += 1;
        assert!(attempt < attempts, "{what}: {status:#?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Ticks until the pool's signal source fails, and returns why (what the pool's status says).
async fn source_error(engine: &Engine, what: &str) -> String {
    let status = tick_until(engine, Duration::from_secs(15), what, |s| {
        s.signal_source_error.is_some()
    })
    .await;
    status.signal_source_error.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_follows_its_fleet_through_prometheus_and_holds_when_prometheus_stops() {
    let pods = [Pod::start(7), Pod::start(5), Pod::start(9)];
    // Each pod serves 10 requests a second: 30 a second in all.
    let stop_serving = Arc::new(AtomicBool::new(false));
    let serving = (pods.clone(), stop_serving.clone());
    std::thread::spawn(move || {
        while !serving.1.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
            for pod in &serving.0 {
                pod.served.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let mut prometheus = Prometheus::start(&pods.iter().map(|p| p.port).collect::<Vec<_>>());

    let (_rig, engine) = live_engine(&config(prometheus.port)).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let readers = tokio::spawn(engine.clone().run_scrapers(async {
        let _ = stopped.await;
    }));

    // The pool reads the fleet's summed queue, and the rate Prometheus takes per series (about
    // 30 a second once its 5-second window holds several scrapes of every pod).
    let status = tick_until(
        &engine,
        Duration::from_secs(30),
        "the fleet's queue of 21, 30 arrivals a second",
        |s| {
            s.last_signal.is_some_and(|l| {
                l.queue_depth == 21
                    && l.arrival_rate_rps
                        .is_some_and(|r| (24.0..=36.0).contains(&r))
            })
        },
    )
    .await;
    assert_eq!(status.scaling_hold, None, "{status:#?}");

    pods[1].waiting.store(40, Ordering::SeqCst);
    tick_until(
        &engine,
        Duration::from_secs(15),
        "the queue grows to 56",
        |s| s.last_signal.is_some_and(|l| l.queue_depth == 56),
    )
    .await;

    // A pod restarts: its counter starts again from zero. The rate never spikes or dips
    // below zero (the pod's 5,000 earlier requests are not counted again, nor taken away).
    pods[0].served.store(0, Ordering::SeqCst);
    let seen = Mutex::new(Vec::new());
    // For 8 seconds.
    for _ in 0..32 {
        engine.tick().await.unwrap();
        if let Some(rate) = engine
            .pool_status(&"llm".parse().unwrap())
            .and_then(|s| s.last_signal)
            .and_then(|l| l.arrival_rate_rps)
        {
            seen.lock().unwrap().push(rate);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let rates = seen.into_inner().unwrap();
    assert!(
        rates.iter().all(|r| (0.0..=60.0).contains(r)),
        "rates around a restart: {rates:?}"
    );

    // A pod leaves: Prometheus marks its series stale and the sum is the two that remain.
    pods[2].gone.store(true, Ordering::SeqCst);
    tick_until(
        &engine,
        Duration::from_secs(20),
        "the queue without the third pod",
        |s| s.last_signal.is_some_and(|l| l.queue_depth == 47),
    )
    .await;

    // Prometheus stops: the pool keeps its last signal until it is stale, then holds, says why
    // and alerts.
    prometheus.stop();
    let status = tick_until(
        &engine,
        Duration::from_secs(20),
        "a hold on a stale signal",
        |s| s.scaling_hold == Some(ScalingHold::SignalStale),
    )
    .await;
    let reason = status.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("the signal source failed: querying http://127.0.0.1"),
        "{reason}"
    );
    assert!(
        status.signal_source_error.is_some(),
        "the status names the failure: {status:#?}"
    );
    assert!(
        engine
            .active_alerts()
            .iter()
            .any(|a| a.alert.name == "PoolSignalsMissing"
                && a.alert.summary.contains("signal source failed")),
        "{:#?}",
        engine.active_alerts()
    );

    stop_serving.store(true, Ordering::SeqCst);
    let _ = stop.send(());
    readers.await.unwrap();
}

/// A bcrypt hash of "fleet-secret", as Prometheus's web configuration takes passwords.
const FLEET_SECRET_HASH: &str = "$2b$04$IRd1jUzTxNC73Hh2VDd/9OaV/zsNkTQb0JcC5b9VzuJRRcrciQdYu";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_behind_tls_and_basic_auth_is_read_with_the_files_configured() {
    let pod = Pod::start(13);
    // A self-signed certificate for 127.0.0.1: the server's, and the CA Headroom is told to trust.
    let web_config = |dir: &std::path::Path| {
        let status = std::process::Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", "/CN=127.0.0.1"])
            .args(["-addext", "subjectAltName=IP:127.0.0.1"])
            .args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .arg("-keyout")
            .arg(dir.join("tls.key"))
            .arg("-out")
            .arg(dir.join("tls.crt"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl");
        assert!(status.success());
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  headroom: '{FLEET_SECRET_HASH}'\n",
            dir.join("tls.crt").display(),
            dir.join("tls.key").display()
        )
    };
    let prometheus = Prometheus::start_with(&[pod.port], Some(&web_config));
    let secrets = tempfile::tempdir().unwrap();
    let ca = secrets.path().join("ca.pem");
    std::fs::copy(prometheus.dir().join("tls.crt"), &ca).unwrap();
    let password = secrets.path().join("password");
    std::fs::write(&password, "fleet-secret\n").unwrap();
    let text = config(0)
        .replace("http://127.0.0.1:0", &prometheus.url())
        .replace(
            "[pools.signals.queries]",
            &format!(
                "basic_auth_username = \"headroom\"\nbasic_auth_password_file = \"{}\"\nca_file = \"{}\"\n[pools.signals.queries]",
                password.display(),
                ca.display()
            ),
        );
    let (_rig, engine) = live_engine(&text).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let readers = tokio::spawn(engine.clone().run_scrapers(async {
        let _ = stopped.await;
    }));
    tick_until(
        &engine,
        Duration::from_secs(30),
        "the pod's queue over TLS",
        |s| s.last_signal.is_some_and(|l| l.queue_depth == 13),
    )
    .await;

    // A wrong password: Prometheus refuses, the pool says so, and the password is not in it.
    std::fs::write(&password, "guess\n").unwrap();
    let error = source_error(&engine, "a refused query").await;
    assert!(error.contains("401"), "{error}");
    assert!(
        !error.contains("guess") && !error.contains("fleet-secret"),
        "{error}"
    );
    let _ = stop.send(());
    readers.await.unwrap();
}

/// Prometheus checks basic auth but not bearer tokens, so the token is checked by a gate in
/// front of the real server (`BearerGate`, as kube-rbac-proxy or an ingress guards one): the
/// token file's content goes out as `Authorization: Bearer …`, a rotated file is read at the
/// next query, and neither a refusal nor a missing file shows the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_file_is_sent_read_again_after_rotation_and_never_shown() {
    use headroom_testkit::prometheus::BearerGate;
    let pod = Pod::start(13);
    let prometheus = Prometheus::start(&[pod.port]);
    let gate = BearerGate::start(prometheus.port, "tok-current-6f1c");
    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, "tok-current-6f1c\n").unwrap();
    let text = config(0)
        .replace("http://127.0.0.1:0", &gate.url())
        .replace(
            "[pools.signals.queries]",
            &format!(
                "bearer_token_file = \"{}\"\n[pools.signals.queries]",
                token.display()
            ),
        );
    let config = Config::parse(&text, "test").unwrap();
    assert_eq!(check_signal_files(&config, "test"), Ok(()));
    let (_rig, engine) = live_engine(&text).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let readers = tokio::spawn(engine.clone().run_scrapers(async {
        let _ = stopped.await;
    }));
    tick_until(
        &engine,
        Duration::from_secs(30),
        "the pod's queue through the gate",
        |s| s.last_signal.is_some_and(|l| l.queue_depth == 13),
    )
    .await;
    assert!(
        gate.seen().iter().any(|h| h == "Bearer tok-current-6f1c"),
        "the file's content, trimmed, as a bearer token: {:?}",
        gate.seen()
    );

    // The file is rotated to a token the gate does not take: the next query sends it and is
    // refused; the pool says so without the token.
    std::fs::write(&token, "tok-revoked-93ab\n").unwrap();
    let error = source_error(&engine, "a refused query").await;
    assert!(error.contains("401"), "{error}");
    assert!(gate.seen().iter().any(|h| h == "Bearer tok-revoked-93ab"));
    // Rotated back: read again at the next query, the pool reads its signal again.
    std::fs::write(&token, "tok-current-6f1c\n").unwrap();
    tick_until(&engine, Duration::from_secs(15), "reads again", |s| {
        s.signal_source_error.is_none() && s.last_signal.is_some_and(|l| l.queue_depth == 13)
    })
    .await;

    // The file goes away: the read fails naming the file, and the load-time check names the key.
    std::fs::remove_file(&token).unwrap();
    let missing = source_error(&engine, "a missing token").await;
    assert!(
        missing.contains(&format!("cannot read {}", token.display())),
        "{missing}"
    );
    let check = check_signal_files(&config, "test").unwrap_err().0;
    assert_eq!(check.len(), 1, "{check:?}");
    assert!(
        check[0].contains("`pools[0].signals.bearer_token_file`")
            && check[0].contains("cannot read"),
        "{check:?}"
    );
    std::fs::write(&token, "  \n").unwrap();
    let empty = check_signal_files(&config, "test").unwrap_err().0;
    assert!(empty[0].contains("is empty"), "{empty:?}");
    for said in [&error, &missing, &check[0], &empty[0]] {
        assert!(
            !said.contains("tok-current") && !said.contains("tok-revoked"),
            "a token is never shown: {said}"
        );
    }
    let _ = stop.send(());
    readers.await.unwrap();
}

/// A declared percentile of the replicas' oldest ages is the same number whether Headroom
/// scrapes the pods itself (`[pools.scrape] oldest_age_aggregation = "p90"`) or a real
/// Prometheus answers the PromQL a replay derives from that table (`quantile(0.90, …)`); the
/// maximum likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_percentile_of_the_replicas_ages_is_what_prometheus_quantile_answers() {
    use headroom_config::prometheus::{PrometheusAuth, PrometheusSource, SignalQueries};
    use headroom_config::scrape::{AgeAggregation, ScrapeSelectors, Selector};
    use headroom_engine::scrape::Scraper;
    // Ten replicas: nine with requests 1.0 to 1.8 s old, one with a request stuck for 600 s.
    let pods: Vec<_> = (0..10u64)
        .map(|i| {
            let pod = Pod::start(1);
            let age = if i == 9 { 600_000 } else { 1_000 + 100 * i };
            pod.oldest_ms.store(age, Ordering::SeqCst);
            pod
        })
        .collect();
    let prometheus = Prometheus::start(&pods.iter().map(|p| p.port).collect::<Vec<_>>());
    let series: Selector = r#"router_oldest_waiting_seconds{model_name="llama-70b"}"#
        .parse()
        .unwrap();
    let selectors: ScrapeSelectors = toml::from_str(&format!(
        "queue_depth = 'vllm:num_requests_waiting'\noldest_age_s = '{series}'\n"
    ))
    .unwrap();
    let urls: Vec<String> = pods
        .iter()
        .map(|p| format!("http://127.0.0.1:{}/metrics", p.port))
        .collect();
    let pages: Vec<String> = urls
        .iter()
        .map(|u| {
            ureq::get(u)
                .call()
                .unwrap()
                .body_mut()
                .read_to_string()
                .unwrap()
        })
        .collect();
    let pages: Vec<(&str, &str)> = urls
        .iter()
        .map(String::as_str)
        .zip(pages.iter().map(String::as_str))
        .collect();
    let now = || headroom_cloud::Clock::now(&SystemClock::new());
    for age in [AgeAggregation::Percentile(90), AgeAggregation::Max] {
        let scraped = Scraper::with_age(age)
            .fleet_signal(&selectors, &pages, now())
            .unwrap()
            .oldest_age_s
            .unwrap();
        let source = PrometheusSource {
            url: prometheus.url(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            auth: PrometheusAuth::None,
            ca_file: None,
            queries: SignalQueries::from_selectors(&selectors, age, "1m"),
        };
        // Until Prometheus has scraped all ten pods (its answer changes no more after that).
        let mut attempts = 0;
        let queried = loop {
            let source = source.clone();
            let read = tokio::task::spawn_blocking(move || {
                headroom_engine::prometheus::read(&source, now, Duration::from_secs(30))
            })
            .await
            .unwrap();
            if let Ok(signal) = &read
                && let Some(queried) = signal.oldest_age_s
                && (queried - scraped).abs() < 1e-9
            {
                break queried;
            }
            attempts += 1;
            assert!(
                attempts < 100,
                "{age}: Prometheus answered {read:?}, the scrape {scraped}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        match age {
            AgeAggregation::Max => assert_eq!(queried, 600.0),
            // Rank 0.9 × 9 = 8.1: a tenth of the way from 1.8 s to 600 s.
            AgeAggregation::Percentile(_) => assert!((queried - 61.62).abs() < 1e-9, "{queried}"),
        }
    }
}
