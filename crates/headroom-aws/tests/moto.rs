//! The AWS provider over real HTTP with the real SDK, against moto's EC2 emulator. Each test starts
//! its own moto server (tests/moto_server.py, which adds fault injection) on a free port and stops
//! it when done. moto must be installed: `python3 -m pip install 'moto[server]'`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_ec2::config::{Credentials, Region};
use headroom_aws::{AwsProvider, AwsSettings, GroupWarmPool, GroupWarmPoolStatus, WarmPoolState};
use headroom_cloud::contract::{self, ContractFixture};
use headroom_cloud::{
    Clock, CloudError, CloudProvider, Instance, InstanceId, InstancePhase, ManualClock, Quotas,
};
use headroom_config::Config;
use headroom_core::{ErrorClass, LadderRung, Market, NodeState, Priority, QuotaUnit};
use headroom_engine::Engine;
use headroom_ledger::prelude::*;
use headroom_ledger::{NewCapacityRequest, SqliteLedger};
use headroom_testkit::{Death, DiesAfterLaunch};
use support::{GOOD_TYPE, IMAGE, Moto, REGION, ZONE, clock, offering, spec};

#[tokio::test]
async fn the_provider_passes_the_contract_suite() {
    let moto = Moto::start();
    // Real EC2 answers a stockout with a server error; the provider must not retry it.
    moto.set_faults(
        r#"{"launch": {"p5.48xlarge": {"code": "InsufficientInstanceCapacity", "status": 500}}}"#,
    );
    let provider = moto.provider(clock()).await;
    let fixture = ContractFixture {
        cluster: "contract".to_string(),
        offering: offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.8048"),
        stockout: Some(offering("p5-od", "p5.48xlarge", Market::OnDemand, "55.04")),
        faults: None,
    };
    contract::run_all(&provider, &fixture).await;
    // The stockout was one request, not a retried one.
    let posts = moto.log().matches("\" 500 -").count();
    assert_eq!(posts, 1, "one refused call, no SDK retries: {}", moto.log());
    // The checks of failures, on the same server.
    let fixture = ContractFixture {
        faults: Some(Arc::new(moto.contract_faults(
            r#""launch": {"p5.48xlarge": {"code": "InsufficientInstanceCapacity", "status": 500}}"#,
            false,
        ))),
        ..fixture
    };
    contract::persistent_server_errors_are_transient_and_create_nothing(&provider, &fixture).await;
    contract::a_create_whose_first_reads_miss_is_adopted(&provider, &fixture).await;
}

/// Every error shape moto can be made to show, end to end through the SDK.
#[tokio::test]
async fn cloud_errors_arrive_classified_and_create_nothing() {
    let moto = Moto::start();
    let provider = moto.provider(clock()).await;
    let target = offering("p4d-od", "p4d.24xlarge", Market::OnDemand, "21.95");
    let cases = [
        ("InsufficientInstanceCapacity", 500, ErrorClass::Capacity),
        ("InsufficientInstanceCapacity", 400, ErrorClass::Capacity),
        ("InsufficientHostCapacity", 500, ErrorClass::Capacity),
        (
            "InsufficientReservedInstanceCapacity",
            500,
            ErrorClass::Capacity,
        ),
        ("InsufficientCapacity", 500, ErrorClass::Capacity),
        ("UnfulfillableCapacity", 500, ErrorClass::Capacity),
        ("ReservationCapacityExceeded", 400, ErrorClass::Capacity),
        ("MaxSpotInstanceCountExceeded", 400, ErrorClass::Quota),
        ("VcpuLimitExceeded", 400, ErrorClass::Quota),
        ("InstanceLimitExceeded", 400, ErrorClass::Quota),
        ("SpotMaxPriceTooLow", 400, ErrorClass::Price),
        ("RequestLimitExceeded", 503, ErrorClass::Throttled),
        ("UnauthorizedOperation", 403, ErrorClass::InvalidRequest),
        ("InvalidParameterValue", 400, ErrorClass::InvalidRequest),
        (
            "InvalidParameterCombination",
            400,
            ErrorClass::InvalidRequest,
        ),
        ("InternalError", 500, ErrorClass::Transient),
        ("SomethingNobodyKnows", 502, ErrorClass::Transient),
        ("SomethingNobodyKnows", 400, ErrorClass::Unknown),
    ];
    for (i, (code, status, class)) in cases.into_iter().enumerate() {
        moto.set_faults(&format!(
            r#"{{"launch": {{"p4d.24xlarge": {{"code": "{code}", "status": {status}}}}}}}"#
        ));
        let err = provider
            .launch(&spec("errors", &target, &format!("n{i}")))
            .await
            .expect_err(code);
        assert_eq!(err.class(), class, "{code} with {status}: {err}");
        assert_eq!(err.code(), code, "the cloud's own code is kept");
    }
    assert!(
        moto.all_instances().await.is_empty(),
        "a refused launch creates nothing"
    );

    // A spot bid below the market price, as moto's wrapper prices it.
    moto.set_faults(r#"{"spot_min_price": 0.5}"#);
    let cheap_bid = offering("g6-spot", GOOD_TYPE, Market::Spot, "0.30");
    let err = provider
        .launch(&spec("errors", &cheap_bid, "bid"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::Price, "SpotMaxPriceTooLow")
    );
    let fair_bid = offering("g6-spot-fair", GOOD_TYPE, Market::Spot, "0.60");
    let spot = provider
        .launch(&spec("errors", &fair_bid, "fair"))
        .await
        .unwrap();
    let raw = moto.all_instances().await;
    assert_eq!(raw.len(), 1);
    assert_eq!(
        raw[0].instance_lifecycle().map(|l| l.as_str()),
        Some("spot"),
        "a spot offering launches a spot instance"
    );
    assert_eq!(raw[0].instance_id(), Some(spot.id.0.as_str()));

    // Throttling on every call, reads included.
    moto.set_faults(r#"{"throttle": {"code": "RequestLimitExceeded", "status": 503}}"#);
    let err = provider.list_owned("errors").await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Throttled, "{err}");
    let err = provider.describe(&spot.id).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Throttled, "{err}");

    // Unknown instances.
    moto.set_faults("{}");
    let ghost = InstanceId("i-0123456789abcdef0".to_string());
    assert!(matches!(
        provider.describe(&ghost).await,
        Err(CloudError::NotFound(_))
    ));
    assert!(matches!(
        provider.start(&ghost).await,
        Err(CloudError::NotFound(_))
    ));
}

#[tokio::test]
async fn stop_keeps_the_instance_and_start_brings_it_back() {
    let moto = Moto::start();
    let provider = moto.provider(clock()).await;
    let od = offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.8048");
    let launched = provider.launch(&spec("warm", &od, "w1")).await.unwrap();
    assert_eq!(launched.tags.request.as_deref(), Some("req-1"));
    assert_eq!(launched.offering.as_str(), "g6-od");

    let stopped = provider.stop(&launched.id).await.unwrap();
    assert_eq!(stopped.phase, InstancePhase::Stopped);
    assert_eq!(
        provider.stop(&launched.id).await.unwrap().phase,
        InstancePhase::Stopped,
        "stopping a stopped instance is a no-op"
    );
    let owned = provider.list_owned("warm").await.unwrap();
    assert_eq!(owned.len(), 1);
    assert_eq!(owned[0].phase, InstancePhase::Stopped);

    let started = provider.start(&launched.id).await.unwrap();
    assert_eq!(started.id, launched.id);
    assert!(
        matches!(started.phase, InstancePhase::Pending | InstancePhase::Ready),
        "{:?}",
        started.phase
    );
    let again = provider.start(&launched.id).await.unwrap();
    assert_eq!(
        again.id, launched.id,
        "starting a running instance is a no-op"
    );

    provider.terminate(&launched.id).await.unwrap();
    assert!(matches!(
        provider.start(&launched.id).await,
        Err(CloudError::NotFound(_))
    ));
    assert!(provider.list_owned("warm").await.unwrap().is_empty());
    assert_eq!(
        provider.describe(&launched.id).await.unwrap().phase,
        InstancePhase::Terminated,
        "describe still finds a terminated instance"
    );
}

#[tokio::test]
async fn a_running_instance_is_booting_until_ready_after_has_passed() {
    let moto = Moto::start();
    let clock = Arc::new(ManualClock::new(headroom_cloud::SystemClock::new().now()));
    let settings = AwsSettings {
        ready_after_secs: 600,
        ..moto.settings()
    };
    let provider = moto.provider_with(settings, clock.clone()).await;
    let od = offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.8048");
    let launched = provider.launch(&spec("ladder", &od, "r1")).await.unwrap();
    assert_eq!(
        provider.describe(&launched.id).await.unwrap().phase,
        InstancePhase::Booting(LadderRung::NodeAcquisition)
    );
    // Well past ready_after, however long the launch itself took on the wall clock.
    clock.advance(Duration::from_secs(900));
    assert_eq!(
        provider.describe(&launched.id).await.unwrap().phase,
        InstancePhase::Ready
    );
}

#[tokio::test]
async fn list_owned_ignores_other_clusters_and_untagged_instances() {
    let moto = Moto::start();
    let provider = moto.provider(clock()).await;
    let od = offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.8048");
    let mine = provider.launch(&spec("mine", &od, "a")).await.unwrap();
    let theirs = provider.launch(&spec("theirs", &od, "b")).await.unwrap();
    moto.raw_client()
        .await
        .run_instances()
        .image_id(IMAGE)
        .instance_type(GOOD_TYPE.into())
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .unwrap();
    assert_eq!(moto.all_instances().await.len(), 3);
    let owned: Vec<InstanceId> = provider
        .list_owned("mine")
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(owned, [mine.id]);
    let theirs_listed = provider.list_owned("theirs").await.unwrap();
    assert_eq!(theirs_listed.len(), 1);
    assert_eq!(theirs_listed[0].id, theirs.id);
    assert_eq!(theirs_listed[0].tags.node, "b");
    assert_eq!(theirs_listed[0].client_token, "hr-b");
}

#[tokio::test]
async fn a_spot_interruption_is_seen_in_the_inventory() {
    let moto = Moto::start();
    let provider = moto.provider(clock()).await;
    let spot = offering("g6-spot", GOOD_TYPE, Market::Spot, "0.35");
    let launched = provider.launch(&spec("spot", &spot, "s1")).await.unwrap();
    moto.set_faults(&format!(r#"{{"interrupt": ["{}"]}}"#, launched.id));
    let owned = provider.list_owned("spot").await.unwrap();
    assert_eq!(owned.len(), 1, "an interrupted instance stays listed");
    assert_eq!(owned[0].phase, InstancePhase::Interrupted);
    assert_eq!(
        provider.describe(&launched.id).await.unwrap().phase,
        InstancePhase::Interrupted
    );
    // Once the engine has terminated it, it is gone from the inventory.
    provider.terminate(&launched.id).await.unwrap();
    assert!(provider.list_owned("spot").await.unwrap().is_empty());
}

#[tokio::test]
async fn spot_prices_come_from_the_price_history() {
    let moto = Moto::start();
    let provider = moto.provider(clock()).await;
    let prices = provider
        .spot_prices(REGION, &["p4d.24xlarge", GOOD_TYPE])
        .await
        .unwrap();
    assert!(!prices.is_empty(), "moto answers some prices");
    for ((instance_type, zone), price) in &prices {
        assert!(zone.starts_with(REGION), "{zone}");
        assert!(
            [GOOD_TYPE, "p4d.24xlarge"].contains(&instance_type.as_str()),
            "{instance_type}"
        );
        assert!(price.micros() > 0);
    }
}

/// The engine's configuration for the engine tests: one AWS offering, one pool, moto's endpoint.
fn engine_config(moto: &Moto) -> Config {
    Config::parse(&engine_config_text(moto), "test").unwrap()
}

fn engine_config_text(moto: &Moto) -> String {
    format!(
        r#"
cluster_id = "crash-test"
[engine]
tick = "1s"
[aws]
region = "{REGION}"
endpoint_url = "{endpoint}"
image_id = "{IMAGE}"
[[offerings]]
id = "g6-od"
provider = "aws"
region = "{REGION}"
zone = "{ZONE}"
instance_type = "{GOOD_TYPE}"
market = "on-demand"
price_usd_per_hour = "0.8048"
gpus = 1
[[pools]]
name = "llm"
account = "ml"
offerings = ["g6-od"]
min_replicas = 0
max_replicas = 4
max_scale_up_per_step = 4
warm_pool_size = 0
[pools.ladder]
node_acquisition = "60s"
image_pull = "45s"
weight_load = "90s"
compile = "30s"
warmup = "15s"
[pools.scaling]
replica_throughput_rps = 5.0
"#,
        endpoint = moto.endpoint()
    )
}

/// A SQLite ledger in `dir`, as `headroom serve` opens one.
async fn ledger_in(dir: &tempfile::TempDir) -> Arc<SqliteLedger> {
    Arc::new(
        SqliteLedger::open_path(&dir.path().join("ledger.db"))
            .await
            .unwrap(),
    )
}

async fn provider_from_config(moto: &Moto, config: &Config, clock: Arc<dyn Clock>) -> AwsProvider {
    let settings = AwsSettings::from_table(config.aws.as_ref()).unwrap();
    settings
        .check_pools(config.pools.iter().map(|p| p.name.as_str()))
        .unwrap();
    let regions = settings.regions_or(config.offerings.iter().map(|o| o.offering.region.as_str()));
    AwsProvider::with_loader(moto.loader(), settings, regions, clock)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_crash_between_launch_and_outcome_neither_leaks_nor_duplicates() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().unwrap();
    let config = Arc::new(engine_config(&moto));
    let clock: Arc<dyn Clock> = clock();
    let ledger = ledger_in(&dir).await;
    headroom_testkit::request(ledger.as_ref(), clock.as_ref(), "llm", 1).await;

    // Launches, then dies before the engine can write the outcome.
    let dying = Arc::new(DiesAfterLaunch {
        inner: Arc::new(provider_from_config(&moto, &config, clock.clone()).await),
        death: Death::Panic,
    });
    let first = Engine::new(config.clone(), ledger.clone(), dying, clock.clone());
    let crashed = tokio::spawn(async move { first.tick().await }).await;
    assert!(
        crashed.is_err_and(|e| e.is_panic()),
        "the first process dies inside the launch"
    );
    let live = ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(
        live[0].state,
        NodeState::Requested,
        "the intent has no outcome"
    );
    assert_eq!(moto.all_instances().await.len(), 1, "the instance was made");

    // A new process: same ledger, a fresh provider with nothing in memory.
    let restarted = Engine::new(
        config.clone(),
        ledger.clone(),
        Arc::new(provider_from_config(&moto, &config, clock.clone()).await),
        clock.clone(),
    );
    restarted.tick().await.unwrap();
    restarted.tick().await.unwrap();

    let instances = moto.all_instances().await;
    let ids: Vec<_> = instances.iter().map(|i| i.instance_id()).collect();
    assert_eq!(instances.len(), 1, "no second instance: {ids:?}");
    let id = instances[0].instance_id().unwrap();
    let live = ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(
        live[0].instance.as_deref(),
        Some(id),
        "the ledger adopted it"
    );
    assert_ne!(live[0].state, NodeState::Requested);
    assert_eq!(
        instances[0]
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str()),
        Some("running"),
        "and it was not terminated as an orphan"
    );
}

#[tokio::test]
async fn a_reserved_offering_launches_into_its_reservation_until_it_is_full() {
    let moto = Moto::start();
    moto.set_faults(r#"{"reservations": {"cr-0aaa": 1}}"#);
    let settings = AwsSettings {
        reservations: [
            ("p5-odcr".to_string(), "cr-0aaa".to_string()),
            ("p5-gone".to_string(), "cr-0bbb".to_string()),
        ]
        .into(),
        ..moto.settings()
    };
    let provider = moto.provider_with(settings, clock()).await;
    let odcr = offering("p5-odcr", "p5.48xlarge", Market::Reserved, "0");
    provider
        .launch(&spec("reserved", &odcr, "r1"))
        .await
        .expect("the reservation holds one instance");
    let full = provider
        .launch(&spec("reserved", &odcr, "r2"))
        .await
        .unwrap_err();
    assert_eq!(
        (full.class(), full.code()),
        (ErrorClass::Capacity, "ReservationCapacityExceeded")
    );
    let gone = offering("p5-gone", "p5.48xlarge", Market::Reserved, "0");
    let err = provider
        .launch(&spec("reserved", &gone, "r3"))
        .await
        .unwrap_err();
    assert_eq!(err.class(), ErrorClass::InvalidRequest, "{err}");
    // A reserved offering without a reservation id uses any open one: a plain launch on moto.
    let open = offering("p5-open", "p5.48xlarge", Market::Reserved, "0");
    provider
        .launch(&spec("reserved", &open, "r4"))
        .await
        .unwrap();
    assert_eq!(provider.list_owned("reserved").await.unwrap().len(), 2);
}

/// Credentials that are never there, as on a machine with nothing configured.
#[derive(Debug)]
struct NoCredentials;

impl aws_credential_types::provider::ProvideCredentials for NoCredentials {
    fn provide_credentials<'a>(
        &'a self,
    ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        aws_credential_types::provider::future::ProvideCredentials::ready(Err(
            aws_credential_types::provider::error::CredentialsError::not_loaded(
                "no credentials in this test",
            ),
        ))
    }
}

#[tokio::test]
async fn missing_credentials_stop_the_pool_and_a_dead_endpoint_is_transient() {
    let moto = Moto::start();
    let no_credentials = AwsProvider::with_loader(
        aws_config::defaults(BehaviorVersion::latest()).credentials_provider(NoCredentials),
        moto.settings(),
        vec![REGION.to_string()],
        clock(),
    )
    .await
    .unwrap();
    let od = offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.8048");
    let err = no_credentials
        .launch(&spec("creds", &od, "c1"))
        .await
        .unwrap_err();
    assert_eq!(err.class(), ErrorClass::InvalidRequest, "{err}");
    assert!(moto.all_instances().await.is_empty());

    // Nothing listens on the port of a stopped server.
    let endpoint = moto.endpoint();
    drop(moto);
    let settings = AwsSettings {
        endpoint_url: Some(endpoint),
        image_id: Some(IMAGE.to_string()),
        ..AwsSettings::default()
    };
    let dead = AwsProvider::with_loader(
        aws_config::defaults(BehaviorVersion::latest())
            .credentials_provider(Credentials::new("test", "test", None, None, "moto")),
        settings,
        vec![REGION.to_string()],
        clock(),
    )
    .await
    .unwrap();
    let err = dead.list_owned("creds").await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Transient, "{err}");
}

/// Our own warm pool on EC2: the engine launches a node, stops it once past the ladder, and
/// wakes that stopped instance for the next request instead of launching another.
#[tokio::test]
async fn the_warm_pool_is_stopped_instances_woken_on_demand() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().unwrap();
    let text = engine_config_text(&moto).replace("warm_pool_size = 0", "warm_pool_size = 1");
    let config = Arc::new(Config::parse(&text, "test").unwrap());
    let clock: Arc<dyn Clock> = clock();
    let ledger = ledger_in(&dir).await;
    let provider = Arc::new(provider_from_config(&moto, &config, clock.clone()).await);
    let engine = Engine::new(config.clone(), ledger.clone(), provider, clock.clone());
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    for _ in 0..4 {
        engine.tick().await.unwrap();
    }
    let states = |instances: &[aws_sdk_ec2::types::Instance]| -> Vec<String> {
        instances
            .iter()
            .map(|i| {
                i.state()
                    .and_then(|s| s.name())
                    .map(|n| n.as_str().to_string())
                    .unwrap_or_default()
            })
            .collect()
    };
    assert_eq!(states(&moto.all_instances().await), ["stopped"]);
    assert_eq!(engine.pool_status(&pool).unwrap().warm, 1);

    ledger
        .record_capacity_request(&NewCapacityRequest {
            pool: pool.clone(),
            replicas: 1,
            priority: Priority::Normal,
            idempotency_key: None,
            at: clock.now(),
        })
        .await
        .unwrap();
    engine.tick().await.unwrap();
    let instances = moto.all_instances().await;
    assert_eq!(
        states(&instances)[0],
        "running",
        "the warm instance was started"
    );
    // The pool refills its warm slot with a second instance; the request took the first.
    for _ in 0..4 {
        engine.tick().await.unwrap();
    }
    let status = engine.pool_status(&pool).unwrap();
    assert_eq!((status.ready, status.warm), (1, 1), "{status:?}");
    let mut all = states(&moto.all_instances().await);
    all.sort();
    assert_eq!(all, ["running", "stopped"]);
}

/// Spot nodes of a pool that keeps them warm are persistent requests (EC2 stops no other spot
/// instance), and terminating one cancels its request, which would otherwise relaunch it.
#[tokio::test]
async fn stoppable_spot_pools_launch_persistent_requests_and_cancel_them_on_terminate() {
    let moto = Moto::start();
    let settings = AwsSettings {
        stoppable_spot_pools: vec!["llm".to_string()],
        ..moto.settings()
    };
    let provider = moto.provider_with(settings, clock()).await;
    let spot = offering("g6-spot", GOOD_TYPE, Market::Spot, "0.35");
    let warmable = provider
        .launch(&spec("spotwarm", &spot, "p1"))
        .await
        .unwrap();
    let mut other_pool = spec("spotwarm", &spot, "p2");
    other_pool.tags.pool = "batch".to_string();
    let one_time = provider.launch(&other_pool).await.unwrap();

    let request_of = |id: &InstanceId, all: &[aws_sdk_ec2::types::Instance]| {
        all.iter()
            .find(|i| i.instance_id() == Some(id.0.as_str()))
            .and_then(|i| i.spot_instance_request_id().map(str::to_string))
    };
    let all = moto.all_instances().await;
    let request = request_of(&warmable.id, &all).expect("a persistent spot request");
    assert_eq!(request_of(&one_time.id, &all), None, "one-time elsewhere");

    assert_eq!(
        provider.stop(&warmable.id).await.unwrap().phase,
        InstancePhase::Stopped
    );
    provider.start(&warmable.id).await.unwrap();
    provider.terminate(&warmable.id).await.unwrap();
    provider.terminate(&warmable.id).await.unwrap();
    let log = moto.log();
    assert!(
        log.contains(&format!("cancelled spot request {request}")),
        "{log}"
    );
    assert!(!log.contains("LEAK"), "{log}");

    // The wrapper does see a leak when the request is left open.
    let leaky = provider
        .launch(&spec("spotwarm", &spot, "p3"))
        .await
        .unwrap();
    moto.raw_client()
        .await
        .terminate_instances()
        .instance_ids(leaky.id.0.clone())
        .send()
        .await
        .unwrap();
    assert!(moto.log().contains("LEAK"));
}

const TEMPLATE: &str = "headroom-llm";

/// A provider whose pool `llm` (and the contract's pool) launch from a launch template, with an
/// instant EC2 Fleet.
async fn fleet_provider(moto: &Moto) -> AwsProvider {
    moto.raw_client()
        .await
        .create_launch_template()
        .launch_template_name(TEMPLATE)
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id(IMAGE)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let settings = AwsSettings {
        image_id: None,
        launch_templates: [
            ("llm".to_string(), TEMPLATE.to_string()),
            ("contract".to_string(), TEMPLATE.to_string()),
        ]
        .into(),
        ..moto.settings()
    };
    moto.provider_with(settings, clock()).await
}

#[tokio::test]
async fn pools_with_a_launch_template_launch_by_instant_fleet_and_pass_the_contract() {
    let moto = Moto::start();
    moto.set_faults(r#"{"fleet": {"p5.48xlarge": {"code": "InsufficientInstanceCapacity"}}}"#);
    let provider = fleet_provider(&moto).await;
    let fixture = ContractFixture {
        cluster: "fleet-contract".to_string(),
        offering: offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.8048"),
        stockout: Some(offering("p5-od", "p5.48xlarge", Market::OnDemand, "55.04")),
        faults: Some(Arc::new(moto.contract_faults(
            r#""fleet": {"p5.48xlarge": {"code": "InsufficientInstanceCapacity"}}"#,
            true,
        ))),
    };
    contract::run_all(&provider, &fixture).await;
    let fleets = moto
        .raw_client()
        .await
        .describe_fleets()
        .send()
        .await
        .unwrap();
    assert!(
        !fleets.fleets().is_empty(),
        "the launches went through CreateFleet"
    );
    let spot = offering("g6-spot", GOOD_TYPE, Market::Spot, "0.35");
    let launched = provider.launch(&spec("fleet", &spot, "f1")).await.unwrap();
    let raw = moto.all_instances().await;
    let made = raw
        .iter()
        .find(|i| i.instance_id() == Some(launched.id.0.as_str()))
        .unwrap();
    assert_eq!(made.image_id(), Some(IMAGE), "from the template");
    assert_eq!(made.instance_lifecycle().map(|l| l.as_str()), Some("spot"));
    assert_eq!(launched.tags.node, "f1");
}

/// An instant fleet refuses per instance, in `Errors[]` of a successful call.
#[tokio::test]
async fn fleet_errors_are_classified_and_a_partial_answer_keeps_its_instance() {
    let moto = Moto::start();
    let provider = fleet_provider(&moto).await;
    let target = offering("p4d-od", "p4d.24xlarge", Market::OnDemand, "21.95");
    for (i, (code, class)) in [
        ("InsufficientInstanceCapacity", ErrorClass::Capacity),
        ("UnfulfillableCapacity", ErrorClass::Capacity),
        ("VcpuLimitExceeded", ErrorClass::Quota),
        ("MaxSpotInstanceCountExceeded", ErrorClass::Quota),
        ("SpotMaxPriceTooLow", ErrorClass::Price),
        ("UnauthorizedOperation", ErrorClass::InvalidRequest),
        ("InvalidParameterValue", ErrorClass::InvalidRequest),
    ]
    .into_iter()
    .enumerate()
    {
        moto.set_faults(&format!(
            r#"{{"fleet": {{"p4d.24xlarge": {{"code": "{code}"}}}}}}"#
        ));
        let err = provider
            .launch(&spec("fleet", &target, &format!("e{i}")))
            .await
            .expect_err(code);
        assert_eq!((err.class(), err.code()), (class, code), "{err}");
    }
    assert!(
        moto.all_instances().await.is_empty(),
        "refusals make nothing"
    );

    moto.set_faults(
        r#"{"fleet": {"p4d.24xlarge": {"code": "InsufficientInstanceCapacity", "partial": true}}}"#,
    );
    let launched = provider
        .launch(&spec("fleet", &target, "partial"))
        .await
        .expect("an instance beside an error is a launch");
    assert_eq!(moto.all_instances().await.len(), 1);
    assert_eq!(
        provider.list_owned("fleet").await.unwrap()[0].id,
        launched.id
    );
}

/// EventBridge → SQS spot interruption warnings put a notice on the instance at once (so the
/// planner replaces it while it still runs), and it reads as interrupted two minutes later even
/// if EC2 has not taken it yet.
#[tokio::test]
async fn a_spot_interruption_warning_from_the_queue_gives_notice_then_interrupts() {
    let moto = Moto::start();
    let sqs_config = moto
        .loader()
        .region(Region::new(REGION))
        .endpoint_url(moto.endpoint())
        .load()
        .await;
    let sqs = aws_sdk_sqs::Client::new(&sqs_config);
    let queue = sqs
        .create_queue()
        .queue_name("spot-warnings")
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_string();
    let settings = AwsSettings {
        interruption_queues: [(REGION.to_string(), queue.clone())].into(),
        ..moto.settings()
    };
    let manual = Arc::new(ManualClock::new(headroom_cloud::SystemClock::new().now()));
    let provider = moto.provider_with(settings, manual.clone()).await;
    let spot = offering("g6-spot", GOOD_TYPE, Market::Spot, "0.35");
    let warned = provider.launch(&spec("warn", &spot, "w1")).await.unwrap();
    let spared = provider.launch(&spec("warn", &spot, "w2")).await.unwrap();
    assert!(
        provider
            .list_owned("warn")
            .await
            .unwrap()
            .iter()
            .all(|i| i.phase != InstancePhase::Interrupted)
    );

    let event = format!(
        r#"{{"version": "0", "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2", "region": "{REGION}", "detail": {{"instance-id": "{}", "instance-action": "terminate"}}}}"#,
        warned.id
    );
    sqs.send_message()
        .queue_url(&queue)
        .message_body(event)
        .send()
        .await
        .unwrap();
    sqs.send_message()
        .queue_url(&queue)
        .message_body("something else")
        .send()
        .await
        .unwrap();
    let owned = provider.list_owned("warn").await.unwrap();
    let find =
        |owned: &[Instance], id: &InstanceId| owned.iter().find(|i| &i.id == id).cloned().unwrap();
    let noticed = find(&owned, &warned.id);
    assert_ne!(noticed.phase, InstancePhase::Interrupted, "still running");
    assert_eq!(
        noticed.interruption_notice,
        Some(manual.now() + chrono::Duration::minutes(2))
    );
    assert_eq!(find(&owned, &spared.id).interruption_notice, None);
    manual.advance(std::time::Duration::from_secs(121));
    let owned = provider.list_owned("warn").await.unwrap();
    assert_eq!(find(&owned, &warned.id).phase, InstancePhase::Interrupted);
    assert_ne!(find(&owned, &spared.id).phase, InstancePhase::Interrupted);
    let left = sqs
        .receive_message()
        .queue_url(&queue)
        .send()
        .await
        .unwrap();
    assert!(left.messages().is_empty(), "read warnings are deleted");
    provider.terminate(&warned.id).await.unwrap();
    let owned = provider.list_owned("warn").await.unwrap();
    assert_eq!(owned.len(), 1);
    assert_eq!(owned[0].id, spared.id);
}

// --- Auto Scaling group mode -------------------------------------------------------------

const GROUP: &str = "headroom-llm";

/// The engine tests' configuration with pool `llm` launching through the group.
fn group_engine_config(moto: &Moto) -> Config {
    let text = engine_config_text(moto).replace(
        &format!("image_id = \"{IMAGE}\""),
        &format!("auto_scaling_groups = {{ llm = \"{GROUP}\" }}"),
    );
    Config::parse(&text, "test").unwrap()
}
const GROUP_TEMPLATE: &str = "headroom-llm-nodes";

/// A plain Auto Scaling client on the moto server.
async fn raw_autoscaling(moto: &Moto) -> aws_sdk_autoscaling::Client {
    let config = moto
        .loader()
        .region(Region::new(REGION))
        .endpoint_url(moto.endpoint())
        .load()
        .await;
    aws_sdk_autoscaling::Client::new(&config)
}

/// What an operator sets up once: a launch template of the pool's instance type and an empty
/// group on it (desired 0, min 0), tagged with the cluster id and propagating it.
async fn create_group(moto: &Moto, cluster: &str, max: i32) {
    moto.raw_client()
        .await
        .create_launch_template()
        .launch_template_name(GROUP_TEMPLATE)
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id(IMAGE)
                .instance_type(aws_sdk_ec2::types::InstanceType::from(GOOD_TYPE))
                .build(),
        )
        .send()
        .await
        .unwrap();
    raw_autoscaling(moto)
        .await
        .create_auto_scaling_group()
        .auto_scaling_group_name(GROUP)
        .launch_template(
            aws_sdk_autoscaling::types::LaunchTemplateSpecification::builder()
                .launch_template_name(GROUP_TEMPLATE)
                .version("$Default")
                .build(),
        )
        .min_size(0)
        .max_size(max)
        .desired_capacity(0)
        .availability_zones(ZONE)
        .tags(
            aws_sdk_autoscaling::types::Tag::builder()
                .resource_id(GROUP)
                .resource_type("auto-scaling-group")
                .key("headroom-cluster")
                .value(cluster)
                .propagate_at_launch(true)
                .build(),
        )
        .send()
        .await
        .unwrap();
}

/// The group's desired capacity and its instances (id, lifecycle state), as AWS reports them.
async fn group_state(moto: &Moto) -> (i32, Vec<(String, String)>) {
    let out = raw_autoscaling(moto)
        .await
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(GROUP)
        .send()
        .await
        .unwrap();
    let group = &out.auto_scaling_groups()[0];
    let members = group
        .instances()
        .iter()
        .map(|i| {
            (
                i.instance_id().unwrap().to_string(),
                i.lifecycle_state().unwrap().as_str().to_string(),
            )
        })
        .collect();
    (group.desired_capacity().unwrap(), members)
}

async fn set_desired(moto: &Moto, desired: i32) {
    raw_autoscaling(moto)
        .await
        .set_desired_capacity()
        .auto_scaling_group_name(GROUP)
        .desired_capacity(desired)
        .send()
        .await
        .unwrap();
}

fn group_settings(moto: &Moto) -> AwsSettings {
    AwsSettings {
        auto_scaling_groups: [("llm".to_string(), GROUP.to_string())].into(),
        ..moto.settings()
    }
}

fn ec2_state(instances: &[aws_sdk_ec2::types::Instance], id: &InstanceId) -> String {
    instances
        .iter()
        .find(|i| i.instance_id() == Some(id.0.as_str()))
        .and_then(|i| i.state()?.name().map(|n| n.as_str().to_string()))
        .unwrap_or_default()
}

#[tokio::test]
async fn a_group_pool_launches_by_desired_capacity_claims_once_and_terminates_with_decrement() {
    let moto = Moto::start();
    create_group(&moto, "asg", 3).await;
    let provider = moto.provider_with(group_settings(&moto), clock()).await;
    let od = offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.8048");

    let first = provider.launch(&spec("asg", &od, "a1")).await.unwrap();
    let again = provider.launch(&spec("asg", &od, "a1")).await.unwrap();
    assert_eq!(again.id, first.id, "the same token is the same instance");
    let (desired, members) = group_state(&moto).await;
    assert_eq!(desired, 1, "one SetDesiredCapacity for one token");
    assert_eq!(members.len(), 1);
    assert_eq!(
        members[0].0, first.id.0,
        "the group's own instance was claimed"
    );
    assert_eq!(first.client_token, "hr-a1");
    assert_eq!(first.offering.as_str(), "g6-od");
    assert_eq!(first.tags.cluster, "asg", "propagated by the group");
    assert_eq!(first.tags.node, "a1");

    // A crash after SetDesiredCapacity and before the claim: the group has an instance nobody
    // tagged. It is not ours yet (so no orphan), and the next launch claims it.
    set_desired(&moto, 2).await;
    let owned = provider.list_owned("asg").await.unwrap();
    assert_eq!(
        owned.len(),
        1,
        "an unclaimed instance is the group's: {owned:?}"
    );
    let second = provider.launch(&spec("asg", &od, "a2")).await.unwrap();
    let (desired, members) = group_state(&moto).await;
    assert_eq!(desired, 2, "claimed, not scaled out again");
    assert_eq!(members.len(), 2);
    assert_ne!(second.id, first.id);
    assert_eq!(provider.list_owned("asg").await.unwrap().len(), 2);
    assert_eq!(provider.describe(&second.id).await.unwrap().tags.node, "a2");

    // A third fits (max 3), a fourth does not: the planner falls back on a quota refusal.
    provider.launch(&spec("asg", &od, "a3")).await.unwrap();
    let err = provider.launch(&spec("asg", &od, "a4")).await.unwrap_err();
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::Quota, "GroupAtMaxSize")
    );
    assert_eq!(group_state(&moto).await.0, 3);

    // Terminate: out of the group without a replacement, and idempotent.
    provider.terminate(&second.id).await.unwrap();
    let (desired, members) = group_state(&moto).await;
    assert_eq!(desired, 2, "the desired capacity went down with it");
    assert!(
        !members.iter().any(|(id, _)| *id == second.id.0),
        "{members:?}"
    );
    assert_eq!(
        ec2_state(&moto.all_instances().await, &second.id),
        "terminated"
    );
    provider.terminate(&second.id).await.unwrap();
    assert_eq!(group_state(&moto).await.0, 2, "a repeat decrements nothing");
    assert_eq!(provider.list_owned("asg").await.unwrap().len(), 2);

    // Headroom's own stop would make the group replace the node: refused, nothing changes.
    let err = provider.stop(&first.id).await.unwrap_err();
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::InvalidRequest, "GroupManagedInstance")
    );
    assert_eq!(ec2_state(&moto.all_instances().await, &first.id), "running");
    assert_eq!(
        provider.start(&first.id).await.unwrap().id,
        first.id,
        "starting a running instance stays a no-op"
    );
}

#[tokio::test]
async fn a_group_pool_refuses_what_the_group_cannot_be() {
    let moto = Moto::start();
    create_group(&moto, "asg", 3).await;
    let provider = moto.provider_with(group_settings(&moto), clock()).await;

    let spot = offering("g6-spot", GOOD_TYPE, Market::Spot, "0.35");
    let err = provider
        .launch(&spec("asg", &spot, "s1"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::InvalidRequest, "MarketNotInGroup")
    );
    // The group launches g6.xlarge; an offering of another type would misprice its nodes.
    let p5 = offering("p5-od", "p5.48xlarge", Market::OnDemand, "55.04");
    set_desired(&moto, 1).await;
    let err = provider.launch(&spec("asg", &p5, "p1")).await.unwrap_err();
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::InvalidRequest, "OfferingNotInGroup")
    );
    assert_eq!(group_state(&moto).await.0, 1, "not scaled out for it");

    // A cluster the group does not propagate: its instances would not be ours.
    let err = provider
        .launch(&spec(
            "other-cluster",
            &offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.8"),
            "o1",
        ))
        .await
        .unwrap_err();
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::InvalidRequest, "GroupNotTagged")
    );

    let missing = AwsSettings {
        auto_scaling_groups: [("llm".to_string(), "no-such-group".to_string())].into(),
        ..moto.settings()
    };
    let provider = moto.provider_with(missing, clock()).await;
    let od = offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.8048");
    let err = provider.launch(&spec("asg", &od, "m1")).await.unwrap_err();
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::InvalidRequest, "GroupNotFound")
    );
}

/// Auto Scaling errors injected by moto_server.py, through the SDK's query-protocol parser.
#[tokio::test]
async fn group_errors_arrive_classified_and_raise_nothing() {
    let moto = Moto::start();
    create_group(&moto, "asg", 3).await;
    let provider = moto.provider_with(group_settings(&moto), clock()).await;
    let od = offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.8048");
    for (i, (code, status, class)) in [
        ("ScalingActivityInProgress", 400, ErrorClass::Throttled),
        ("ResourceContention", 500, ErrorClass::Throttled),
        ("Throttling", 400, ErrorClass::Throttled),
        ("LimitExceeded", 400, ErrorClass::Quota),
        ("ValidationError", 400, ErrorClass::InvalidRequest),
        ("AccessDenied", 403, ErrorClass::InvalidRequest),
        ("InternalFailure", 500, ErrorClass::Transient),
    ]
    .into_iter()
    .enumerate()
    {
        moto.set_faults(&format!(
            r#"{{"autoscaling": {{"SetDesiredCapacity": {{"code": "{code}", "status": {status}}}}}}}"#
        ));
        let err = provider
            .launch(&spec("asg", &od, &format!("e{i}")))
            .await
            .expect_err(code);
        assert_eq!(err.class(), class, "{code} with {status}: {err}");
        assert_eq!(err.code(), code, "the cloud's own code is kept");
    }
    assert_eq!(group_state(&moto).await, (0, vec![]), "nothing was raised");
    assert!(moto.all_instances().await.is_empty());

    // Reads fail the same way: the launch stops before it changes anything.
    moto.set_faults(
        r#"{"autoscaling": {"DescribeAutoScalingGroups": {"code": "AccessDenied", "status": 403}}}"#,
    );
    let err = provider.launch(&spec("asg", &od, "r1")).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::InvalidRequest, "{err}");
    moto.set_faults("{}");
    provider.launch(&spec("asg", &od, "ok")).await.unwrap();
    assert_eq!(group_state(&moto).await.0, 1);
}

#[tokio::test]
async fn the_group_warm_pool_is_put_by_headroom_and_read_back() {
    let moto = Moto::start();
    create_group(&moto, "asg", 4).await;
    let settings = AwsSettings {
        group_warm_pools: [(
            "llm".to_string(),
            GroupWarmPool {
                min_size: 2,
                max_prepared_capacity: Some(4),
                pool_state: WarmPoolState::Hibernated,
                reuse_on_scale_in: true,
            },
        )]
        .into(),
        ..group_settings(&moto)
    };
    let provider = moto.provider_with(settings, clock()).await;
    assert_eq!(
        provider.group_warm_pool("llm").await.unwrap(),
        None,
        "none yet"
    );
    provider.sync_group_warm_pools().await.unwrap();
    provider.sync_group_warm_pools().await.unwrap();
    let status = provider.group_warm_pool("llm").await.unwrap().unwrap();
    assert_eq!(
        status,
        GroupWarmPoolStatus {
            group: GROUP.to_string(),
            min_size: 2,
            max_prepared_capacity: Some(4),
            pool_state: "Hibernated".to_string(),
            instances: 0,
        }
    );
    // What AWS holds, read with a plain client.
    let raw = raw_autoscaling(&moto)
        .await
        .describe_warm_pool()
        .auto_scaling_group_name(GROUP)
        .send()
        .await
        .unwrap();
    let config = raw.warm_pool_configuration().unwrap();
    assert_eq!(
        config
            .instance_reuse_policy()
            .and_then(|p| p.reuse_on_scale_in()),
        Some(true)
    );
    assert_eq!(
        provider.group_warm_pool("batch").await.unwrap(),
        None,
        "not a group pool"
    );

    moto.set_faults(
        r#"{"autoscaling": {"PutWarmPool": {"code": "LimitExceeded", "status": 400}}}"#,
    );
    let err = provider.sync_group_warm_pools().await.unwrap_err();
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::Quota, "LimitExceeded")
    );
}

/// The engine over a group pool: a crash after the claim but before the ledger outcome, and one
/// after SetDesiredCapacity but before the claim; the restarted process adopts one instance.
#[tokio::test]
async fn a_crash_in_a_group_launch_neither_leaks_nor_duplicates() {
    let moto = Moto::start();
    create_group(&moto, "crash-test", 4).await;
    let dir = tempfile::tempdir().unwrap();
    let config = Arc::new(group_engine_config(&moto));
    let clock: Arc<dyn Clock> = clock();
    let ledger = ledger_in(&dir).await;
    headroom_testkit::request(ledger.as_ref(), clock.as_ref(), "llm", 1).await;
    // Launches, then dies before the engine can write the outcome.
    let dying = Arc::new(DiesAfterLaunch {
        inner: Arc::new(provider_from_config(&moto, &config, clock.clone()).await),
        death: Death::Panic,
    });
    let first = Engine::new(config.clone(), ledger.clone(), dying, clock.clone());
    let crashed = tokio::spawn(async move { first.tick().await }).await;
    assert!(crashed.is_err_and(|e| e.is_panic()));
    // And the group raised once more by a process that died before claiming.
    set_desired(&moto, 2).await;

    let restarted = Engine::new(
        config.clone(),
        ledger.clone(),
        Arc::new(provider_from_config(&moto, &config, clock.clone()).await),
        clock.clone(),
    );
    restarted.tick().await.unwrap();
    restarted.tick().await.unwrap();

    let (desired, members) = group_state(&moto).await;
    assert_eq!(desired, 2, "{members:?}");
    assert_eq!(members.len(), 2, "{members:?}");
    assert!(
        members.iter().all(|(_, state)| state == "InService"),
        "the unclaimed one waits in the group for the next launch, not terminated as an orphan: {members:?}"
    );
    let live = ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1, "{live:?}");
    let adopted = live[0].instance.clone().unwrap();
    assert!(
        members
            .iter()
            .any(|(id, state)| *id == adopted && state == "InService"),
        "the ledger adopted the claimed instance and it was not terminated: {members:?}"
    );
    assert_eq!(
        moto.all_instances().await.len(),
        2,
        "nothing else was launched"
    );
}

#[tokio::test]
async fn the_engine_plans_and_records_spot_at_the_price_ec2_quotes() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().unwrap();
    let text = engine_config_text(&moto)
        .replace(
            "offerings = [\"g6-od\"]",
            "offerings = [\"g6-spot\", \"g6-od\"]",
        )
        .replace(
            "[[pools]]",
            &format!(
                "[[offerings]]\nid = \"g6-spot\"\nprovider = \"aws\"\nregion = \"{REGION}\"\nzone = \"{ZONE}\"\ninstance_type = \"{GOOD_TYPE}\"\nmarket = \"spot\"\nprice_usd_per_hour = \"5.00\"\ngpus = 1\n[[pools]]"
            ),
        );
    let config = Arc::new(Config::parse(&text, "test").unwrap());
    let clock: Arc<dyn Clock> = clock();
    let ledger = ledger_in(&dir).await;
    let provider = Arc::new(provider_from_config(&moto, &config, clock.clone()).await);
    let quoted = provider.spot_prices(REGION, &[GOOD_TYPE]).await.unwrap();
    let market = *quoted
        .get(&(GOOD_TYPE.to_string(), ZONE.to_string()))
        .expect("moto quotes a spot price for the offering's type and zone");
    assert!(market < "5.00".parse().unwrap(), "{market}");

    headroom_testkit::request(ledger.as_ref(), clock.as_ref(), "llm", 1).await;
    let engine = Engine::new(config.clone(), ledger.clone(), provider, clock.clone());
    engine.tick().await.unwrap();

    let prices = engine.offering_prices();
    let spot = prices
        .iter()
        .find(|p| p.offering.as_str() == "g6-spot")
        .unwrap();
    assert_eq!(spot.live_usd_per_hour, Some(market));
    assert_eq!(spot.effective_usd_per_hour, market);
    let od = prices
        .iter()
        .find(|p| p.offering.as_str() == "g6-od")
        .unwrap();
    assert_eq!(
        od.live_usd_per_hour, None,
        "on-demand keeps the catalog price"
    );

    let nodes = ledger.live_nodes().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].offering.as_str(), "g6-spot");
    assert_eq!(
        nodes[0].price_usd_per_hour, market,
        "the node costs the market price, not the 5.00 maximum"
    );
}

#[tokio::test]
async fn a_group_instance_no_launch_claims_is_terminated_as_an_orphan_after_its_grace() {
    let moto = Moto::start();
    create_group(&moto, "crash-test", 4).await;
    let dir = tempfile::tempdir().unwrap();
    let config = Arc::new(group_engine_config(&moto));
    let manual = Arc::new(ManualClock::new(clock().now()));
    let clock: Arc<dyn Clock> = manual.clone();
    let ledger = ledger_in(&dir).await;
    // The group was raised by a process that died before it could claim the instance, and no
    // demand is left to claim it: nothing in the ledger asks for it.
    set_desired(&moto, 1).await;
    let engine = Engine::new(
        config.clone(),
        ledger.clone(),
        Arc::new(provider_from_config(&moto, &config, clock.clone()).await),
        clock.clone(),
    );
    engine.tick().await.unwrap();
    let (desired, members) = group_state(&moto).await;
    assert_eq!(
        (desired, members.len()),
        (1, 1),
        "within its grace the instance waits for a claim"
    );

    manual.advance(Duration::from_secs(16 * 60));
    engine.tick().await.unwrap();
    let (desired, members) = group_state(&moto).await;
    assert_eq!(
        desired, 0,
        "terminated with the capacity decremented, so the group does not replace it: {members:?}"
    );
    assert!(ledger.live_nodes().await.unwrap().is_empty());
}

/// A node's bootstrap (what `[kube] bootstrap` renders) is its instance's user data, as EC2
/// shows it: launched by RunInstances without a launch template, and by RunInstances from the
/// template with one (an instant fleet's overrides cannot carry user data). A template pool's
/// node without user data still goes by fleet.
#[tokio::test]
async fn a_nodes_bootstrap_is_its_instances_user_data_with_or_without_a_launch_template() {
    use base64::Engine as _;
    let moto = Moto::start();
    let od = offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.8048");
    let bootstrap = |node: &str| {
        format!(
            "MIME-Version: 1.0\nkind: NodeConfig\n  kubelet:\n    flags:\n      - \"--node-labels=gpu=l4,headroom.dev/node={node},headroom.dev/pool=llm\"\n"
        )
    };
    let plain = moto.provider(clock()).await;
    let templated = fleet_provider(&moto).await;
    for (provider, node) in [(&plain, "u1"), (&templated, "u2")] {
        let mut with_user_data = spec("ud", &od, node);
        with_user_data.user_data = Some(bootstrap(node));
        let launched = provider.launch(&with_user_data).await.unwrap();
        let attribute = moto
            .raw_client()
            .await
            .describe_instance_attribute()
            .instance_id(&launched.id.0)
            .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
            .send()
            .await
            .unwrap();
        let encoded = attribute
            .user_data()
            .and_then(|v| v.value())
            .expect("the instance has user data");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        assert_eq!(String::from_utf8(decoded).unwrap(), bootstrap(node));
        let raw = moto.all_instances().await;
        let made = raw
            .iter()
            .find(|i| i.instance_id() == Some(launched.id.0.as_str()))
            .unwrap();
        assert_eq!(made.image_id(), Some(IMAGE));
    }
    let fleets = || async {
        moto.raw_client()
            .await
            .describe_fleets()
            .send()
            .await
            .unwrap()
            .fleets()
            .len()
    };
    assert_eq!(fleets().await, 0, "user data went by RunInstances");
    templated.launch(&spec("ud", &od, "u3")).await.unwrap();
    assert_eq!(
        fleets().await,
        1,
        "no user data: the template's own, by fleet"
    );
}

/// Quota preflight on moto: the G/VT and P families' quotas from Service Quotas (moto_server.py
/// serves EC2's, which moto lacks: AWS defaults when no value is applied, else the applied one),
/// with what is in use counted in vCPUs from every running instance of the family in the region.
#[tokio::test]
async fn quotas_come_from_service_quotas_with_the_vcpus_running_in_the_family() {
    let moto = Moto::start();
    let provider = moto.provider(clock()).await;
    let g6 = offering("g6", GOOD_TYPE, Market::OnDemand, "0.8048");
    let p5 = offering("p5", "p5.48xlarge", Market::OnDemand, "55.04");
    let m7 = offering("m7", "m7i.large", Market::OnDemand, "0.1");
    let asked = [g6.clone(), p5.clone(), m7.clone()];
    let read = || async {
        match provider.quota_headroom(REGION, &asked).await.unwrap() {
            Quotas::Known(q) => q,
            Quotas::Unknown => panic!("AWS knows its quotas"),
        }
    };
    let quotas = read().await;
    let codes: Vec<&str> = quotas.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(
        codes,
        ["L-DB2E81BA", "L-417A185B"],
        "one quota per family asked about"
    );
    let g = &quotas[0];
    assert_eq!(g.description, "Running On-Demand G and VT instances");
    assert_eq!(
        (g.unit, g.limit, g.in_use),
        (QuotaUnit::Vcpu, 64, 0),
        "moto_server.py's default"
    );
    assert_eq!(g.draw(&g6.id), Some(4), "a g6.xlarge has 4 vCPUs");
    assert_eq!(quotas[1].draw(&p5.id), Some(192));
    assert!(
        quotas.iter().all(|q| q.draw(&m7.id).is_none()),
        "m7i is no GPU family"
    );

    // Our launch and an instance Headroom does not own both count: the quota is the account's.
    provider.launch(&spec("quota", &g6, "n1")).await.unwrap();
    moto.raw_client()
        .await
        .run_instances()
        .image_id(IMAGE)
        .instance_type(aws_sdk_ec2::types::InstanceType::from("g6.2xlarge"))
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .unwrap();
    let g = read().await.remove(0);
    assert_eq!(g.in_use, 4 + 8, "{g:?}");

    // An applied value (a granted increase, or a lowered one) wins over the default.
    moto.set_faults(r#"{"service_quotas": {"L-DB2E81BA": 12}}"#);
    let g = read().await.remove(0);
    assert_eq!(
        (g.limit, g.remaining(), g.nodes_left(&g6.id)),
        (12, 0, Some(0))
    );

    // A region with no offering of a GPU family has no quota to read.
    assert_eq!(
        provider
            .quota_headroom(REGION, std::slice::from_ref(&m7))
            .await
            .unwrap(),
        Quotas::Known(Vec::new())
    );
}
