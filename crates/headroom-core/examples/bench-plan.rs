//! One planning tick over a large fleet: the controller, the planner and the governor for 10,000
//! pools and 100,000 nodes, with no I/O. Prints wall time per tick and heap allocations per tick.
//!
//! `cargo run --release -p headroom-core --example bench-plan [-- POOLS NODES_PER_POOL TICKS]`
//!
//! The baseline in the same run is one pass that only counts each pool's nodes by state: the
//! least any planner must do. The ratio says what deciding costs on top of reading.

// A benchmark measures wall time: that is its job, not a decision read off the clock.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use headroom_core::budget::{BudgetStanding, HardAction};
use headroom_core::controller::{self, ControllerMemory, ReplicaCounts, Signals};
use headroom_core::planner::{self, Destination, NodeView, OfferingChoice, PlanInput};
use headroom_core::pool::{ColdStartLadder, ScalingPolicy, SupplyPolicy};
use headroom_core::{Market, Money, NodeId, NodeState, Offering, PoolSpec, ProviderKind};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

struct Fleet {
    pools: Vec<PoolSpec>,
    offerings: Vec<OfferingChoice>,
    nodes: Vec<Vec<NodeView>>,
    signals: Vec<Signals>,
}

fn fleet(pools: usize, nodes_per_pool: usize, now: headroom_core::Timestamp) -> Fleet {
    let markets = [Market::OnDemand, Market::Spot];
    let offerings: Vec<OfferingChoice> = (0..40)
        .map(|i| {
            let mut c = OfferingChoice::new(Offering {
                id: format!("o{i}").parse().unwrap(),
                provider: ProviderKind::Sim,
                region: format!("region-{}", i % 4),
                zone: format!("zone-{}", i % 8),
                instance_type: format!("type-{}", i % 5),
                market: markets[i % 2],
                price_usd_per_hour: Money::from_micros(1_000_000 + 250_000 * i as i64),
                gpus_per_node: 8,
                warm_usd_per_hour: headroom_core::Money::ZERO,
            });
            c.available = i % 7 != 0;
            c.recent_refusals = (i % 3) as u32;
            c
        })
        .collect();
    let states = [
        NodeState::Serving,
        NodeState::Serving,
        NodeState::Serving,
        NodeState::Booting,
        NodeState::Warm,
        NodeState::Serving,
        NodeState::Launching,
        NodeState::Serving,
        NodeState::Serving,
        NodeState::Standby,
    ];
    let mut all_pools = Vec::with_capacity(pools);
    let mut all_nodes = Vec::with_capacity(pools);
    let mut signals = Vec::with_capacity(pools);
    for p in 0..pools {
        let first = (p * 4) % 40;
        let pool = PoolSpec {
            name: format!("pool-{p}").parse().unwrap(),
            account: "fleet".parse().unwrap(),
            offerings: (first..first + 4)
                .map(|i| offerings[i % 40].offering.id.clone())
                .collect(),
            min_replicas: 2,
            max_replicas: 40,
            max_scale_up_per_step: 8,
            warm_pool_size: 2,
            ladder: ColdStartLadder {
                node_acquisition: Duration::from_secs(90),
                image_pull: Duration::from_secs(60),
                weight_load: Duration::from_secs(45),
                compile: Duration::from_secs(20),
                warmup: Duration::from_secs(5),
            },
            scaling: ScalingPolicy {
                replica_throughput_rps: 10.0,
                scale_up_breaches: 1,
                ..ScalingPolicy::default()
            },
            supply: SupplyPolicy {
                on_demand_base: 2,
                spot_percent_above_base: 50,
                ..SupplyPolicy::default()
            },
        };
        let nodes = (0..nodes_per_pool)
            .map(|n| {
                let o = &offerings[(first + n % 4) % 40].offering;
                let state = states[n % states.len()];
                NodeView {
                    id: NodeId(format!("n-{p}-{n}")),
                    state,
                    offering: o.id.clone(),
                    market: o.market,
                    request: None,
                    destination: if state.is_warm() {
                        Destination::Warm
                    } else {
                        Destination::Serve
                    },
                    price_usd_per_hour: o.price_usd_per_hour,
                    reclaiming: false,
                }
            })
            .collect();
        // A third of the pools are bursting, a third steady, a third idle.
        let queue = [400, 20, 0][p % 3];
        signals.push(Signals {
            queue_depth: queue,
            oldest_age_s: Some(queue as f64 / 10.0),
            arrival_rate_rps: Some([120.0, 60.0, 5.0][p % 3]),
            departure_rate_rps: Some(60.0),
            error_rate_rps: None,
            batch_occupancy: Some(0.8),
            gpu_utilization: Some(0.9),
            received_at: now,
            queued_tokens: None,
            token_arrival_rate_tps: None,
        });
        all_pools.push(pool);
        all_nodes.push(nodes);
    }
    Fleet {
        pools: all_pools,
        offerings,
        nodes: all_nodes,
        signals,
    }
}

fn counts(nodes: &[NodeView]) -> ReplicaCounts {
    let mut c = ReplicaCounts::default();
    for n in nodes {
        match n.state {
            NodeState::Requested | NodeState::Launching => c.requested += 1,
            NodeState::Booting => c.starting += 1,
            NodeState::Serving => c.ready += 1,
            NodeState::Draining => c.draining += 1,
            _ => {}
        }
    }
    c
}

/// One tick: decide, then plan, every pool. Returns the actions planned.
fn tick(fleet: &Fleet, now: headroom_core::Timestamp) -> usize {
    let mut actions = 0;
    for ((pool, nodes), signal) in fleet.pools.iter().zip(&fleet.nodes).zip(&fleet.signals) {
        let c = counts(nodes);
        let memory = ControllerMemory {
            target: c.requested + c.starting + c.ready,
            ..ControllerMemory::default()
        };
        let decision = controller::decide(pool, Some(signal), c, memory, now);
        let plan = planner::plan(&PlanInput {
            pool,
            offerings: &fleet.offerings,
            nodes,
            controller_target: decision.target,
            borrowed: 0,
            requests: &[],
            budget: Some(BudgetStanding {
                ceiling: Money::from_micros(10_000_000_000),
                spent: Money::from_micros(4_000_000_000),
                held: Money::ZERO,
            }),
            budget_action: HardAction::Clamp,
            hold_horizon: Duration::from_secs(3600),
            launches_in_period: 0,
            global_room: Some(1_000_000),
            warm_target: None,
            quotas: &[],
        });
        actions += plan.actions.len();
    }
    actions
}

fn baseline(fleet: &Fleet) -> u32 {
    fleet.nodes.iter().map(|n| counts(n).ready).sum()
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let pools = args.first().copied().unwrap_or(10_000);
    let per_pool = args.get(1).copied().unwrap_or(10);
    let ticks = args.get(2).copied().unwrap_or(20);
    let now: headroom_core::Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
    let fleet = fleet(pools, per_pool, now);

    let time = |f: &dyn Fn() -> usize| {
        let mut samples: Vec<Duration> = (0..ticks)
            .map(|_| {
                let start = Instant::now();
                black_box(f());
                start.elapsed()
            })
            .collect();
        samples.sort();
        (samples[samples.len() / 2], samples[samples.len() * 9 / 10])
    };
    let (base_p50, _) = time(&|| baseline(&fleet) as usize);
    let (p50, p90) = time(&|| tick(&fleet, now));

    let profiler = dhat::Profiler::builder().testing().build();
    let before = dhat::HeapStats::get();
    let actions = tick(&fleet, now);
    let after = dhat::HeapStats::get();
    drop(profiler);

    println!(
        "fleet: {pools} pools, {} nodes, {} offerings",
        pools * per_pool,
        fleet.offerings.len()
    );
    println!("planning tick (controller + planner + governor), {ticks} runs:");
    println!(
        "  wall time p50 {:.1} ms, p90 {:.1} ms ({:.2} µs per pool)",
        ms(p50),
        ms(p90),
        p50.as_secs_f64() * 1e6 / pools as f64
    );
    println!("  actions planned {actions}");
    println!(
        "  heap: {} allocations ({:.1} per pool), {:.1} MiB allocated, peak live {:.0} KiB",
        after.total_blocks - before.total_blocks,
        (after.total_blocks - before.total_blocks) as f64 / pools as f64,
        (after.total_bytes - before.total_bytes) as f64 / 1048576.0,
        after.max_bytes as f64 / 1024.0,
    );
    println!(
        "baseline (count nodes by state only): p50 {:.2} ms; tick/baseline = {:.1}x; tick / 1 s control window = {:.3}",
        ms(base_p50),
        p50.as_secs_f64() / base_p50.as_secs_f64().max(1e-9),
        p50.as_secs_f64()
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
