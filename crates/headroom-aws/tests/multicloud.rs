//! Issue 37: one pool with offerings on AWS (moto) and GCP (the local Compute API server) at
//! once, behind the composite, with the real engine and a SQLite ledger.

// Shared with moto.rs, which uses all of it.
#[allow(dead_code)]
mod support;

use std::net::SocketAddr;
use std::sync::Arc;

use headroom_cloud::{Clock, CloudProvider, ManualClock, MultiCloud};
use headroom_engine::{Config, Engine};
use headroom_gcp::GcpSettings;
use headroom_gcp::server::ComputeServer;
use headroom_ledger::{Ledger, SqliteLedger};
use support::{Moto, REGION, ZONE};

fn config(gcp_endpoint: &str) -> String {
    let aws = |id: &str, instance_type: &str, price: &str| {
        format!(
            "[[offerings]]\nid = \"{id}\"\nprovider = \"aws\"\nregion = \"{REGION}\"\nzone = \"{ZONE}\"\ninstance_type = \"{instance_type}\"\nmarket = \"on-demand\"\nprice_usd_per_hour = \"{price}\"\ngpus = 8\n"
        )
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
    let aws = Arc::new(moto.provider(dyn_clock.clone()).await);
    let gcp = Arc::new(
        headroom_gcp::GcpProvider::new(
            GcpSettings::parse(config.gcp.as_ref()).unwrap(),
            ["us-central1-a".to_string()],
            dyn_clock.clone(),
        )
        .await
        .unwrap(),
    );
    let members: Vec<Arc<dyn CloudProvider>> = vec![aws, gcp];
    let multi = Arc::new(MultiCloud::new(members).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let ledger = Arc::new(
        SqliteLedger::open_path(&dir.path().join("l.db"))
            .await
            .unwrap(),
    );
    let engine = Engine::new(config, ledger.clone(), multi, dyn_clock);
    Both {
        moto,
        gcp: gcp_server,
        clock,
        ledger,
        engine,
        _dir: dir,
    }
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
