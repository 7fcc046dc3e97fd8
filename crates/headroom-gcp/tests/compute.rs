//! The GCP provider over real HTTP, with the real client, against the local Compute API server:
//! the shared contract suite, every error class end to end, warm pools, preemption, and a crash
//! between insert and the ledger outcome with the real engine and a SQLite ledger.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::contract::{ContractFixture, run_all};
use headroom_cloud::{
    CloudProvider, InstanceId, InstancePhase, LaunchSpec, ManualClock, OwnershipTags,
};
use headroom_core::{ErrorClass, LadderRung, Market, NodeState, Offering, ProviderKind};
use headroom_gcp::server::{ComputeServer, Fault, FaultKind, FaultMatch, RunningServer};
use headroom_gcp::{GcpProvider, GcpSettings};
use headroom_ledger::SqliteLedger;
use headroom_ledger::prelude::*;
use headroom_testkit::{Death, DiesAfterLaunch};
use serde_json::json;

const PROJECT: &str = "headroom-test";
const ZONE: &str = "us-central1-a";
const ZONE_B: &str = "us-central1-b";

struct Env {
    server: RunningServer,
    provider: Arc<GcpProvider>,
    clock: Arc<ManualClock>,
}

fn settings_text(endpoint: &str, extra: &str) -> String {
    format!(
        r#"
project = "{PROJECT}"
endpoint = "{endpoint}"
credentials = "anonymous"
instance_template = "global/instanceTemplates/headroom-gpu"
operation_timeout = "10s"
{extra}
"#
    )
}

async fn provider_for(endpoint: &str, extra: &str, clock: Arc<ManualClock>) -> GcpProvider {
    let table: toml::Table = toml::from_str(&settings_text(endpoint, extra)).unwrap();
    let settings = GcpSettings::parse(Some(&table)).unwrap();
    GcpProvider::new(settings, [ZONE.to_string(), ZONE_B.to_string()], clock)
        .await
        .unwrap()
}

async fn env(extra: &str) -> Env {
    let clock = Arc::new(ManualClock::new("2026-11-30T09:00:00Z".parse().unwrap()));
    let server = ComputeServer::start(clock.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let provider = Arc::new(provider_for(&server.endpoint(), extra, clock.clone()).await);
    Env {
        server,
        provider,
        clock,
    }
}

fn offering(id: &str, zone: &str, instance_type: &str, market: Market) -> Offering {
    Offering {
        id: id.parse().unwrap(),
        provider: ProviderKind::Gcp,
        region: "us-central1".into(),
        zone: zone.into(),
        instance_type: instance_type.into(),
        market,
        price_usd_per_hour: "3.67".parse().unwrap(),
        gpus_per_node: 1,
        warm_usd_per_hour: headroom_core::Money::ZERO,
    }
}

fn spec(o: &Offering, cluster: &str, token: &str) -> LaunchSpec {
    LaunchSpec {
        offering: o.clone(),
        client_token: token.into(),
        tags: OwnershipTags {
            cluster: cluster.into(),
            pool: "llm".into(),
            node: format!("n-{token}"),
            request: Some("r-1".into()),
        },
        user_data: None,
    }
}

fn name_of(id: &InstanceId) -> &str {
    id.0.rsplit('/').next().unwrap()
}

fn stockout_fault() -> Fault {
    Fault {
        matches: FaultMatch::MachineType("a2-ultragpu-1g".into()),
        kind: FaultKind::CapacityInOperation("ZONE_RESOURCE_POOL_EXHAUSTED".into()),
        times: None,
    }
}

/// The local server's faults for the contract: HTTP 500 on insert, reads that miss right after
/// an insert, and a VM carrying only Headroom's labels.
#[derive(Debug)]
struct ServerFaults(ComputeServer);

impl headroom_cloud::contract::ContractFaults for ServerFaults {
    fn fail_launches(&self, offering: &Offering) -> bool {
        self.0.inject(Fault {
            matches: FaultMatch::MachineType(offering.instance_type.clone()),
            kind: FaultKind::Internal,
            times: None,
        });
        true
    }
    fn heal(&self) {
        self.0.clear_faults();
        self.0.inject(stockout_fault());
        self.0.clear_hidden();
    }
    fn miss_reads_after_create(&self, n: u32) -> bool {
        self.0.miss_reads_after_insert(n);
        true
    }
    fn plant_tagged_only(
        &self,
        cluster: &str,
        offering: &Offering,
        token: &str,
    ) -> Option<InstanceId> {
        let token = format!("{cluster}-{token}");
        let name = headroom_gcp::naming::instance_name(&token);
        let tags = OwnershipTags {
            cluster: cluster.into(),
            pool: "contract".into(),
            node: format!("n-{token}"),
            request: None,
        };
        let mut labels: serde_json::Map<String, serde_json::Value> =
            headroom_gcp::naming::labels(&tags, &token)
                .into_iter()
                .map(|(k, v)| (k, json!(v)))
                .collect();
        labels.insert(
            headroom_gcp::naming::OFFERING_LABEL.into(),
            json!(headroom_gcp::naming::label_value(offering.id.as_str())),
        );
        self.0.put_instance(
            PROJECT,
            &offering.zone,
            json!({
                "name": name,
                "status": "RUNNING",
                "machineType": format!("zones/{}/machineTypes/{}", offering.zone, offering.instance_type),
                "creationTimestamp": "2026-11-30T08:00:00.000-00:00",
                "labels": labels,
            }),
        );
        Some(InstanceId(headroom_gcp::naming::instance_id(
            &offering.zone,
            &name,
        )))
    }
}

fn fixture(cluster: &str, server: &ComputeServer) -> ContractFixture {
    ContractFixture {
        faults: Some(Arc::new(ServerFaults(server.clone()))),
        cluster: cluster.into(),
        offering: offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand),
        stockout: Some(offering(
            "gcp-a2u-spot",
            ZONE,
            "a2-ultragpu-1g",
            Market::Spot,
        )),
    }
}

#[tokio::test]
async fn the_shared_contract_holds() {
    let e = env("").await;
    e.server.server.inject(stockout_fault());
    run_all(e.provider.as_ref(), &fixture("contract", &e.server.server)).await;
}

#[tokio::test]
async fn the_contract_holds_when_operations_take_several_polls() {
    let e = env("").await;
    e.server.server.inject(stockout_fault());
    e.server.server.set_operation_polls(3);
    run_all(
        e.provider.as_ref(),
        &fixture("contract-slow", &e.server.server),
    )
    .await;
    let waits = e
        .server
        .server
        .calls()
        .iter()
        .filter(|c| c.ends_with("/wait"))
        .count();
    assert!(waits >= 3, "operations were waited on: {waits} waits");
}

#[tokio::test]
async fn each_error_class_arrives_as_gcp_sends_it() {
    let cases = [
        (
            FaultKind::CapacityInOperation("ZONE_RESOURCE_POOL_EXHAUSTED".into()),
            ErrorClass::Capacity,
            "ZONE_RESOURCE_POOL_EXHAUSTED",
        ),
        (
            FaultKind::CapacityInOperation("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS".into()),
            ErrorClass::Capacity,
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        ),
        (
            FaultKind::CapacityInOperation("RESOURCE_POOL_EXHAUSTED".into()),
            ErrorClass::Capacity,
            "RESOURCE_POOL_EXHAUSTED",
        ),
        (
            FaultKind::CapacityInOperation("INSUFFICIENT_CAPACITY".into()),
            ErrorClass::Capacity,
            "INSUFFICIENT_CAPACITY",
        ),
        (FaultKind::QuotaHttp, ErrorClass::Quota, "quotaExceeded"),
        (
            FaultKind::QuotaInOperation,
            ErrorClass::Quota,
            "QUOTA_EXCEEDED",
        ),
        (
            FaultKind::RateLimit429,
            ErrorClass::Throttled,
            "rateLimitExceeded",
        ),
        (
            FaultKind::RateLimit403,
            ErrorClass::Throttled,
            "rateLimitExceeded",
        ),
        (
            FaultKind::Permission,
            ErrorClass::InvalidRequest,
            "forbidden",
        ),
        (FaultKind::Invalid, ErrorClass::InvalidRequest, "invalid"),
        (
            FaultKind::Unavailable,
            ErrorClass::Transient,
            "backendError",
        ),
    ];
    let e = env("").await;
    let o = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    for (i, (kind, class, code)) in cases.into_iter().enumerate() {
        e.server.server.inject(Fault {
            matches: FaultMatch::Zone(ZONE.into()),
            kind: kind.clone(),
            times: Some(1),
        });
        let err = e
            .provider
            .launch(&spec(&o, "errors", &format!("t{i}")))
            .await
            .expect_err("the fault must fail the launch");
        assert_eq!(err.class(), class, "{kind:?}: {err}");
        assert_eq!(err.code(), code, "{kind:?}: {err}");
        assert!(
            e.provider.list_owned("errors").await.unwrap().is_empty(),
            "{kind:?} created an instance"
        );
    }
    // The faults were used up: the next launch works.
    e.provider
        .launch(&spec(&o, "errors", "after"))
        .await
        .expect("no fault left");
}

#[tokio::test]
async fn a_stockout_on_start_is_a_capacity_refusal_too() {
    let e = env("").await;
    let o = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    let vm = e.provider.launch(&spec(&o, "wake", "w")).await.unwrap();
    e.provider.stop(&vm.id).await.unwrap();
    e.server.server.inject(Fault {
        matches: FaultMatch::MachineType("a2-highgpu-1g".into()),
        kind: FaultKind::CapacityInOperation("ZONE_RESOURCE_POOL_EXHAUSTED".into()),
        times: Some(1),
    });
    let err = e.provider.start(&vm.id).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Capacity, "{err}");
    assert_eq!(
        e.provider.describe(&vm.id).await.unwrap().phase,
        InstancePhase::Stopped
    );
    let started = e.provider.start(&vm.id).await.unwrap();
    assert_eq!(started.phase, InstancePhase::Ready);
}

#[tokio::test]
async fn a_flaky_api_is_retried_once_then_reported_transient() {
    let e = env("").await;
    let o = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    let vm = e.provider.launch(&spec(&o, "flaky", "f")).await.unwrap();
    let before = e.server.server.calls().len();
    e.server.server.fail_next_gets(10);
    let err = e.provider.describe(&vm.id).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Transient, "{err}");
    let attempts = e.server.server.calls().len() - before;
    assert_eq!(attempts, 2, "one call and one retry, no more");
    // One failure left over from the ten is absorbed by the retry.
    e.server.server.fail_next_gets(1);
    assert_eq!(e.provider.describe(&vm.id).await.unwrap().id, vm.id);
}

#[tokio::test]
async fn the_insert_carries_market_reservation_labels_and_a_request_id() {
    let e = env(r#"
[reservations]
gcp-a3-reserved = "a3-block-1"
[instance_templates]
llm = "projects/headroom-test/global/instanceTemplates/llm-v2"
"#)
    .await;
    let spot = offering("gcp-a2-spot", ZONE, "a2-highgpu-1g", Market::Spot);
    let reserved = offering("gcp-a3-reserved", ZONE, "a3-highgpu-8g", Market::Reserved);
    let any = offering("gcp-a3-any", ZONE_B, "a3-highgpu-8g", Market::Reserved);
    let mut s = spec(&spot, "Team.Prod", "tok-spot");
    s.tags.pool = "llm".into();
    let a = e.provider.launch(&s).await.unwrap();
    let b = e
        .provider
        .launch(&spec(&reserved, "Team.Prod", "tok-res"))
        .await
        .unwrap();
    let c = e
        .provider
        .launch(&spec(&any, "Team.Prod", "tok-any"))
        .await
        .unwrap();
    assert_eq!(
        a.tags, s.tags,
        "exact tags come back despite label sanitising"
    );
    let vms = e.server.server.instances();
    let vm = |id: &InstanceId| {
        vms.iter()
            .find(|v| v["name"] == name_of(id))
            .cloned()
            .unwrap()
    };
    let spot_vm = vm(&a.id);
    assert_eq!(spot_vm["scheduling"]["provisioningModel"], "SPOT");
    assert_eq!(spot_vm["scheduling"]["instanceTerminationAction"], "STOP");
    assert_eq!(spot_vm["scheduling"]["onHostMaintenance"], "TERMINATE");
    assert_eq!(spot_vm["labels"]["headroom-cluster"], "team_prod");
    assert_eq!(spot_vm["labels"]["headroom-token"], "tok-spot");
    assert_eq!(
        spot_vm["sourceInstanceTemplate"],
        "projects/headroom-test/global/instanceTemplates/llm-v2"
    );
    assert!(
        spot_vm["machineType"]
            .as_str()
            .unwrap()
            .ends_with("/machineTypes/a2-highgpu-1g")
    );
    let res_vm = vm(&b.id);
    assert_eq!(res_vm["scheduling"]["provisioningModel"], "STANDARD");
    assert_eq!(
        res_vm["reservationAffinity"],
        json!({"consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name", "values": ["a3-block-1"]})
    );
    assert_eq!(
        vm(&c.id)["reservationAffinity"]["consumeReservationType"],
        "ANY_RESERVATION"
    );
    assert!(c.id.0.starts_with("us-central1-b/"), "{}", c.id);
    assert_eq!(
        e.provider.list_owned("Team.Prod").await.unwrap().len(),
        3,
        "listed across both zones"
    );
    assert!(
        e.provider.list_owned("team_prod").await.unwrap().is_empty(),
        "the exact cluster, not its label"
    );
}

#[tokio::test]
async fn without_a_template_the_vm_gets_a_boot_disk() {
    let clock = Arc::new(ManualClock::new("2026-11-30T09:00:00Z".parse().unwrap()));
    let server = ComputeServer::start(clock.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let table: toml::Table = toml::from_str(&format!(
        "project = \"{PROJECT}\"\nendpoint = \"{}\"\ncredentials = \"anonymous\"\nboot_image = \"projects/debian-cloud/global/images/family/debian-12\"\nboot_disk_gb = 100",
        server.endpoint()
    ))
    .unwrap();
    let p = GcpProvider::new(
        GcpSettings::parse(Some(&table)).unwrap(),
        [ZONE.to_string()],
        clock,
    )
    .await
    .unwrap();
    let o = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    p.launch(&spec(&o, "disk", "d")).await.unwrap();
    let vm = &server.server.instances()[0];
    assert_eq!(vm["disks"][0]["boot"], true);
    assert_eq!(vm["disks"][0]["initializeParams"]["diskSizeGb"], "100");
    assert!(vm.get("sourceInstanceTemplate").is_none());
}

#[tokio::test]
async fn a_repeat_after_the_request_id_window_collides_on_the_name() {
    let e = env("").await;
    let o = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    let first = e.provider.launch(&spec(&o, "late", "same")).await.unwrap();
    e.server.server.forget_request_ids();
    let again = e.provider.launch(&spec(&o, "late", "same")).await.unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(e.server.server.instances().len(), 1);
    let inserts = e
        .server
        .server
        .calls()
        .iter()
        .filter(|c| c.starts_with("POST") && c.ends_with("/instances"))
        .count();
    assert_eq!(
        inserts, 2,
        "the second insert reached the server and was refused as a duplicate"
    );
}

#[tokio::test]
async fn a_duplicate_reported_inside_the_operation_returns_the_first_vm_too() {
    let e = env("").await;
    e.server.server.set_duplicates_in_operation(true);
    let o = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    let first = e.provider.launch(&spec(&o, "late", "same")).await.unwrap();
    e.server.server.forget_request_ids();
    let again = e.provider.launch(&spec(&o, "late", "same")).await.unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(e.server.server.instances().len(), 1);
}

#[tokio::test]
async fn suspend_warm_pools_resume_past_weight_load() {
    let e = env("warm_mode = \"suspend\"\nready_after = \"5m\"").await;
    let o = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    let vm = e.provider.launch(&spec(&o, "warm", "s")).await.unwrap();
    assert_eq!(vm.phase, InstancePhase::Booting(LadderRung::ImagePull));
    e.clock.advance(Duration::from_secs(301));
    assert_eq!(
        e.provider.describe(&vm.id).await.unwrap().phase,
        InstancePhase::Ready
    );
    let parked = e.provider.stop(&vm.id).await.unwrap();
    assert_eq!(parked.phase, InstancePhase::Stopped);
    assert_eq!(e.server.server.instances()[0]["status"], "SUSPENDED");
    assert_eq!(
        e.provider.stop(&vm.id).await.unwrap().phase,
        InstancePhase::Stopped,
        "stopping twice is a no-op"
    );
    e.clock.advance(Duration::from_secs(60));
    let woken = e.provider.start(&vm.id).await.unwrap();
    assert_eq!(
        woken.phase,
        InstancePhase::Booting(LadderRung::Compile),
        "resume skips weight load"
    );
    assert!(
        e.server
            .server
            .calls()
            .iter()
            .any(|c| c.ends_with("/resume"))
    );
    assert_eq!(
        e.provider.start(&vm.id).await.unwrap().phase,
        InstancePhase::Booting(LadderRung::Compile),
        "starting a running VM is a no-op"
    );
}

#[tokio::test]
async fn stop_warm_pools_restart_past_image_pull() {
    let e = env("ready_after = \"5m\"").await;
    let o = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    let vm = e.provider.launch(&spec(&o, "warm", "t")).await.unwrap();
    e.clock.advance(Duration::from_secs(400));
    e.provider.stop(&vm.id).await.unwrap();
    assert_eq!(
        e.server.server.instances()[0]["status"],
        "TERMINATED",
        "GCE's stopped"
    );
    assert_eq!(
        e.provider.describe(&vm.id).await.unwrap().phase,
        InstancePhase::Stopped
    );
    e.clock.advance(Duration::from_secs(60));
    let woken = e.provider.start(&vm.id).await.unwrap();
    assert_eq!(woken.phase, InstancePhase::Booting(LadderRung::WeightLoad));
    assert!(
        e.server
            .server
            .calls()
            .iter()
            .any(|c| c.ends_with("/start"))
    );
}

#[tokio::test]
async fn a_preempted_spot_vm_is_interrupted_and_a_stopped_one_is_not() {
    let e = env("").await;
    let spot = offering("gcp-a2-spot", ZONE, "a2-highgpu-1g", Market::Spot);
    let od = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    let preempted = e.provider.launch(&spec(&spot, "pre", "p1")).await.unwrap();
    let parked = e.provider.launch(&spec(&spot, "pre", "p2")).await.unwrap();
    let steady = e.provider.launch(&spec(&od, "pre", "p3")).await.unwrap();
    e.provider.stop(&parked.id).await.unwrap();
    e.clock.advance(Duration::from_secs(30));
    assert!(
        e.server
            .server
            .preempt(PROJECT, ZONE, name_of(&preempted.id))
    );
    let listed = e.provider.list_owned("pre").await.unwrap();
    let phase = |id: &InstanceId| listed.iter().find(|i| &i.id == id).map(|i| i.phase);
    assert_eq!(phase(&preempted.id), Some(InstancePhase::Interrupted));
    assert_eq!(
        phase(&parked.id),
        Some(InstancePhase::Stopped),
        "stopped by us, not preempted"
    );
    assert_eq!(phase(&steady.id), Some(InstancePhase::Ready));
    assert_eq!(
        e.provider.describe(&preempted.id).await.unwrap().phase,
        InstancePhase::Interrupted
    );
    // Started again after the preemption, it is no longer interrupted.
    e.clock.advance(Duration::from_secs(30));
    assert_eq!(
        e.provider.start(&preempted.id).await.unwrap().phase,
        InstancePhase::Ready
    );
}

#[tokio::test]
async fn list_owned_skips_other_clusters_and_vms_headroom_did_not_make() {
    let e = env("").await;
    let o = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    let mine = e.provider.launch(&spec(&o, "mine", "m")).await.unwrap();
    e.provider.launch(&spec(&o, "theirs", "t")).await.unwrap();
    // Someone copied our label onto a VM of their own.
    e.server.server.put_instance(
        PROJECT,
        ZONE,
        json!({"name": "handmade", "status": "RUNNING", "labels": {"headroom-cluster": "mine"}, "description": "a VM"}),
    );
    let listed = e.provider.list_owned("mine").await.unwrap();
    assert_eq!(
        listed.iter().map(|i| &i.id).collect::<Vec<_>>(),
        vec![&mine.id]
    );
    let filter_used = e
        .server
        .server
        .calls()
        .iter()
        .any(|c| c == &format!("GET /zones/{ZONE}/instances"));
    assert!(filter_used);
}

fn engine_config(endpoint: &str) -> String {
    format!(
        r#"
cluster_id = "gcp-crash"
[engine]
tick = "1s"
[[offerings]]
id = "gcp-a2-od"
provider = "gcp"
region = "us-central1"
zone = "{ZONE}"
instance_type = "a2-highgpu-1g"
market = "on-demand"
price_usd_per_hour = "3.67"
gpus = 1
[[pools]]
name = "llm"
account = "ml"
offerings = ["gcp-a2-od"]
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
[gcp]
{}
"#,
        settings_text(endpoint, "")
    )
}

#[tokio::test]
async fn a_crash_between_insert_and_outcome_leaves_exactly_one_vm() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new("2026-11-30T09:00:00Z".parse().unwrap()));
    let server = ComputeServer::start(clock.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let config = Arc::new(
        headroom_config::Config::parse(&engine_config(&server.endpoint()), "test").unwrap(),
    );
    let settings = GcpSettings::parse(config.gcp.as_ref()).unwrap();
    let zones: Vec<String> = config
        .offerings
        .iter()
        .map(|o| o.offering.zone.clone())
        .collect();
    let db = dir.path().join("ledger.db");

    {
        let ledger = Arc::new(SqliteLedger::open_path(&db).await.unwrap());
        let gcp = Arc::new(
            GcpProvider::new(settings.clone(), zones.clone(), clock.clone())
                .await
                .unwrap(),
        );
        // The insert is made, then the process dies before the ledger hears.
        let dying = Arc::new(DiesAfterLaunch {
            inner: gcp,
            death: Death::LostAnswer,
        });
        let engine =
            headroom_engine::Engine::new(config.clone(), ledger.clone(), dying, clock.clone());
        headroom_testkit::request(ledger.as_ref(), clock.as_ref(), "llm", 1).await;
        engine.tick().await.unwrap();
        let live = ledger.live_nodes().await.unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(
            live[0].state,
            NodeState::Requested,
            "an intent without an outcome"
        );
        assert_eq!(server.server.instances().len(), 1, "the insert happened");
        // The engine, its provider and its ledger connection go away: the process is dead.
    }

    clock.advance(Duration::from_secs(5));
    let ledger = Arc::new(SqliteLedger::open_path(&db).await.unwrap());
    let gcp = Arc::new(
        GcpProvider::new(settings, zones, clock.clone())
            .await
            .unwrap(),
    );
    let engine =
        headroom_engine::Engine::new(config.clone(), ledger.clone(), gcp.clone(), clock.clone());
    engine.tick().await.unwrap();
    clock.advance(Duration::from_secs(5));
    engine.tick().await.unwrap();

    let vms = server.server.instances();
    assert_eq!(vms.len(), 1, "no second VM: {vms:#?}");
    let live = ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1, "{live:?}");
    let node = &live[0];
    assert_ne!(
        node.state,
        NodeState::Requested,
        "the restart recorded the outcome"
    );
    let id = node
        .instance
        .clone()
        .expect("the ledger knows the instance");
    assert_eq!(id, format!("{ZONE}/{}", vms[0]["name"].as_str().unwrap()));
    assert_eq!(gcp.list_owned("gcp-crash").await.unwrap().len(), 1);
}

#[tokio::test]
async fn the_engine_replaces_a_preempted_spot_vm() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new("2026-11-30T09:00:00Z".parse().unwrap()));
    let server = ComputeServer::start(clock.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let text =
        engine_config(&server.endpoint()).replace("market = \"on-demand\"", "market = \"spot\"");
    let config = Arc::new(headroom_config::Config::parse(&text, "test").unwrap());
    let settings = GcpSettings::parse(config.gcp.as_ref()).unwrap();
    let ledger = Arc::new(
        SqliteLedger::open_path(&dir.path().join("l.db"))
            .await
            .unwrap(),
    );
    let gcp = Arc::new(
        GcpProvider::new(settings, [ZONE.to_string()], clock.clone())
            .await
            .unwrap(),
    );
    let engine = headroom_engine::Engine::new(config, ledger.clone(), gcp.clone(), clock.clone());
    headroom_testkit::request(ledger.as_ref(), clock.as_ref(), "llm", 1).await;
    for _ in 0..3 {
        engine.tick().await.unwrap();
        clock.advance(Duration::from_secs(5));
    }
    let live = ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].state, NodeState::Serving, "{live:?}");
    let first = server.server.instances()[0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        server.server.instances()[0]["scheduling"]["provisioningModel"],
        "SPOT"
    );

    assert!(server.server.preempt(PROJECT, ZONE, &first));
    for _ in 0..3 {
        engine.tick().await.unwrap();
        clock.advance(Duration::from_secs(5));
    }
    let events = ledger.node_events().await.unwrap();
    assert!(
        events.iter().any(|e| e.state == NodeState::Interrupted),
        "the preemption reached the ledger"
    );
    let names: Vec<String> = server
        .server
        .instances()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !names.contains(&first),
        "the preempted VM was deleted: {names:?}"
    );
    assert_eq!(names.len(), 1, "one replacement: {names:?}");
    let live = ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(gcp.list_owned("gcp-crash").await.unwrap().len(), 1);
}

/// A node's bootstrap (what `[kube] bootstrap` renders) goes into the VM's metadata as
/// `user-data`, beside a template's own settings, and GCE keeps it on the instance.
#[tokio::test]
async fn a_nodes_bootstrap_is_its_vms_user_data_metadata() {
    let e = env(r#"
[instance_templates]
llm = "projects/headroom-test/global/instanceTemplates/llm-v2"
"#)
    .await;
    let od = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    let bootstrap = "#cloud-config\nruncmd:\n  - kubeadm join --node-labels=gpu=a100,headroom.dev/node=n-ud,headroom.dev/pool=llm --register-with-taints=nvidia.com/gpu=present:NoSchedule\n";
    let mut with_user_data = spec(&od, "boot", "ud");
    with_user_data.user_data = Some(bootstrap.to_string());
    let launched = e.provider.launch(&with_user_data).await.unwrap();
    let plain = e
        .provider
        .launch(&spec(&od, "boot", "plain"))
        .await
        .unwrap();
    let vms = e.server.server.instances();
    let vm = |id: &InstanceId| {
        vms.iter()
            .find(|v| v["name"] == name_of(id))
            .cloned()
            .unwrap()
    };
    assert_eq!(
        vm(&launched.id)["metadata"]["items"],
        json!([{"key": "user-data", "value": bootstrap}])
    );
    assert_eq!(
        vm(&launched.id)["sourceInstanceTemplate"],
        "projects/headroom-test/global/instanceTemplates/llm-v2"
    );
    assert!(
        vm(&plain.id).get("metadata").is_none(),
        "no bootstrap: the template's metadata stands"
    );
}

/// Issue 19: a VM whose insert finished but whose first reads answer 404 (GCE's reads can lag
/// the write) is read again by its name and returned: a successful create is never a refusal.
/// Reads that keep missing past `gcp.operation_timeout` are a transient error, and the retry
/// with the same client token adopts the one VM.
#[tokio::test]
async fn a_vm_that_cannot_be_read_right_after_its_insert_is_read_again_and_adopted() {
    let e = env("").await;
    let o = offering("gcp-a2-od", ZONE, "a2-highgpu-1g", Market::OnDemand);
    e.server.server.miss_reads_after_insert(3);
    let launched = e
        .provider
        .launch(&spec(&o, "readback", "rb-1"))
        .await
        .expect("a created VM is adopted, not refused");
    assert_eq!(e.server.server.instances().len(), 1);
    let gets = |e: &Env| {
        e.server
            .server
            .calls()
            .iter()
            .filter(|c| c.starts_with(&format!("GET /zones/{ZONE}/instances/hr-")))
            .count()
    };
    assert_eq!(gets(&e), 4, "three misses, then the read that found it");
    assert_eq!(launched.client_token, "rb-1");

    // Reads that never come back within the bound: transient (the intent stays), not NotFound.
    let quick_text = settings_text(&e.server.endpoint(), "").replace("\"10s\"", "\"1s\"");
    let table: toml::Table = toml::from_str(&quick_text).unwrap();
    let quick = GcpProvider::new(
        GcpSettings::parse(Some(&table)).unwrap(),
        [ZONE.to_string()],
        e.clock.clone(),
    )
    .await
    .unwrap();
    e.server.server.miss_reads_after_insert(1_000);
    let err = quick
        .launch(&spec(&o, "readback", "rb-2"))
        .await
        .expect_err("never readable within the bound");
    assert_eq!(err.class(), ErrorClass::Transient, "{err}");
    assert_eq!(err.code(), "read_back_pending");
    e.server.server.miss_reads_after_insert(0);
    e.server.server.clear_hidden();
    let again = quick.launch(&spec(&o, "readback", "rb-2")).await.unwrap();
    assert_eq!(again.client_token, "rb-2");
    assert_eq!(
        e.server.server.instances().len(),
        2,
        "one VM per client token"
    );
}

/// Issue 19, with the engine: before, the miss was recorded as `refused NotFound` and the pool
/// launched a fresh VM under a new name; now the one VM is adopted and nothing is refused.
#[tokio::test]
async fn the_engine_adopts_a_vm_whose_first_reads_miss_and_launches_no_second() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new("2026-11-30T09:00:00Z".parse().unwrap()));
    let server = ComputeServer::start(clock.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let text = engine_config(&server.endpoint()).replace("\"10s\"", "\"2s\"");
    let config = Arc::new(headroom_config::Config::parse(&text, "test").unwrap());
    let settings = GcpSettings::parse(config.gcp.as_ref()).unwrap();
    let ledger = Arc::new(
        SqliteLedger::open_path(&dir.path().join("l.db"))
            .await
            .unwrap(),
    );
    let gcp = Arc::new(
        GcpProvider::new(settings, [ZONE.to_string()], clock.clone())
            .await
            .unwrap(),
    );
    let engine = headroom_engine::Engine::new(config, ledger.clone(), gcp.clone(), clock.clone());
    server.server.miss_reads_after_insert(2);
    let request = headroom_testkit::request(ledger.as_ref(), clock.as_ref(), "llm", 1).await;
    for _ in 0..5 {
        engine.tick().await.unwrap();
        clock.advance(Duration::from_secs(1));
    }
    let inserts = server
        .server
        .calls()
        .iter()
        .filter(|c| *c == &format!("POST /zones/{ZONE}/instances"))
        .count();
    eprintln!("first two reads after each insert miss, 5 ticks: {inserts} inserts");
    assert_eq!(inserts, 1, "one insert, no VM under a new name");
    let vms = server.server.instances();
    assert_eq!(vms.len(), 1, "one VM: {vms:#?}");
    let outcome = ledger.capacity_request(&request).await.unwrap().unwrap();
    assert!(outcome.refusals.is_empty(), "{:?}", outcome.refusals);
    let live = ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(
        live[0].instance.as_deref(),
        Some(format!("{ZONE}/{}", vms[0]["name"].as_str().unwrap()).as_str())
    );
}

/// Issue 19: ownership is read from the labels Headroom writes when the description is gone, so
/// such a VM unknown to the ledger is seen, and swept as an orphan.
#[tokio::test]
async fn a_vm_with_headroom_s_labels_but_no_description_is_owned_and_swept_as_an_orphan() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new("2026-11-30T09:00:00Z".parse().unwrap()));
    let server = ComputeServer::start(clock.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let config = Arc::new(
        headroom_config::Config::parse(&engine_config(&server.endpoint()), "test").unwrap(),
    );
    let settings = GcpSettings::parse(config.gcp.as_ref()).unwrap();
    let gcp = Arc::new(
        GcpProvider::new(settings, [ZONE.to_string()], clock.clone())
            .await
            .unwrap(),
    );
    server.server.put_instance(
        PROJECT,
        ZONE,
        json!({
            "name": "hr-0123456789abcdef0123456789abcdef",
            "status": "RUNNING",
            "machineType": format!("zones/{ZONE}/machineTypes/a2-highgpu-1g"),
            "creationTimestamp": "2026-11-30T08:00:00.000-00:00",
            "labels": {
                "headroom-cluster": "gcp-crash",
                "headroom-pool": "llm",
                "headroom-node": "n-lost",
                "headroom-token": "hr-n-lost",
                "headroom-offering": "gcp-a2-od",
            },
        }),
    );
    let owned = gcp.list_owned("gcp-crash").await.unwrap();
    assert_eq!(owned.len(), 1, "labels are a source of ownership");
    assert_eq!(owned[0].client_token, "hr-n-lost");
    assert_eq!(owned[0].tags.node, "n-lost");
    assert_eq!(owned[0].offering.as_str(), "gcp-a2-od");
    assert!(gcp.list_owned("someone-else").await.unwrap().is_empty());

    let ledger = Arc::new(
        SqliteLedger::open_path(&dir.path().join("l.db"))
            .await
            .unwrap(),
    );
    let engine = headroom_engine::Engine::new(config, ledger.clone(), gcp.clone(), clock.clone());
    engine.tick().await.unwrap();
    assert!(
        server.server.instances().is_empty(),
        "the orphan was deleted: {:#?}",
        server.server.instances()
    );
}

/// Quota preflight against the local server: `regions.get`'s quotas, their usage following the
/// VMs the server holds (stopped ones use none), spot VMs under the `PREEMPTIBLE_` metric.
#[tokio::test]
async fn regional_gpu_quotas_come_from_regions_get_with_usage_that_follows_the_vms() {
    use headroom_cloud::Quotas;
    let e = env("").await;
    let l4 = offering("gcp-l4", ZONE, "g2-standard-8", Market::OnDemand);
    let l4_spot = offering("gcp-l4-spot", ZONE_B, "g2-standard-8", Market::Spot);
    let n1 = offering("gcp-n1", ZONE, "n1-standard-8", Market::OnDemand);
    let asked = [l4.clone(), l4_spot.clone(), n1.clone()];
    let read = || async {
        match e
            .provider
            .quota_headroom("us-central1", &asked)
            .await
            .unwrap()
        {
            Quotas::Known(q) => q,
            Quotas::Unknown => panic!("the server reports quotas"),
        }
    };
    let quotas = read().await;
    let names: Vec<&str> = quotas.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["NVIDIA_L4_GPUS", "PREEMPTIBLE_NVIDIA_L4_GPUS"]);
    assert_eq!((quotas[0].limit, quotas[0].in_use), (8, 0));
    assert_eq!(quotas[0].draw(&l4.id), Some(1));
    assert_eq!(quotas[1].draw(&l4_spot.id), Some(1));
    assert!(
        quotas.iter().all(|q| q.draw(&n1.id).is_none()),
        "N1 GPUs are attached, not mapped"
    );
    assert!(
        e.server
            .server
            .calls()
            .iter()
            .any(|c| c == "GET /regions/us-central1")
    );

    let first = e.provider.launch(&spec(&l4, "quota", "q1")).await.unwrap();
    e.provider.launch(&spec(&l4, "quota", "q2")).await.unwrap();
    e.provider
        .launch(&spec(&l4_spot, "quota", "q3"))
        .await
        .unwrap();
    let quotas = read().await;
    assert_eq!((quotas[0].in_use, quotas[1].in_use), (2, 1));
    e.provider.stop(&first.id).await.unwrap();
    assert_eq!(read().await[0].in_use, 1, "a stopped VM holds no GPU quota");

    // No L4s left in the region: the offering takes no more nodes.
    e.server
        .server
        .set_quota("us-central1", "NVIDIA_L4_GPUS", 1.0);
    let quotas = read().await;
    assert_eq!(
        (quotas[0].remaining(), quotas[0].nodes_left(&l4.id)),
        (0, Some(0))
    );
    // And the server holds to it, as GCE does: a launch or a start past the limit fails with
    // QUOTA_EXCEEDED, which the provider reads as a quota refusal; spot has its own quota.
    let over = e
        .provider
        .launch(&spec(&l4, "quota", "q4"))
        .await
        .unwrap_err();
    assert_eq!(over.class(), ErrorClass::Quota, "{over}");
    assert!(over.to_string().contains("NVIDIA_L4_GPUS"), "{over}");
    let start = e.provider.start(&first.id).await.unwrap_err();
    assert_eq!(start.class(), ErrorClass::Quota, "{start}");
    e.provider
        .launch(&spec(&l4_spot, "quota", "q5"))
        .await
        .unwrap();
    assert_eq!(
        e.server.server.instances().len(),
        4,
        "nothing was created by the refused launch"
    );
    // A granted increase: the stopped VM starts again.
    e.server
        .server
        .set_quota("us-central1", "NVIDIA_L4_GPUS", 2.0);
    e.provider.start(&first.id).await.unwrap();
    assert_eq!(read().await[0].in_use, 2);
}
