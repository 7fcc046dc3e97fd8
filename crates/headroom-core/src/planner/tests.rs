use std::time::Duration;

use super::*;
use crate::pool::{ColdStartLadder, ScalingPolicy, SupplyPolicy};
use crate::{Market, PoolName, ProviderKind};

fn pool(max: u32, step: u32, warm: u32) -> PoolSpec {
    PoolSpec {
        name: "llama".parse().unwrap(),
        account: "ml".parse().unwrap(),
        offerings: vec!["cheap".parse().unwrap(), "dear".parse().unwrap()],
        min_replicas: 0,
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
        scaling: ScalingPolicy {
            replica_throughput_rps: 10.0,
            ..ScalingPolicy::default()
        },
        supply: SupplyPolicy::default(),
    }
}

fn offering(id: &str, price: &str, available: bool) -> OfferingChoice {
    OfferingChoice {
        offering: Offering {
            id: id.parse().unwrap(),
            provider: ProviderKind::Sim,
            region: "us-east-1".into(),
            zone: "use1-az1".into(),
            instance_type: "g5.xlarge".into(),
            market: Market::OnDemand,
            price_usd_per_hour: price.parse().unwrap(),
            gpus_per_node: 1,
            warm_usd_per_hour: crate::Money::ZERO,
        },
        available,
        recent_refusals: 0,
        reservation_free: None,
    }
}

fn node(id: &str, state: NodeState, destination: Destination) -> NodeView {
    NodeView {
        id: NodeId(id.into()),
        state,
        offering: "cheap".parse().unwrap(),
        market: Market::OnDemand,
        request: None,
        destination,
        price_usd_per_hour: "1".parse().unwrap(),
        reclaiming: false,
    }
}

fn input<'a>(
    pool: &'a PoolSpec,
    offerings: &'a [OfferingChoice],
    nodes: &'a [NodeView],
    target: u32,
) -> PlanInput<'a> {
    PlanInput {
        pool,
        offerings,
        nodes,
        controller_target: target,
        borrowed: 0,
        requests: &[],
        budget: None,
        budget_action: HardAction::Clamp,
        hold_horizon: Duration::from_secs(3600),
        launches_in_period: 0,
        global_room: None,
        warm_target: None,
        quotas: &[],
    }
}

fn launches(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch { offering, .. } => Some(offering.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn wakes_warm_nodes_before_launching_the_cheapest_offering() {
    let p = pool(10, 4, 0);
    let offerings = [offering("dear", "5", true), offering("cheap", "2", true)];
    let nodes = [node("w1", NodeState::Warm, Destination::Warm)];
    let plan = plan(&input(&p, &offerings, &nodes, 3));
    assert!(matches!(&plan.actions[0], Action::Wake { node, .. } if node.0 == "w1"));
    assert_eq!(launches(&plan), ["cheap", "cheap"]);
}

#[test]
fn falls_back_past_unavailable_offerings_and_refuses_when_none_is_left() {
    let p = pool(10, 4, 0);
    let offerings = [offering("cheap", "2", false), offering("dear", "5", true)];
    assert_eq!(launches(&plan(&input(&p, &offerings, &[], 1))), ["dear"]);

    let none = [offering("cheap", "2", false), offering("dear", "5", false)];
    let refused = plan(&input(&p, &none, &[], 2));
    assert_eq!(
        refused.actions,
        [Action::Refuse {
            request: None,
            count: 2,
            reason: RefusalReason::NoOffering
        }]
    );
}

#[test]
fn per_step_limit_defers_and_max_replicas_refuses() {
    let offerings = [offering("cheap", "2", true)];
    let stepped = plan(&input(&pool(50, 2, 0), &offerings, &[], 12));
    assert_eq!(launches(&stepped).len(), 2);
    assert_eq!(stepped.deferred, 10);

    let capped = plan(&input(&pool(3, 10, 0), &offerings, &[], 5));
    assert_eq!(launches(&capped).len(), 3);
    assert!(capped.actions.contains(&Action::Refuse {
        request: None,
        count: 2,
        reason: RefusalReason::MaxReplicas
    }));
}

#[test]
fn budget_refuses_what_the_ceiling_cannot_hold() {
    let p = pool(10, 10, 0);
    let offerings = [offering("cheap", "2", true)];
    let mut i = input(&p, &offerings, &[], 5);
    // $5 left, each launch holds one hour at $2: two fit.
    i.budget = Some(BudgetStanding {
        ceiling: "100".parse().unwrap(),
        spent: "90".parse().unwrap(),
        held: "5".parse().unwrap(),
    });
    let planned = plan(&i);
    assert_eq!(launches(&planned).len(), 2);
    assert!(planned.actions.contains(&Action::Refuse {
        request: None,
        count: 3,
        reason: RefusalReason::Budget
    }));
}

/// What the engine checks in release builds before it applies a plan: a plan the planner made
/// passes; the same plan with a launch that holds nothing, with its holds past the budget, past
/// the per-step limit, the per-period limit or the global ceiling is refused, naming the
/// invariant and the numbers.
#[test]
fn the_release_guard_refuses_a_plan_that_would_spend_or_buy_past_what_is_allowed() {
    let p = pool(10, 3, 0);
    let offerings = [offering("cheap", "2", true)];
    let nodes = [node("w1", NodeState::Warm, Destination::Warm)];
    let mut i = input(&p, &offerings, &nodes, 3);
    i.budget = Some(BudgetStanding {
        ceiling: "100".parse().unwrap(),
        spent: "90".parse().unwrap(),
        held: "4".parse().unwrap(),
    });
    let planned = plan(&i);
    assert_eq!(launches(&planned).len(), 2, "{:?}", planned.actions);
    assert_eq!(guard::check(&i, &planned), Ok(()));
    let broken = |edit: &dyn Fn(&mut Vec<Action>)| {
        let mut actions = planned.actions.clone();
        edit(&mut actions);
        let plan = Plan {
            actions,
            ..planned.clone()
        };
        guard::check(&i, &plan).unwrap_err()
    };

    let unheld = broken(&|actions| {
        for a in actions.iter_mut() {
            if let Action::Launch { hold, .. } = a {
                *hold = Money::ZERO;
            }
        }
    });
    assert_eq!(unheld.invariant(), "hold");
    assert_eq!(
        unheld.to_string(),
        "pool llama: launch on cheap holds $0.000000, not its price for the hold horizon ($2.000000)"
    );
    let launch = planned
        .actions
        .iter()
        .find(|a| matches!(a, Action::Launch { .. }))
        .unwrap()
        .clone();
    let overspent = broken(&|actions| actions.push(launch.clone()));
    assert_eq!(overspent.invariant(), "budget");
    assert_eq!(
        overspent.to_string(),
        "pool llama: the plan holds $7.000000 where account ml's budget has $6.000000 left ($90.000000 spent, $4.000000 held of its $100.000000 ceiling)"
    );

    let mut roomy = i.clone();
    roomy.budget = None;
    let past_step = {
        let mut actions = planned.actions.clone();
        actions.push(launch.clone());
        guard::check(
            &roomy,
            &Plan {
                actions,
                ..planned.clone()
            },
        )
        .unwrap_err()
    };
    assert_eq!(past_step.invariant(), "per_step");
    assert_eq!(
        past_step,
        guard::PlanViolation::PerStep {
            pool: p.name.clone(),
            launches: 3,
            wakes: 1,
            limit: 3
        }
    );
    let mut limited_pool = p.clone();
    limited_pool.supply.max_launches_per_period = Some(5);
    let mut period = roomy.clone();
    period.pool = &limited_pool;
    period.launches_in_period = 4;
    let past_period = guard::check(&period, &planned).unwrap_err();
    assert_eq!(
        past_period.to_string(),
        "pool llama: 2 launches where the period's limit of 5 leaves room for 1"
    );
    roomy.global_room = Some(1);
    let past_ceiling = guard::check(&roomy, &planned).unwrap_err();
    assert_eq!(past_ceiling.invariant(), "global_ceiling");
    assert_eq!(
        past_ceiling.to_string(),
        "pool llama: 2 launches where the global ceiling leaves room for 1"
    );
}

/// A wake holds its node's price too, and names a node of the input: a wake of a node the
/// input does not have is refused before anything is held for it. The violation is the
/// crate's error too.
#[test]
fn the_release_guard_refuses_a_wake_without_its_hold_or_its_node() {
    let p = pool(10, 3, 0);
    let offerings = [offering("cheap", "2", true)];
    let nodes = [node("w1", NodeState::Warm, Destination::Warm)];
    let i = input(&p, &offerings, &nodes, 1);
    let planned = plan(&i);
    assert!(
        matches!(planned.actions[..], [Action::Wake { ref node, hold, .. }] if node.0 == "w1" && hold == "1".parse().unwrap()),
        "{:?}",
        planned.actions
    );
    assert_eq!(guard::check(&i, &planned), Ok(()));
    let wake = |node: &str, hold: &str| Plan {
        actions: vec![Action::Wake {
            node: NodeId(node.into()),
            request: None,
            hold: hold.parse().unwrap(),
        }],
        ..planned.clone()
    };
    let short = guard::check(&i, &wake("w1", "0.5")).unwrap_err();
    assert_eq!(
        short,
        guard::PlanViolation::WrongHold {
            pool: p.name.clone(),
            action: "wake of w1".into(),
            hold: "0.5".parse().unwrap(),
            expected: "1".parse().unwrap(),
        }
    );
    let unknown = guard::check(&i, &wake("gone", "1")).unwrap_err();
    assert_eq!(unknown.invariant(), "hold");
    assert_eq!(
        unknown.to_string(),
        "pool llama: wake of gone names nothing the plan's input priced"
    );
    let core: crate::CoreError = unknown.clone().into();
    assert_eq!(core.to_string(), unknown.to_string());
}

/// A launch's client token, minted by the executor, is carried by no live node of any pool
/// (nor is its node id one): a repeated token would make the cloud answer with the live node's
/// instance and two ledger nodes claim it. A fresh one passes.
#[test]
fn a_launch_token_a_live_node_carries_is_refused() {
    let llama: PoolName = "llama".parse().unwrap();
    let other: PoolName = "mistral".parse().unwrap();
    let (a, b) = (NodeId("n-a".into()), NodeId("n-b".into()));
    let live = [(&a, &llama, "hr-n-a"), (&b, &other, "hr-n-b")];
    let fresh = NodeId("n-c".into());
    assert_eq!(
        guard::fresh_client_token(&llama, &fresh, "hr-n-c", live),
        Ok(())
    );
    assert_eq!(
        guard::fresh_client_token(&llama, &fresh, "hr-n-c", []),
        Ok(())
    );

    let shared = guard::fresh_client_token(&llama, &fresh, "hr-n-b", live).unwrap_err();
    assert_eq!(shared.invariant(), "client_token");
    assert_eq!(
        shared.to_string(),
        "pool llama: the launch of node n-c would send client token hr-n-b, which live node n-b of pool mistral carries"
    );
    // The same id is the same token once the executor formats it.
    let same_id = guard::fresh_client_token(&llama, &a, "hr-other", live).unwrap_err();
    assert_eq!(
        same_id,
        guard::PlanViolation::SharedClientToken {
            pool: llama.clone(),
            node: a.clone(),
            token: "hr-other".into(),
            live: a.clone(),
            live_pool: llama.clone(),
        }
    );
}

#[test]
fn requests_are_served_by_priority_before_organic_demand() {
    let p = pool(2, 10, 0);
    let offerings = [offering("cheap", "2", true)];
    let t: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let requests = [
        OpenRequest {
            id: RequestId("low".into()),
            replicas: 2,
            priority: Priority::Low,
            created_at: t,
        },
        OpenRequest {
            id: RequestId("crit".into()),
            replicas: 1,
            priority: Priority::Critical,
            created_at: t,
        },
    ];
    let mut i = input(&p, &offerings, &[], 0);
    i.requests = &requests;
    let planned = plan(&i);
    assert!(
        matches!(&planned.actions[0], Action::Launch { request: Some(r), .. } if r.0 == "crit")
    );
    assert!(planned.actions.contains(&Action::Refuse {
        request: Some(RequestId("low".into())),
        count: 1,
        reason: RefusalReason::MaxReplicas
    }));
}

#[test]
fn scale_in_refills_the_warm_pool_before_terminating() {
    let p = pool(10, 4, 1);
    let offerings = [offering("cheap", "2", true)];
    let nodes = [
        node("a", NodeState::Serving, Destination::Serve),
        node("b", NodeState::Serving, Destination::Serve),
        node("c", NodeState::Serving, Destination::Serve),
    ];
    let planned = plan(&input(&p, &offerings, &nodes, 1));
    let releases: Vec<bool> = planned
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Release { to_warm, .. } => Some(*to_warm),
            _ => None,
        })
        .collect();
    assert_eq!(releases, [true, false]);
    assert!(
        launches(&planned).is_empty(),
        "the released node refills the warm pool"
    );
}

/// After a spot reclaim was replaced by launches, the target (4) is short of what serves sooner
/// (one serving, one booting) while two warm nodes wait: each warm node is woken in place of a
/// launch still being acquired, the dearest launch first; the count of replicas stays. With
/// enough serving or booting, nothing is swapped.
#[test]
fn a_warm_node_is_woken_in_place_of_a_launch_still_being_acquired() {
    let p = pool(10, 4, 0);
    let offerings = [offering("cheap", "2", true)];
    let mut dear = node("l-dear", NodeState::Launching, Destination::Serve);
    dear.price_usd_per_hour = "3".parse().unwrap();
    let nodes = [
        node("s", NodeState::Serving, Destination::Serve),
        node("b", NodeState::Booting, Destination::Serve),
        node("l1", NodeState::Launching, Destination::Serve),
        dear,
        node("l2", NodeState::Launching, Destination::Serve),
        node("w1", NodeState::Warm, Destination::Warm),
        node("w2", NodeState::Warm, Destination::Warm),
    ];
    let planned = plan(&input(&p, &offerings, &nodes, 5));
    let woken: Vec<&str> = planned
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Wake { node, .. } => Some(node.0.as_str()),
            _ => None,
        })
        .collect();
    let released: Vec<&str> = planned
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Release { node, to_warm } => {
                assert!(!to_warm);
                Some(node.0.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(woken.len(), 2, "{planned:?}");
    assert_eq!(released.len(), 2, "{planned:?}");
    assert_eq!(released[0], "l-dear", "the dearest launch goes first");
    assert!(
        launches(&planned).is_empty(),
        "the count is met: {planned:?}"
    );
    assert_eq!(
        guard::check(&input(&p, &offerings, &nodes, 5), &planned),
        Ok(())
    );

    // Two serving and three booting meet the target of five: the launch stays, and so does the
    // warm node (a warm pool of one).
    let p = pool(10, 4, 1);
    let enough = [
        node("s1", NodeState::Serving, Destination::Serve),
        node("s2", NodeState::Serving, Destination::Serve),
        node("b1", NodeState::Booting, Destination::Serve),
        node("b2", NodeState::Booting, Destination::Serve),
        node("b3", NodeState::Booting, Destination::Serve),
        node("l1", NodeState::Launching, Destination::Serve),
        node("w1", NodeState::Warm, Destination::Warm),
    ];
    let planned = plan(&input(&p, &offerings, &enough, 5));
    assert!(
        !planned
            .actions
            .iter()
            .any(|a| matches!(a, Action::Wake { .. } | Action::Release { .. })),
        "{planned:?}"
    );
}

#[test]
fn refills_an_empty_warm_pool() {
    let p = pool(10, 4, 2);
    let offerings = [offering("cheap", "2", true)];
    let planned = plan(&input(&p, &offerings, &[], 0));
    assert_eq!(planned.actions.len(), 2);
    assert!(planned.actions.iter().all(|a| matches!(
        a,
        Action::Launch {
            destination: Destination::Warm,
            ..
        }
    )));
}

mod budget_action_tests {
    use std::time::Duration;

    use crate::planner::*;
    use crate::pool::{ColdStartLadder, ScalingPolicy, SupplyPolicy};
    use crate::{Market, ProviderKind};

    fn plan_with(action: HardAction) -> Plan {
        let pool = PoolSpec {
            name: "p".parse().unwrap(),
            account: "a".parse().unwrap(),
            offerings: vec!["o".parse().unwrap()],
            min_replicas: 0,
            max_replicas: 10,
            max_scale_up_per_step: 10,
            warm_pool_size: 0,
            ladder: ColdStartLadder {
                node_acquisition: Duration::ZERO,
                image_pull: Duration::ZERO,
                weight_load: Duration::ZERO,
                compile: Duration::ZERO,
                warmup: Duration::ZERO,
            },
            scaling: ScalingPolicy {
                replica_throughput_rps: 1.0,
                ..ScalingPolicy::default()
            },
            supply: SupplyPolicy::default(),
        };
        let offerings = [OfferingChoice {
            offering: Offering {
                id: "o".parse().unwrap(),
                provider: ProviderKind::Sim,
                region: "r".into(),
                zone: "z".into(),
                instance_type: "t".into(),
                market: Market::OnDemand,
                price_usd_per_hour: "1".parse().unwrap(),
                gpus_per_node: 1,
                warm_usd_per_hour: crate::Money::ZERO,
            },
            available: true,
            recent_refusals: 0,
            reservation_free: None,
        }];
        let requests = [OpenRequest {
            id: RequestId("r".into()),
            replicas: 3,
            priority: Priority::Normal,
            created_at: "2026-01-01T00:00:00Z".parse().unwrap(),
        }];
        plan(&PlanInput {
            pool: &pool,
            offerings: &offerings,
            nodes: &[],
            controller_target: 0,
            borrowed: 0,
            requests: &requests,
            // Two of the three one-dollar holds fit.
            budget: Some(BudgetStanding {
                ceiling: "2".parse().unwrap(),
                spent: Money::ZERO,
                held: Money::ZERO,
            }),
            budget_action: action,
            hold_horizon: Duration::from_secs(3600),
            launches_in_period: 0,
            global_room: None,
            warm_target: None,
            quotas: &[],
        })
    }

    #[test]
    fn refuse_is_all_or_nothing_and_clamp_launches_what_fits() {
        let refused = plan_with(HardAction::Refuse);
        assert_eq!(
            refused.actions,
            [Action::Refuse {
                request: Some(RequestId("r".into())),
                count: 3,
                reason: RefusalReason::Budget
            }]
        );
        let clamped = plan_with(HardAction::Clamp);
        assert_eq!(clamped.actions.len(), 3, "two launches and one refusal");
        assert_eq!(
            clamped.actions[2],
            Action::Refuse {
                request: Some(RequestId("r".into())),
                count: 1,
                reason: RefusalReason::Budget
            }
        );
    }
}

mod supply_tests {
    use std::time::Duration;

    use crate::ProviderKind;
    use crate::planner::*;
    use crate::pool::{ColdStartLadder, ScalingPolicy, SupplyPolicy};

    fn pool(offerings: &[String], supply: SupplyPolicy) -> PoolSpec {
        PoolSpec {
            name: "llama".parse().unwrap(),
            account: "ml".parse().unwrap(),
            offerings: offerings.iter().map(|o| o.parse().unwrap()).collect(),
            min_replicas: 0,
            max_replicas: 100,
            max_scale_up_per_step: 100,
            warm_pool_size: 0,
            ladder: ColdStartLadder {
                node_acquisition: Duration::from_secs(60),
                image_pull: Duration::from_secs(30),
                weight_load: Duration::from_secs(60),
                compile: Duration::from_secs(30),
                warmup: Duration::from_secs(10),
            },
            scaling: ScalingPolicy::default(),
            supply,
        }
    }

    /// `id` is "<region>/<zone>/<type>/<market>".
    fn offering(id: &str, price: &str) -> OfferingChoice {
        let parts: Vec<&str> = id.split('/').collect();
        OfferingChoice::new(Offering {
            id: id.replace('/', "-").parse().unwrap(),
            provider: ProviderKind::Sim,
            region: parts[0].into(),
            zone: parts[1].into(),
            instance_type: parts[2].into(),
            market: Market::parse(parts[3]).unwrap(),
            price_usd_per_hour: price.parse().unwrap(),
            gpus_per_node: 8,
            warm_usd_per_hour: crate::Money::ZERO,
        })
    }

    fn ids(choices: &[OfferingChoice]) -> Vec<String> {
        choices.iter().map(|c| c.offering.id.to_string()).collect()
    }

    fn node(id: &str, state: NodeState, market: Market, price: &str) -> NodeView {
        NodeView {
            id: NodeId(id.into()),
            state,
            offering: "any".parse().unwrap(),
            market,
            request: None,
            destination: if state.is_warm() {
                Destination::Warm
            } else {
                Destination::Serve
            },
            price_usd_per_hour: price.parse().unwrap(),
            reclaiming: false,
        }
    }

    fn run(pool: &PoolSpec, offerings: &[OfferingChoice], nodes: &[NodeView], target: u32) -> Plan {
        plan(&PlanInput {
            pool,
            offerings,
            nodes,
            controller_target: target,
            borrowed: 0,
            requests: &[],
            budget: None,
            budget_action: HardAction::Clamp,
            hold_horizon: Duration::from_secs(3600),
            launches_in_period: 0,
            global_room: None,
            warm_target: None,
            quotas: &[],
        })
    }

    /// Replicas refused for `reason` in `plan`.
    fn refused(plan: &Plan, reason: RefusalReason) -> u32 {
        plan.actions
            .iter()
            .map(|a| match a {
                Action::Refuse {
                    count, reason: r, ..
                } if *r == reason => *count,
                _ => 0,
            })
            .sum()
    }

    fn launched(plan: &Plan) -> Vec<(String, Vec<FallbackKind>)> {
        plan.actions
            .iter()
            .filter_map(|a| match a {
                Action::Launch {
                    offering,
                    fallbacks,
                    ..
                } => Some((offering.to_string(), fallbacks.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn reservations_come_before_new_capacity_and_stop_when_full() {
        let mut reserved = offering("r1/z1/p5/reserved", "30");
        reserved.reservation_free = Some(2);
        let offerings = [offering("r1/z1/p5/on-demand", "55"), reserved];
        let p = pool(&ids(&offerings), SupplyPolicy::default());
        let got: Vec<String> = launched(&run(&p, &offerings, &[], 3))
            .into_iter()
            .map(|l| l.0)
            .collect();
        assert_eq!(
            got,
            [
                "r1-z1-p5-reserved",
                "r1-z1-p5-reserved",
                "r1-z1-p5-on-demand"
            ]
        );
    }

    #[test]
    fn on_demand_base_then_spot_share_like_a_mixed_instances_policy() {
        let offerings = [
            offering("r1/z1/g6/on-demand", "0.80"),
            offering("r1/z1/g6/spot", "0.30"),
        ];
        let supply = SupplyPolicy {
            on_demand_base: 2,
            spot_percent_above_base: 50,
            ..SupplyPolicy::default()
        };
        let p = pool(&ids(&offerings), supply);
        let got = launched(&run(&p, &offerings, &[], 6));
        let spot = got.iter().filter(|l| l.0.ends_with("spot")).count();
        assert_eq!(got.len(), 6);
        // Two on-demand for the base, then half of the remaining four on spot.
        assert!(
            got[..2].iter().all(|l| l.0.ends_with("on-demand")),
            "{got:?}"
        );
        assert_eq!(spot, 2, "{got:?}");
    }

    #[test]
    fn spot_refused_falls_back_to_on_demand_and_the_price_cap_excludes_dear_spot() {
        let mut spot = offering("r1/z1/g6/spot", "0.30");
        spot.available = false;
        let offerings = [spot, offering("r1/z1/g6/on-demand", "0.80")];
        let p = pool(&ids(&offerings), SupplyPolicy::default());
        let got = launched(&run(&p, &offerings, &[], 1));
        assert_eq!(got[0].0, "r1-z1-g6-on-demand");

        let offerings = [
            offering("r1/z1/g6/spot", "0.60"),
            offering("r1/z1/g6/on-demand", "0.80"),
        ];
        let capped = SupplyPolicy {
            spot_max_price: Some("0.50".parse().unwrap()),
            ..SupplyPolicy::default()
        };
        let got = launched(&run(&pool(&ids(&offerings), capped), &offerings, &[], 1));
        assert_eq!(
            got[0].0, "r1-z1-g6-on-demand",
            "spot above the cap is not bought"
        );
    }

    #[test]
    fn recent_refusals_outrank_a_small_price_difference() {
        let mut cheap = offering("r1/z1/p4d/on-demand", "20");
        cheap.recent_refusals = 2;
        let offerings = [cheap, offering("r1/z2/p4d/on-demand", "22")];
        let p = pool(&ids(&offerings), SupplyPolicy::default());
        let got = launched(&run(&p, &offerings, &[], 1));
        assert_eq!(
            got,
            [("r1-z2-p4d-on-demand".to_string(), vec![FallbackKind::Zone])]
        );
    }

    #[test]
    fn each_fallback_is_named_by_the_widest_step_it_took() {
        let first = offering("r1/z1/p4d/on-demand", "20");
        for (other, kind) in [
            ("r1/z1/p5/on-demand", FallbackKind::InstanceType),
            ("r1/z2/p4d/on-demand", FallbackKind::Zone),
            ("r2/z9/p4d/on-demand", FallbackKind::Region),
        ] {
            let kind = vec![kind];
            let mut gone = first.clone();
            gone.available = false;
            let offerings = [gone, offering(other, "30")];
            let p = pool(&ids(&offerings), SupplyPolicy::default());
            assert_eq!(launched(&run(&p, &offerings, &[], 1))[0].1, kind, "{other}");
        }
    }

    /// Issue 37: an offering on another cloud is a fallback of kind `cloud`, the widest step,
    /// wherever it is, and is ranked by the same rules (here the price) as any other.
    #[test]
    fn a_fallback_to_another_cloud_is_of_kind_cloud() {
        let first = offering("r1/z1/p4d/on-demand", "20");
        let mut gone = first.clone();
        gone.available = false;
        // The same place and type on another cloud, and another region and type there.
        for place in ["r1/z1/p4d/on-demand", "r2/z9/p5/on-demand"] {
            let mut elsewhere = offering(place, "30");
            elsewhere.offering.provider = ProviderKind::Gcp;
            elsewhere.offering.id = format!("gcp-{}", elsewhere.offering.id).parse().unwrap();
            let dearer_same_cloud = offering("r1/z2/p4d/on-demand", "31");
            let offerings = [gone.clone(), elsewhere, dearer_same_cloud];
            let p = pool(&ids(&offerings), SupplyPolicy::default());
            let got = launched(&run(&p, &offerings, &[], 1));
            assert_eq!(
                got[0].1.first(),
                Some(&FallbackKind::Cloud),
                "{place}: {got:?}"
            );
        }
    }

    /// Issue 19: a spot → on-demand switch records `market` beside the place it moved to.
    #[test]
    fn a_switch_of_market_is_recorded_as_market_too() {
        for (other, kinds) in [
            (
                "r1/z2/g6/on-demand",
                vec![FallbackKind::Zone, FallbackKind::Market],
            ),
            ("r1/z1/g6/on-demand", vec![FallbackKind::Market]),
            ("r1/z2/g6/spot", vec![FallbackKind::Zone]),
        ] {
            let mut gone = offering("r1/z1/g6/spot", "0.30");
            gone.available = false;
            let offerings = [gone, offering(other, "0.80")];
            let p = pool(&ids(&offerings), SupplyPolicy::default());
            assert_eq!(
                launched(&run(&p, &offerings, &[], 1))[0].1,
                kinds,
                "{other}"
            );
        }
    }

    #[test]
    fn no_offering_left_is_unserved_for_the_fallback_pool() {
        let mut gone = offering("r1/z1/p4d/on-demand", "20");
        gone.available = false;
        let offerings = [gone];
        let p = pool(&ids(&offerings), SupplyPolicy::default());
        let planned = run(&p, &offerings, &[], 3);
        assert_eq!(planned.unserved, 3);
        assert_eq!(refused(&planned, RefusalReason::NoOffering), 3);
    }

    #[test]
    fn the_global_ceiling_and_the_period_limit_clamp() {
        let offerings = [offering("r1/z1/p4d/on-demand", "20")];
        let p = pool(&ids(&offerings), SupplyPolicy::default());
        let mut input = PlanInput {
            pool: &p,
            offerings: &offerings,
            nodes: &[],
            controller_target: 5,
            borrowed: 0,
            requests: &[],
            budget: None,
            budget_action: HardAction::Clamp,
            hold_horizon: Duration::from_secs(3600),
            launches_in_period: 0,
            global_room: Some(2),
            warm_target: None,
            quotas: &[],
        };
        let ceiling = plan(&input);
        assert_eq!(launched(&ceiling).len(), 2);
        assert_eq!(refused(&ceiling, RefusalReason::GlobalCeiling), 3);

        let limited = PlanInput {
            pool: &pool(
                &ids(&offerings),
                SupplyPolicy {
                    max_launches_per_period: Some(4),
                    ..SupplyPolicy::default()
                },
            ),
            ..input.clone()
        };
        input = PlanInput {
            launches_in_period: 3,
            global_room: None,
            warm_target: None,
            quotas: &[],
            ..limited
        };
        let period = plan(&input);
        assert_eq!(
            launched(&period).len(),
            1,
            "four per period, three already made"
        );
        assert_eq!(period.deferred, 4);
    }

    #[test]
    fn at_the_global_ceiling_warm_nodes_still_wake() {
        // Warm nodes already count against engine.global_max_nodes: waking one adds no node.
        let offerings = [offering("r1/z1/p4d/on-demand", "20")];
        let mut nodes = [
            node("w1", NodeState::Warm, Market::OnDemand, "20"),
            node("w2", NodeState::Warm, Market::OnDemand, "20"),
        ];
        for n in &mut nodes {
            n.offering = offerings[0].offering.id.clone();
        }
        let p = pool(&ids(&offerings), SupplyPolicy::default());
        let planned = plan(&PlanInput {
            pool: &p,
            offerings: &offerings,
            nodes: &nodes,
            controller_target: 3,
            borrowed: 0,
            requests: &[],
            budget: None,
            budget_action: HardAction::Clamp,
            hold_horizon: Duration::from_secs(3600),
            launches_in_period: 0,
            global_room: Some(0),
            warm_target: None,
            quotas: &[],
        });
        let woken = planned
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Wake { .. }))
            .count();
        assert_eq!(woken, 2, "{:?}", planned.actions);
        assert!(launched(&planned).is_empty());
        assert_eq!(refused(&planned, RefusalReason::GlobalCeiling), 1);
    }

    #[test]
    fn running_warm_nodes_wake_before_stopped_ones() {
        let offerings = [offering("r1/z1/p4d/on-demand", "20")];
        let mut nodes = [
            node("stopped", NodeState::Warm, Market::OnDemand, "20"),
            node("running", NodeState::Standby, Market::OnDemand, "20"),
        ];
        for n in &mut nodes {
            n.offering = offerings[0].offering.id.clone();
        }
        let mut p = pool(&ids(&offerings), SupplyPolicy::default());
        p.warm_pool_size = 2;
        let planned = run(&p, &offerings, &nodes, 1);
        assert!(matches!(&planned.actions[0], Action::Wake { node, .. } if node.0 == "running"));
        // The stopped node stays parked; the floor of two is refilled with a new warm node.
        assert!(matches!(
            &planned.actions[1..],
            [Action::Launch {
                destination: Destination::Warm,
                ..
            }]
        ));
    }

    #[test]
    fn a_reclaimed_node_is_replaced_before_it_is_gone() {
        let offerings = [
            offering("r1/z1/g6/spot", "0.3"),
            offering("r1/z1/g6/on-demand", "0.8"),
        ];
        let mut doomed = node("doomed", NodeState::Serving, Market::Spot, "0.3");
        doomed.reclaiming = true;
        let p = pool(&ids(&offerings), SupplyPolicy::default());
        let planned = run(&p, &offerings, &[doomed], 1);
        assert_eq!(
            launched(&planned).len(),
            1,
            "the replacement is planned at once"
        );
        assert!(
            !planned
                .actions
                .iter()
                .any(|a| matches!(a, Action::Release { .. }))
        );
    }

    #[test]
    fn scale_in_releases_on_demand_before_reserved_and_never_a_booting_node() {
        let offerings = [offering("r1/z1/p4d/on-demand", "20")];
        let nodes = [
            node("reserved", NodeState::Serving, Market::Reserved, "12"),
            node("on-demand", NodeState::Serving, Market::OnDemand, "20"),
            node("spot", NodeState::Serving, Market::Spot, "8"),
            node("booting", NodeState::Booting, Market::OnDemand, "30"),
        ];
        let mut p = pool(&ids(&offerings), SupplyPolicy::default());
        p.min_replicas = 1;
        let planned = run(&p, &offerings, &nodes, 0);
        let released: Vec<&str> = planned
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Release { node, .. } => Some(node.0.as_str()),
                _ => None,
            })
            .collect();
        // Four active, min one: three are surplus, but the booting node may not go, and one
        // serving node stays until it is ready.
        assert_eq!(released, ["on-demand", "spot"]);
    }

    #[test]
    fn a_lowered_warm_floor_gives_back_parked_nodes() {
        let offerings = [offering("r1/z1/p4d/on-demand", "20")];
        let mut nodes = [
            node("w1", NodeState::Warm, Market::OnDemand, "20"),
            node("w2", NodeState::Warm, Market::OnDemand, "20"),
        ];
        for n in &mut nodes {
            n.offering = offerings[0].offering.id.clone();
        }
        let mut p = pool(&ids(&offerings), SupplyPolicy::default());
        p.warm_pool_size = 1;
        let planned = run(&p, &offerings, &nodes, 0);
        assert_eq!(
            planned
                .actions
                .iter()
                .filter(|a| matches!(a, Action::Release { to_warm: false, .. }))
                .count(),
            1
        );
    }

    #[test]
    fn rebalancing_replaces_on_demand_with_cheaper_spot_make_before_break() {
        let offerings = [
            offering("us-east-1/a/p4d/spot", "1.00"),
            offering("us-east-1/a/p4d/on-demand", "2.00"),
        ];
        let ids = ids(&offerings);
        let on = SupplyPolicy {
            rebalance_to_spot: true,
            ..SupplyPolicy::default()
        };
        let rebalancing = pool(&ids, on);
        let od = |i: u32| {
            node(
                &format!("od{i}"),
                NodeState::Serving,
                Market::OnDemand,
                "2.00",
            )
        };
        let eight: Vec<NodeView> = (0..8).map(od).collect();

        // At target with every node serving: a quarter of the pool gets spot replacements.
        let plan = run(&rebalancing, &offerings, &eight, 8);
        let launched: Vec<String> = launches_of(&plan);
        assert_eq!(launched, ["us-east-1-a-p4d-spot"; 2], "{plan:?}");
        assert!(
            !plan
                .actions
                .iter()
                .any(|a| matches!(a, Action::Release { .. }))
        );

        // While they boot nothing else happens: no second batch, no release yet.
        let mut nodes = eight.clone();
        nodes.push(node("s0", NodeState::Booting, Market::Spot, "1.00"));
        nodes.push(node("s1", NodeState::Booting, Market::Spot, "1.00"));
        let plan = run(&rebalancing, &offerings, &nodes, 8);
        assert!(plan.actions.is_empty(), "{plan:?}");

        // Once they serve, two on-demand nodes are released.
        nodes.truncate(8);
        nodes.push(node("s0", NodeState::Serving, Market::Spot, "1.00"));
        nodes.push(node("s1", NodeState::Serving, Market::Spot, "1.00"));
        let plan = run(&rebalancing, &offerings, &nodes, 8);
        let released: Vec<&NodeId> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Release { node, .. } => Some(node),
                _ => None,
            })
            .collect();
        assert_eq!(released.len(), 2, "{plan:?}");
        assert!(released.iter().all(|n| n.0.starts_with("od")));

        // A pool at its max_replicas rebalances too: the replacements go past it while they boot.
        let mut full = rebalancing.clone();
        full.max_replicas = 8;
        assert_eq!(launches_of(&run(&full, &offerings, &eight, 8)).len(), 2);

        // Off by default, and never onto spot that is not cheaper or not there.
        let plain = pool(&ids, SupplyPolicy::default());
        assert!(run(&plain, &offerings, &eight, 8).actions.is_empty());
        let dear = [
            offering("us-east-1/a/p4d/spot", "2.50"),
            offering("us-east-1/a/p4d/on-demand", "2.00"),
        ];
        assert!(run(&rebalancing, &dear, &eight, 8).actions.is_empty());
        let mut gone = offerings.clone();
        gone[0].available = false;
        assert!(run(&rebalancing, &gone, &eight, 8).actions.is_empty());
    }

    fn launches_of(plan: &Plan) -> Vec<String> {
        plan.actions
            .iter()
            .filter_map(|a| match a {
                Action::Launch { offering, .. } => Some(offering.to_string()),
                _ => None,
            })
            .collect()
    }
}

mod quota_preflight {
    use super::*;
    use crate::{QuotaDraw, QuotaHeadroom, QuotaUnit};

    /// `cheap` in us-east-1, `dear` in us-west-2.
    fn two_regions() -> [OfferingChoice; 2] {
        let mut dear = offering("dear", "5", true);
        dear.offering.region = "us-west-2".into();
        dear.offering.zone = "usw2-az1".into();
        [offering("cheap", "2", true), dear]
    }

    fn g_quota(region: &str, limit: u64, in_use: u64, covers: &str) -> QuotaHeadroom {
        QuotaHeadroom {
            name: "L-DB2E81BA".into(),
            description: "Running On-Demand G and VT instances".into(),
            region: region.into(),
            unit: QuotaUnit::Vcpu,
            limit,
            in_use,
            covers: vec![QuotaDraw {
                offering: covers.parse().unwrap(),
                per_node: 4,
            }],
        }
    }

    #[test]
    fn skips_a_region_without_quota_and_launches_in_the_next_without_a_refusal() {
        let p = pool(10, 4, 0);
        let offerings = two_regions();
        let quotas = [g_quota("us-east-1", 64, 62, "cheap")];
        let plan = plan(&PlanInput {
            quotas: &quotas,
            ..input(&p, &offerings, &[], 2)
        });
        assert_eq!(launches(&plan), ["dear", "dear"]);
        assert!(
            plan.actions
                .iter()
                .all(|a| !matches!(a, Action::Refuse { .. })),
            "{plan:?}"
        );
        assert!(plan.actions.iter().all(|a| matches!(
            a,
            Action::Launch { fallbacks, .. } if fallbacks == &[FallbackKind::Region]
        )));
        assert_eq!(
            plan.skipped,
            [SkippedOffering {
                offering: "cheap".parse().unwrap(),
                reason: SkipReason::Quota,
                quota: "L-DB2E81BA".into(),
                remaining: 2,
                per_node: 4,
            }]
        );
        // Without the quota read, the cheap region is tried first (and would be refused).
        let blind = plan_without_quotas(&p, &offerings);
        assert_eq!(launches(&blind), ["cheap", "cheap"]);
        assert!(blind.skipped.is_empty());
    }

    fn plan_without_quotas(p: &PoolSpec, offerings: &[OfferingChoice]) -> Plan {
        plan(&input(p, offerings, &[], 2))
    }

    #[test]
    fn launches_use_up_the_quota_within_one_plan_then_fall_back() {
        let p = pool(10, 4, 0);
        let offerings = two_regions();
        // Room for two nodes of 4 vCPUs.
        let quotas = [g_quota("us-east-1", 64, 56, "cheap")];
        let planned = plan(&PlanInput {
            quotas: &quotas,
            ..input(&p, &offerings, &[], 3)
        });
        assert_eq!(launches(&planned), ["cheap", "cheap", "dear"]);
        assert_eq!(planned.skipped.len(), 1);
        assert_eq!(planned.skipped[0].remaining, 0);
    }

    #[test]
    fn every_destination_short_of_quota_is_refused_as_no_offering() {
        let p = pool(10, 4, 0);
        let offerings = two_regions();
        let quotas = [
            g_quota("us-east-1", 8, 8, "cheap"),
            g_quota("us-west-2", 8, 6, "dear"),
        ];
        let planned = plan(&PlanInput {
            quotas: &quotas,
            ..input(&p, &offerings, &[], 1)
        });
        assert_eq!(
            planned.actions,
            [Action::Refuse {
                request: None,
                count: 1,
                reason: RefusalReason::NoOffering
            }]
        );
        let skipped: Vec<String> = planned
            .skipped
            .iter()
            .map(|s| s.offering.to_string())
            .collect();
        assert_eq!(skipped, ["cheap", "dear"]);
    }

    #[test]
    fn a_quota_that_covers_nothing_of_the_pool_limits_nothing() {
        let p = pool(10, 4, 0);
        let offerings = two_regions();
        let quotas = [g_quota("us-east-1", 0, 0, "other")];
        let planned = plan(&PlanInput {
            quotas: &quotas,
            ..input(&p, &offerings, &[], 2)
        });
        assert_eq!(launches(&planned), ["cheap", "cheap"]);
        assert!(planned.skipped.is_empty());
    }
}
