//! The engine against the real SQLite ledger and the simulated cloud, in manual time.

use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::{
    Clock, CloudProvider, InstancePhase, LaunchSpec, ManualClock, OwnershipTags, SimCloud,
};
use headroom_config::Config;
use headroom_core::controller::{Limit, Rule, ScalingHold};
use headroom_core::planner::Destination;
use headroom_core::{ErrorClass, NodeId, NodeState, Priority, RefusalReason, RequestState};
use headroom_engine::{Engine, SignalInput};
use headroom_ledger::prelude::*;
use headroom_ledger::{NodeEvent, SqliteLedger};
use headroom_testkit::Rig;

/// One pool, two offerings (cheap and dear), no warm pool, min 0: quiet unless asked.
const CONFIG: &str = r#"
cluster_id = "engine-test"
[engine]
tick = "1s"
offering_cooldown = "5m"
[[offerings]]
id = "cheap"
provider = "sim"
region = "us-east-2"
zone = "use2-az1"
instance_type = "g6.xlarge"
market = "spot"
price_usd_per_hour = "0.2599"
gpus = 1
sim_capacity = 2
[[offerings]]
id = "dear"
provider = "sim"
region = "us-east-1"
zone = "use1-az1"
instance_type = "g6.xlarge"
market = "on-demand"
price_usd_per_hour = "0.8048"
gpus = 1
sim_capacity = 8
[[pools]]
name = "llm"
account = "ml"
offerings = ["cheap", "dear"]
min_replicas = 0
max_replicas = 6
max_scale_up_per_step = 6
warm_pool_size = 0
[pools.ladder]
node_acquisition = "60s"
image_pull = "45s"
weight_load = "90s"
compile = "30s"
warmup = "15s"
[pools.scaling]
replica_throughput_rps = 5.0
# The worked numbers below serve arrivals at full throughput.
target_utilization = 1.0
"#;

/// What a serving layer with nothing to do reports: nothing queued, nothing arriving.
fn quiet() -> SignalInput {
    SignalInput {
        queue_depth: 0,
        arrival_rate_rps: Some(0.0),
        ..SignalInput::default()
    }
}

/// Two days of a pool's demand before minute `start`: one replica, and five during a job from
/// 09:10 to 09:30 each day.
fn two_days_with_a_job(start: i64) -> Vec<(i64, u32)> {
    (start - 2 * 1440..start)
        .map(|m| {
            (
                m,
                if (550..570).contains(&m.rem_euclid(1440)) {
                    5
                } else {
                    1
                },
            )
        })
        .collect()
}

struct Harness {
    rig: Rig,
    clock: Arc<ManualClock>,
    ledger: Arc<SqliteLedger>,
    cloud: Arc<SimCloud>,
    engine: Arc<Engine>,
    config: Arc<Config>,
}

async fn harness(config_text: &str) -> Harness {
    let rig = Rig::new(config_text).await;
    let cloud = rig.sim_cloud();
    Harness {
        clock: rig.clock.clone(),
        ledger: rig.ledger.clone(),
        config: rig.config.clone(),
        engine: rig.engine(cloud.clone()),
        cloud,
        rig,
    }
}

impl Harness {
    /// A second engine on the same ledger and cloud: what a restart after a crash sees.
    fn restarted(&self) -> Arc<Engine> {
        self.rig.engine(self.cloud.clone())
    }

    async fn request(&self, replicas: u32) -> headroom_core::RequestId {
        self.rig.request("llm", replicas).await
    }

    async fn run_for(&self, seconds: u64) {
        for _ in 0..seconds / 5 {
            self.clock.advance(Duration::from_secs(5));
            self.engine.tick().await.unwrap();
        }
    }

    async fn live_instances(&self) -> usize {
        self.cloud.list_owned("engine-test").await.unwrap().len()
    }

    /// Launch calls the cloud has been sent, retries included.
    fn launch_calls(&self) -> usize {
        self.cloud
            .calls()
            .iter()
            .filter(|c| c.starts_with("launch"))
            .count()
    }
}

#[tokio::test]
async fn a_capacity_request_is_delivered_after_the_ladder() {
    let h = harness(CONFIG).await;
    let id = h.request(2).await;
    h.engine.tick().await.unwrap();
    let pool = h.engine.pool_status(&"llm".parse().unwrap()).unwrap();
    assert_eq!(
        (pool.requested + pool.starting, pool.ready),
        (2, 0),
        "launched, not yet capacity"
    );
    assert_eq!(
        h.ledger.capacity_request(&id).await.unwrap().unwrap().state,
        RequestState::Pending
    );

    h.run_for(240).await;
    let outcome = h.ledger.capacity_request(&id).await.unwrap().unwrap();
    assert_eq!(
        (outcome.state, outcome.delivered),
        (RequestState::Delivered, 2)
    );
    assert_eq!(
        h.engine.pool_status(&"llm".parse().unwrap()).unwrap().ready,
        2
    );
    assert_eq!(h.live_instances().await, 2);
    // Both went to the cheaper spot offering.
    assert!(
        h.cloud
            .calls()
            .iter()
            .filter(|c| c.starts_with("launch"))
            .all(|c| c.contains("cheap"))
    );
}

#[tokio::test]
async fn a_stockout_falls_back_at_once_to_the_next_offering() {
    let h = harness(CONFIG).await;
    h.cloud.set_capacity(&"cheap".parse().unwrap(), 1);
    let id = h.request(3).await;
    h.engine.tick().await.unwrap();
    // One on the cheap offering, the refusal recorded, and two on the dear one, in one tick.
    let outcome = h.ledger.capacity_request(&id).await.unwrap().unwrap();
    assert_eq!(outcome.refusals.len(), 1);
    assert_eq!(
        outcome.refusals[0].reason,
        RefusalReason::Cloud(ErrorClass::Capacity)
    );
    assert_eq!(
        outcome.refusals[0].offering.as_ref().unwrap().as_str(),
        "cheap"
    );
    assert_eq!(h.live_instances().await, 3);
    h.run_for(240).await;
    let outcome = h.ledger.capacity_request(&id).await.unwrap().unwrap();
    assert_eq!(outcome.state, RequestState::Delivered);
}

#[tokio::test]
async fn when_every_offering_refuses_the_request_is_refused_with_a_reason() {
    let h = harness(CONFIG).await;
    h.cloud.set_capacity(&"cheap".parse().unwrap(), 0);
    h.cloud.set_capacity(&"dear".parse().unwrap(), 0);
    let id = h.request(1).await;
    h.engine.tick().await.unwrap();
    let outcome = h.ledger.capacity_request(&id).await.unwrap().unwrap();
    assert_eq!(outcome.state, RequestState::Refused);
    let reasons: Vec<RefusalReason> = outcome.refusals.iter().map(|r| r.reason).collect();
    assert_eq!(
        reasons,
        [
            RefusalReason::Cloud(ErrorClass::Capacity),
            RefusalReason::Cloud(ErrorClass::Capacity),
            RefusalReason::NoOffering
        ]
    );
    assert!(
        outcome.refusals[2].detail.contains("add offerings"),
        "{}",
        outcome.refusals[2].detail
    );
    assert_eq!(h.live_instances().await, 0);
}

#[tokio::test]
async fn a_missing_signal_holds_the_pool_and_says_why() {
    let h = harness(&CONFIG.replace("min_replicas = 0", "min_replicas = 1")).await;
    h.engine.tick().await.unwrap();
    let status = h.engine.pool_status(&"llm".parse().unwrap()).unwrap();
    assert_eq!(status.scaling_hold, Some(ScalingHold::SignalMissing));
    assert_eq!(status.desired, 1, "the floor still holds");

    let demand = SignalInput {
        queue_depth: 0,
        arrival_rate_rps: Some(20.0),
        ..SignalInput::default()
    };
    h.engine
        .push_signal(&"llm".parse().unwrap(), demand.clone());
    h.engine.tick().await.unwrap();
    let status = h.engine.pool_status(&"llm".parse().unwrap()).unwrap();
    // The first breaching window: the rule wants 4, the policy waits for a second window.
    assert_eq!(
        (status.scaling_hold, status.limited, status.desired),
        (None, Some(Limit::BreachWindow), 1)
    );
    h.clock.advance(std::time::Duration::from_secs(15));
    h.engine.push_signal(&"llm".parse().unwrap(), demand);
    h.engine.tick().await.unwrap();
    let status = h.engine.pool_status(&"llm".parse().unwrap()).unwrap();
    assert_eq!((status.scaling_hold, status.desired), (None, 4));
    assert_eq!(status.rule, Some(Rule::BacklogDrain));
    let log = h.engine.decisions(&"llm".parse().unwrap()).await.unwrap();
    assert_eq!(log[0]["target"], 4, "newest first");
    // The earlier holds were closed and written to the ledger: they survive a restart.
    assert!(log.iter().any(|d| d["hold"] == "signal_missing"), "{log:?}");
    let restarted = h.restarted();
    let after = restarted.decisions(&"llm".parse().unwrap()).await.unwrap();
    assert!(
        after.iter().any(|d| d["hold"] == "signal_missing"),
        "{after:?}"
    );

    // The signal goes quiet: after signal_max_age the pool holds at 4, neither up nor down.
    h.run_for(60).await;
    let status = h.engine.pool_status(&"llm".parse().unwrap()).unwrap();
    assert_eq!(
        (status.scaling_hold, status.desired),
        (Some(ScalingHold::SignalStale), 4)
    );
}

/// The ledger keeps a pool's decision log for `DECISION_RETENTION` by each entry's last
/// activation: an answer that stood for longer than the retention, once superseded, stays in
/// the log while it is recent, rather than going as old with the next entry written.
#[tokio::test]
async fn a_decision_that_stood_past_the_retention_stays_in_the_log() {
    let h = harness(CONFIG).await;
    let llm: headroom_core::PoolName = "llm".parse().unwrap();
    h.engine.tick().await.unwrap();
    let opened = h.clock.now();
    let stood = headroom_ledger::DECISION_RETENTION + chrono::Duration::days(1);
    h.clock.advance(stood.to_std().unwrap());
    h.engine.tick().await.unwrap();
    let demand = SignalInput {
        queue_depth: 0,
        arrival_rate_rps: Some(20.0),
        ..SignalInput::default()
    };
    // A breaching window supersedes the hold (written), then the scale-up supersedes it
    // (written, more than the retention after the hold opened).
    h.engine.push_signal(&llm, demand.clone());
    h.engine.tick().await.unwrap();
    h.clock.advance(Duration::from_secs(15));
    h.engine.push_signal(&llm, demand);
    h.engine.tick().await.unwrap();
    let log = h.engine.decisions(&llm).await.unwrap();
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(log[0]["target"], 4, "{log:?}");
    let hold = &log[2];
    assert_eq!(hold["hold"], "signal_missing", "{log:?}");
    assert_eq!(hold["at"], serde_json::json!(opened));
    assert_eq!(hold["last_at"], serde_json::json!(opened + stood));
}

fn intent(h: &Harness, node: &str) -> NodeEvent {
    let offering = h.config.offering(&"cheap".parse().unwrap()).unwrap();
    let pool = h.config.pool(&"llm".parse().unwrap()).unwrap();
    NodeEvent::launch_intent(
        pool,
        offering,
        NodeId(node.into()),
        None,
        Destination::Serve,
        offering.price_usd_per_hour,
        h.clock.now(),
    )
}

/// The cloud call an intent of [`intent`] stands for, made behind the engine's back.
async fn launch_intent_on_cloud(h: &Harness, intent: &NodeEvent) -> headroom_cloud::Instance {
    let offering = h.config.offering(&intent.offering).unwrap().clone();
    h.cloud
        .launch(&LaunchSpec {
            offering,
            client_token: intent.client_token.clone(),
            tags: OwnershipTags {
                cluster: "engine-test".into(),
                pool: "llm".into(),
                node: intent.node.0.clone(),
                request: None,
            },
            user_data: None,
        })
        .await
        .unwrap()
}

/// A crash between the ledger intent and the cloud call, and one between the cloud call and the
/// outcome: the restarted engine neither leaks nor duplicates.
#[tokio::test]
async fn a_restart_reconciles_intents_without_outcomes() {
    let h = harness(CONFIG).await;
    // Crash after the intent, before the cloud call.
    h.ledger
        .append_node_event(&intent(&h, "n-before-call"))
        .await
        .unwrap();
    // Crash after the cloud call, before the outcome.
    let after = intent(&h, "n-after-call");
    h.ledger.append_node_event(&after).await.unwrap();
    let made = launch_intent_on_cloud(&h, &after).await;

    let engine = h.restarted();
    engine.tick().await.unwrap();
    engine.tick().await.unwrap();
    let instances = h.cloud.list_owned("engine-test").await.unwrap();
    assert_eq!(instances.len(), 2, "one instance per intent: {instances:?}");
    assert!(
        instances.iter().any(|i| i.id == made.id),
        "the instance made before the crash is adopted"
    );
    let live = h.ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 2);
    assert!(
        live.iter()
            .all(|e| e.instance.is_some() && e.state != NodeState::Requested),
        "{live:?}"
    );
    // Nothing wanted them (no request, no signal, min 0): with no demand, they are not released
    // either, because the controller holds without a signal.
}

/// An instance tagged for pool `llm` of this deployment that the ledger does not know.
async fn launch_orphan(h: &Harness, token: &str) -> headroom_cloud::Instance {
    let offering = h.config.offering(&"dear".parse().unwrap()).unwrap().clone();
    h.cloud
        .launch(&LaunchSpec {
            offering,
            client_token: token.into(),
            tags: OwnershipTags {
                cluster: "engine-test".into(),
                pool: "llm".into(),
                node: "ghost".into(),
                request: None,
            },
            user_data: None,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn an_orphaned_instance_is_terminated() {
    let h = harness(CONFIG).await;
    let orphan = launch_orphan(&h, "not-in-the-ledger").await;
    h.engine.tick().await.unwrap();
    assert_eq!(
        h.cloud.describe(&orphan.id).await.unwrap().phase,
        InstancePhase::Terminated
    );
    let decisions = h.engine.decisions(&"llm".parse().unwrap()).await.unwrap();
    assert!(
        decisions.iter().any(|d| d["event"] == "orphan"
            && d["instance"] == orphan.id.0.as_str()
            && d["policy"] == "terminate"),
        "{decisions:?}"
    );
}

#[tokio::test]
async fn with_the_report_policy_an_orphan_is_left_running_alerted_and_logged_once() {
    let h =
        harness(&CONFIG.replacen("[engine]\n", "[engine]\norphan_policy = \"report\"\n", 1)).await;
    let orphan = launch_orphan(&h, "made-by-hand").await;
    h.run_for(60).await;
    assert_ne!(
        h.cloud.describe(&orphan.id).await.unwrap().phase,
        InstancePhase::Terminated,
        "reported, not terminated"
    );
    let alerts = h.engine.active_alerts();
    let alert = alerts
        .iter()
        .find(|a| a.alert.name == "OrphanInstances")
        .expect("an OrphanInstances alert fires");
    assert!(
        alert.alert.summary.contains(&orphan.id.0),
        "{}",
        alert.alert.summary
    );
    assert_eq!(
        count_metric(
            &h.engine.metrics().encode(),
            "headroom_orphan_instances{pool=\"llm\",account=\"ml\"}"
        ),
        1.0
    );
    let decisions = h.engine.decisions(&"llm".parse().unwrap()).await.unwrap();
    let logged = decisions
        .iter()
        .filter(|d| d["event"] == "orphan" && d["policy"] == "report")
        .count();
    assert_eq!(logged, 1, "written once, not every tick: {decisions:?}");

    // Once someone terminates it, the alert clears and the gauge drops.
    h.cloud.terminate(&orphan.id).await.unwrap();
    h.run_for(10).await;
    assert!(
        h.engine
            .active_alerts()
            .iter()
            .all(|a| a.alert.name != "OrphanInstances")
    );
    assert_eq!(
        count_metric(
            &h.engine.metrics().encode(),
            "headroom_orphan_instances{pool=\"llm\",account=\"ml\"}"
        ),
        0.0
    );
}

#[tokio::test]
async fn an_interrupted_spot_node_is_replaced() {
    let h = harness(&CONFIG.replace(
        "sim_capacity = 2",
        "sim_capacity = 2\nsim_spot_interruptions_per_hour = 30.0",
    ))
    .await;
    let id = h.request(1).await;
    // Two minutes at 30 interruptions an hour: the first node is almost surely gone
    // (seeded, so this run is the same every time).
    h.run_for(600).await;
    let events = h.ledger.node_events().await.unwrap();
    let interrupted = events
        .iter()
        .filter(|e| e.state == NodeState::Interrupted)
        .count();
    assert!(
        interrupted >= 1,
        "expected an interruption in ten minutes at 30/h"
    );
    let live = h.ledger.live_nodes().await.unwrap();
    let serving_or_starting = live
        .iter()
        .filter(|e| e.request.as_ref() == Some(&id) && e.state != NodeState::Warm)
        .count();
    assert_eq!(
        serving_or_starting, 1,
        "the request keeps one replica: {live:?}"
    );
    assert_eq!(h.live_instances().await, live.len());
}

#[tokio::test]
async fn cancelling_a_request_releases_its_nodes() {
    let h = harness(CONFIG).await;
    let id = h.request(2).await;
    h.run_for(300).await;
    assert_eq!(
        h.ledger.capacity_request(&id).await.unwrap().unwrap().state,
        RequestState::Delivered
    );
    assert_eq!(h.live_instances().await, 2);
    h.ledger
        .cancel_capacity_request(&id, h.clock.now())
        .await
        .unwrap();
    h.engine.push_signal(&"llm".parse().unwrap(), quiet());
    h.engine.tick().await.unwrap();
    assert_eq!(h.live_instances().await, 0);
    let outcome = h.ledger.capacity_request(&id).await.unwrap().unwrap();
    assert_eq!(outcome.state, RequestState::Cancelled);
    assert!(h.ledger.live_nodes().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_clamping_budget_launches_what_fits_and_refuses_the_rest() {
    // $1 a day; each launch holds an hour: three cheap launches ($0.2599) fit, a fourth does not.
    let text = format!(
        "{CONFIG}\n[[budgets]]\naccount = \"ml\"\nperiod = \"day\"\nceiling_usd = \"1\"\nhard_action = \"clamp\"\n"
    );
    let h = harness(&text).await;
    h.cloud.set_capacity(&"cheap".parse().unwrap(), 10);
    let id = h.request(4).await;
    h.engine.tick().await.unwrap();
    let outcome = h.ledger.capacity_request(&id).await.unwrap().unwrap();
    assert_eq!(h.live_instances().await, 3);
    let last = outcome.refusals.last().unwrap();
    assert_eq!((last.reason, last.replicas), (RefusalReason::Budget, 1));
    assert!(last.detail.contains("account ml"), "{}", last.detail);
}

#[tokio::test]
async fn a_refusing_budget_refuses_a_request_it_cannot_carry_whole() {
    let text =
        format!("{CONFIG}\n[[budgets]]\naccount = \"ml\"\nperiod = \"day\"\nceiling_usd = \"1\"\n");
    let h = harness(&text).await;
    h.cloud.set_capacity(&"cheap".parse().unwrap(), 10);
    let id = h.request(4).await;
    h.engine.tick().await.unwrap();
    let outcome = h.ledger.capacity_request(&id).await.unwrap().unwrap();
    assert_eq!(
        h.live_instances().await,
        0,
        "nothing launched for a request refused whole"
    );
    assert_eq!(outcome.state, RequestState::Refused);
    assert_eq!(
        (outcome.refusals[0].reason, outcome.refusals[0].replicas),
        (RefusalReason::Budget, 4)
    );
    // A request that fits whole still goes through.
    let small = h.request(2).await;
    h.engine.tick().await.unwrap();
    assert!(
        h.ledger
            .capacity_request(&small)
            .await
            .unwrap()
            .unwrap()
            .refusals
            .is_empty()
    );
    assert_eq!(h.live_instances().await, 2);
}

#[tokio::test]
async fn shadow_mode_records_decisions_without_executing_them() {
    let text = CONFIG.replace(
        "replica_throughput_rps = 5.0",
        "replica_throughput_rps = 5.0\nscale_up_breaches = 1\nshadow = true",
    );
    let h = harness(&text).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    h.engine.push_signal(
        &pool,
        SignalInput {
            queue_depth: 30,
            arrival_rate_rps: Some(20.0),
            ..SignalInput::default()
        },
    );
    h.engine.tick().await.unwrap();
    let log = h.engine.decisions(&pool).await.unwrap();
    assert_eq!(
        log[0]["target"], 5,
        "20/s at 5/s plus 30 queued: {}",
        log[0]["reason"]
    );
    assert_eq!(log[0]["shadow"], true);
    assert_eq!(
        h.live_instances().await,
        0,
        "shadow decisions launch nothing"
    );
    // A capacity request is still served: shadow mode is about the controller only.
    h.request(1).await;
    h.engine.tick().await.unwrap();
    assert_eq!(h.live_instances().await, 1);
}

/// A webhook receiver on `port`: records each request body, answers 200, stops after `max`.
fn receiver(
    listener: std::net::TcpListener,
    max: usize,
) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    answering_receiver(listener, max, |_| 200)
}

/// A webhook receiver that records each request body and answers it with `status(body)`.
fn answering_receiver(
    listener: std::net::TcpListener,
    max: usize,
    status: fn(&str) -> u16,
) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    use std::io::{BufRead, BufReader, Read, Write};
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(max) {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let body = String::from_utf8_lossy(&body).into_owned();
            let code = status(&body);
            seen.lock().unwrap().push(body);
            let _ = stream.write_all(
                format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            );
        }
    });
    bodies
}

/// A local port nobody listens on (until a test binds it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One pool with a floor of one and no signal yet (`PoolSignalsMissing` fires), repeats hourly,
/// no watchdog, and one webhook of `format` at `path` on local `port`.
fn signal_missing_alerted(port: u16, path: &str, format: &str) -> String {
    format!(
        "{}\n[alerts]\nrepeat_interval = \"1h\"\nwatchdog = false\n[[alerts.webhooks]]\nurl = \"http://127.0.0.1:{port}/{path}\"\nformat = \"{format}\"\n",
        CONFIG.replace("min_replicas = 0", "min_replicas = 1")
    )
}

#[tokio::test]
async fn alerts_wait_in_the_outbox_while_the_webhook_is_down_then_fire_and_resolve() {
    // A port with nobody listening yet: the webhook is down.
    let port = free_port();
    let h = harness(&signal_missing_alerted(
        port,
        "api/v2/alerts",
        "alertmanager",
    ))
    .await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    h.engine.tick().await.unwrap();
    let active = h.engine.active_alerts();
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0].alert.name, "PoolSignalsMissing");

    h.engine.deliver_alerts().await.unwrap();
    assert_eq!(
        h.ledger.pending_alerts(10).await.unwrap().len(),
        1,
        "kept while the webhook is down"
    );
    h.engine.tick().await.unwrap();
    assert_eq!(
        h.ledger.pending_alerts(10).await.unwrap().len(),
        1,
        "deduplicated: not queued again"
    );
    assert_eq!(
        h.engine.metrics().service.alert_outbox_depth.get(),
        1,
        "the outbox's depth on /metrics"
    );
    // Keep-alives do not pile up behind a webhook that is down.
    for _ in 0..5 {
        h.clock.advance(Duration::from_secs(60));
        h.engine.tick().await.unwrap();
    }
    assert_eq!(
        h.ledger.pending_alerts(10).await.unwrap().len(),
        1,
        "no keep-alive queued behind the undelivered firing"
    );

    let bodies = receiver(
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap(),
        10,
    );
    h.clock.advance(Duration::from_secs(600)); // past the backoff
    h.engine.deliver_alerts().await.unwrap();
    assert!(h.ledger.pending_alerts(10).await.unwrap().is_empty());

    // The signal arrives: the hold ends and the alert resolves.
    h.engine.push_signal(
        &pool,
        SignalInput {
            queue_depth: 0,
            arrival_rate_rps: Some(1.0),
            ..SignalInput::default()
        },
    );
    h.engine.tick().await.unwrap();
    assert!(h.engine.active_alerts().is_empty());
    h.engine.deliver_alerts().await.unwrap();
    // The receiver thread records asynchronously; give it a bounded moment.
    for _ in 0..50 {
        if bodies.lock().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    let firing: serde_json::Value = serde_json::from_str(&bodies[0]).unwrap();
    assert_eq!(firing[0]["labels"]["alertname"], "PoolSignalsMissing");
    assert_eq!(firing[0]["labels"]["pool"], "llm");
    assert!(
        firing[0]["endsAt"].as_str().unwrap() > firing[0]["startsAt"].as_str().unwrap(),
        "a firing alert's endsAt is ahead: {firing}"
    );
    let resolved: serde_json::Value = serde_json::from_str(&bodies[1]).unwrap();
    assert!(
        resolved[0]["endsAt"].is_string(),
        "a resolve message: {resolved}"
    );
}

#[tokio::test]
async fn a_notification_the_receiver_refuses_is_dropped_and_never_holds_back_the_next() {
    use headroom_engine::alerts::delivery::{REFUSED_ATTEMPTS, TRANSIENT_ATTEMPTS};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    // 400 to one notification, 500 to another, 200 to the rest.
    let bodies = answering_receiver(listener, 100, |body| {
        if body.contains("malformed") {
            400
        } else if body.contains("chokes") {
            500
        } else {
            200
        }
    });
    let h = harness(CONFIG).await;
    let now = h.clock.now();
    for body in ["malformed", "chokes", "first", "second"] {
        h.ledger.enqueue_alert(&url, body, now).await.unwrap();
    }
    let outcome = |name: &str| {
        h.engine
            .metrics()
            .service
            .alert_deliveries
            .get_or_create(&headroom_engine::metrics::OutcomeLabels {
                outcome: name.to_string(),
            })
            .get()
    };

    // One round: both refusals are kept for a retry and the two behind them are delivered.
    h.engine.deliver_alerts().await.unwrap();
    let pending: Vec<String> = h
        .ledger
        .pending_alerts(10)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.body)
        .collect();
    assert_eq!(
        pending,
        ["malformed", "chokes"],
        "nothing waits behind a refusal"
    );
    assert_eq!((outcome("delivered"), outcome("retried")), (2, 2));

    // Each is retried on its own schedule; the hopeless 400 goes first, the 500 later.
    for _ in 0..TRANSIENT_ATTEMPTS {
        h.clock.advance(Duration::from_secs(600)); // past any backoff
        h.engine.deliver_alerts().await.unwrap();
    }
    assert!(
        h.ledger.pending_alerts(10).await.unwrap().is_empty(),
        "both dropped in the end"
    );
    assert_eq!(outcome("dropped"), 2);
    assert_eq!(outcome("delivered"), 2);
    let tries = |needle: &str| {
        bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| b.as_str() == needle)
            .count() as u32
    };
    assert_eq!(
        tries("malformed"),
        REFUSED_ATTEMPTS,
        "a 400 is not retried forever"
    );
    assert_eq!(
        tries("chokes"),
        TRANSIENT_ATTEMPTS,
        "a 500 is retried within the bound"
    );
    assert_eq!((tries("first"), tries("second")), (1, 1));
}

#[tokio::test]
async fn a_fresh_start_with_no_traffic_fires_no_shedding_and_no_depleted_warm_pool() {
    let alerts_over = async |config: &str, seconds: u64| {
        let h = harness(config).await;
        let pool: headroom_core::PoolName = "llm".parse().unwrap();
        let mut fired = std::collections::BTreeSet::new();
        for _ in 0..seconds / 5 {
            // The serving layer says: nothing queued, nothing arriving.
            h.engine.push_signal(&pool, quiet());
            h.engine.tick().await.unwrap();
            fired.extend(
                h.engine
                    .active_alerts()
                    .into_iter()
                    .map(|a| a.alert.name)
                    .filter(|name| name != "Watchdog"),
            );
            h.clock.advance(Duration::from_secs(5));
        }
        fired
    };
    let floor_and_warm = CONFIG
        .replace("min_replicas = 0", "min_replicas = 2")
        .replace("warm_pool_size = 0", "warm_pool_size = 1");
    // The floor and the warm node climb their ladders: neither condition could have been met.
    let fired = alerts_over(&floor_and_warm, 300).await;
    assert!(fired.is_empty(), "{fired:?}");
    // With no capacity left for the warm node, the warm pool is depleted indeed.
    let no_room = floor_and_warm.replace("sim_capacity = 8", "sim_capacity = 0");
    let fired = alerts_over(&no_room, 60).await;
    assert!(fired.contains("WarmPoolDepleted"), "{fired:?}");
    assert!(!fired.contains("PoolShedding"), "{fired:?}");
}

#[tokio::test]
async fn the_watchdog_fires_at_alertmanager_for_as_long_as_headroom_runs_and_nowhere_else() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let bodies = receiver(listener, 100);
    let text = format!(
        "{}\n[[alerts.webhooks]]\nurl = \"http://127.0.0.1:{port}/api/v2/alerts\"\nformat = \"alertmanager\"\n[[alerts.webhooks]]\nurl = \"http://127.0.0.1:{port}/slack\"\nformat = \"slack\"\n",
        CONFIG
    );
    let h = harness(&text).await;
    // A pool with nothing to say: the Watchdog is the only alert.
    for _ in 0..6 {
        h.engine.push_signal(&"llm".parse().unwrap(), quiet());
        h.engine.tick().await.unwrap();
        h.engine.deliver_alerts().await.unwrap();
        h.clock.advance(Duration::from_secs(30));
    }
    let names: Vec<String> = h
        .engine
        .active_alerts()
        .into_iter()
        .map(|a| a.alert.name)
        .collect();
    assert_eq!(names, ["Watchdog"]);
    for _ in 0..50 {
        if h.ledger.pending_alerts(10).await.unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bodies = bodies.lock().unwrap().clone();
    // Sent once and re-sent within Alertmanager's resolve timeout, always with endsAt ahead;
    // never to the Slack webhook, where people would read it.
    assert!(bodies.len() >= 2, "{bodies:?}");
    for body in &bodies {
        let v: serde_json::Value =
            serde_json::from_str(body).expect("only Alertmanager JSON arrays");
        assert_eq!(v[0]["labels"]["alertname"], "Watchdog", "{body}");
        assert!(v[0]["endsAt"].as_str().unwrap() > v[0]["startsAt"].as_str().unwrap());
    }
    // With `watchdog = false` there is none.
    let quiet = harness(&format!("{CONFIG}\n[alerts]\nwatchdog = false\n")).await;
    quiet.engine.tick().await.unwrap();
    assert!(
        quiet
            .engine
            .active_alerts()
            .iter()
            .all(|a| a.alert.name != "Watchdog")
    );
}

/// Alertmanager's documented rule for a received alert: it is resolved from its `endsAt` on,
/// or, without one, from `resolve_timeout` (5 minutes by default) after it was last received.
fn alertmanager_resolved_at(
    received: &[(headroom_core::Timestamp, serde_json::Value)],
    t: headroom_core::Timestamp,
) -> bool {
    let Some((at, alert)) = received.iter().rev().find(|(at, _)| *at <= t) else {
        return true;
    };
    match alert["endsAt"].as_str() {
        Some(end) => end.parse::<headroom_core::Timestamp>().unwrap() <= t,
        None => *at + chrono::Duration::minutes(5) <= t,
    }
}

#[tokio::test]
async fn an_alert_that_holds_stays_firing_at_alertmanager_and_resolves_when_it_clears() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let bodies = receiver(listener, 200);
    // A day between repeats: without keep-alives Alertmanager would resolve it after 5 minutes.
    let text = format!(
        "{}\n[alerts]\nrepeat_interval = \"24h\"\nwatchdog = false\n[[alerts.webhooks]]\nurl = \"http://127.0.0.1:{port}/api/v2/alerts\"\nformat = \"alertmanager\"\n",
        CONFIG.replace("min_replicas = 0", "min_replicas = 1")
    );
    let h = harness(&text).await;
    let mut received: Vec<(headroom_core::Timestamp, serde_json::Value)> = Vec::new();
    let mut seen = 0;
    let mut collect = async |received: &mut Vec<_>, now| {
        h.engine.deliver_alerts().await.unwrap();
        for _ in 0..100 {
            if h.ledger.pending_alerts(10).await.unwrap().is_empty()
                && bodies.lock().unwrap().len() >= seen
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let all = bodies.lock().unwrap().clone();
        for body in &all[seen..] {
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            received.push((now, v[0].clone()));
        }
        seen = all.len();
    };
    // The pool gets no signal for 30 minutes: PoolSignalsMissing holds throughout.
    let start = h.clock.now();
    for _ in 0..60 {
        h.engine.tick().await.unwrap();
        let now = h.clock.now();
        collect(&mut received, now).await;
        assert!(
            !alertmanager_resolved_at(&received, now),
            "Alertmanager resolved the alert {}s in while it holds: {received:?}",
            (now - start).num_seconds()
        );
        h.clock.advance(Duration::from_secs(30));
        assert!(
            !alertmanager_resolved_at(&received, h.clock.now()),
            "Alertmanager resolved the alert {}s in, between ticks: {received:?}",
            (h.clock.now() - start).num_seconds()
        );
    }
    assert!(
        received
            .iter()
            .all(|(_, a)| a["startsAt"] == received[0].1["startsAt"])
    );
    assert!(
        received.len() < 40,
        "one resend a minute, not one a tick: {}",
        received.len()
    );
    h.engine.push_signal(
        &"llm".parse().unwrap(),
        SignalInput {
            queue_depth: 0,
            arrival_rate_rps: Some(1.0),
            ..SignalInput::default()
        },
    );
    h.engine.tick().await.unwrap();
    let now = h.clock.now();
    // The receiver records asynchronously: wait for the resolve message.
    let before = received.len();
    for _ in 0..50 {
        collect(&mut received, now).await;
        if received.len() > before {
            break;
        }
    }
    assert!(
        alertmanager_resolved_at(&received, now),
        "resolved when it cleared"
    );
}

#[tokio::test]
async fn a_refused_request_raises_a_capacity_alert() {
    let h = harness(CONFIG).await;
    h.cloud.set_capacity(&"cheap".parse().unwrap(), 0);
    h.cloud.set_capacity(&"dear".parse().unwrap(), 0);
    h.request(1).await;
    h.engine.tick().await.unwrap();
    let names = alert_names(&h);
    assert!(names.contains(&"CapacityRefused".to_string()), "{names:?}");
}

/// The names of the alerts firing now.
fn alert_names(h: &Harness) -> Vec<String> {
    h.engine
        .active_alerts()
        .into_iter()
        .map(|a| a.alert.name)
        .collect()
}

/// The alert rules' refusals are kept between ticks, but not past a refusal written elsewhere
/// (here a second handle on the ledger, as a replica that held the pool before): the next tick
/// reads them again and alerts.
#[tokio::test]
async fn a_refusal_recorded_through_another_handle_is_alerted_on_the_next_tick() {
    let h = harness(CONFIG).await;
    h.engine.tick().await.unwrap();
    let elsewhere = SqliteLedger::open_path(&h.rig.ledger_path()).await.unwrap();
    elsewhere
        .append_refusal(&headroom_ledger::RefusalRecord {
            pool: "llm".parse().unwrap(),
            request: None,
            node: None,
            offering: Some("cheap".parse().unwrap()),
            replicas: 1,
            reason: RefusalReason::Cloud(ErrorClass::Quota),
            detail: "quota exhausted in us-east-1".into(),
            at: h.clock.now(),
        })
        .await
        .unwrap();
    h.clock.advance(Duration::from_secs(5));
    h.engine.tick().await.unwrap();
    let names = alert_names(&h);
    assert!(
        names.contains(&"CloudQuotaExhausted".to_string()),
        "{names:?}"
    );
}

#[tokio::test]
async fn the_oldest_age_counts_only_the_pool_s_service_classes() {
    let text = CONFIG.replace(
        "replica_throughput_rps = 5.0",
        "replica_throughput_rps = 5.0\nage_classes = [\"interactive\"]",
    );
    let h = harness(&text).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    h.engine.push_signal(
        &pool,
        SignalInput {
            queue_depth: 3,
            oldest_age_by_class_s: [
                ("interactive".to_string(), 3.5),
                ("batch".to_string(), 90.0),
            ]
            .into(),
            ..SignalInput::default()
        },
    );
    h.engine.tick().await.unwrap();
    let status = h.engine.pool_status(&pool).unwrap();
    assert_eq!(
        status.last_signal.unwrap().oldest_age_s,
        Some(3.5),
        "batch's deferred work does not count"
    );
}

/// The rig's manual time, remembering every sleep the engine asks of it.
#[derive(Debug)]
struct SleepLog {
    time: Arc<ManualClock>,
    asked: std::sync::Mutex<Vec<Duration>>,
}

impl Clock for SleepLog {
    fn now(&self) -> headroom_core::Timestamp {
        self.time.now()
    }

    fn sleep(&self, d: Duration) -> headroom_cloud::clock::Sleep {
        self.asked.lock().unwrap().push(d);
        self.time.sleep(d)
    }
}

/// A throttled launch's backoff within the tick waits on the engine's clock, not tokio's
/// timer: on a manual clock (the simulator's) it takes no time and moves no time, so a
/// simulated run neither waits on the wall clock nor depends on it.
#[tokio::test]
async fn a_throttled_launch_waits_out_its_backoff_on_the_engines_clock() {
    let h = harness(CONFIG).await;
    let log = Arc::new(SleepLog {
        time: h.clock.clone(),
        asked: Default::default(),
    });
    let engine = Engine::new(
        h.config.clone(),
        h.ledger.clone(),
        h.cloud.clone(),
        log.clone(),
    );
    h.cloud
        .inject_launch_fault(&"cheap".parse().unwrap(), ErrorClass::Throttled, 2);
    h.request(1).await;
    let before = h.clock.now();
    engine.tick().await.unwrap();
    assert_eq!(
        h.launch_calls(),
        3,
        "two throttled attempts, then the launch"
    );
    let asked = log.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "one wait before each retry: {asked:?}");
    assert!(
        asked
            .iter()
            .all(|d| (Duration::from_millis(100)..=Duration::from_secs(4)).contains(d)),
        "the backoff's waits (100 ms doubling, jittered): {asked:?}"
    );
    assert_eq!(h.clock.now(), before, "the waits moved no time");
}

#[tokio::test]
async fn a_throttling_storm_is_retried_by_later_ticks_without_a_second_instance() {
    let h = harness(CONFIG).await;
    h.cloud
        .inject_launch_fault(&"cheap".parse().unwrap(), ErrorClass::Throttled, 5);
    let id = h.request(1).await;
    for _ in 0..8 {
        h.engine.tick().await.unwrap();
    }
    let outcome = h.ledger.capacity_request(&id).await.unwrap().unwrap();
    assert!(
        outcome.refusals.is_empty(),
        "throttling is not a refusal: {:?}",
        outcome.refusals
    );
    assert_eq!(h.live_instances().await, 1);
    let launches = h.launch_calls();
    assert_eq!(
        launches, 6,
        "five throttled calls and one that went through, all with one client token"
    );
    let tokens: std::collections::BTreeSet<String> = h
        .cloud
        .calls()
        .iter()
        .filter(|c| c.starts_with("launch"))
        .cloned()
        .collect();
    assert_eq!(tokens.len(), 1, "every retry carried the same client token");
}

#[tokio::test]
async fn a_hanging_cloud_api_times_out_and_the_launch_is_repeated_once_it_answers() {
    let h = harness(&CONFIG.replace(
        "offering_cooldown = \"5m\"",
        "offering_cooldown = \"5m\"\nprovider_timeout = \"200ms\"",
    ))
    .await;
    h.cloud.set_launch_delay(Duration::from_secs(30));
    h.request(1).await;
    // The tick returns although the cloud does not answer: the intent waits for the next one.
    tokio::time::timeout(Duration::from_secs(10), h.engine.tick())
        .await
        .expect("a hanging cloud stalled the tick")
        .unwrap();
    let live = h.ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].state, NodeState::Requested);
    assert_eq!(h.live_instances().await, 0);
    h.cloud.set_launch_delay(Duration::ZERO);
    h.engine.tick().await.unwrap();
    assert_eq!(h.live_instances().await, 1);
    assert_eq!(
        h.ledger.live_nodes().await.unwrap().len(),
        1,
        "the same node, launched once"
    );
}

#[tokio::test]
async fn a_hanging_webhook_blocks_neither_the_loop_nor_loses_the_alert() {
    // A receiver that accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().take(4).collect();
        std::thread::sleep(Duration::from_secs(30));
        drop(held);
    });
    let text = format!(
        "{}\n[[alerts.webhooks]]\nurl = \"http://127.0.0.1:{port}/hook\"\n",
        CONFIG.replace("min_replicas = 0", "min_replicas = 1")
    );
    let h = harness(&text).await;
    h.engine.tick().await.unwrap();
    let engine = h.engine.clone();
    let delivery = tokio::spawn(async move { engine.deliver_alerts().await });
    // The control loop goes on while delivery hangs.
    h.engine.tick().await.unwrap();
    h.engine.tick().await.unwrap();
    assert!(
        !delivery.is_finished(),
        "delivery should still be waiting on the hanging receiver"
    );
    delivery.await.unwrap().unwrap();
    assert_eq!(
        h.ledger.pending_alerts(10).await.unwrap().len(),
        1,
        "kept for the next attempt"
    );
}

/// An offering block for the supply tests: `id`, region, zone, type, market, price, capacity.
fn offering(
    id: &str,
    region: &str,
    zone: &str,
    kind: &str,
    market: &str,
    price: &str,
    cap: u32,
) -> String {
    format!(
        "[[offerings]]\nid = \"{id}\"\nprovider = \"sim\"\nregion = \"{region}\"\nzone = \"{zone}\"\ninstance_type = \"{kind}\"\nmarket = \"{market}\"\nprice_usd_per_hour = \"{price}\"\ngpus = 8\nsim_capacity = {cap}\n"
    )
}

const LADDER: &str = "[pools.ladder]\nnode_acquisition = \"60s\"\nimage_pull = \"45s\"\nweight_load = \"90s\"\ncompile = \"30s\"\nwarmup = \"15s\"\n[pools.scaling]\nreplica_throughput_rps = 5.0\n";

fn pool_block(name: &str, offerings: &str, extra: &str, supply: &str) -> String {
    format!(
        "[[pools]]\nname = \"{name}\"\naccount = \"ml\"\nofferings = [{offerings}]\n{extra}\n{LADDER}[pools.supply]\n{supply}\n"
    )
}

fn count_metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

async fn refusal_reasons(h: &Harness) -> Vec<RefusalReason> {
    h.ledger
        .refusals_between(
            "2026-11-30T00:00:00Z".parse().unwrap(),
            "2026-12-01T00:00:00Z".parse().unwrap(),
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.reason)
        .collect()
}

#[tokio::test]
async fn a_stockout_falls_back_type_zone_region_then_to_the_smaller_model_in_one_tick() {
    let config = format!(
        "cluster_id = \"engine-test\"\n{}{}{}{}{}{}{}",
        offering(
            "a",
            "us-east-1",
            "use1-az1",
            "p4d.24xlarge",
            "on-demand",
            "20",
            1
        ),
        offering(
            "b",
            "us-east-1",
            "use1-az1",
            "p5.48xlarge",
            "on-demand",
            "21",
            1
        ),
        offering(
            "c",
            "us-east-1",
            "use1-az2",
            "p4d.24xlarge",
            "on-demand",
            "22",
            1
        ),
        offering(
            "d",
            "us-west-2",
            "usw2-az1",
            "p4d.24xlarge",
            "on-demand",
            "23",
            1
        ),
        offering(
            "s",
            "us-east-1",
            "use1-az1",
            "g6.xlarge",
            "on-demand",
            "0.8",
            8
        ),
        pool_block(
            "llama-70b",
            "\"a\", \"b\", \"c\", \"d\"",
            "min_replicas = 5\nmax_replicas = 8\nmax_scale_up_per_step = 8",
            "fallback_pool = \"llama-8b\""
        ),
        pool_block(
            "llama-8b",
            "\"s\"",
            "max_replicas = 8\nmax_scale_up_per_step = 8",
            ""
        ),
    );
    let h = harness(&config).await;
    h.engine.tick().await.unwrap();

    let by_offering = launched_offerings(&h).await;
    // One node on each of the four offerings, found within one tick, and the fifth replica on
    // the smaller model.
    assert_eq!(by_offering, ["a", "b", "c", "d", "s"]);
    let big = h.engine.pool_status(&"llama-70b".parse().unwrap()).unwrap();
    assert_eq!(big.handed_to_fallback, 1);
    assert_eq!(
        big.clamped.as_ref().map(|c| c.reason.as_str()),
        Some("no_offering")
    );
    let small = h.engine.pool_status(&"llama-8b".parse().unwrap()).unwrap();
    assert_eq!(small.serving_for_others, 1);

    let reasons = refusal_reasons(&h).await;
    let capacity = reasons
        .iter()
        .filter(|r| **r == RefusalReason::Cloud(ErrorClass::Capacity))
        .count();
    assert_eq!(
        capacity, 4,
        "each offering refused once, then skipped: {reasons:?}"
    );
    let metrics = h.engine.metrics().encode();
    for kind in ["instance_type", "zone", "region", "smaller_model"] {
        assert_eq!(
            count_metric(
                &metrics,
                &format!(
                    "headroom_fallbacks_total{{pool=\"llama-70b\",account=\"ml\",kind=\"{kind}\"}}"
                )
            ),
            1.0,
            "{kind}\n{metrics}"
        );
    }
    assert!(
        h.engine
            .active_alerts()
            .iter()
            .any(|a| a.alert.name == "PoolServedByFallback")
    );
}

#[tokio::test]
async fn quota_falls_back_throttling_is_retried_and_an_invalid_request_halts_the_pool() {
    let h = harness(CONFIG).await;
    let cheap = "cheap".parse().unwrap();
    h.cloud.inject_launch_fault(&cheap, ErrorClass::Quota, 1);
    h.request(1).await;
    h.engine.tick().await.unwrap();
    let offerings = launched_offerings(&h).await;
    assert_eq!(
        offerings,
        ["dear"],
        "quota on cheap: fell back in the same tick"
    );

    // Throttled twice: retried with backoff inside the tick, not left for the next one.
    let h = harness(CONFIG).await;
    h.cloud
        .inject_launch_fault(&cheap, ErrorClass::Throttled, 2);
    h.request(1).await;
    h.engine.tick().await.unwrap();
    assert_eq!(h.live_instances().await, 1);
    let launches = h.launch_calls();
    assert_eq!(launches, 3, "two throttled attempts, then the launch");

    // Invalid request: the pool stops launching and on-call hears of it.
    let h = harness(CONFIG).await;
    h.cloud
        .inject_launch_fault(&cheap, ErrorClass::InvalidRequest, 1);
    h.request(2).await;
    h.run_for(30).await;
    assert_eq!(h.live_instances().await, 0);
    let status = h.engine.pool_status(&"llm".parse().unwrap()).unwrap();
    assert!(status.halted.is_some(), "{status:?}");
    assert!(
        h.engine
            .active_alerts()
            .iter()
            .any(|a| a.alert.name == "PoolHalted")
    );
}

/// A launch repeated after the cloud forgot its client token (its idempotency window passed)
/// leaves two live instances for one ledger node: the second would bill unseen, since the
/// engine matches instances to nodes by token. The pool halts and says which instances share
/// which token, and nothing is terminated on a guess.
#[tokio::test]
async fn two_live_instances_for_one_client_token_halt_the_pool_and_name_both() {
    let h = harness(CONFIG).await;
    h.request(1).await;
    h.run_for(30).await;
    let first = h.cloud.list_owned("engine-test").await.unwrap();
    assert_eq!(first.len(), 1, "{first:?}");
    let original = &first[0];
    let offering = h
        .config
        .offerings
        .iter()
        .find(|o| o.offering.id == original.offering)
        .unwrap()
        .offering
        .clone();
    h.cloud.forget_client_tokens();
    let again = LaunchSpec {
        offering,
        client_token: original.client_token.clone(),
        tags: original.tags.clone(),
        user_data: None,
    };
    let duplicate = h.cloud.launch(&again).await.unwrap();
    assert_ne!(duplicate.id, original.id);
    h.run_for(5).await;
    let status = h.engine.pool_status(&"llm".parse().unwrap()).unwrap();
    let why = status.halted.expect("the pool halts");
    for named in [
        original.id.to_string(),
        duplicate.id.to_string(),
        original.client_token.clone(),
    ] {
        assert!(why.contains(&named), "{named} not in: {why}");
    }
    assert!(
        h.engine
            .active_alerts()
            .iter()
            .any(|a| a.alert.name == "PoolHalted" && a.alert.summary.contains(&why)),
        "{:?}",
        h.engine.active_alerts()
    );
    assert_eq!(
        h.live_instances().await,
        2,
        "nothing is terminated on a guess"
    );
}

/// A launch whose client token a live node already carries is refused before its hold and its
/// cloud call, in every build: the cloud would answer with the live node's instance and two
/// ledger nodes would claim it. Reached the one way it can be: a seeded id source started twice
/// on one ledger mints the first node's id again. No instance is made and no intent written;
/// the pool halts naming the node and the token, and the violation is counted.
#[tokio::test]
async fn a_launch_reusing_a_live_nodes_client_token_is_refused_before_the_cloud_is_asked() {
    let h = harness(CONFIG).await;
    let seeded = || {
        Engine::with_ids(
            h.config.clone(),
            h.ledger.clone(),
            h.cloud.clone(),
            h.clock.clone(),
            None,
            headroom_ledger::IdSource::seeded(7),
        )
    };
    let series = "headroom_invariant_violations_total{pool=\"llm\",account=\"ml\",invariant=\"client_token\"}";
    let first = seeded();
    assert!(
        first.metrics().encode().contains(&format!("{series} 0")),
        "the counter starts at zero"
    );
    h.request(1).await;
    first.tick().await.unwrap();
    let node = headroom_ledger::IdSource::seeded(7).node_id();
    let token = format!("hr-{node}");
    let tokens = |instances: Vec<headroom_cloud::Instance>| -> Vec<String> {
        instances.into_iter().map(|i| i.client_token).collect()
    };
    assert_eq!(
        tokens(h.cloud.list_owned("engine-test").await.unwrap()),
        [token.as_str()]
    );

    // The same seed again on the same ledger, and one more replica wanted.
    let second = seeded();
    let wanted = h.request(1).await;
    for _ in 0..3 {
        h.clock.advance(Duration::from_secs(5));
        second.tick().await.unwrap();
    }
    let launches = h.launch_calls();
    assert_eq!(launches, 1, "the cloud was asked once, by the first engine");
    assert_eq!(
        tokens(h.cloud.list_owned("engine-test").await.unwrap()),
        [token.as_str()]
    );
    let intents = h
        .ledger
        .pool_events(&"llm".parse().unwrap())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.state == NodeState::Requested)
        .count();
    assert_eq!(intents, 1, "no second intent, so no second hold");
    assert!(h.ledger.request_events(&wanted).await.unwrap().is_empty());
    let why = second
        .pool_status(&"llm".parse().unwrap())
        .unwrap()
        .halted
        .expect("the pool halts");
    for named in ["client_token", node.0.as_str(), token.as_str()] {
        assert!(why.contains(named), "{named} not in: {why}");
    }
    assert!(
        second
            .active_alerts()
            .iter()
            .any(|a| a.alert.name == "PoolHalted" && a.alert.summary.contains(&why)),
        "{:?}",
        second.active_alerts()
    );
    assert_eq!(count_metric(&second.metrics().encode(), series), 1.0);
}

/// `CONFIG` with the simulated cloud's GPU quota in us-east-2 (where `cheap` is) set to `gpus`,
/// and `engine` lines added to `[engine]`.
fn quota_config(gpus: u32, engine: &str) -> String {
    CONFIG.replace(
        "offering_cooldown = \"5m\"\n",
        &format!(
            "offering_cooldown = \"5m\"\n{engine}\n[sim.gpu_quota_per_region]\nus-east-2 = {gpus}\n"
        ),
    )
}

async fn launched_offerings(h: &Harness) -> Vec<String> {
    let mut offerings: Vec<String> = h
        .cloud
        .list_owned("engine-test")
        .await
        .unwrap()
        .iter()
        .map(|i| i.offering.to_string())
        .collect();
    offerings.sort();
    offerings
}

#[tokio::test]
async fn quota_preflight_skips_a_region_without_quota_and_launches_in_the_next_without_a_refusal() {
    let h = harness(&quota_config(0, "")).await;
    h.request(2).await;
    h.engine.tick().await.unwrap();
    assert_eq!(launched_offerings(&h).await, ["dear", "dear"]);
    assert_eq!(
        launch_calls(&h, "cheap"),
        0,
        "the cloud was never asked for cheap"
    );
    assert!(
        refusal_reasons(&h).await.is_empty(),
        "no refusal was earned"
    );
    assert!(
        h.cloud
            .calls()
            .iter()
            .any(|c| c == "quota_headroom us-east-2"),
        "{:?}",
        h.cloud.calls()
    );
    // The decision log says why cheap was passed over.
    let log = h.engine.decisions(&"llm".parse().unwrap()).await.unwrap();
    let skip = log
        .iter()
        .find(|d| d["event"] == "skipped")
        .unwrap_or_else(|| panic!("{log:#?}"));
    assert_eq!(skip["reason"], "quota");
    assert_eq!(skip["skipped"][0]["offering"], "cheap");
    assert_eq!(skip["skipped"][0]["quota"], "gpus");
    assert_eq!(skip["skipped"][0]["remaining"], 0);
    // The headroom is in the offerings' view and in /metrics.
    let cheap = h
        .engine
        .offering_prices()
        .into_iter()
        .find(|o| o.offering.to_string() == "cheap")
        .unwrap();
    assert_eq!(cheap.quotas.len(), 1, "{cheap:?}");
    assert_eq!((cheap.quotas[0].limit, cheap.quotas[0].remaining), (0, 0));
    // One family per unit: the simulated cloud counts GPUs, so nothing is in the vCPU families.
    let metrics = h.engine.metrics().encode();
    for series in [
        "headroom_quota_remaining_gpus{provider=\"sim\",region=\"us-east-2\",quota=\"gpus\"} 0",
        "headroom_quota_limit_gpus{provider=\"sim\",region=\"us-east-2\",quota=\"gpus\"} 0",
    ] {
        assert!(metrics.contains(series), "{series} missing from {metrics}");
    }
    assert!(
        !metrics.contains("headroom_quota_remaining_vcpus{"),
        "{metrics}"
    );
    assert!(!metrics.contains("unit=\""), "{metrics}");
    // The chain (cheap: no quota; dear: not quota-bound) is not bound as a whole: no alert.
    assert!(
        !h.engine
            .active_alerts()
            .iter()
            .any(|a| a.alert.name == "QuotaBelowMaxReplicas")
    );

    // The same cloud without the preflight learns it from a refusal.
    let blind = harness(&quota_config(0, "quota_cache_ttl = \"0s\"")).await;
    blind.request(2).await;
    blind.engine.tick().await.unwrap();
    assert_eq!(launched_offerings(&blind).await, ["dear", "dear"]);
    assert_eq!(
        refusal_reasons(&blind).await,
        [RefusalReason::Cloud(ErrorClass::Quota)]
    );
}

#[tokio::test]
async fn quota_preflight_uses_up_what_is_left_then_falls_back_and_counts_its_own_launches() {
    // Room for one node of cheap (1 GPU) in us-east-2.
    let h = harness(&quota_config(1, "")).await;
    h.request(3).await;
    h.engine.tick().await.unwrap();
    assert_eq!(launched_offerings(&h).await, ["cheap", "dear", "dear"]);
    assert!(refusal_reasons(&h).await.is_empty());
    // The cache (5 minutes) counts the launch it made: the next request goes to dear at once.
    h.request(1).await;
    h.clock.advance(Duration::from_secs(5));
    h.engine.tick().await.unwrap();
    assert_eq!(
        launched_offerings(&h).await,
        ["cheap", "dear", "dear", "dear"]
    );
    assert!(refusal_reasons(&h).await.is_empty());
    let reads = h
        .cloud
        .calls()
        .iter()
        .filter(|c| *c == "quota_headroom us-east-2")
        .count();
    assert_eq!(reads, 1, "read once per quota_cache_ttl");
}

#[tokio::test]
async fn a_fallback_chain_whose_quotas_cannot_take_max_replicas_alerts() {
    // Both regions quota-bound: 1 GPU in us-east-2, 2 in us-east-1; max_replicas = 6.
    let text = quota_config(1, "").replace("us-east-2 = 1\n", "us-east-2 = 1\nus-east-1 = 2\n");
    let h = harness(&text).await;
    h.engine.tick().await.unwrap();
    let alert = h
        .engine
        .active_alerts()
        .into_iter()
        .find(|a| a.alert.name == "QuotaBelowMaxReplicas")
        .expect("the chain takes 3 nodes, max_replicas would need 6");
    assert!(
        alert.alert.summary.contains("take 3 more nodes"),
        "{}",
        alert.alert.summary
    );
}

/// One on-demand g6 offering (`od`) holding `capacity` nodes, one pool `llm` on it.
fn on_demand_g6_config(engine: &str, capacity: u32, pool: &str, supply: &str) -> String {
    format!(
        "cluster_id = \"engine-test\"\n{engine}{}{}",
        offering(
            "od",
            "us-east-1",
            "use1-az1",
            "g6.xlarge",
            "on-demand",
            "0.8",
            capacity
        ),
        pool_block("llm", "\"od\"", pool, supply),
    )
}

/// A reservation of two p5 nodes (`rsv`) beside on-demand p5 (`od`), one pool using both.
fn reserved_config(engine: &str, reservation: &str) -> String {
    format!(
        "cluster_id = \"engine-test\"\n{engine}\n{}reserved_nodes = 2\n{reservation}\n{}{}",
        offering(
            "rsv",
            "us-east-1",
            "use1-az1",
            "p5.48xlarge",
            "reserved",
            "30",
            8
        ),
        offering(
            "od",
            "us-east-1",
            "use1-az1",
            "p5.48xlarge",
            "on-demand",
            "55",
            8
        ),
        pool_block(
            "llm",
            "\"od\", \"rsv\"",
            "max_replicas = 8\nmax_scale_up_per_step = 8",
            ""
        ),
    )
}

#[tokio::test]
async fn reservations_first_then_the_global_ceiling_clamps_visibly() {
    let config = reserved_config("[engine]\nglobal_max_nodes = 3", "");
    let h = harness(&config).await;
    h.request(4).await;
    h.engine.tick().await.unwrap();
    let offerings = launched_offerings(&h).await;
    assert_eq!(
        offerings,
        ["od", "rsv", "rsv"],
        "both reserved slots, then on-demand"
    );
    assert!(
        refusal_reasons(&h)
            .await
            .contains(&RefusalReason::GlobalCeiling)
    );
}

#[tokio::test]
async fn a_running_warm_node_serves_in_the_same_tick_it_is_woken() {
    let config = on_demand_g6_config(
        "",
        8,
        "max_replicas = 8\nmax_scale_up_per_step = 8\nwarm_pool_size = 1",
        "warm_mode = \"running\"",
    );
    let h = harness(&config).await;
    h.run_for(300).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    let status = h.engine.pool_status(&pool).unwrap();
    assert_eq!((status.warm, status.warm_running), (1, 1));
    let warm = h.ledger.live_nodes().await.unwrap();
    assert_eq!(
        warm[0].state,
        NodeState::Standby,
        "parked running, not stopped"
    );

    h.request(1).await;
    h.engine.tick().await.unwrap();
    let status = h.engine.pool_status(&pool).unwrap();
    assert_eq!(status.ready, 1, "no ladder to climb: {status:?}");
}

/// A pool short of replicas that serve soon, with a launch still being acquired and a node
/// parked warm: the warm node is woken in its place (a wake skips acquisition and the image
/// pull), and the launch's instance is terminated before it was acquired; the count stays one.
#[tokio::test]
async fn a_warm_node_is_woken_in_place_of_a_launch_still_being_acquired() {
    let h = harness(&CONFIG.replace("warm_pool_size = 0", "warm_pool_size = 1")).await;
    h.run_for(300).await;
    let parked = h.ledger.live_nodes().await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].state, NodeState::Warm, "{parked:?}");
    let warm = parked[0].node.clone();

    // An organic launch the cloud accepted a moment ago: a minute of acquisition ahead.
    let intent = intent(&h, "n-acquiring");
    h.ledger.append_node_event(&intent).await.unwrap();
    let made = launch_intent_on_cloud(&h, &intent).await;
    let mut accepted = intent.next(NodeState::Launching, "accepted", h.clock.now());
    accepted.instance = Some(made.id.0.clone());
    h.ledger.append_node_event(&accepted).await.unwrap();

    // The same deployment, now with a floor of one: the launch meets the count, not the time.
    let config = CONFIG
        .replace("warm_pool_size = 0", "warm_pool_size = 1")
        .replace("min_replicas = 0", "min_replicas = 1");
    let engine = Engine::new(
        Arc::new(Config::parse(&config, "test").unwrap()),
        h.ledger.clone(),
        h.cloud.clone(),
        h.clock.clone(),
    );
    h.clock.advance(Duration::from_secs(1));
    engine.tick().await.unwrap();

    let live = h.ledger.live_nodes().await.unwrap();
    let state_of = |node: &str| live.iter().find(|e| e.node.0 == node).map(|e| e.state);
    assert_eq!(
        state_of(&warm.0),
        Some(NodeState::Booting),
        "woken: {live:?}"
    );
    assert_eq!(state_of("n-acquiring"), None, "the launch ended: {live:?}");
    assert_eq!(
        h.cloud.describe(&made.id).await.unwrap().phase,
        InstancePhase::Terminated
    );
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    let status = engine.pool_status(&pool).unwrap();
    assert_eq!(
        status.requested + status.starting + status.ready,
        1,
        "one replica, as before the swap: {status:?}"
    );
    engine.tick().await.unwrap();
    assert_eq!(
        h.ledger
            .live_nodes()
            .await
            .unwrap()
            .iter()
            .filter(|e| e.destination == Destination::Serve)
            .count(),
        1,
        "no second swap or launch"
    );
}

#[tokio::test]
async fn an_interruption_notice_is_replaced_before_the_node_is_gone() {
    let h = harness(CONFIG).await;
    h.request(2).await;
    h.run_for(300).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    assert_eq!(h.engine.pool_status(&pool).unwrap().ready, 2);

    let reclaim_at = h.clock.now() + chrono::Duration::seconds(120);
    assert_eq!(
        h.cloud.interrupt(&"cheap".parse().unwrap(), 1, reclaim_at),
        1
    );
    h.clock.advance(Duration::from_secs(1));
    h.engine.tick().await.unwrap();
    let status = h.engine.pool_status(&pool).unwrap();
    assert_eq!(status.ready, 1, "the doomed node no longer counts");
    assert_eq!(
        status.requested + status.starting,
        1,
        "its replacement is on the way"
    );
    assert_eq!(
        h.live_instances().await,
        3,
        "before the reclaim: old and new both exist"
    );
    assert_eq!(
        count_metric(
            &h.engine.metrics().encode(),
            "headroom_spot_interruption_notices_total{pool=\"llm\",account=\"ml\"}"
        ),
        1.0
    );
    h.run_for(300).await;
    let status = h.engine.pool_status(&pool).unwrap();
    assert_eq!(status.ready, 2);
    assert_eq!(
        h.live_instances().await,
        2,
        "the reclaimed instance is cleaned up"
    );
}

#[tokio::test]
async fn load_is_shed_lowest_tier_first_and_admitted_again_when_capacity_lands() {
    let config = on_demand_g6_config(
        "[engine]\noffering_cooldown = \"1m\"\n",
        2,
        "max_replicas = 8\nmax_scale_up_per_step = 8",
        "",
    )
    .replace(
        "[pools.scaling]\n",
        // The worked numbers serve arrivals at full throughput.
        "[pools.scaling]\nbreach_window = \"5s\"\ntarget_utilization = 1.0\n",
    );
    let h = harness(&config).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    let push = |depth: u64, departures: f64| {
        h.engine.push_signal(
            &pool,
            SignalInput {
                queue_depth: depth,
                oldest_age_s: Some(30.0),
                arrival_rate_rps: Some(20.0),
                departure_rate_rps: Some(departures),
                ..SignalInput::default()
            },
        )
    };
    let shed = |h: &Harness| -> Vec<Priority> {
        h.engine
            .pool_status(&"llm".parse().unwrap())
            .unwrap()
            .admission
            .iter()
            .filter(|t| !t.admit)
            .map(|t| t.priority)
            .collect()
    };
    // 20 req/s at 5 per replica is four replicas, and 1200 waiting drained within the 60 s
    // drain window four more. The two that serve fall 10 req/s behind, so the queue grows until
    // new replicas land (the 240 s ladder) and the lead-time cap leaves the drain rule's eight
    // standing; the offering holds two.
    for _ in 0..60 {
        push(1200, 10.0);
        h.clock.advance(Duration::from_secs(5));
        h.engine.tick().await.unwrap();
    }
    let status = h.engine.pool_status(&pool).unwrap();
    assert_eq!((status.ready, status.demand), (2, 8), "{status:?}");
    assert_eq!(
        shed(&h),
        [Priority::Low, Priority::Normal, Priority::High],
        "a quarter of the demand covered: only interactive traffic is admitted"
    );
    let retry = status.admission[0].retry_after_s.unwrap();
    assert!(
        retry > 0 && retry <= 60,
        "retry when the refused offering may be tried: {retry}"
    );

    h.cloud.set_capacity(&"od".parse().unwrap(), 8);
    // The queue drains as the new replicas serve.
    let mut most_provisioned = 0;
    for i in 0..80u64 {
        push(1200u64.saturating_sub(i * 40), 40.0);
        h.clock.advance(Duration::from_secs(5));
        h.engine.tick().await.unwrap();
        let status = h.engine.pool_status(&pool).unwrap();
        most_provisioned = most_provisioned.max(status.ready + status.starting + status.requested);
    }
    assert_eq!(most_provisioned, 8, "the capacity asked for was launched");
    assert!(shed(&h).is_empty(), "capacity landed: everyone is admitted");
    // The queue drained (in this drill, by itself) before the launches landed: 20 req/s needs
    // four at 5 each, so the pool came down to demand (its 5 % margin rounds down to nothing),
    // parking its four surplus nodes in the warm pool, which the rise it saw sized at four.
    let status = h.engine.pool_status(&pool).unwrap();
    assert_eq!((status.ready, status.desired), (4, 4), "{status:?}");
    let warm = status.warm_pool.as_ref().unwrap();
    assert_eq!((status.warm, warm.size, warm.floor), (4, 4, 0), "{warm:?}");
}

/// Runs a pool of one on-demand offering holding `capacity` nodes up to four replicas, asks for
/// eight (the cloud refuses what is past its capacity), then lets demand fall to one replica's
/// worth; returns each tick's (seconds since the fall, desired, nodes kept: desired and parked
/// warm, reason).
async fn scale_in_after(capacity: u32) -> Vec<(u64, u32, u32, String)> {
    let config = on_demand_g6_config(
        "[engine]\noffering_cooldown = \"1m\"\n",
        capacity,
        "max_replicas = 8\nmax_scale_up_per_step = 8",
        // No warm pool: the surplus is either kept ready or released.
        "warm_pool_max = 0",
    )
    .replace(
        "[pools.scaling]\n",
        "[pools.scaling]\nbreach_window = \"5s\"\ntarget_utilization = 1.0\nscale_down_stabilization = \"10m\"\n",
    );
    let h = harness(&config).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    let push = |depth: u64, arrivals: f64| {
        h.engine.push_signal(
            &pool,
            SignalInput {
                queue_depth: depth,
                arrival_rate_rps: Some(arrivals),
                departure_rate_rps: Some(arrivals.min(20.0)),
                ..SignalInput::default()
            },
        )
    };
    // Four replicas' worth (20 req/s at 5 each) until four serve.
    for _ in 0..80 {
        push(0, 20.0);
        h.clock.advance(Duration::from_secs(5));
        h.engine.tick().await.unwrap();
    }
    // Then eight's worth: what is past the offering's capacity is refused.
    for _ in 0..6 {
        push(400, 40.0);
        h.clock.advance(Duration::from_secs(5));
        h.engine.tick().await.unwrap();
    }
    let mut out = Vec::new();
    for i in 1..=160u64 {
        push(0, 4.0);
        h.clock.advance(Duration::from_secs(5));
        h.engine.tick().await.unwrap();
        let status = h.engine.pool_status(&pool).unwrap();
        let kept = status.desired + status.warm;
        out.push((
            i * 5,
            status.desired,
            kept,
            status.reason.unwrap_or_default(),
        ));
    }
    out
}

#[tokio::test]
async fn a_pool_its_cloud_refuses_keeps_its_surplus_for_the_whole_window() {
    // Refused at four: a replica released could not be bought back, so the surplus stays ready
    // until the 10-minute stabilisation window has passed, and the decision says why.
    let refused = scale_in_after(4).await;
    let at = |run: &[(u64, u32, u32, String)], t: u64| {
        let r = run.iter().find(|r| r.0 == t).unwrap();
        (r.1, r.2)
    };
    let seen = |run: &[(u64, u32, u32, String)]| -> Vec<(u64, u32, u32)> {
        run.iter().map(|r| (r.0, r.1, r.2)).collect()
    };
    assert!(
        refused.iter().filter(|r| r.0 < 590).all(|r| r.1 >= 4),
        "{:?}",
        seen(&refused)
    );
    assert!(
        refused
            .iter()
            .any(|r| r.3.contains("could not be bought back")),
        "{:?}",
        refused.last()
    );
    assert_eq!(
        at(&refused, 800).0,
        1,
        "released once the window has passed"
    );
    // The same fall where the cloud took every launch: released after a cold start's worth
    // (the 240 s ladder), not kept for the window.
    let served = scale_in_after(8).await;
    assert_eq!(at(&served, 400), (1, 1), "{:?}", seen(&served));
}

#[tokio::test]
async fn an_idle_reservation_and_one_nearing_its_end_alert() {
    let config = reserved_config("", "reservation_ends = \"2026-12-04T00:00:00Z\"");
    let h = harness(&config).await;
    let names = |h: &Harness| -> Vec<String> {
        h.engine
            .active_alerts()
            .iter()
            .map(|a| a.alert.name.clone())
            .collect()
    };
    h.engine.tick().await.unwrap();
    assert!(
        names(&h).contains(&"ReservationEnding".to_string()),
        "ends within 7 days"
    );
    assert!(
        !names(&h).contains(&"ReservationIdle".to_string()),
        "not idle long enough yet"
    );
    h.run_for(31 * 60).await;
    assert!(
        names(&h).contains(&"ReservationIdle".to_string()),
        "{:?}",
        names(&h)
    );
    // It says what the idle time has cost: two nodes at 30.00/h for the half hour or so.
    let idle = h
        .engine
        .active_alerts()
        .into_iter()
        .find(|a| a.alert.name == "ReservationIdle")
        .unwrap();
    let summary = &idle.alert.summary;
    assert!(summary.contains("(60.000000/h)"), "{summary}");
    let so_far: f64 = summary
        .split(": ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|cost| cost.parse().ok())
        .unwrap_or_else(|| panic!("no cost in {summary}"));
    assert!((30.0..=32.0).contains(&so_far), "{summary}");

    // Putting it to use clears the idle alert.
    h.request(1).await;
    h.run_for(10).await;
    assert!(
        !names(&h).contains(&"ReservationIdle".to_string()),
        "{:?}",
        names(&h)
    );
}

/// A spot offering (`spot`, paying at most 3.00/h) beside on-demand (`od`, 2.00/h); the pool buys
/// spot first.
fn spot_market_config(price_refresh: &str) -> String {
    format!(
        "cluster_id = \"engine-test\"\n[engine]\nprice_refresh = \"{price_refresh}\"\n{}{}{}",
        offering(
            "spot",
            "us-east-1",
            "use1-az1",
            "g6.xlarge",
            "spot",
            "3.00",
            8
        ),
        offering(
            "od",
            "us-east-1",
            "use1-az1",
            "g6.xlarge",
            "on-demand",
            "2.00",
            8
        ),
        pool_block(
            "llm",
            "\"spot\", \"od\"",
            "max_replicas = 8\nmax_scale_up_per_step = 8",
            "spot_percent_above_base = 100"
        ),
    )
}

#[tokio::test]
async fn live_spot_prices_set_what_nodes_cost_and_a_market_above_the_max_price_is_skipped() {
    let h = harness(&spot_market_config("1m")).await;
    let spot: headroom_core::OfferingId = "spot".parse().unwrap();
    h.cloud.set_spot_price(&spot, "1.10".parse().unwrap());
    h.request(2).await;
    h.run_for(300).await;
    let nodes = h.ledger.live_nodes().await.unwrap();
    assert_eq!(nodes.len(), 2);
    for node in &nodes {
        assert_eq!(node.offering, spot);
        assert_eq!(
            node.price_usd_per_hour,
            "1.10".parse().unwrap(),
            "recorded at the market price, not the 3.00 maximum"
        );
    }
    let prices = h.engine.offering_prices();
    let quoted = prices.iter().find(|p| p.offering == spot).unwrap();
    assert_eq!(quoted.live_usd_per_hour, Some("1.10".parse().unwrap()));
    assert!(!quoted.above_max_price);
    let metrics = h.engine.metrics().encode();
    assert!(
        metrics.contains(
            "headroom_offering_price_dollars_per_hour{offering=\"spot\",market=\"spot\",source=\"live\"} 1.1"
        ),
        "{metrics}"
    );
    assert!(metrics.contains(
        "headroom_offering_price_dollars_per_hour{offering=\"od\",market=\"on-demand\",source=\"configured\"} 2.0"
    ));

    // The market climbs above what the pool pays at most. The cloud reclaims the two spot nodes
    // (after its notice, which also makes Headroom quote prices again at once): their
    // replacements and new capacity come from on-demand, without a refused spot launch first.
    h.run_for(30).await; // halfway to the next price refresh
    h.cloud.set_spot_price(&spot, "3.50".parse().unwrap());
    h.run_for(60).await;
    h.request(1).await;
    h.run_for(300).await;
    let live = h.ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 3, "{live:?}");
    for node in &live {
        assert_eq!(node.offering.as_str(), "od");
        assert_eq!(node.price_usd_per_hour, "2.00".parse().unwrap());
    }
    assert!(
        refusal_reasons(&h).await.is_empty(),
        "no launch was sent to a market above its maximum price"
    );
    let quoted = h.engine.offering_prices();
    assert!(
        quoted
            .iter()
            .find(|p| p.offering == spot)
            .unwrap()
            .above_max_price
    );
}

#[tokio::test]
async fn without_live_prices_a_spot_market_above_the_max_price_costs_a_refusal_then_falls_back() {
    let h = harness(&spot_market_config("0s")).await;
    let spot: headroom_core::OfferingId = "spot".parse().unwrap();
    h.cloud.set_spot_price(&spot, "3.50".parse().unwrap());
    h.request(1).await;
    h.run_for(300).await;
    let nodes = h.ledger.live_nodes().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].offering.as_str(), "od");
    assert_eq!(
        refusal_reasons(&h).await,
        [RefusalReason::Cloud(ErrorClass::Price)],
        "the cloud said no first"
    );
    let quoted = h.engine.offering_prices();
    assert_eq!(quoted[0].live_usd_per_hour, None, "prices were never asked");
    assert_eq!(
        quoted[0].recent_refusals, 1,
        "it ranks lower for a while: {quoted:?}"
    );
}

#[tokio::test]
async fn a_restart_remembers_the_offerings_that_refused_and_the_launches_of_the_period() {
    let config = format!(
        "cluster_id = \"engine-test\"\n{}{}{}",
        offering(
            "cheap",
            "us-east-1",
            "use1-az1",
            "g6.xlarge",
            "on-demand",
            "0.50",
            0
        ),
        offering(
            "dear",
            "us-east-1",
            "use1-az1",
            "g6.xlarge",
            "on-demand",
            "0.80",
            8
        ),
        pool_block(
            "llm",
            "\"cheap\", \"dear\"",
            "max_replicas = 8\nmax_scale_up_per_step = 8",
            "max_launches_per_period = 2\nlaunch_period = \"10m\""
        ),
    );
    let h = harness(&config).await;
    let id = h.request(3).await;
    h.engine.tick().await.unwrap();
    let launch_calls = |h: &Harness| {
        h.cloud
            .calls()
            .iter()
            .filter(|c| c.starts_with("launch "))
            .count()
    };
    // The stocked-out offering refused once, then one launch on the dear one: two launches,
    // the period's limit.
    assert_eq!(launch_calls(&h), 2);
    assert_eq!(h.live_instances().await, 1);

    // A restart must neither ask the refusing offering again within its cooldown nor launch
    // past the period's limit.
    let restarted = h.restarted();
    h.clock.advance(Duration::from_secs(30));
    restarted.tick().await.unwrap();
    assert_eq!(launch_calls(&h), 2, "{:?}", h.cloud.calls());
    let status = restarted.pool_status(&"llm".parse().unwrap()).unwrap();
    assert_eq!(status.requested + status.starting, 1, "{status:?}");

    // Later periods launch the rest: the cheap offering is tried again after its cooldown, and
    // once it has refused twice in 15 minutes it ranks below the dear one.
    for _ in 0..300 {
        h.clock.advance(Duration::from_secs(5));
        restarted.tick().await.unwrap();
    }
    let outcome = h.ledger.capacity_request(&id).await.unwrap().unwrap();
    assert_eq!(outcome.state, RequestState::Delivered, "{outcome:?}");
}

fn launch_calls(h: &Harness, offering: &str) -> usize {
    let prefix = format!("launch {offering} ");
    h.cloud
        .calls()
        .iter()
        .filter(|c| c.starts_with(&prefix))
        .count()
}

/// Issue 19: a spot offering that answers HTTP 500 to every launch. A few transient failures
/// within the window end its intent as a refusal that says provider errors, cool the offering
/// down and fall back to the on-demand offering in the same tick, instead of retrying the same
/// call every tick forever.
#[tokio::test]
async fn a_persistent_transient_error_falls_back_after_a_bounded_number_of_failures() {
    let h = harness(CONFIG).await;
    h.cloud
        .inject_launch_fault(&"cheap".parse().unwrap(), ErrorClass::Transient, u32::MAX);
    let id = h.request(1).await;
    let mut fell_back_at = None;
    // Four minutes of one-second ticks, as the issue measured, and the ladder's climb after.
    for tick in 1..=300 {
        h.clock.advance(Duration::from_secs(1));
        h.engine.tick().await.unwrap();
        if fell_back_at.is_none() && launch_calls(&h, "dear") > 0 {
            fell_back_at = Some(tick);
        }
    }
    let cheap = launch_calls(&h, "cheap");
    eprintln!(
        "persistent 500 on spot, 300 ticks of 1s: {cheap} spot launch calls, first on-demand launch at tick {fell_back_at:?}"
    );
    assert_eq!(
        fell_back_at,
        Some(3),
        "the third failure falls back in its own tick"
    );
    assert_eq!(
        cheap, 3,
        "three failures, then the offering cools down (5 minutes)"
    );
    let outcome = h.ledger.capacity_request(&id).await.unwrap().unwrap();
    assert_eq!(outcome.state, RequestState::Delivered);
    let codes: Vec<String> = outcome.refusals.iter().map(|r| r.reason.code()).collect();
    assert_eq!(codes, ["provider_errors"]);
    assert_eq!(
        outcome.refusals[0].offering.as_ref().unwrap().as_str(),
        "cheap"
    );
    assert!(
        outcome.refusals[0].detail.contains("3 transient failures"),
        "{}",
        outcome.refusals[0].detail
    );
    // The refused intent never got an instance; exactly one instance exists, on dear.
    assert_eq!(h.live_instances().await, 1);
    let offerings = h.engine.offering_prices();
    let cheap = offerings
        .iter()
        .find(|o| o.offering.as_str() == "cheap")
        .unwrap();
    assert_eq!(cheap.recent_refusals, 1, "ranked lower for a while");
}

/// Issue 19, the same for a provider that times out: every offering hangs past
/// `engine.provider_timeout`, each is refused for provider errors after three timeouts, and the
/// pool, unable to launch for `engine.provider_errors_alert_after`, raises `ProviderErrors`.
#[tokio::test]
async fn a_provider_that_keeps_timing_out_is_bounded_and_raises_provider_errors() {
    let h = harness(&CONFIG.replace(
        "offering_cooldown = \"5m\"",
        "offering_cooldown = \"5m\"\nprovider_timeout = \"100ms\"\nprovider_errors_alert_after = \"2m\"",
    ))
    .await;
    h.cloud.set_launch_delay(Duration::from_secs(30));
    let id = h.request(1).await;
    let firing = |h: &Harness| {
        h.engine
            .active_alerts()
            .into_iter()
            .any(|a| a.alert.name == "ProviderErrors")
    };
    let mut first_alert_at = None;
    for tick in 1..=30 {
        h.clock.advance(Duration::from_secs(5));
        h.engine.tick().await.unwrap();
        if first_alert_at.is_none() && firing(&h) {
            first_alert_at = Some(tick);
        }
    }
    let (cheap, dear) = (launch_calls(&h, "cheap"), launch_calls(&h, "dear"));
    eprintln!("every launch times out, 30 ticks of 5s: {cheap} + {dear} launch calls");
    assert_eq!(
        (cheap, dear),
        (3, 3),
        "three timeouts per offering, then refused"
    );
    let outcome = h.ledger.capacity_request(&id).await.unwrap().unwrap();
    let codes: Vec<String> = outcome.refusals.iter().map(|r| r.reason.code()).collect();
    assert_eq!(codes, ["provider_errors", "provider_errors", "no_offering"]);
    assert!(
        outcome.refusals[0].detail.contains("Timeout"),
        "{}",
        outcome.refusals[0].detail
    );
    // The first timeout was at tick 1 (5 s); two minutes later the pool still launched nothing.
    assert_eq!(first_alert_at, Some(25), "ProviderErrors after two minutes");
    assert_eq!(h.live_instances().await, 0);
    h.cloud.set_launch_delay(Duration::ZERO);
}

/// A launch that goes through clears the pool's provider trouble: no `ProviderErrors` after a
/// fallback that worked.
#[tokio::test]
async fn a_fallback_that_launches_raises_no_provider_errors_alert() {
    let h = harness(&CONFIG.replace(
        "offering_cooldown = \"5m\"",
        "offering_cooldown = \"5m\"\nprovider_errors_alert_after = \"10s\"",
    ))
    .await;
    h.cloud
        .inject_launch_fault(&"cheap".parse().unwrap(), ErrorClass::Transient, u32::MAX);
    h.request(1).await;
    h.run_for(60).await;
    let names: Vec<String> = h
        .engine
        .active_alerts()
        .into_iter()
        .map(|a| a.alert.name)
        .collect();
    assert!(!names.contains(&"ProviderErrors".to_string()), "{names:?}");
    assert_eq!(h.live_instances().await, 1);
}

/// Issue 19: a spot offering stocked out and an on-demand one in another zone of the region: the
/// launch counts as a `zone` fallback and a `market` one, in `/metrics` and in the simulator's
/// fallbacks (both read `headroom_fallbacks_total`).
#[tokio::test]
async fn a_spot_to_on_demand_switch_in_another_zone_counts_zone_and_market() {
    let config = format!(
        "cluster_id = \"engine-test\"\n{}{}{}",
        offering("s", "us-east-1", "use1-az1", "g6.xlarge", "spot", "0.30", 0),
        offering(
            "o",
            "us-east-1",
            "use1-az2",
            "g6.xlarge",
            "on-demand",
            "0.80",
            4
        ),
        pool_block(
            "llm",
            "\"s\", \"o\"",
            "max_replicas = 4\nmax_scale_up_per_step = 4",
            ""
        ),
    );
    let h = harness(&config).await;
    h.request(1).await;
    h.engine.tick().await.unwrap();
    assert_eq!(launch_calls(&h, "o"), 1);
    let llm = h.engine.config().pool(&"llm".parse().unwrap()).unwrap();
    let fallbacks = h.engine.metrics().fallbacks_of(llm);
    assert_eq!(
        fallbacks,
        [("market".to_string(), 1), ("zone".to_string(), 1)].into(),
        "{fallbacks:?}"
    );
}

/// Issue 37: one pool with an offering on each of two clouds (the simulated cloud, and a second
/// simulated cloud standing in for GCP) behind the composite. The first cloud's offering runs
/// out after one node: the second node launches on the other cloud in the same tick, counted and
/// logged as a `cloud` fallback, and one budget bounds the nodes of both clouds.
#[tokio::test]
async fn a_stockout_on_one_cloud_falls_back_to_the_other_in_the_same_tick_under_one_budget() {
    let config = format!(
        "cluster_id = \"engine-test\"\n[engine]\nhold_horizon = \"1h\"\n{}{}{}[[budgets]]\naccount = \"ml\"\nperiod = \"day\"\nceiling_usd = \"5.00\"\nhard_action = \"clamp\"\n",
        offering(
            "s",
            "us-east-1",
            "use1-az1",
            "p5.48xlarge",
            "on-demand",
            "2.00",
            1
        ),
        offering(
            "g",
            "us-central1",
            "us-central1-a",
            "a3-highgpu-8g",
            "on-demand",
            "2.50",
            4
        )
        .replace("provider = \"sim\"", "provider = \"gcp\""),
        pool_block(
            "llm",
            "\"s\", \"g\"",
            "max_replicas = 4\nmax_scale_up_per_step = 4",
            ""
        ),
    );
    let rig = Rig::new(&config).await;
    let sim = rig.sim_cloud();
    let gcp = Arc::new(
        headroom_engine::sim_cloud_for(&rig.config, rig.clock.clone())
            .standing_in_for(headroom_core::ProviderKind::Gcp),
    );
    let multi = headroom_cloud::MultiCloud::new(vec![sim.clone(), gcp.clone()]).unwrap();
    let engine = rig.engine(Arc::new(multi));
    rig.request("llm", 3).await;
    engine.tick().await.unwrap();

    let launches = |c: &SimCloud| {
        c.calls()
            .into_iter()
            .filter(|c| c.starts_with("launch "))
            .collect::<Vec<_>>()
    };
    // One node on the first cloud, then its stockout, then the other cloud: all in one tick.
    assert_eq!(sim.list_owned("engine-test").await.unwrap().len(), 1);
    assert_eq!(gcp.list_owned("engine-test").await.unwrap().len(), 1);
    assert!(launches(&gcp).iter().all(|c| c.starts_with("launch g ")));
    assert!(launches(&sim).iter().all(|c| c.starts_with("launch s ")));
    // The first cloud's refusal is on record; then one budget: $2.00 and $2.50 of holds fit
    // in $5.00, a third node ($2.50, on either cloud) does not.
    let refusals = refusal_reasons_of(&rig).await;
    assert_eq!(
        refusals,
        vec![
            RefusalReason::Cloud(ErrorClass::Capacity),
            RefusalReason::Budget
        ],
        "{refusals:?}"
    );
    let budget = rig.config.budget(&"ml".parse().unwrap()).unwrap();
    let standing = rig
        .ledger
        .budget_standing(budget, rig.clock.now())
        .await
        .unwrap();
    assert_eq!(standing.held, "4.50".parse().unwrap());

    let llm = engine.config().pool(&"llm".parse().unwrap()).unwrap();
    let fallbacks = engine.metrics().fallbacks_of(llm);
    assert_eq!(
        fallbacks,
        [("cloud".to_string(), 1)].into(),
        "{fallbacks:?}"
    );
    let logged = engine.decisions(&"llm".parse().unwrap()).await.unwrap();
    let entry = logged
        .iter()
        .find(|d| d["event"] == "fallback")
        .expect("the fallback is in the decision log");
    assert_eq!(entry["kinds"], serde_json::json!(["cloud"]));
    assert_eq!(entry["provider"], "gcp");
    assert!(
        entry["reason"]
            .as_str()
            .unwrap()
            .starts_with("fallback (cloud) from s on sim"),
        "{entry}"
    );
}

/// Issue 37: one cloud's API down leaves the other working. A node runs on the second cloud;
/// its API goes down; the ticks still run (before, the whole tick failed on the inventory),
/// leave that node as it was (not missing), and the next replica launches on the cloud that
/// answers.
#[tokio::test]
async fn an_outage_of_one_cloud_leaves_its_nodes_be_and_the_other_cloud_working() {
    let config = format!(
        "cluster_id = \"engine-test\"\n{}{}{}",
        offering(
            "s",
            "us-east-1",
            "use1-az1",
            "p5.48xlarge",
            "on-demand",
            "2.00",
            4
        ),
        offering(
            "g",
            "us-central1",
            "us-central1-a",
            "a3-highgpu-8g",
            "on-demand",
            "2.50",
            4
        )
        .replace("provider = \"sim\"", "provider = \"gcp\""),
        pool_block(
            "llm",
            "\"s\", \"g\"",
            "max_replicas = 4\nmax_scale_up_per_step = 4",
            ""
        ),
    );
    let rig = Rig::new(&config).await;
    let sim = rig.sim_cloud();
    let gcp = Arc::new(
        headroom_engine::sim_cloud_for(&rig.config, rig.clock.clone())
            .standing_in_for(headroom_core::ProviderKind::Gcp),
    );
    let multi = headroom_cloud::MultiCloud::new(vec![sim.clone(), gcp.clone()]).unwrap();
    let engine = rig.engine(Arc::new(multi));
    sim.set_capacity(&"s".parse().unwrap(), 0);
    rig.request("llm", 1).await;
    for _ in 0..60 {
        engine.tick().await.unwrap();
        rig.clock.advance(Duration::from_secs(5));
    }
    let on_gcp = rig.ledger.live_nodes().await.unwrap();
    assert_eq!(on_gcp.len(), 1);
    assert_eq!(on_gcp[0].state, NodeState::Serving, "{on_gcp:?}");

    gcp.set_outage(true);
    sim.set_capacity(&"s".parse().unwrap(), 4);
    rig.request("llm", 1).await;
    // The down cloud still ranks first (the other one refused recently): its launch fails
    // transiently, a bounded number of times (`engine.transient_failure_limit`), then the pool
    // falls back to the cloud that answers.
    let mut ticks = 0;
    while sim.list_owned("engine-test").await.unwrap().is_empty() && ticks < 10 {
        engine.tick().await.unwrap();
        rig.clock.advance(Duration::from_secs(1));
        ticks += 1;
    }
    assert_eq!(
        sim.list_owned("engine-test").await.unwrap().len(),
        1,
        "{:?} {:?} {:?}",
        gcp.calls(),
        rig.ledger.live_nodes().await.unwrap(),
        engine.decisions(&"llm".parse().unwrap()).await.unwrap()
    );
    assert!(
        gcp.all_instances().len() == 1,
        "nothing more on the down cloud"
    );
    let live = rig.ledger.live_nodes().await.unwrap();
    assert_eq!(live.len(), 2, "{live:?}");
    let kept = live.iter().find(|e| e.node == on_gcp[0].node).unwrap();
    assert_eq!(kept.state, NodeState::Serving, "left as it was: {kept:?}");

    // The down cloud pages once its inventory has been unreadable for
    // `engine.provider_errors_alert_after` (5 minutes), not on the first missed read, and the
    // alert names the cloud; the first read that answers resolves it.
    let unreachable = |engine: &headroom_engine::Engine| {
        engine
            .active_alerts()
            .into_iter()
            .filter(|a| a.alert.name == "CloudUnreachable")
            .map(|a| a.alert.labels["provider"].clone())
            .collect::<Vec<_>>()
    };
    assert!(unreachable(&engine).is_empty(), "not after {ticks} s");
    let mut waited = ticks as u64;
    while unreachable(&engine).is_empty() && waited < 600 {
        rig.clock.advance(Duration::from_secs(10));
        waited += 10;
        engine.tick().await.unwrap();
    }
    assert_eq!(unreachable(&engine), ["gcp"]);
    assert!((300..=310).contains(&waited), "after {waited} s");
    gcp.set_outage(false);
    engine.tick().await.unwrap();
    assert!(unreachable(&engine).is_empty());
}

async fn refusal_reasons_of(rig: &Rig) -> Vec<RefusalReason> {
    rig.ledger
        .refusals_between(
            "2026-11-30T00:00:00Z".parse().unwrap(),
            "2026-12-31T00:00:00Z".parse().unwrap(),
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.reason)
        .collect()
}

#[path = "engine/budgets.rs"]
mod budgets;

#[path = "engine/config_fuzz.rs"]
mod config_fuzz;

/// A previous owner's history: two days of one replica's demand with a job of five from 09:10
/// to 09:30, and a first owner that dies at 09:05; the next owner reads it all back.
#[tokio::test]
async fn a_new_owner_keeps_the_demand_history_its_forecast_and_the_warm_pool_size() {
    let config = format!(
        "{}[pools.supply]\nwarm_pool_max = 4\n",
        CONFIG
            .replace("min_replicas = 0", "min_replicas = 1")
            .replace("max_replicas = 6", "max_replicas = 8")
    );
    let h = harness(&config).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    let minute = |at: headroom_core::Timestamp| at.timestamp().div_euclid(60);
    let start = minute(h.clock.now());
    let history = two_days_with_a_job(start);
    h.ledger
        .record_demand_minutes(&pool, &history)
        .await
        .unwrap();
    // The first owner runs five quiet minutes: each ended minute reaches the ledger.
    for _ in 0..60 {
        h.engine.push_signal(&pool, quiet());
        h.engine.tick().await.unwrap();
        h.clock.advance(Duration::from_secs(5));
    }
    // The last tick is at 09:04:55: four minutes have ended, none asked for a replica.
    let written = h.ledger.demand_minutes(&pool, start).await.unwrap();
    assert_eq!(
        written,
        (start..start + 4).map(|m| (m, 0)).collect::<Vec<_>>()
    );
    let status = h.engine.pool_status(&pool).unwrap();
    let forecast = status.forecast.clone().expect("a forecast status");
    assert_eq!(
        forecast.expected.as_ref().map(|f| f.replicas),
        Some(5),
        "09:05 with a 5-minute lead sees the job: {forecast:?}"
    );
    assert_eq!(status.desired, 5, "{:?}", status.reason);
    assert!(
        status
            .reason
            .as_ref()
            .unwrap()
            .contains("history expects 5"),
        "{:?}",
        status.reason
    );
    let warm_size = status.warm_pool.as_ref().unwrap().size;
    assert_eq!(
        warm_size, 4,
        "a rise of four within a cold start, capped at the ceiling"
    );

    // The owner dies; the next one starts from the ledger alone.
    let next = h.restarted();
    next.push_signal(&pool, quiet());
    next.tick().await.unwrap();
    let status = next.pool_status(&pool).unwrap();
    let forecast = status.forecast.clone().expect("restored");
    assert!(forecast.history_minutes >= 2 * 1440, "{forecast:?}");
    assert_eq!(forecast.expected.map(|f| f.replicas), Some(5));
    assert_eq!(status.desired, 5, "{:?}", status.reason);
    assert_eq!(
        status.warm_pool.unwrap().size,
        warm_size,
        "the warm pool's size is kept"
    );
}

/// What a tick's decision for the pool says: the desired target, the rule, the hold and the
/// reason.
type Said = (u32, Option<Rule>, Option<ScalingHold>, Option<String>);

fn said(engine: &Engine) -> Said {
    let status = engine.pool_status(&"llm".parse().unwrap()).unwrap();
    (
        status.desired,
        status.rule,
        status.scaling_hold,
        status.reason,
    )
}

/// Twenty req/s for four minutes (the rule wants 4 at 5 each), then quiet: the signal at
/// 5-second step `step`.
fn burst_then_quiet(step: usize) -> SignalInput {
    if step < 48 {
        SignalInput {
            arrival_rate_rps: Some(20.0),
            ..quiet()
        }
    } else {
        quiet()
    }
}

/// Two identical deployments driven by the same clock steps and signals, every 5 s for 15
/// minutes; one runs uninterrupted, the other's engine is dropped after step `crash_after`
/// and a new one on the same ledger and cloud (a restart after a crash) takes over. Every
/// decision the new engine makes is the uninterrupted one's. Returns what the uninterrupted
/// engine said at each step.
async fn twin_runs(config: &str, crash_after: usize) -> Vec<Said> {
    let (steady, crashing) = (harness(config).await, harness(config).await);
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    let mut engine = Some(crashing.engine.clone());
    let mut successor = None;
    let mut run = Vec::new();
    for step in 0..180 {
        let current = successor.as_ref().or(engine.as_ref()).unwrap().clone();
        for e in [&steady.engine, &current] {
            e.push_signal(&pool, burst_then_quiet(step));
            e.tick().await.unwrap();
        }
        let (expected, got) = (said(&steady.engine), said(&current));
        if successor.is_some() {
            assert_eq!(
                got, expected,
                "step {step} after a crash at step {crash_after}"
            );
        }
        run.push(expected);
        if step == crash_after {
            // Only the ledger and the cloud outlive the process.
            drop(engine.take());
            successor = Some(crashing.restarted());
        }
        steady.clock.advance(Duration::from_secs(5));
        crashing.clock.advance(Duration::from_secs(5));
    }
    run
}

/// Issue 34 item 2: the controller's memory survives a restart. A fresh memory would forget
/// the breach windows, the direction cooldown and how long the pool has been idle, and scale
/// in a full cold start late (or, on a scale-up's heels, undo it inside the cooldown).
#[tokio::test]
async fn a_restarted_engine_decides_as_the_one_that_kept_running() {
    let run = twin_runs(CONFIG, 60).await;
    // The scenario has what a fresh memory would get wrong: a scale-up, then a stretch idle,
    // then the scale-in — after the crash at step 60 (five minutes in, one minute idle).
    let first_up = run.iter().position(|s| s.0 == 4).expect("scaled up to 4");
    assert!(first_up < 10, "{first_up}");
    let down = run
        .iter()
        .position(|s| s.1 == Some(Rule::ScaleDown))
        .expect("scaled in");
    assert!(
        down > 60 + 20,
        "scaled in well after the crash: step {down}"
    );
    assert!(run[down].0 < 4, "{:?}", run[down]);
    // Crashes elsewhere in the run: between the two breach windows, just after the scale-up
    // (in the direction cooldown, replicas still booting) and at the first idle step.
    for crash_after in [0, 3, 48] {
        assert_eq!(
            twin_runs(CONFIG, crash_after).await,
            run,
            "crash at step {crash_after}"
        );
    }
}

/// A shadow-mode pool keeps its memory across a restart too (it decides without acting).
#[tokio::test]
async fn a_restarted_engine_in_shadow_mode_decides_as_the_one_that_kept_running() {
    let config = CONFIG.replace(
        "replica_throughput_rps = 5.0",
        "replica_throughput_rps = 5.0\nshadow = true",
    );
    let run = twin_runs(&config, 20).await;
    assert!(
        run.iter().any(|s| s.0 == 4),
        "the shadow decision scaled up"
    );
}

/// A memory in the ledger this version cannot read is logged and left: the new owner starts
/// from the replicas that exist, as with no memory at all, and writes its own.
#[tokio::test]
async fn a_controller_memory_that_does_not_read_back_is_ignored() {
    let h = harness(CONFIG).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    for step in 0..10 {
        h.engine.push_signal(&pool, burst_then_quiet(step));
        h.engine.tick().await.unwrap();
        h.clock.advance(Duration::from_secs(5));
    }
    assert_eq!(said(&h.engine).0, 4);
    let (written_at, body) = h.ledger.controller_memory(&pool).await.unwrap().unwrap();
    assert!(body.contains("\"target\":4"), "{body}");
    h.ledger
        .record_controller_memory(&pool, h.clock.now(), "{\"target\": \"four\"")
        .await
        .unwrap();
    h.clock.advance(Duration::from_secs(5));
    let next = h.restarted();
    next.push_signal(&pool, quiet());
    next.tick().await.unwrap();
    let (desired, rule, hold, reason) = said(&next);
    // Afresh: the four launched are the target it starts from; nothing is idle for long yet.
    assert_eq!(
        (desired, rule, hold),
        (4, Some(Rule::Steady), None),
        "{reason:?}"
    );
    let (rewritten_at, body) = h.ledger.controller_memory(&pool).await.unwrap().unwrap();
    assert!(rewritten_at > written_at, "its own memory written after it");
    let memory: headroom_core::controller::ControllerMemory = serde_json::from_str(&body).unwrap();
    assert_eq!(memory.target, 4);
}

#[tokio::test]
async fn with_forecast_off_the_history_is_kept_but_not_acted_on() {
    let config = CONFIG
        .replace("min_replicas = 0", "min_replicas = 1")
        .replace(
            "target_utilization = 1.0",
            "target_utilization = 1.0\nforecast = false",
        );
    let h = harness(&config).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    let start = h.clock.now().timestamp().div_euclid(60);
    let history = two_days_with_a_job(start);
    h.ledger
        .record_demand_minutes(&pool, &history)
        .await
        .unwrap();
    h.clock.advance(Duration::from_secs(300));
    h.engine.push_signal(&pool, quiet());
    h.engine.tick().await.unwrap();
    let status = h.engine.pool_status(&pool).unwrap();
    assert_eq!(status.desired, 1, "{:?}", status.reason);
    assert!(
        status
            .forecast
            .is_some_and(|f| f.history_minutes >= 2 * 1440)
    );
}

#[path = "engine/prometheus.rs"]
mod prometheus;

#[tokio::test]
async fn one_replica_holding_the_queue_is_shown_and_alerted_not_scaled_away() {
    let h = harness(CONFIG).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    let imbalance = |h: &Harness| {
        h.engine
            .active_alerts()
            .into_iter()
            .find(|a| a.alert.name == "ReplicaImbalance")
    };
    // Evenly spread: the spread is shown, nothing fires.
    h.engine.push_signal(
        &pool,
        SignalInput {
            queue_depth: 30,
            replica_queue_depths: vec![10, 11, 9],
            ..quiet()
        },
    );
    h.engine.tick().await.unwrap();
    let spread = h.engine.pool_status(&pool).unwrap().replica_queues.unwrap();
    assert_eq!((spread.replicas, spread.max), (3, 11));
    assert!(imbalance(&h).is_none());
    // One replica holds 40 of 45: the router is at fault, and the alert says so.
    h.engine.push_signal(
        &pool,
        SignalInput {
            queue_depth: 45,
            replica_queue_depths: vec![40, 3, 2],
            ..quiet()
        },
    );
    h.engine.tick().await.unwrap();
    let spread = h.engine.pool_status(&pool).unwrap().replica_queues.unwrap();
    assert!((spread.skew - 40.0 / 15.0).abs() < 1e-9, "{spread:?}");
    let alert = imbalance(&h).expect("ReplicaImbalance fires");
    assert!(
        alert.alert.summary.contains("holds 40 waiting requests"),
        "{alert:?}"
    );
    let metrics = h.engine.metrics().encode();
    assert!(
        metrics.contains("headroom_pool_replica_queue_skew{pool=\"llm\",account=\"ml\"} 2.66"),
        "{metrics}"
    );
}

/// A window declared for a known event: a weekday job at 10:30 in Paris (09:30 UTC in
/// November), 3 replicas. The pool launches one cold start (4 minutes) ahead, serves them when
/// the job starts, and gives them back after the window by its usual scale-in.
#[tokio::test]
async fn a_scheduled_window_has_its_capacity_ready_when_it_opens() {
    let text = format!(
        "{CONFIG}\n[[pools.schedule]]\nname = \"batch-1030\"\nmin_replicas = 3\ndays = [\"weekdays\"]\nstart = \"10:30\"\nend = \"11:00\"\ntime_zone = \"Europe/Paris\"\n"
    );
    let h = harness(&text).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    let status = |h: &Harness| h.engine.pool_status(&pool).unwrap();
    // Monday 09:00 UTC: quiet, nothing scheduled yet.
    let tick_quiet = |h: &Harness| {
        h.engine.push_signal(&pool, quiet());
    };
    tick_quiet(&h);
    h.engine.tick().await.unwrap();
    assert_eq!(status(&h).desired, 0);
    // Until 09:25:55 nothing; from 09:26 (one cold start before 09:30) the floor is 3.
    for _ in 0..(25 * 60 + 55) / 5 {
        tick_quiet(&h);
        h.clock.advance(Duration::from_secs(5));
        h.engine.tick().await.unwrap();
    }
    assert_eq!(status(&h).desired, 0, "{:?}", status(&h).reason);
    tick_quiet(&h);
    h.clock.advance(Duration::from_secs(5));
    h.engine.tick().await.unwrap();
    let opening = status(&h);
    assert_eq!(opening.desired, 3, "{:?}", opening.reason);
    assert_eq!(opening.rule, Some(Rule::Scheduled));
    assert!(
        opening
            .reason
            .as_deref()
            .unwrap()
            .contains("batch-1030 (mon-fri 10:30-11:00 Europe/Paris)"),
        "{:?}",
        opening.reason
    );
    // 09:30: the window opens with its replicas serving.
    for _ in 0..48 {
        tick_quiet(&h);
        h.clock.advance(Duration::from_secs(5));
        h.engine.tick().await.unwrap();
    }
    assert_eq!(
        h.clock.now(),
        "2026-11-30T09:30:00Z"
            .parse::<headroom_core::Timestamp>()
            .unwrap()
    );
    assert_eq!(status(&h).ready, 3, "ready when the job starts");
    // After 10:00 the floor is gone and the quiet pool scales in as it always does.
    for _ in 0..(40 * 60) / 5 {
        tick_quiet(&h);
        h.clock.advance(Duration::from_secs(5));
        h.engine.tick().await.unwrap();
    }
    assert!(status(&h).desired < 3, "{:?}", status(&h));
}

/// A restart does not send a firing alert again as new: the new owner reads the alert book
/// back from the ledger, sends nothing while the alert still holds (no repeat is due), and one
/// resolved notification, with the original start, once it clears.
#[tokio::test]
async fn a_restart_keeps_the_firing_alerts_and_resolves_them_once() {
    // A port with nobody listening: every notification stays in the outbox, to be read.
    let h = harness(&signal_missing_alerted(free_port(), "hook", "json")).await;
    let pool: headroom_core::PoolName = "llm".parse().unwrap();
    h.engine.tick().await.unwrap();
    let active = h.engine.active_alerts();
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0].alert.name, "PoolSignalsMissing");
    let started = active[0].starts_at;
    let sent = || async {
        h.ledger
            .pending_alerts(100)
            .await
            .unwrap()
            .into_iter()
            .map(|p| serde_json::from_str::<serde_json::Value>(&p.body).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(sent().await.len(), 1);

    h.clock.advance(Duration::from_secs(120));
    let next = h.restarted();
    for _ in 0..3 {
        next.tick().await.unwrap();
        h.clock.advance(Duration::from_secs(60));
    }
    let active = next.active_alerts();
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0].starts_at, started, "the original start kept");
    assert_eq!(
        sent().await.len(),
        1,
        "nothing sent again as new: {:?}",
        sent().await
    );

    // The signal arrives: the hold ends and the alert resolves, once, with its original start.
    next.push_signal(
        &pool,
        SignalInput {
            queue_depth: 0,
            arrival_rate_rps: Some(1.0),
            ..SignalInput::default()
        },
    );
    next.tick().await.unwrap();
    h.clock.advance(Duration::from_secs(5));
    next.tick().await.unwrap();
    assert!(next.active_alerts().is_empty());
    let sent = sent().await;
    assert_eq!(sent.len(), 2, "{sent:?}");
    let iso = |t: headroom_core::Timestamp| serde_json::to_value(t).unwrap();
    assert_eq!(
        (
            &sent[1]["status"],
            &sent[1]["alert"]["name"],
            &sent[1]["starts_at"]
        ),
        (
            &serde_json::json!("resolved"),
            &serde_json::json!("PoolSignalsMissing"),
            &iso(started)
        ),
        "{sent:?}"
    );
    let (_, book) = h.ledger.alert_book("llm").await.unwrap().unwrap();
    assert_eq!(book, "[]", "the resolution written");
}

/// An alert book in the ledger this version cannot read is logged and left: its alerts fire
/// afresh, as with none, and the new owner writes its own.
#[tokio::test]
async fn an_alert_book_that_does_not_read_back_is_ignored() {
    let text = format!(
        "{}\n[alerts]\nwatchdog = false\n",
        CONFIG.replace("min_replicas = 0", "min_replicas = 1")
    );
    let h = harness(&text).await;
    h.ledger
        .record_alert_book("llm", h.clock.now(), "[{\"alert\": 4")
        .await
        .unwrap();
    h.clock.advance(Duration::from_secs(5));
    let next = h.restarted();
    next.tick().await.unwrap();
    let active = next.active_alerts();
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0].starts_at, h.clock.now(), "fired afresh");
    let (_, body) = h.ledger.alert_book("llm").await.unwrap().unwrap();
    assert!(body.contains("PoolSignalsMissing"), "{body}");
}
