//! Budgets bound spend, not only holds: running nodes' holds are renewed before they lapse,
//! through the same transactional admission as launches, and a refused renewal stops or
//! releases the node. Short hold horizons so that a few hours of manual time see many renewals.

use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::{Clock, ManualClock};
use headroom_config::Config;
use headroom_core::{Budget, Money, NodeState, Priority, RefusalReason, Timestamp};
use headroom_engine::Engine;
use headroom_ledger::prelude::*;
use headroom_ledger::{NewCapacityRequest, PostgresLedger, RefusalRecord};
use headroom_testkit::{EPOCH, Rig};

/// One pool on one $1/h offering, ten-minute holds, 30 s ticks, a $`ceiling`/day budget.
fn budget_config(pool: &str, ceiling: &str, hard_action: &str) -> String {
    format!(
        r#"
cluster_id = "budget-test"
[engine]
tick = "30s"
hold_horizon = "10m"
# A round of the loop is a tick and one cloud call (40 s): renewals lead a lapse by a quarter of
# the horizon (150 s), which the timings below count on.
provider_timeout = "10s"
[[offerings]]
id = "g6"
provider = "sim"
region = "us-east-1"
zone = "use1-az1"
instance_type = "g6.xlarge"
market = "on-demand"
price_usd_per_hour = "1"
gpus = 1
sim_capacity = 8
[[pools]]
name = "{pool}"
account = "ml"
offerings = ["g6"]
min_replicas = 0
max_replicas = 4
max_scale_up_per_step = 4
warm_pool_size = 0
[pools.ladder]
node_acquisition = "10s"
image_pull = "10s"
weight_load = "10s"
compile = "0s"
warmup = "0s"
[pools.scaling]
replica_throughput_rps = 5.0
[[budgets]]
account = "ml"
period = "day"
ceiling_usd = "{ceiling}"
hard_action = "{hard_action}"
"#
    )
}

async fn ask(
    ledger: &dyn Ledger,
    clock: &dyn Clock,
    pool: &str,
    replicas: u32,
    priority: Priority,
) {
    let new = NewCapacityRequest {
        pool: pool.parse().unwrap(),
        replicas,
        priority,
        idempotency_key: None,
        at: clock.now(),
    };
    ledger.record_capacity_request(&new).await.unwrap();
}

async fn ml_budget(ledger: &dyn Ledger) -> Budget {
    ledger
        .budget(&"ml".parse().unwrap())
        .await
        .unwrap()
        .unwrap()
}

/// What the account spent in today's period so far.
async fn spent(ledger: &dyn Ledger, budget: &Budget, now: Timestamp) -> Money {
    ledger.budget_standing(budget, now).await.unwrap().spent
}

/// Refusals that stopped a running node for budget (they name the node).
async fn budget_stops(ledger: &dyn Ledger, now: Timestamp) -> Vec<RefusalRecord> {
    ledger
        .refusals_between(EPOCH.parse().unwrap(), now + chrono::Duration::seconds(1))
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.reason == RefusalReason::Budget && r.node.is_some())
        .collect()
}

#[tokio::test]
async fn renewals_keep_running_nodes_inside_the_budget_and_stop_them_when_refused() {
    let rig = Rig::new(&budget_config("llm", "3", "clamp")).await;
    let engine = rig.engine(rig.sim_cloud());
    rig.request("llm", 2).await;
    engine.tick().await.unwrap();
    let budget = ml_budget(rig.ledger.as_ref()).await;
    let mut alerted = false;
    // Two $1/h nodes on a $3 day would spend $8 in four hours; ten-minute holds alone would
    // never stop them.
    for _ in 0..(4 * 3600 / 30) {
        rig.clock.advance(Duration::from_secs(30));
        engine.tick().await.unwrap();
        let now = rig.clock.now();
        let spent = spent(rig.ledger.as_ref(), &budget, now).await;
        assert!(
            spent <= budget.ceiling,
            "spent ${spent} of ${} at {now}",
            budget.ceiling
        );
        alerted |= engine
            .active_alerts()
            .iter()
            .any(|a| a.alert.name == "BudgetStoppedCapacity");
    }
    let now = rig.clock.now();
    let events = rig.ledger.account_events(&budget.account).await.unwrap();
    assert!(
        events.iter().filter(|e| e.is_hold_renewal()).count() >= 10,
        "holds were renewed while the budget lasted"
    );
    let stops = budget_stops(rig.ledger.as_ref(), now).await;
    assert_eq!(stops.len(), 2, "both nodes stopped for budget: {stops:?}");
    assert!(
        stops[0].detail.contains("stopped for budget"),
        "{}",
        stops[0].detail
    );
    assert!(alerted, "a BudgetStoppedCapacity alert fired");
    let live = rig.ledger.live_nodes().await.unwrap();
    assert!(
        live.iter().all(|e| !e.state.is_billable()),
        "nothing runs on past the budget: {live:?}"
    );
    // The budget was used, not left idle: within one hold of each node of the ceiling.
    let spent = spent(rig.ledger.as_ref(), &budget, now).await;
    assert!(spent >= "2.66".parse().unwrap(), "spent only ${spent}");
}

/// A second pool on the same account: `batch`, on a $3/h offering.
const BATCH_POOL: &str = r#"
[[offerings]]
id = "g6-dear"
provider = "sim"
region = "us-east-1"
zone = "use1-az2"
instance_type = "g6.2xlarge"
market = "on-demand"
price_usd_per_hour = "3"
gpus = 1
sim_capacity = 8
[[pools]]
name = "batch"
account = "ml"
offerings = ["g6-dear"]
min_replicas = 0
max_replicas = 4
max_scale_up_per_step = 4
warm_pool_size = 0
[pools.ladder]
node_acquisition = "10s"
image_pull = "10s"
weight_load = "10s"
compile = "0s"
warmup = "0s"
[pools.scaling]
replica_throughput_rps = 5.0
"#;

#[tokio::test]
async fn with_shed_lowest_tier_a_lower_tier_gives_way_to_a_higher_tier_s_renewal() {
    // A low-tier batch node ($3/h) and, five minutes later, a critical chat node ($1/h): their
    // renewals alternate, and at $3.47 the budget runs out at 09:45:30, just after the batch
    // node renewed ($0.375 more) and as the chat node's turn comes ($0.125 more).
    let config = budget_config("chat", "3.47", "shed-lowest-tier") + BATCH_POOL;
    let rig = Rig::new(&config).await;
    let engine = rig.engine(rig.sim_cloud());
    let (ledger, clock) = (rig.ledger.as_ref(), rig.clock.as_ref());
    ask(ledger, clock, "batch", 1, Priority::Low).await;
    engine.tick().await.unwrap();
    for _ in 0..10 {
        rig.clock.advance(Duration::from_secs(30));
        engine.tick().await.unwrap();
    }
    ask(ledger, clock, "chat", 1, Priority::Critical).await;
    let budget = ml_budget(ledger).await;
    for _ in 0..(2 * 3600 / 30) {
        rig.clock.advance(Duration::from_secs(30));
        engine.tick().await.unwrap();
        let spent = spent(ledger, &budget, rig.clock.now()).await;
        assert!(spent <= budget.ceiling, "spent ${spent}");
    }
    let stops = budget_stops(ledger, rig.clock.now()).await;
    let pools: Vec<&str> = stops.iter().map(|r| r.pool.as_str()).collect();
    assert_eq!(pools, ["batch", "chat"], "{stops:?}");
    assert!(
        stops[0].detail.contains("gives way") && stops[0].detail.contains("critical tier"),
        "{}",
        stops[0].detail
    );
    assert!(
        stops[1].at > stops[0].at + chrono::Duration::minutes(5),
        "the critical node ran on after the low one gave way: {stops:?}"
    );
}

/// Two processes with a pool each, both charging one account, tick at the same time against
/// one PostgreSQL ledger: their renewals and launches together never overspend it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres_two_engines_charging_one_account_never_overspend_it() {
    let url = headroom_testkit::fresh_postgres_database("headroom_budget").await;
    let clock = Arc::new(ManualClock::new(EPOCH.parse().unwrap()));
    let mut engines = Vec::new();
    for pool in ["llm-a", "llm-b"] {
        let config = Arc::new(Config::parse(&budget_config(pool, "4", "clamp"), "test").unwrap());
        let ledger: Arc<dyn Ledger> = Arc::new(PostgresLedger::connect(&url).await.unwrap());
        let cloud = Arc::new(headroom_engine::sim_cloud_for(&config, clock.clone()));
        engines.push((
            Engine::new(config, ledger.clone(), cloud, clock.clone()),
            ledger,
        ));
    }
    for (pool, (_, ledger)) in ["llm-a", "llm-b"].iter().zip(&engines) {
        ask(ledger.as_ref(), clock.as_ref(), pool, 2, Priority::Normal).await;
    }
    let ledger = engines[0].1.clone();
    let (a, b) = (engines[0].0.clone(), engines[1].0.clone());
    let (ra, rb) = tokio::join!(a.tick(), b.tick());
    ra.unwrap();
    rb.unwrap();
    let budget = ml_budget(ledger.as_ref()).await;
    for _ in 0..(3 * 3600 / 30) {
        clock.advance(Duration::from_secs(30));
        let (a, b) = (engines[0].0.clone(), engines[1].0.clone());
        let (ra, rb) = tokio::join!(
            tokio::spawn(async move { a.tick().await }),
            tokio::spawn(async move { b.tick().await })
        );
        ra.unwrap().unwrap();
        rb.unwrap().unwrap();
        let spent = spent(ledger.as_ref(), &budget, clock.now()).await;
        assert!(
            spent <= budget.ceiling,
            "spent ${spent} of ${}",
            budget.ceiling
        );
    }
    let stops = budget_stops(ledger.as_ref(), clock.now()).await;
    assert_eq!(stops.len(), 4, "every node stopped for budget: {stops:?}");
    assert!(
        ledger
            .live_nodes()
            .await
            .unwrap()
            .iter()
            .all(|e| e.state != NodeState::Serving)
    );
}

/// A node is held from its launch: one that boots far longer than its pool's ladder says (the
/// cloud's real climb is 30 minutes, the estimate 30 seconds) is billed while it climbs, so its
/// hold is renewed while it boots and, once the budget cannot carry it, it is ended.
#[tokio::test]
async fn a_node_that_overruns_its_ladder_is_held_while_it_boots() {
    let config = budget_config("llm", "5", "clamp")
        .replace("hold_horizon = \"10m\"", "hold_horizon = \"1m\"")
        .replace("tick = \"30s\"", "tick = \"1s\"")
        .replace("provider_timeout = \"10s\"", "provider_timeout = \"1s\"")
        .replace("price_usd_per_hour = \"1\"", "price_usd_per_hour = \"60\"")
        .replace(
            "sim_capacity = 8\n",
            "sim_capacity = 8\n[offerings.sim_ladder]\nnode_acquisition = \"10s\"\nimage_pull = \"30m\"\nweight_load = \"10s\"\ncompile = \"0s\"\nwarmup = \"0s\"\n",
        );
    let rig = Rig::new(&config).await;
    let engine = rig.engine(rig.sim_cloud());
    rig.request("llm", 2).await;
    engine.tick().await.unwrap();
    let budget = ml_budget(rig.ledger.as_ref()).await;
    let mut renewed_while_booting = false;
    // Two $60/h nodes booting for half an hour would spend $60 against a $5 day; each holds $1
    // a minute, so the day carries a few renewals and then none.
    for _ in 0..(10 * 60) {
        engine.tick().await.unwrap();
        rig.clock.advance(Duration::from_secs(1));
        let now = rig.clock.now();
        let spent = spent(rig.ledger.as_ref(), &budget, now).await;
        assert!(spent <= budget.ceiling, "spent ${spent} of $5 at {now}");
        renewed_while_booting |= rig
            .ledger
            .node_events()
            .await
            .unwrap()
            .iter()
            .any(|e| e.is_hold_renewal() && e.state == NodeState::Booting);
    }
    assert!(renewed_while_booting, "no booting node's hold was renewed");
    let stops = budget_stops(rig.ledger.as_ref(), rig.clock.now()).await;
    assert!(
        !stops.is_empty(),
        "the overrunning nodes were ended for budget"
    );
    let live = rig.ledger.live_nodes().await.unwrap();
    assert!(
        live.iter().all(|e| e.state != NodeState::Booting),
        "{live:?}"
    );
}

/// [`budget_config`] with a warm pool of one stopped node whose volumes cost $0.50/h parked.
fn parked_config(ceiling: &str) -> String {
    budget_config("llm", ceiling, "clamp")
        .replace("warm_pool_size = 0", "warm_pool_size = 1")
        .replace(
            "price_usd_per_hour = \"1\"",
            "price_usd_per_hour = \"1\"\nwarm_usd_per_hour = \"0.5\"",
        )
}

/// Ticks every 30 s until the pool's warm node is parked (stopped); its park event.
async fn until_parked(rig: &Rig, engine: &Engine) -> headroom_ledger::NodeEvent {
    for _ in 0..20 {
        engine.tick().await.unwrap();
        let parked = rig
            .ledger
            .node_events()
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.state == NodeState::Warm);
        if let Some(parked) = parked {
            return parked;
        }
        rig.clock.advance(Duration::from_secs(30));
    }
    panic!("the warm node never parked");
}

/// A node parked warm pays for its volumes: an hour parked at $0.50/h adds $0.50 to the
/// ledger's spend and the account's standing, and a hold covers it all along (placed at the
/// park, renewed while parked).
#[tokio::test]
async fn a_node_parked_an_hour_adds_its_parked_price_to_the_spend_and_is_held() {
    let rig = Rig::new(&parked_config("3")).await;
    let engine = rig.engine(rig.sim_cloud());
    let parked = until_parked(&rig, &engine).await;
    let money = |s: &str| -> Money { s.parse().unwrap() };
    // Ten minutes of volumes at $0.50/h.
    assert_eq!(parked.parked_usd_per_hour, money("0.5"));
    assert_eq!(parked.hold, money("0.083333"));
    let budget = ml_budget(rig.ledger.as_ref()).await;
    let start = rig.clock.now();
    assert_eq!(start, parked.at);
    let before = rig.ledger.summary(start).await.unwrap().spend;
    let standing_before = rig.ledger.budget_standing(&budget, start).await.unwrap();
    for _ in 0..(3600 / 30) {
        rig.clock.advance(Duration::from_secs(30));
        engine.tick().await.unwrap();
        let standing = rig
            .ledger
            .budget_standing(&budget, rig.clock.now())
            .await
            .unwrap();
        assert!(
            standing.held > Money::ZERO,
            "a parked node's volumes are held at {}",
            rig.clock.now()
        );
    }
    let end = rig.clock.now();
    let after = rig.ledger.summary(end).await.unwrap().spend;
    assert_eq!(after - before, money("0.5"), "an hour parked at $0.50/h");
    let standing_after = rig.ledger.budget_standing(&budget, end).await.unwrap();
    assert_eq!(standing_after.spent - standing_before.spent, money("0.5"));
    let events = rig.ledger.node_events().await.unwrap();
    let renewals = events
        .iter()
        .filter(|e| e.is_hold_renewal() && e.state == NodeState::Warm)
        .count();
    assert!(renewals >= 5, "{renewals} renewals in an hour parked");
    assert!(
        events
            .iter()
            .filter(|e| e.at > start)
            .all(|e| e.state == NodeState::Warm),
        "the node stayed parked: {events:?}"
    );
}

/// A budget cut below what the account has committed cannot carry a park's hold: the warm
/// node is released (terminated) when it would park, with a budget refusal naming it, instead
/// of costing money parked.
#[tokio::test]
async fn a_budget_that_cannot_hold_a_park_gets_the_node_released_not_parked() {
    let rig = Rig::new(&parked_config("3")).await;
    let engine = rig.engine(rig.sim_cloud());
    // The warm node launches, holding ten minutes of compute ($0.17).
    engine.tick().await.unwrap();
    let mut budget = ml_budget(rig.ledger.as_ref()).await;
    assert_eq!(rig.ledger.live_nodes().await.unwrap().len(), 1);
    budget.ceiling = "0.05".parse().unwrap();
    rig.ledger
        .put_budget(&budget, rig.clock.now())
        .await
        .unwrap();
    for _ in 0..10 {
        rig.clock.advance(Duration::from_secs(30));
        engine.tick().await.unwrap();
    }
    let now = rig.clock.now();
    let events = rig.ledger.node_events().await.unwrap();
    assert!(
        events.iter().all(|e| e.state != NodeState::Warm),
        "no node parked: {events:?}"
    );
    let stops = budget_stops(rig.ledger.as_ref(), now).await;
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert!(
        stops[0].detail.contains("released instead of parked"),
        "{}",
        stops[0].detail
    );
    let node = stops[0].node.clone().unwrap();
    let end = events
        .iter()
        .find(|e| e.node == node && e.state == NodeState::Terminated)
        .expect("the node was released");
    assert_eq!(end.reason.as_deref(), Some("budget"));
    let spent = spent(rig.ledger.as_ref(), &budget, now).await;
    assert!(spent <= budget.ceiling, "spent ${spent}");
}

/// The engine keeps the budgets it read between ticks, but not past a change: a budget raised
/// through another handle on the ledger (another process, the API) is the one the next tick
/// plans with.
#[tokio::test]
async fn a_budget_changed_through_another_handle_takes_effect_on_the_next_tick() {
    // Five cents a day: not even one ten-minute hold of a $1/h node fits.
    let rig = Rig::new(&budget_config("llm", "0.05", "refuse")).await;
    let cloud = rig.sim_cloud();
    let engine = rig.engine(cloud.clone());
    engine.tick().await.unwrap();
    let elsewhere = headroom_ledger::SqliteLedger::open_path(&rig.ledger_path())
        .await
        .unwrap();
    let mut budget = ml_budget(&elsewhere).await;
    budget.ceiling = "10".parse().unwrap();
    elsewhere
        .put_budget(&budget, rig.clock.now())
        .await
        .unwrap();
    rig.clock.advance(Duration::from_secs(30));
    rig.request("llm", 2).await;
    engine.tick().await.unwrap();
    let launched = headroom_cloud::CloudProvider::list_owned(cloud.as_ref(), "budget-test")
        .await
        .unwrap()
        .len();
    assert_eq!(launched, 2, "both nodes launched under the raised budget");
    let refused = rig
        .ledger
        .refusals_between(EPOCH.parse().unwrap(), rig.clock.now())
        .await
        .unwrap();
    assert!(refused.is_empty(), "{refused:?}");
}
