//! Random plan inputs through `plan`, so the postconditions asserted at its end run on inputs no
//! example test thought of. Sizes stay small: the limits, the budget and the warm floor bind
//! often.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::pool::{ColdStartLadder, ScalingPolicy, SupplyPolicy};
use crate::{ProviderKind, WarmMode};

const OFFERINGS: usize = 4;
const REQUESTS: usize = 3;

fn dollars(max_cents: i64) -> impl Strategy<Value = Money> {
    (0..=max_cents).prop_map(|cents| Money::from_micros(cents * 10_000))
}

fn market() -> impl Strategy<Value = Market> {
    prop_oneof![
        Just(Market::Reserved),
        Just(Market::OnDemand),
        Just(Market::Spot)
    ]
}

fn offering_id(i: usize) -> OfferingId {
    format!("o{i}").parse().unwrap()
}

fn choice(i: usize) -> impl Strategy<Value = OfferingChoice> {
    (
        market(),
        dollars(1_000),
        proptest::bool::weighted(0.8),
        0..3u32,
        proptest::option::of(0..4u32),
        0..2usize,
    )
        .prop_map(
            move |(market, price, available, refusals, free, place)| OfferingChoice {
                offering: Offering {
                    id: offering_id(i),
                    provider: ProviderKind::Sim,
                    region: ["r1", "r2"][place].into(),
                    zone: ["z1", "z2"][(i + place) % 2].into(),
                    instance_type: ["p4d", "p5"][i % 2].into(),
                    market,
                    price_usd_per_hour: price,
                    gpus_per_node: 8,
                    warm_usd_per_hour: crate::Money::ZERO,
                },
                available,
                recent_refusals: refusals,
                // Only a reservation has slots, as the engine builds choices.
                reservation_free: free.filter(|_| market == Market::Reserved),
            },
        )
}

fn state() -> impl Strategy<Value = NodeState> {
    // Mostly the states the planner acts on.
    prop_oneof![
        1 => Just(NodeState::Requested),
        1 => Just(NodeState::Launching),
        2 => Just(NodeState::Booting),
        2 => Just(NodeState::Warm),
        2 => Just(NodeState::Standby),
        6 => Just(NodeState::Serving),
        1 => Just(NodeState::Draining),
        1 => Just(NodeState::Failed),
        1 => Just(NodeState::Interrupted),
    ]
}

fn node(i: usize) -> impl Strategy<Value = NodeView> {
    (
        state(),
        0..OFFERINGS,
        market(),
        proptest::option::weighted(0.3, 0..REQUESTS),
        proptest::bool::weighted(0.15),
        dollars(1_000),
        proptest::bool::weighted(0.1),
    )
        .prop_map(
            move |(state, offering, market, request, odd_destination, price, reclaiming)| {
                NodeView {
                    id: NodeId(format!("n{i}")),
                    state,
                    offering: offering_id(offering),
                    market,
                    request: request.map(|r| RequestId(format!("r{r}"))),
                    // Parked nodes were mostly launched to wait, the others to serve.
                    destination: if state.is_warm() != odd_destination {
                        Destination::Warm
                    } else {
                        Destination::Serve
                    },
                    price_usd_per_hour: price,
                    reclaiming,
                }
            },
        )
}

fn priority() -> impl Strategy<Value = Priority> {
    prop_oneof![
        Just(Priority::Low),
        Just(Priority::Normal),
        Just(Priority::High),
        Just(Priority::Critical),
    ]
}

fn request(i: usize) -> impl Strategy<Value = OpenRequest> {
    (0..6u32, priority(), 0..3i64).prop_map(move |(replicas, priority, minute)| OpenRequest {
        id: RequestId(format!("r{i}")),
        replicas,
        priority,
        created_at: "2026-01-01T00:00:00Z".parse::<Timestamp>().unwrap()
            + chrono::Duration::minutes(minute),
    })
}

fn supply_policy() -> impl Strategy<Value = SupplyPolicy> {
    (
        0..3u32,
        prop_oneof![Just(0u32), Just(50), Just(100), 0..=100u32],
        proptest::option::of(dollars(800)),
        any::<bool>(),
        proptest::option::weighted(0.3, 1..5u32),
        any::<bool>(),
    )
        .prop_map(
            |(base, percent, cap, reuse, per_period, rebalance)| SupplyPolicy {
                on_demand_base: base,
                spot_percent_above_base: percent,
                spot_max_price: cap,
                warm_mode: WarmMode::Stopped,
                reuse_on_scale_in: reuse,
                fallback_pool: None,
                max_launches_per_period: per_period,
                launch_period: Duration::from_secs(60),
                rebalance_to_spot: rebalance,
                ..SupplyPolicy::default()
            },
        )
}

fn pool() -> impl Strategy<Value = PoolSpec> {
    (
        1..20u32,
        0..5u32,
        prop_oneof![1 => Just(0u32), 6 => 1..8u32],
        0..4u32,
        proptest::collection::vec(any::<bool>(), OFFERINGS),
        supply_policy(),
    )
        .prop_map(|(max, min, step, warm, listed, supply)| PoolSpec {
            name: "p".parse().unwrap(),
            account: "a".parse().unwrap(),
            // Mostly listed; an offering the pool does not list must never be launched.
            offerings: (0..OFFERINGS)
                .filter(|i| listed[*i] || *i == 0)
                .map(offering_id)
                .collect(),
            min_replicas: min.min(max),
            max_replicas: max,
            max_scale_up_per_step: step,
            warm_pool_size: warm,
            ladder: ColdStartLadder {
                node_acquisition: Duration::from_secs(60),
                image_pull: Duration::from_secs(30),
                weight_load: Duration::from_secs(60),
                compile: Duration::from_secs(30),
                warmup: Duration::from_secs(10),
            },
            scaling: ScalingPolicy::default(),
            supply,
        })
}

fn budget() -> impl Strategy<Value = Option<BudgetStanding>> {
    proptest::option::weighted(
        0.6,
        (dollars(10_000), dollars(6_000), dollars(2_000)).prop_map(|(ceiling, spent, held)| {
            BudgetStanding {
                ceiling,
                spent,
                held,
            }
        }),
    )
}

fn budget_action() -> impl Strategy<Value = HardAction> {
    prop_oneof![
        Just(HardAction::Refuse),
        Just(HardAction::Clamp),
        Just(HardAction::ShedLowestTier),
    ]
}

/// Everything a `PlanInput` borrows, owned.
#[derive(Debug)]
struct Case {
    pool: PoolSpec,
    offerings: Vec<OfferingChoice>,
    nodes: Vec<NodeView>,
    requests: Vec<OpenRequest>,
    controller_target: u32,
    borrowed: u32,
    budget: Option<BudgetStanding>,
    budget_action: HardAction,
    hold_horizon_min: u64,
    launches_in_period: u32,
    global_room: Option<u32>,
    warm_target: Option<u32>,
}

/// Random inputs rarely land on the organic target exactly, where scale-in stops and
/// rebalancing starts; some cases are made to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Any,
    AtTarget,
    /// At target with every active replica serving and rebalancing on.
    Steady,
    /// Half the organic replicas are surplus.
    Shrinking,
}

fn case() -> impl Strategy<Value = Case> {
    let offerings = (0..OFFERINGS).map(choice).collect::<Vec<_>>();
    let nodes = (0..=12usize)
        .prop_flat_map(|n| (0..n).map(node).collect::<Vec<_>>())
        .boxed();
    let requests = prop_oneof![2 => Just(0), 1 => 0..=REQUESTS]
        .prop_flat_map(|n| (0..n).map(request).collect::<Vec<_>>())
        .boxed();
    (
        (pool(), offerings, nodes, requests),
        (0..12u32, 0..3u32, budget(), budget_action()),
        (
            0..120u64,
            0..3u32,
            proptest::option::weighted(0.3, 0..8u32),
            prop_oneof![3 => Just(Shape::Any),
                1 => Just(Shape::AtTarget),
                2 => Just(Shape::Steady),
                1 => Just(Shape::Shrinking),],
            proptest::option::weighted(0.5, 0..6u32),
        ),
    )
        .prop_map(
            |(
                (mut pool, offerings, mut nodes, requests),
                (mut controller_target, mut borrowed, budget, budget_action),
                (hold_horizon_min, launches_in_period, global_room, shape, warm_target),
            )| {
                if shape == Shape::Steady {
                    pool.supply.rebalance_to_spot = true;
                    // On-demand nodes dearer than any spot offering: the ones rebalancing replaces.
                    for n in nodes.iter_mut().filter(|n| n.is_active_replica()) {
                        n.state = NodeState::Serving;
                        if n.market == Market::OnDemand {
                            n.price_usd_per_hour += Money::from_micros(10_000_000);
                        }
                    }
                }
                if shape != Shape::Any {
                    let organic = nodes
                        .iter()
                        .filter(|n| n.is_active_replica() && n.request.is_none())
                        .count() as u32;
                    controller_target = if shape == Shape::Shrinking {
                        organic / 2
                    } else {
                        organic
                    };
                    borrowed = 0;
                    pool.min_replicas = pool.min_replicas.min(controller_target);
                }
                Case {
                    pool,
                    offerings,
                    nodes,
                    requests,
                    controller_target,
                    borrowed,
                    budget,
                    budget_action,
                    hold_horizon_min,
                    launches_in_period,
                    global_room,
                    warm_target,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// `plan` asserts its postconditions itself (in debug builds, as tests run): a broken one
    /// panics here, and proptest shrinks the input.
    #[test]
    fn every_plan_keeps_its_postconditions(
        case in case(),
        quota in proptest::option::weighted(0.5, (0..40u64, 0..40u64, 1..16u32)),
    ) {
        // One quota over the even offerings (GPUs, 8 a node, or a cheaper draw), often short.
        let quotas: Vec<QuotaHeadroom> = quota
            .into_iter()
            .map(|(limit, in_use, per_node)| QuotaHeadroom {
                name: "gpus".into(),
                description: "GPUs".into(),
                region: "r1".into(),
                unit: crate::QuotaUnit::Gpu,
                limit,
                in_use,
                covers: (0..OFFERINGS)
                    .step_by(2)
                    .map(|i| crate::QuotaDraw { offering: offering_id(i), per_node })
                    .collect(),
            })
            .collect();
        plan(&PlanInput {
            pool: &case.pool,
            offerings: &case.offerings,
            nodes: &case.nodes,
            controller_target: case.controller_target,
            borrowed: case.borrowed,
            requests: &case.requests,
            budget: case.budget,
            budget_action: case.budget_action,
            hold_horizon: Duration::from_secs(case.hold_horizon_min * 60),
            launches_in_period: case.launches_in_period,
            global_room: case.global_room,
            warm_target: case.warm_target,
            quotas: &quotas,
        });
    }
}
