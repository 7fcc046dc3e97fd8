//! The planner: "pool P needs N more ready replicas" in, a [`Plan`] (plain data) out.
//!
//! Supply order: wake warm nodes first (they skip node acquisition and image pull), then launch
//! on the cheapest available allowed offering. The governor's checks — max replicas, the per-step
//! scale-up limit and the budget — are applied as the plan is built, so every unit of demand ends
//! as exactly one action: a wake, a launch, a deferral to the next step, or a refusal with a
//! reason. The executor applies the plan; the planner changes nothing.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::budget::{BudgetStanding, HardAction};
use crate::{
    Money, NodeId, NodeState, Offering, OfferingId, PoolSpec, Priority, RefusalReason, RequestId,
    Timestamp,
};

/// What a node is being made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Destination {
    /// Serve traffic once ready.
    Serve,
    /// Climb the ladder, then stop and wait in the warm pool.
    Warm,
}

impl Destination {
    pub fn as_str(self) -> &'static str {
        match self {
            Destination::Serve => "serve",
            Destination::Warm => "warm",
        }
    }

    pub fn parse(s: &str) -> Option<Destination> {
        match s {
            "serve" => Some(Destination::Serve),
            "warm" => Some(Destination::Warm),
            _ => None,
        }
    }
}

/// The planner's view of one live node of the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub id: NodeId,
    pub state: NodeState,
    pub offering: OfferingId,
    pub request: Option<RequestId>,
    pub destination: Destination,
    pub price_usd_per_hour: Money,
}

impl NodeView {
    /// Counts toward the pool's replicas: ready or on its way to serving.
    fn is_active_replica(&self) -> bool {
        self.destination == Destination::Serve
            && (self.state.is_starting() || self.state == NodeState::Serving)
    }

    fn is_warm_or_warming(&self) -> bool {
        self.state == NodeState::Warm
            || (self.destination == Destination::Warm && self.state.is_starting())
    }
}

/// An allowed offering and whether it may be tried now (recently refused ones may not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferingChoice {
    pub offering: Offering,
    pub available: bool,
}

/// An open capacity request of this pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRequest {
    pub id: RequestId,
    pub replicas: u32,
    pub priority: Priority,
    pub created_at: Timestamp,
}

/// Everything the planner looks at for one pool.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    pub pool: &'a PoolSpec,
    /// The pool's allowed offerings.
    pub offerings: &'a [OfferingChoice],
    /// The pool's nodes that are not final.
    pub nodes: &'a [NodeView],
    /// Ready replicas the controller wants for organic traffic.
    pub controller_target: u32,
    pub requests: &'a [OpenRequest],
    /// The pool's account, if it has a budget.
    pub budget: Option<BudgetStanding>,
    /// What to do with a capacity request the budget cannot carry in full: `Refuse` refuses it
    /// whole; `Clamp` and `ShedLowestTier` launch what fits (requests are served highest tier
    /// first, so the lowest tiers are the ones refused).
    pub budget_action: HardAction,
    /// Each wake or launch holds this much running time against the budget.
    pub hold_horizon: Duration,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Start a warm node and put it into service.
    Wake {
        node: NodeId,
        request: Option<RequestId>,
        hold: Money,
    },
    /// Buy a new node.
    Launch {
        offering: OfferingId,
        request: Option<RequestId>,
        destination: Destination,
        hold: Money,
    },
    /// Take a serving node out of service: back to the warm pool, or terminated.
    Release { node: NodeId, to_warm: bool },
    /// Demand that will not be supplied, and why.
    Refuse {
        request: Option<RequestId>,
        count: u32,
        reason: RefusalReason,
    },
}

/// The planner's output for one pool: plain data, applied by the executor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// Demand left for a later step because of the per-step scale-up limit.
    pub deferred: u32,
}

#[derive(Clone)]
struct Builder<'a> {
    input: &'a PlanInput<'a>,
    plan: Plan,
    step_left: u32,
    replica_room: u32,
    warm: Vec<&'a NodeView>,
    /// Available offerings, cheapest first.
    offerings: Vec<&'a Offering>,
    budget: Option<BudgetStanding>,
}

enum Supply {
    Supplied,
    Deferred,
    Refused(RefusalReason),
}

impl<'a> Builder<'a> {
    fn hold_for(&self, price: Money) -> Money {
        price.per_hour_for_millis(self.input.hold_horizon.as_millis() as i64)
    }

    fn admit(&mut self, hold: Money) -> bool {
        match &mut self.budget {
            None => true,
            Some(standing) if standing.admits(hold) => {
                standing.held += hold;
                true
            }
            Some(_) => false,
        }
    }

    /// Supplies one ready replica for `request`, or says why not.
    fn supply_one(&mut self, request: Option<&RequestId>) -> Supply {
        if self.replica_room == 0 {
            return Supply::Refused(RefusalReason::MaxReplicas);
        }
        if self.step_left == 0 {
            return Supply::Deferred;
        }
        if let Some(node) = self.warm.last().copied() {
            let hold = self.hold_for(node.price_usd_per_hour);
            if !self.admit(hold) {
                return Supply::Refused(RefusalReason::Budget);
            }
            self.warm.pop();
            self.plan.actions.push(Action::Wake {
                node: node.id.clone(),
                request: request.cloned(),
                hold,
            });
        } else {
            let Some(offering) = self.offerings.first().copied() else {
                return Supply::Refused(RefusalReason::NoOffering);
            };
            let hold = self.hold_for(offering.price_usd_per_hour);
            if !self.admit(hold) {
                return Supply::Refused(RefusalReason::Budget);
            }
            self.plan.actions.push(Action::Launch {
                offering: offering.id.clone(),
                request: request.cloned(),
                destination: Destination::Serve,
                hold,
            });
        }
        self.step_left -= 1;
        self.replica_room -= 1;
        Supply::Supplied
    }

    /// Supplies a capacity request, all or nothing when the budget's hard action is `Refuse`.
    fn supply_request(&mut self, request: &RequestId, count: u32) {
        if self.input.budget_action != HardAction::Refuse {
            return self.supply(Some(request), count);
        }
        let before = self.clone();
        self.supply(Some(request), count);
        let over_budget = self.plan.actions[before.plan.actions.len()..]
            .iter()
            .any(|a| {
                matches!(
                    a,
                    Action::Refuse {
                        reason: RefusalReason::Budget,
                        ..
                    }
                )
            });
        if over_budget {
            *self = before;
            self.plan.actions.push(Action::Refuse {
                request: Some(request.clone()),
                count,
                reason: RefusalReason::Budget,
            });
        }
    }

    /// Supplies `count` replicas; the first refusal covers the rest of the count.
    fn supply(&mut self, request: Option<&RequestId>, count: u32) {
        for supplied in 0..count {
            match self.supply_one(request) {
                Supply::Supplied => {}
                Supply::Deferred => {
                    self.plan.deferred += count - supplied;
                    return;
                }
                Supply::Refused(reason) => {
                    self.plan.actions.push(Action::Refuse {
                        request: request.cloned(),
                        count: count - supplied,
                        reason,
                    });
                    return;
                }
            }
        }
    }
}

/// Plans one step for one pool.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let pool = input.pool;
    let active = input.nodes.iter().filter(|n| n.is_active_replica()).count() as u32;
    let mut offerings: Vec<&Offering> = input
        .offerings
        .iter()
        .filter(|c| c.available && pool.offerings.contains(&c.offering.id))
        .map(|c| &c.offering)
        .collect();
    // Cheapest first; ties keep the pool's preference order (stable sort).
    offerings.sort_by_key(|o| o.price_usd_per_hour);
    // Wake the cheapest warm node last-popped: sort most expensive first.
    let mut warm: Vec<&NodeView> = input
        .nodes
        .iter()
        .filter(|n| n.state == NodeState::Warm)
        // A warm node of a refused offering may meet the same stockout when started.
        .filter(|n| {
            input
                .offerings
                .iter()
                .any(|c| c.offering.id == n.offering && c.available)
        })
        .collect();
    warm.sort_by_key(|n| std::cmp::Reverse(n.price_usd_per_hour));

    let mut b = Builder {
        input,
        plan: Plan::default(),
        step_left: pool.max_scale_up_per_step,
        replica_room: pool.max_replicas.saturating_sub(active),
        warm,
        offerings,
        budget: input.budget,
    };

    // Capacity requests first, highest priority then oldest.
    let mut requests: Vec<&OpenRequest> = input.requests.iter().collect();
    requests.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.created_at.cmp(&b.created_at))
    });
    for request in requests {
        let have = input
            .nodes
            .iter()
            .filter(|n| n.is_active_replica() && n.request.as_ref() == Some(&request.id))
            .count() as u32;
        b.supply_request(&request.id, request.replicas.saturating_sub(have));
    }

    // Then organic demand from the controller.
    let organic_target = input.controller_target.max(pool.min_replicas);
    let organic: Vec<&NodeView> = input
        .nodes
        .iter()
        .filter(|n| n.is_active_replica() && n.request.is_none())
        .collect();
    let organic_have = organic.len() as u32;
    b.supply(None, organic_target.saturating_sub(organic_have));

    // Warm-pool bookkeeping: refill below the floor, and keep released nodes when it is short.
    let woken = b
        .plan
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Wake { .. }))
        .count() as u32;
    let mut warm_have = (input
        .nodes
        .iter()
        .filter(|n| n.is_warm_or_warming())
        .count() as u32)
        .saturating_sub(woken);

    // Scale in: release surplus organic nodes. Nodes still climbing the ladder go first (they
    // serve nobody yet) and are terminated, since a half-built node makes a poor warm node;
    // then serving nodes, most expensive first, into the warm pool while it is short.
    if organic_have > organic_target {
        let mut releasable: Vec<&NodeView> = organic
            .iter()
            .copied()
            .filter(|n| {
                matches!(
                    n.state,
                    NodeState::Launching | NodeState::Booting | NodeState::Serving
                )
            })
            .collect();
        releasable.sort_by_key(|n| {
            (
                n.state == NodeState::Serving,
                std::cmp::Reverse(n.price_usd_per_hour),
            )
        });
        let surplus = (organic_have - organic_target) as usize;
        for node in releasable.into_iter().take(surplus) {
            let to_warm = node.state == NodeState::Serving && warm_have < pool.warm_pool_size;
            if to_warm {
                warm_have += 1;
            }
            b.plan.actions.push(Action::Release {
                node: node.id.clone(),
                to_warm,
            });
        }
    }

    // Refill the warm pool with whatever step is left. Warm nodes do not count as replicas.
    while warm_have < pool.warm_pool_size && b.step_left > 0 {
        let Some(offering) = b.offerings.first().copied() else {
            break;
        };
        let hold = b.hold_for(offering.price_usd_per_hour);
        if !b.admit(hold) {
            break;
        }
        b.plan.actions.push(Action::Launch {
            offering: offering.id.clone(),
            request: None,
            destination: Destination::Warm,
            hold,
        });
        b.step_left -= 1;
        warm_have += 1;
    }
    b.plan
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::pool::{ColdStartLadder, ScalingPolicy};
    use crate::{Market, ProviderKind};

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
            },
            available,
        }
    }

    fn node(id: &str, state: NodeState, destination: Destination) -> NodeView {
        NodeView {
            id: NodeId(id.into()),
            state,
            offering: "cheap".parse().unwrap(),
            request: None,
            destination,
            price_usd_per_hour: "1".parse().unwrap(),
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
            requests: &[],
            budget: None,
            budget_action: HardAction::Clamp,
            hold_horizon: Duration::from_secs(3600),
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
}

#[cfg(test)]
mod budget_action_tests {
    use std::time::Duration;

    use super::*;
    use crate::pool::{ColdStartLadder, ScalingPolicy};
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
            },
            available: true,
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
            requests: &requests,
            // Two of the three one-dollar holds fit.
            budget: Some(BudgetStanding {
                ceiling: "2".parse().unwrap(),
                spent: Money::ZERO,
                held: Money::ZERO,
            }),
            budget_action: action,
            hold_horizon: Duration::from_secs(3600),
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
