//! The real kube client against a local server speaking the Kubernetes API subset Headroom uses,
//! driving the engine with the simulated cloud, the SQLite ledger and manual time.

mod support;

use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::{Clock, CloudProvider, InstanceId, InstancePhase, ManualClock, SimCloud};
use headroom_config::Config;
use headroom_core::{NodeId, NodeState, PoolName, RequestState};
use headroom_engine::{Cluster, ClusterNodeKey, Engine, SignalInput};
use headroom_kube::{KubeCluster, KubeSettings, sim_provider_id};
use headroom_ledger::prelude::*;
use headroom_ledger::{NodeEvent, SqliteLedger};
use headroom_testkit::Rig;
use support::FakeApi;

const CONFIG: &str = r#"
cluster_id = "kube-test"
[engine]
tick = "1s"
[[offerings]]
id = "od"
provider = "sim"
region = "us-east-1"
zone = "use1-az1"
instance_type = "g6.xlarge"
market = "on-demand"
price_usd_per_hour = "0.8048"
gpus = 1
sim_capacity = 8
# Acquired in 5 s (the cloud reports it pending until then), then the rest of the ladder: the
# drills below start from a node that is running.
[offerings.sim_ladder]
node_acquisition = "5s"
image_pull = "45s"
weight_load = "90s"
compile = "30s"
warmup = "15s"
[[pools]]
name = "llm"
account = "ml"
offerings = ["od"]
min_replicas = 0
max_replicas = 4
warm_pool_size = 0
[pools.ladder]
node_acquisition = "60s"
image_pull = "45s"
weight_load = "90s"
compile = "30s"
warmup = "15s"
[pools.scaling]
replica_throughput_rps = 5.0
[kube]
enabled = true
register_timeout = "2m"
ready_timeout = "8m"
drain_timeout = "3m"
[kube.pools.llm]
model_selector = "app=llm"
node_labels = { "gpu" = "l4" }
"#;

struct Harness {
    rig: Rig,
    clock: Arc<ManualClock>,
    ledger: Arc<SqliteLedger>,
    cloud: Arc<SimCloud>,
    engine: Arc<Engine>,
    api: FakeApi,
    cluster: Arc<KubeCluster>,
}

fn pool() -> PoolName {
    "llm".parse().unwrap()
}

async fn cluster_for(api: &FakeApi, config: &Config) -> Arc<KubeCluster> {
    let settings = KubeSettings::from_table(config.kube.as_ref(), &[pool()], "test")
        .unwrap()
        .expect("[kube] is enabled");
    let cluster = Arc::new(KubeCluster::at_url(&api.url, settings).unwrap());
    cluster.wait_synced(Duration::from_secs(10)).await.unwrap();
    cluster
}

async fn harness() -> Harness {
    harness_from(CONFIG).await
}

async fn harness_from(config_text: &str) -> Harness {
    let api = FakeApi::start().await;
    let rig = Rig::new(config_text).await;
    let cloud = rig.sim_cloud();
    let cluster = cluster_for(&api, &rig.config).await;
    let engine = rig.engine_with_cluster(cloud.clone(), cluster.clone());
    Harness {
        clock: rig.clock.clone(),
        ledger: rig.ledger.clone(),
        rig,
        cloud,
        engine,
        api,
        cluster,
    }
}

/// Polls (in real time: the watches run on their own) until `f` holds.
async fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn key(e: &NodeEvent) -> ClusterNodeKey {
    ClusterNodeKey {
        pool: e.pool.clone(),
        node: e.node.clone(),
        provider: e.provider,
        zone: e.zone.clone(),
        instance: e.instance.clone().expect("launched"),
    }
}

impl Harness {
    async fn request(&self, replicas: u32) -> headroom_core::RequestId {
        self.rig.request("llm", replicas).await
    }

    async fn tick(&self) {
        self.clock.advance(Duration::from_secs(5));
        self.engine.tick().await.unwrap();
    }

    async fn run_for(&self, seconds: u64) {
        for _ in 0..seconds / 5 {
            self.tick().await;
        }
    }

    async fn live(&self) -> Vec<NodeEvent> {
        self.ledger.live_nodes().await.unwrap()
    }

    /// `node`'s states from its failure on, with their reasons.
    async fn end_of(&self, node: &NodeId) -> Vec<(NodeState, Option<String>)> {
        self.ledger
            .node_events()
            .await
            .unwrap()
            .into_iter()
            .filter(|e| &e.node == node)
            .map(|e| (e.state, e.reason))
            .skip_while(|(s, _)| *s != NodeState::Failed)
            .collect()
    }

    async fn only_node(&self) -> NodeEvent {
        let live = self.live().await;
        assert_eq!(live.len(), 1, "{live:?}");
        live[0].clone()
    }

    async fn decisions(&self) -> Vec<serde_json::Value> {
        self.engine.decisions(&pool()).await.unwrap()
    }

    /// Launches one node and takes it through the cluster's rungs to serving, with its model
    /// pod `serving/llm-0` on Kubernetes node `gpu-1`.
    async fn serving_node(&self) -> (headroom_core::RequestId, NodeEvent) {
        let id = self.request(1).await;
        self.tick().await;
        let node = self.only_node().await;
        let k = key(&node);
        self.api.register_node(
            "gpu-1",
            &sim_provider_id(&node.zone, node.instance.as_deref().unwrap()),
            &[("gpu", "l4")],
        );
        eventually("registered", || self.cluster.node(&k).registered).await;
        self.run_for(300).await;
        self.api.set_node_ready("gpu-1", true);
        self.api
            .add_pod("serving", "llm-0", "gpu-1", &[("app", "llm")], true, None);
        eventually("the model pod is seen Ready", || {
            self.cluster.node(&k).model_ready
        })
        .await;
        self.tick().await;
        let node = self.only_node().await;
        assert_eq!(node.state, NodeState::Serving);
        (id, node)
    }

    async fn scale_in(&self, id: &headroom_core::RequestId) {
        self.ledger
            .cancel_capacity_request(id, self.clock.now())
            .await
            .unwrap();
        self.engine.push_signal(
            &pool(),
            SignalInput {
                queue_depth: 0,
                arrival_rate_rps: Some(0.0),
                ..SignalInput::default()
            },
        );
    }
}

#[tokio::test]
async fn a_node_serves_only_once_the_cluster_shows_its_model_server_ready() {
    let h = harness().await;
    let id = h.request(1).await;
    h.tick().await;
    h.tick().await;
    let node = h.only_node().await;
    assert_eq!(node.state, NodeState::Booting);
    let k = key(&node);
    assert!(!h.cluster.node(&k).registered);

    // Registered (matched by provider ID), not Ready.
    let provider_id = sim_provider_id(&node.zone, node.instance.as_deref().unwrap());
    h.api.register_node("gpu-1", &provider_id, &[("gpu", "l4")]);
    eventually("registered", || h.cluster.node(&k).registered).await;
    // Past the whole ladder: the simulated cloud calls the instance ready by itself...
    h.run_for(300).await;
    let instances = h.cloud.list_owned("kube-test").await.unwrap();
    assert_eq!(instances.len(), 1);
    assert_eq!(instances[0].phase, InstancePhase::Ready);
    // ...but the cluster does not show it Ready, so it is not capacity (and, registered, it is
    // not failed either).
    assert_eq!(h.only_node().await.state, NodeState::Booting);
    assert_eq!(h.engine.pool_status(&pool()).unwrap().ready, 0);

    // Node Ready, no model server yet.
    h.api.set_node_ready("gpu-1", true);
    eventually("node ready", || h.cluster.node(&k).node_ready).await;
    h.tick().await;
    assert_eq!(h.only_node().await.state, NodeState::Booting);

    // The model-server pod is scheduled there but still loading; a pod of another selector
    // being Ready on it does not count.
    h.api
        .add_pod("serving", "llm-0", "gpu-1", &[("app", "llm")], false, None);
    h.api.add_pod(
        "serving",
        "other-0",
        "gpu-1",
        &[("app", "other")],
        true,
        None,
    );
    h.tick().await;
    assert_eq!(h.only_node().await.state, NodeState::Booting);
    assert!(!h.cluster.node(&k).model_ready);

    h.api.set_pod_ready("serving", "llm-0", true);
    eventually("model server ready", || h.cluster.node(&k).model_ready).await;
    h.tick().await;
    let node = h.only_node().await;
    assert_eq!(node.state, NodeState::Serving);
    assert_eq!(node.reason.as_deref(), Some("model_server_ready"));
    assert_eq!(h.engine.pool_status(&pool()).unwrap().ready, 1);
    assert_eq!(
        h.ledger.capacity_request(&id).await.unwrap().unwrap().state,
        RequestState::Delivered
    );
    // Each rung is stamped once, in order, in the decision log (newest first).
    let rungs: Vec<String> = h
        .decisions()
        .await
        .iter()
        .filter(|d| d["event"] == "cluster_rung")
        .map(|d| d["rung"].as_str().unwrap().to_string())
        .rev()
        .collect();
    assert_eq!(
        rungs,
        ["node_registered", "node_ready", "model_server_ready"]
    );
}

#[tokio::test]
async fn a_node_that_never_registers_is_failed_replaced_and_terminated() {
    let h = harness().await;
    h.request(1).await;
    h.tick().await;
    let first = h.only_node().await;
    let first_instance = first.instance.clone().unwrap();
    // register_timeout is 2 minutes; nothing ever registers.
    h.run_for(150).await;
    let ends = h.end_of(&first.node).await;
    assert_eq!(
        ends,
        [
            (NodeState::Failed, Some("never_registered".to_string())),
            (NodeState::Terminated, Some("never_registered".to_string()))
        ]
    );
    // No orphan paying by the hour: the instance is gone, a replacement is on its way.
    let instances = h.cloud.list_owned("kube-test").await.unwrap();
    assert!(instances.iter().all(|i| i.id.0 != first_instance));
    assert_eq!(instances.len(), 1);
    let replacement = h.only_node().await;
    assert_ne!(replacement.node, first.node);
    assert!(replacement.state.is_starting(), "{replacement:?}");
    assert!(
        h.decisions()
            .await
            .iter()
            .any(|d| d["event"] == "never_registered" && d["node"] == first.node.0)
    );
}

#[tokio::test]
async fn scale_in_cordons_evicts_through_the_disruption_budget_then_terminates() {
    let h = harness().await;
    let (id, node) = h.serving_node().await;
    // Beside the model server: a pod a PodDisruptionBudget protects, and a DaemonSet pod that
    // a drain leaves alone.
    h.api.add_pod(
        "default",
        "batch-0",
        "gpu-1",
        &[("app", "batch")],
        true,
        None,
    );
    h.api.add_pod(
        "kube-system",
        "exporter-0",
        "gpu-1",
        &[("app", "exporter")],
        true,
        Some("DaemonSet"),
    );
    h.api.block_eviction("default", "batch-0", true);

    h.scale_in(&id).await;
    h.tick().await;
    let draining = h.only_node().await;
    assert_eq!(draining.state, NodeState::Draining);
    assert_eq!(h.engine.pool_status(&pool()).unwrap().draining, 1);
    let log = h.api.log();
    assert_eq!(
        log[0], "PATCH node/gpu-1 {\"spec\":{\"unschedulable\":true}}",
        "cordoned first: {log:?}"
    );
    assert!(
        log.contains(&"EVICT serving/llm-0 -> 201".to_string()),
        "{log:?}"
    );
    assert!(
        log.contains(&"EVICT default/batch-0 -> 429".to_string()),
        "{log:?}"
    );
    assert!(!log.iter().any(|l| l.contains("exporter-0")), "{log:?}");
    assert_eq!(h.cloud.list_owned("kube-test").await.unwrap().len(), 1);

    // The budget still forbids it: asked again next tick, the node stays draining.
    eventually("cordon seen", || h.cluster.node(&key(&node)).cordoned).await;
    h.tick().await;
    assert_eq!(h.only_node().await.state, NodeState::Draining);
    let refused = |log: &[String]| {
        log.iter()
            .filter(|l| *l == "EVICT default/batch-0 -> 429")
            .count()
    };
    assert_eq!(refused(&h.api.log()), 2);
    assert_eq!(
        h.api
            .log()
            .iter()
            .filter(|l| l.starts_with("PATCH"))
            .count(),
        1,
        "cordoned once"
    );

    // The budget allows it now: evicted, but the pods have not left yet.
    h.api.block_eviction("default", "batch-0", false);
    h.tick().await;
    assert!(h.api.pod_terminating("default", "batch-0"));
    assert_eq!(h.only_node().await.state, NodeState::Draining);
    assert_eq!(h.cloud.list_owned("kube-test").await.unwrap().len(), 1);

    // The kubelet finishes them: the next tick terminates the instance.
    h.api.finish_terminating();
    assert!(!h.api.pod_exists("serving", "llm-0"));
    h.tick().await;
    assert!(h.live().await.is_empty());
    assert!(h.cloud.list_owned("kube-test").await.unwrap().is_empty());
    let events = h.ledger.node_events().await.unwrap();
    let last = events.iter().rfind(|e| e.node == node.node).unwrap();
    assert_eq!(
        (last.state, last.reason.as_deref()),
        (NodeState::Terminated, Some("released"))
    );
    assert!(h.decisions().await.iter().any(|d| d["event"] == "drained"));
}

#[tokio::test]
async fn a_drain_a_disruption_budget_blocks_goes_ahead_at_its_bound() {
    let h = harness().await;
    let (id, _) = h.serving_node().await;
    h.api.block_eviction("serving", "llm-0", true);
    h.scale_in(&id).await;
    h.tick().await;
    assert_eq!(h.only_node().await.state, NodeState::Draining);
    // drain_timeout is 3 minutes.
    h.run_for(170).await;
    assert_eq!(h.only_node().await.state, NodeState::Draining);
    h.run_for(15).await;
    assert!(h.live().await.is_empty());
    assert!(h.cloud.list_owned("kube-test").await.unwrap().is_empty());
    let timeout = h
        .decisions()
        .await
        .into_iter()
        .find(|d| d["event"] == "drain_timeout")
        .expect("the bound is on record");
    assert_eq!(timeout["pods_left"], 1);
    assert_eq!(timeout["blocked_by_disruption_budget"], 1);
}

#[tokio::test]
async fn a_spot_notice_drains_within_the_notice() {
    let h = harness().await;
    let (_, node) = h.serving_node().await;
    let reclaim_at = h.clock.now() + chrono::Duration::seconds(120);
    assert_eq!(h.cloud.interrupt(&"od".parse().unwrap(), 1, reclaim_at), 1);
    h.tick().await;
    let events = h.ledger.node_events().await.unwrap();
    let last = events.iter().rfind(|e| e.node == node.node).unwrap();
    assert_eq!(
        (last.state, last.reason.as_deref()),
        (NodeState::Draining, Some("interruption_notice"))
    );
    assert!(h.api.log()[0].starts_with("PATCH node/gpu-1"));
    assert!(h.api.pod_terminating("serving", "llm-0"));
    // Its replacement is launched in the same tick.
    assert_eq!(h.live().await.len(), 2);
    // The evicted model server has not left yet: the node stays draining, the instance runs.
    h.tick().await;
    let events = h.ledger.node_events().await.unwrap();
    let last = events.iter().rfind(|e| e.node == node.node).unwrap();
    assert_eq!(last.state, NodeState::Draining);
    let instance = node.instance.clone().unwrap();
    assert!(
        h.cloud
            .list_owned("kube-test")
            .await
            .unwrap()
            .iter()
            .any(|i| i.id.0 == instance)
    );
    h.api.finish_terminating();
    h.tick().await;
    let events = h.ledger.node_events().await.unwrap();
    let last = events.iter().rfind(|e| e.node == node.node).unwrap();
    assert_eq!(last.state, NodeState::Terminated);
    assert!(h.clock.now() < reclaim_at, "drained within the notice");
}

#[tokio::test]
async fn watches_resume_after_a_close_and_relist_after_410_gone() {
    let api = FakeApi::start().await;
    let config = Config::parse(CONFIG, "test").unwrap();
    let cluster = cluster_for(&api, &config).await;
    let node = |name: &str, instance: &str| ClusterNodeKey {
        pool: pool(),
        node: NodeId(name.to_string()),
        provider: headroom_core::ProviderKind::Sim,
        zone: "use1-az1".to_string(),
        instance: instance.to_string(),
    };
    let (a, b) = (node("n-a", "sim-1"), node("n-b", "sim-2"));
    api.register_node("gpu-a", &sim_provider_id("use1-az1", "sim-1"), &[]);
    api.set_node_ready("gpu-a", true);
    eventually("a ready", || cluster.node(&a).node_ready).await;

    // The server ends the watch; the client watches again from its resourceVersion and misses
    // nothing that happened in between.
    let (lists, watches) = api.counts();
    api.close_watches();
    api.set_node_ready("gpu-a", false);
    eventually("a not ready", || !cluster.node(&a).node_ready).await;
    eventually("watching again", || api.counts().1 > watches).await;
    assert_eq!(api.counts().0, lists, "resumed without a re-list");

    // The history is compacted while the watch is down and a node goes without an event:
    // resuming answers 410 Gone, the client re-lists, and the view is right again.
    api.compact();
    api.delete_node_unseen("gpu-a");
    api.register_node(
        "gpu-b",
        "",
        &[("headroom.dev/node", "n-b"), ("headroom.dev/pool", "llm")],
    );
    api.close_watches();
    eventually("a gone, b seen", || {
        !cluster.node(&a).registered && cluster.node(&b).registered
    })
    .await;
    assert!(api.counts().0 > lists, "re-listed after 410");

    // A Node labelled for another pool never matches, whatever its provider ID says.
    api.register_node(
        "gpu-c",
        &sim_provider_id("use1-az1", "sim-3"),
        &[("headroom.dev/pool", "other")],
    );
    let c = node("n-c", "sim-3");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!cluster.node(&c).registered);
}

/// The configuration with `[kube] bootstrap = "eks-al2023"` and its cluster.
fn eks_config() -> String {
    CONFIG.replace(
        "[kube]\nenabled = true\n",
        "[kube]\nenabled = true\nbootstrap = \"eks-al2023\"\n",
    ) + r#"
[kube.eks]
cluster_name = "gpu-prod"
api_server_endpoint = "https://ABC.gr7.us-east-1.eks.amazonaws.com"
certificate_authority = "LS0tLS1CRUdJTg=="
service_cidr = "10.100.0.0/16"
"#
}

#[tokio::test]
async fn each_launch_carries_its_nodes_bootstrap_with_the_pools_labels() {
    let h = harness_from(&eks_config()).await;
    h.request(2).await;
    h.tick().await;
    let live = h.live().await;
    assert_eq!(live.len(), 2);
    for node in &live {
        let user_data = h
            .cloud
            .user_data(&InstanceId(node.instance.clone().unwrap()))
            .expect("launched with user data");
        assert!(user_data.contains("kind: NodeConfig\n"), "{user_data}");
        assert!(
            user_data.contains("    name: \"gpu-prod\"\n"),
            "{user_data}"
        );
        assert!(
            user_data.contains(&format!(
                "      - \"--node-labels=gpu=l4,headroom.dev/node={},headroom.dev/pool=llm\"\n",
                node.node.0
            )),
            "{user_data}"
        );
    }

    // Without a bootstrap setting nothing is sent: the image or template bootstraps itself.
    let plain = harness().await;
    plain.request(1).await;
    plain.tick().await;
    let node = plain.only_node().await;
    assert_eq!(
        plain
            .cloud
            .user_data(&InstanceId(node.instance.clone().unwrap())),
        None
    );
}

#[tokio::test]
async fn a_registered_node_whose_model_server_never_becomes_ready_is_failed_replaced_and_terminated()
 {
    let h = harness().await;
    h.request(1).await;
    h.tick().await;
    let first = h.only_node().await;
    let instance = first.instance.clone().unwrap();
    h.api.register_node(
        "gpu-1",
        &sim_provider_id(&first.zone, &instance),
        &[("gpu", "l4")],
    );
    h.api.set_node_ready("gpu-1", true);
    h.api
        .add_pod("serving", "llm-0", "gpu-1", &[("app", "llm")], false, None);
    eventually("node ready", || h.cluster.node(&key(&first)).node_ready).await;
    // Registered in time, so not `never_registered`; ready_timeout is 8 minutes.
    h.run_for(420).await;
    assert_eq!(h.only_node().await.state, NodeState::Booting);
    h.run_for(150).await;
    let ends = h.end_of(&first.node).await;
    assert_eq!(
        ends,
        [
            (NodeState::Failed, Some("never_ready".to_string())),
            (NodeState::Terminated, Some("never_ready".to_string()))
        ]
    );
    // Cordoned before it went, so nothing new was scheduled there.
    assert!(
        h.api
            .log()
            .contains(&"PATCH node/gpu-1 {\"spec\":{\"unschedulable\":true}}".to_string()),
        "{:?}",
        h.api.log()
    );
    let instances = h.cloud.list_owned("kube-test").await.unwrap();
    assert!(instances.iter().all(|i| i.id.0 != instance));
    let replacement = h.only_node().await;
    assert_ne!(replacement.node, first.node);
    assert!(replacement.state.is_starting(), "{replacement:?}");
    let entry = h
        .decisions()
        .await
        .into_iter()
        .find(|d| d["event"] == "never_ready")
        .expect("on record");
    assert_eq!(entry["node"], first.node.0);
    assert!(entry["waited_s"].as_i64().unwrap() >= 480, "{entry}");
}

#[tokio::test]
async fn a_woken_standby_node_serves_only_once_the_cluster_shows_its_model_server_ready() {
    let config = CONFIG
        .replace("warm_pool_size = 0", "warm_pool_size = 1")
        .replace(
            "[pools.scaling]\n",
            "[pools.supply]\nwarm_mode = \"running\"\n[pools.scaling]\n",
        );
    let h = harness_from(&config).await;
    // The warm floor launches a node that climbs to its model server, then parks running.
    h.tick().await;
    let warm = h.only_node().await;
    let k = key(&warm);
    h.api.register_node(
        "gpu-w",
        &sim_provider_id(&warm.zone, warm.instance.as_deref().unwrap()),
        &[("gpu", "l4")],
    );
    h.api.set_node_ready("gpu-w", true);
    h.api
        .add_pod("serving", "llm-w", "gpu-w", &[("app", "llm")], true, None);
    eventually("model ready", || h.cluster.node(&k).model_ready).await;
    h.tick().await;
    assert_eq!(h.only_node().await.state, NodeState::Standby);

    // While parked, its model server went away and the node was cordoned.
    h.api.set_pod_ready("serving", "llm-w", false);
    h.api.cordon("gpu-w");
    eventually("parked node changed", || {
        let v = h.cluster.node(&k);
        v.cordoned && !v.model_ready
    })
    .await;

    // Woken for a request: not capacity yet, and made schedulable again.
    h.request(1).await;
    h.tick().await;
    let state_of_warm = || async {
        h.live()
            .await
            .into_iter()
            .find(|e| e.node == warm.node)
            .unwrap()
    };
    let woken = state_of_warm().await;
    assert_eq!(
        (woken.state, woken.reason.as_deref()),
        (NodeState::Booting, Some("wake"))
    );
    assert_eq!(h.engine.pool_status(&pool()).unwrap().ready, 0);
    assert!(
        h.api
            .log()
            .contains(&"PATCH node/gpu-w {\"spec\":{\"unschedulable\":false}}".to_string()),
        "{:?}",
        h.api.log()
    );
    eventually("uncordoned", || !h.cluster.node(&k).cordoned).await;
    h.tick().await;
    assert_eq!(state_of_warm().await.state, NodeState::Booting);

    // The model server is back: now it serves.
    h.api.set_pod_ready("serving", "llm-w", true);
    eventually("model ready again", || h.cluster.node(&k).model_ready).await;
    h.tick().await;
    let serving = state_of_warm().await;
    assert_eq!(
        (serving.state, serving.reason.as_deref()),
        (NodeState::Serving, Some("model_server_ready"))
    );
    assert_eq!(h.engine.pool_status(&pool()).unwrap().ready, 1);
}

#[tokio::test]
async fn rung_stamps_are_not_repeated_by_a_restarted_engine() {
    let h = harness().await;
    h.request(1).await;
    h.tick().await;
    let node = h.only_node().await;
    let k = key(&node);
    h.api.register_node(
        "gpu-1",
        &sim_provider_id(&node.zone, node.instance.as_deref().unwrap()),
        &[("gpu", "l4")],
    );
    h.api.set_node_ready("gpu-1", true);
    eventually("node ready", || h.cluster.node(&k).node_ready).await;
    h.tick().await;

    // A second process on the same ledger (the first one restarted).
    let restarted = Engine::with_cluster(
        Arc::new(h.engine.config().clone()),
        h.ledger.clone(),
        h.cloud.clone(),
        h.clock.clone(),
        Some(h.cluster.clone()),
    );
    h.clock.advance(Duration::from_secs(5));
    restarted.tick().await.unwrap();
    h.api
        .add_pod("serving", "llm-0", "gpu-1", &[("app", "llm")], true, None);
    eventually("model ready", || h.cluster.node(&k).model_ready).await;
    h.clock.advance(Duration::from_secs(5));
    restarted.tick().await.unwrap();
    assert_eq!(h.only_node().await.state, NodeState::Serving);
    let rungs: Vec<String> = restarted
        .decisions(&pool())
        .await
        .unwrap()
        .iter()
        .filter(|d| d["event"] == "cluster_rung")
        .map(|d| d["rung"].as_str().unwrap().to_string())
        .rev()
        .collect();
    assert_eq!(
        rungs,
        ["node_registered", "node_ready", "model_server_ready"]
    );
}

#[tokio::test]
async fn unschedulable_model_server_pods_ask_for_nodes() {
    let h = harness().await;
    // No queue signal at all: the controller holds; two replicas of the model server wait.
    h.api
        .add_unschedulable_pod("serving", "llm-0", &[("app", "llm")]);
    h.api
        .add_unschedulable_pod("serving", "llm-1", &[("app", "llm")]);
    eventually("pending pods seen", || {
        h.cluster.unschedulable_pods(&pool()) == 2
    })
    .await;
    h.tick().await;
    assert_eq!(h.live().await.len(), 2, "one node per waiting pod");
    // The nodes on their way cover the pods: no more launches while they start.
    h.run_for(60).await;
    assert_eq!(h.live().await.len(), 2);
    let entries: Vec<serde_json::Value> = h
        .decisions()
        .await
        .into_iter()
        .filter(|d| d["event"] == "unschedulable_pods")
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "logged when the count changes: {entries:?}"
    );
    assert_eq!(entries[0]["pods"], 2);
    assert_eq!(entries[0]["target"], 2);
}

/// `[pools.scrape.pods]`: the pool's signal is read from every Ready model-server pod the
/// cluster shows, and from no other: a warming pod's queue and a draining one's stay out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_reads_every_ready_model_server_pod_and_no_other() {
    use headroom_testkit::prometheus::Pod;
    // Pods have their own IPs and share the model server's port: 127.0.0.2-4 are loopback.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let exporters = [
        Pod::start_at("127.0.0.2", port, 7),
        Pod::start_at("127.0.0.3", port, 5),
        Pod::start_at("127.0.0.4", port, 100),
    ];
    let config = CONFIG.replace(
        "[kube]\n",
        &format!(
            "[pools.scrape]\ninterval = \"1s\"\ntimeout = \"1s\"\n[pools.scrape.pods]\nport = {port}\n[pools.scrape.series]\nqueue_depth = 'vllm:num_requests_waiting{{model_name=\"llama-70b\"}}'\n[kube]\n"
        ),
    );
    let h = harness_from(&config).await;
    for (name, ip, ready) in [
        ("llm-a", "127.0.0.2", true),
        ("llm-b", "127.0.0.3", true),
        // Still warming: its model is not loaded, its queue is not the pool's.
        ("llm-c", "127.0.0.4", false),
    ] {
        h.api
            .add_pod("default", name, "node-1", &[("app", "llm")], ready, None);
        h.api.set_pod_ip("default", name, ip);
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let readers = tokio::spawn(h.engine.clone().run_scrapers(async {
        let _ = stopped.await;
    }));
    let queue = |h: &Harness| {
        h.engine
            .pool_status(&pool())
            .and_then(|s| s.last_signal)
            .map(|s| s.queue_depth)
    };
    async fn until(h: &Harness, what: &str, wanted: impl Fn(&Harness) -> bool) {
        for _ in 0..100 {
            h.engine.tick().await.unwrap();
            if wanted(h) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "timed out waiting for: {what}: {:?}",
            h.engine.pool_status(&pool())
        );
    }
    until(&h, "the two Ready pods' 12", |h| queue(h) == Some(12)).await;
    let spread = h
        .engine
        .pool_status(&pool())
        .unwrap()
        .replica_queues
        .unwrap();
    assert_eq!((spread.replicas, spread.max), (2, 7));

    h.api.set_pod_ready("default", "llm-c", true);
    until(&h, "the third pod, Ready now", |h| queue(h) == Some(112)).await;
    h.api.set_pod_ready("default", "llm-a", false);
    until(&h, "without the pod that stopped being Ready", |h| {
        queue(h) == Some(105)
    })
    .await;
    assert!(exporters.iter().all(|p| p.port == port));
    let _ = stop.send(());
    readers.await.unwrap();
}
