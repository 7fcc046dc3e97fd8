//! Issue 37: one pool with offerings on AWS (moto) and GCP (the local Compute API server) at
//! once, behind the composite, with the real engine and a SQLite ledger.

// Shared with moto.rs, which uses all of it.
#[path = "support/multicloud.rs"]
mod multicloud_toml;
#[allow(dead_code)]
mod support;

use std::net::SocketAddr;
use std::sync::Arc;

use headroom_cloud::{Clock, CloudProvider, ManualClock, MultiCloud};
use headroom_config::Config;
use headroom_core::ProviderKind;
use headroom_engine::Engine;
use headroom_gcp::GcpSettings;
use headroom_gcp::server::ComputeServer;
use headroom_ledger::SqliteLedger;
use headroom_ledger::prelude::*;
use headroom_testkit::{Death, DiesAfterLaunch};
use support::Moto;

fn config(gcp_endpoint: &str) -> String {
    let aws = |id: &str, instance_type: &str, price: &str| {
        multicloud_toml::aws_offering_toml(id, instance_type, price, 8)
    };
    format!(
        r#"
cluster_id = "multicloud"
[engine]
tick = "1s"
hold_horizon = "1h"
{}{}
[[offerings]]
id = "gcp-a3"
provider = "gcp"
region = "us-central1"
zone = "us-central1-a"
instance_type = "a3-highgpu-8g"
market = "on-demand"
price_usd_per_hour = "88.00"
gpus = 8
[[pools]]
name = "llm"
account = "ml"
offerings = ["aws-p5", "aws-p4d", "gcp-a3"]
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
[[budgets]]
account = "ml"
period = "day"
ceiling_usd = "100.00"
hard_action = "clamp"
[gcp]
project = "headroom-test"
endpoint = "{gcp_endpoint}"
credentials = "anonymous"
instance_template = "global/instanceTemplates/headroom-gpu"
operation_timeout = "10s"
"#,
        aws("aws-p5", "p5.48xlarge", "55.04"),
        aws("aws-p4d", "p4d.24xlarge", "32.77"),
    )
}

struct Both {
    moto: Moto,
    config: Arc<Config>,
    gcp: headroom_gcp::server::RunningServer,
    clock: Arc<ManualClock>,
    ledger: Arc<SqliteLedger>,
    engine: Arc<Engine>,
    _dir: tempfile::TempDir,
}

async fn both() -> Both {
    let moto = Moto::start();
    let clock = Arc::new(ManualClock::new("2026-11-30T09:00:00Z".parse().unwrap()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let gcp_server = ComputeServer::start(dyn_clock.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let config = Arc::new(Config::parse(&config(&gcp_server.endpoint()), "test").unwrap());
    let (aws, gcp) = providers(&moto, &config, &dyn_clock).await;
    let multi = Arc::new(MultiCloud::new(vec![aws, gcp]).unwrap());
    let config_for_test = config.clone();
    let dir = tempfile::tempdir().unwrap();
    let ledger = Arc::new(
        SqliteLedger::open_path(&dir.path().join("l.db"))
            .await
            .unwrap(),
    );
    let engine = Engine::new(config, ledger.clone(), multi, dyn_clock);
    Both {
        moto,
        config: config_for_test,
        gcp: gcp_server,
        clock,
        ledger,
        engine,
        _dir: dir,
    }
}

/// A fresh AWS provider (moto) and GCP provider (the local server), nothing in memory: what a
/// process that starts has.
async fn providers(
    moto: &Moto,
    config: &Config,
    clock: &Arc<dyn Clock>,
) -> (Arc<dyn CloudProvider>, Arc<dyn CloudProvider>) {
    let aws = Arc::new(moto.provider(clock.clone()).await);
    let gcp = Arc::new(
        headroom_gcp::GcpProvider::new(
            GcpSettings::parse(config.gcp.as_ref()).unwrap(),
            ["us-central1-a".to_string()],
            clock.clone(),
        )
        .await
        .unwrap(),
    );
    (aws, gcp)
}

/// Instances on (AWS, GCP).
async fn cloud_counts(b: &Both) -> (usize, usize) {
    (
        b.moto.all_instances().await.len(),
        b.gcp.server.instances().len(),
    )
}

/// A process dies inside the launch on `dying` (the cloud made the VM, the ledger has only the
/// intent); a new process, with fresh providers and the same ledger, adopts that one instance:
/// nothing leaked (no instance the ledger does not know of, none terminated as an orphan) and
/// nothing duplicated, on either cloud.
async fn crash_inside_a_launch_on(dying: ProviderKind) {
    let b = both().await;
    if dying == ProviderKind::Gcp {
        // Every AWS offering refuses, so the launch that dies is the GCP fallback.
        b.moto.set_faults(
            r#"{"launch": {"p5.48xlarge": {"code": "InsufficientInstanceCapacity", "status": 500},
                           "p4d.24xlarge": {"code": "InsufficientInstanceCapacity", "status": 500}}}"#,
        );
    }
    let config = b.config.clone();
    let clock: Arc<dyn Clock> = b.clock.clone();
    headroom_testkit::request(b.ledger.as_ref(), b.clock.as_ref(), "llm", 1).await;

    let (aws, gcp) = providers(&b.moto, &config, &clock).await;
    let dies = |inner: Arc<dyn CloudProvider>| -> Arc<dyn CloudProvider> {
        Arc::new(DiesAfterLaunch {
            inner,
            death: Death::Panic,
        })
    };
    let (aws, gcp) = match dying {
        ProviderKind::Gcp => (aws, dies(gcp)),
        _ => (dies(aws), gcp),
    };
    let first = Engine::new(
        config.clone(),
        b.ledger.clone(),
        Arc::new(MultiCloud::new(vec![aws, gcp]).unwrap()),
        clock.clone(),
    );
    let crashed = tokio::spawn(async move { first.tick().await }).await;
    assert!(
        crashed.is_err_and(|e| e.is_panic()),
        "dies inside the launch"
    );
    let made = if dying == ProviderKind::Gcp {
        (0, 1)
    } else {
        (1, 0)
    };
    assert_eq!(cloud_counts(&b).await, made, "the cloud made the instance");

    let (aws, gcp) = providers(&b.moto, &config, &clock).await;
    let restarted = Engine::new(
        config.clone(),
        b.ledger.clone(),
        Arc::new(MultiCloud::new(vec![aws, gcp]).unwrap()),
        clock.clone(),
    );
    for _ in 0..3 {
        restarted.tick().await.unwrap();
        b.clock.advance(std::time::Duration::from_secs(1));
    }
    assert_eq!(
        cloud_counts(&b).await,
        made,
        "no second instance, none terminated"
    );
    let live = b.ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].provider, dying);
    assert!(
        live[0].instance.is_some(),
        "the ledger adopted it: {live:?}"
    );
    assert_ne!(live[0].state, headroom_core::NodeState::Requested);
}

#[tokio::test]
async fn a_crash_inside_the_gcp_fallback_launch_neither_leaks_nor_duplicates() {
    crash_inside_a_launch_on(ProviderKind::Gcp).await;
}

#[tokio::test]
async fn a_crash_inside_an_aws_launch_beside_gcp_neither_leaks_nor_duplicates() {
    crash_inside_a_launch_on(ProviderKind::Aws).await;
}

/// Every AWS offering refuses with InsufficientInstanceCapacity: the GCP offering launches in
/// the same tick, counted as a `cloud` fallback, and the one budget holds the GCP node (its
/// $88 hold fits the $100 ceiling; a second does not).
#[tokio::test]
async fn aws_stocked_out_falls_back_to_gcp_in_the_same_tick_under_one_budget() {
    let Both {
        moto,
        gcp: gcp_server,
        clock,
        ledger,
        engine,
        _dir,
        ..
    } = both().await;
    moto.set_faults(
        r#"{"launch": {"p5.48xlarge": {"code": "InsufficientInstanceCapacity", "status": 500},
                       "p4d.24xlarge": {"code": "InsufficientInstanceCapacity", "status": 500}}}"#,
    );
    headroom_testkit::request(ledger.as_ref(), clock.as_ref(), "llm", 2).await;
    engine.tick().await.unwrap();

    assert!(
        moto.all_instances().await.is_empty(),
        "AWS launched nothing"
    );
    let vms = gcp_server.server.instances();
    assert_eq!(vms.len(), 1, "one GCP VM in the same tick: {vms:?}");
    let llm = engine.config().pool(&"llm".parse().unwrap()).unwrap();
    let fallbacks = engine.metrics().fallbacks_of(llm);
    assert_eq!(fallbacks.get("cloud"), Some(&1), "{fallbacks:?}");
    let live = ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].provider, headroom_core::ProviderKind::Gcp);
    let refusals = ledger
        .refusals_between(
            "2026-11-30T00:00:00Z".parse().unwrap(),
            "2026-12-01T00:00:00Z".parse().unwrap(),
        )
        .await
        .unwrap();
    assert!(
        refusals
            .iter()
            .any(|r| r.reason == headroom_core::RefusalReason::Budget),
        "the second replica is refused by the one budget: {refusals:?}"
    );
}

/// A GCP outage (every read answers 503, every insert fails): the ticks go on and the AWS
/// offering launches. (Before, the whole tick failed on the inventory.)
#[tokio::test]
async fn a_gcp_outage_leaves_aws_working() {
    let b = both().await;
    b.gcp.server.fail_next_gets(u32::MAX);
    b.gcp.server.inject(headroom_gcp::server::Fault {
        matches: headroom_gcp::server::FaultMatch::MachineType("a3-highgpu-8g".into()),
        kind: headroom_gcp::server::FaultKind::Unavailable,
        times: None,
    });
    headroom_testkit::request(b.ledger.as_ref(), b.clock.as_ref(), "llm", 1).await;
    for _ in 0..3 {
        b.engine.tick().await.unwrap();
        b.clock.advance(std::time::Duration::from_secs(5));
    }
    assert_eq!(b.moto.all_instances().await.len(), 1, "{}", b.moto.log());
    assert!(b.gcp.server.instances().is_empty());
    let live = b.ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].provider, headroom_core::ProviderKind::Aws);
}
