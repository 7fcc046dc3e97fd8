//! The planner: "pool P needs N more ready replicas" in, a [`Plan`] (plain data) out.
//!
//! Order of supply, per replica: a running warm node (instant), a stopped warm node (skips node
//! acquisition and image pull), a free slot of a reservation the pool may use, then new
//! capacity split between on-demand and spot by the pool's market policy (an on-demand base,
//! then a percentage of the rest on spot), on the offering with the best price for its recent
//! availability. The governor's checks — max replicas, the global ceiling, the per-step and
//! per-period launch limits, the spot price cap and the budget — are applied as the plan is
//! built, so every unit of demand ends as exactly one action: a wake, a launch, a deferral to a
//! later step, or a refusal with a reason. A warm node is also woken in place of a launch still
//! being acquired when the target is short of what serves sooner (`wake_ahead`): a swap, which
//! changes no count. The executor applies the plan; the planner changes nothing.
//!
//! What a plan guarantees against its input is asserted at the end of [`plan`] in debug builds
//! (`postconditions`), and `proptests` feeds it random inputs. The promises about money and
//! instances ([`guard`]) are checked in every build by the engine before it applies a plan.

mod governor;
pub mod guard;
mod postconditions;
#[cfg(test)]
mod proptests;
mod rebalance;
mod scale_in;
mod supply;
#[cfg(test)]
mod tests;
mod wake_ahead;
mod warm_pool;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::budget::{BudgetStanding, HardAction};
use crate::{
    Market, Money, NodeId, NodeState, Offering, OfferingId, PoolSpec, Priority, QuotaHeadroom,
    RefusalReason, RequestId, Timestamp,
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
    pub market: Market,
    pub request: Option<RequestId>,
    pub destination: Destination,
    pub price_usd_per_hour: Money,
    /// The cloud has given notice that it will reclaim this (spot) node: it still serves, but
    /// no longer counts, so its replacement is planned now, before it is gone.
    pub reclaiming: bool,
}

impl NodeView {
    /// Counts toward the pool's replicas: ready or on its way to serving, and staying.
    fn is_active_replica(&self) -> bool {
        self.destination == Destination::Serve
            && !self.reclaiming
            && (self.state.is_starting() || self.state == NodeState::Serving)
    }

    fn is_warm_or_warming(&self) -> bool {
        self.state.is_warm() || (self.destination == Destination::Warm && self.state.is_starting())
    }

    /// On-demand and reserved nodes make up the on-demand base.
    fn is_on_demand(&self) -> bool {
        self.market != Market::Spot
    }
}

/// An allowed offering and what the planner knows about it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferingChoice {
    pub offering: Offering,
    /// False while a recent refusal (capacity, quota, price) bars it.
    pub available: bool,
    /// Refusals in the recent window: an offering that keeps refusing ranks as if dearer
    /// (price-capacity-optimised, not cheapest-only).
    pub recent_refusals: u32,
    /// For a reservation or capacity block: nodes it can still take, across every pool.
    pub reservation_free: Option<u32>,
}

impl OfferingChoice {
    /// A plain offering, available, never refused.
    pub fn new(offering: Offering) -> OfferingChoice {
        OfferingChoice {
            offering,
            available: true,
            recent_refusals: 0,
            reservation_free: None,
        }
    }

    /// The price the planner ranks by: each recent refusal adds half the list price.
    fn rank_price(&self) -> i128 {
        let price = self.offering.price_usd_per_hour.micros() as i128;
        price * (2 + self.recent_refusals as i128) / 2
    }
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
    /// The pool's nodes that are not final, each id once.
    pub nodes: &'a [NodeView],
    /// Ready replicas the controller wants for organic traffic.
    pub controller_target: u32,
    /// Replicas other pools could not supply and hand to this one (this pool is their
    /// smaller-model fallback).
    pub borrowed: u32,
    /// The pool's open capacity requests, each id once.
    pub requests: &'a [OpenRequest],
    /// The pool's account, if it has a budget.
    pub budget: Option<BudgetStanding>,
    /// What to do with a capacity request the budget cannot carry in full: `Refuse` refuses it
    /// whole; `Clamp` and `ShedLowestTier` launch what fits (requests are served highest tier
    /// first, so the lowest tiers are the ones refused).
    pub budget_action: HardAction,
    /// Each wake or launch holds this much running time against the budget.
    pub hold_horizon: Duration,
    /// Launches already made in the current `launch_period` (the per-period limit's count).
    pub launches_in_period: u32,
    /// Nodes the deployment-wide ceiling still allows, if there is one.
    pub global_room: Option<u32>,
    /// The warm pool's size now, sized by the engine from the pool's recent bursts between its
    /// floor (`warm_pool_size`) and its ceiling; `None`: the floor.
    pub warm_target: Option<u32>,
    /// The cloud's quotas in the regions of the pool's offerings, as last read: an offering a
    /// quota cannot take one more node of is skipped (and the skip recorded in the plan).
    /// Offerings no quota covers, and regions whose quotas are unknown, are not limited.
    pub quotas: &'a [QuotaHeadroom],
}

impl PlanInput<'_> {
    /// The warm pool's size this plan keeps: the target, never below the floor.
    pub fn warm_size(&self) -> u32 {
        self.warm_target
            .unwrap_or(self.pool.warm_pool_size)
            .max(self.pool.warm_pool_size)
    }

    /// Launches the per-period limit still allows (`u32::MAX` without one).
    pub fn launches_left_in_period(&self) -> u32 {
        self.pool
            .supply
            .max_launches_per_period
            .map_or(u32::MAX, |max| max.saturating_sub(self.launches_in_period))
    }
}

/// Why a launch went somewhere other than the pool's first choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackKind {
    InstanceType,
    Zone,
    Region,
    /// The offering is on another cloud (provider) than the first choice: the widest step.
    Cloud,
    /// Another pool (a smaller model) serves the traffic.
    SmallerModel,
    /// The launch changed market (spot to on-demand, or back): recorded beside the location
    /// step, so a spot → on-demand switch in another zone counts as `zone` and `market`.
    Market,
}

impl FallbackKind {
    pub const ALL: [FallbackKind; 6] = [
        FallbackKind::InstanceType,
        FallbackKind::Zone,
        FallbackKind::Region,
        FallbackKind::Cloud,
        FallbackKind::SmallerModel,
        FallbackKind::Market,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FallbackKind::InstanceType => "instance_type",
            FallbackKind::Zone => "zone",
            FallbackKind::Region => "region",
            FallbackKind::Cloud => "cloud",
            FallbackKind::SmallerModel => "smaller_model",
            FallbackKind::Market => "market",
        }
    }

    /// How `chosen` differs from `first`: the widest step of place or type the fallback took
    /// (cloud, region, zone, instance type), and `Market` too when the market changed.
    pub fn between(first: &Offering, chosen: &Offering) -> Vec<FallbackKind> {
        if first.id == chosen.id {
            return Vec::new();
        }
        let place = if first.provider != chosen.provider {
            Some(FallbackKind::Cloud)
        } else if first.region != chosen.region {
            Some(FallbackKind::Region)
        } else if first.zone != chosen.zone {
            Some(FallbackKind::Zone)
        } else if first.instance_type != chosen.instance_type {
            Some(FallbackKind::InstanceType)
        } else {
            None
        };
        let market = (first.market != chosen.market).then_some(FallbackKind::Market);
        place.into_iter().chain(market).collect()
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Put a warm node into service: start a stopped one, or route traffic to a running one.
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
        /// The steps from the pool's first choice, when that was unavailable or refused
        /// (empty otherwise).
        fallbacks: Vec<FallbackKind>,
    },
    /// Take a node out of service: back to the warm pool, or terminated (drained first when it
    /// is serving).
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
    /// Demand left for a later step because of the per-step or per-period limit.
    pub deferred: u32,
    /// Organic replicas no offering could supply: the pool's fallback pool may take them.
    pub unserved: u32,
    /// Offerings the plan would have launched on and passed over, and why (for the decision
    /// log: a fallback that moved on without asking the cloud).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedOffering>,
}

/// Why the planner passed over an offering it would otherwise have chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// A quota covering it cannot take one more node.
    Quota,
}

/// An offering passed over, with the quota that stopped it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedOffering {
    pub offering: OfferingId,
    pub reason: SkipReason,
    /// The quota's cloud name.
    pub quota: String,
    /// What the quota had left when the offering was passed over, in its unit.
    pub remaining: u64,
    /// What one node would draw.
    pub per_node: u32,
}

/// A plan being built: what the limits and the budget still allow, and the supply left to use.
#[derive(Clone)]
struct Builder<'a> {
    input: &'a PlanInput<'a>,
    plan: Plan,
    /// Wakes and launches this step still allows.
    step_left: u32,
    /// Launches the per-period limit still allows.
    period_left: u32,
    /// Replicas `max_replicas` still allows.
    replica_room: u32,
    /// New nodes the global ceiling still allows.
    global_room: Option<u32>,
    /// Warm nodes that can be woken, the next to wake last.
    warm: Vec<&'a NodeView>,
    /// Available offerings, best rank first, with reservation slots left.
    offerings: Vec<(&'a OfferingChoice, Option<u32>)>,
    /// The pool's first choice per market, whatever is available: what a fallback is measured
    /// against.
    first_on_demand: Option<&'a Offering>,
    first_spot: Option<&'a Offering>,
    /// Serving replicas per market, as the market policy counts them: active ones plus the plan's.
    on_demand_have: u32,
    spot_have: u32,
    budget: Option<BudgetStanding>,
    /// What each of `input.quotas` has left after the plan's launches so far.
    quota_left: Vec<u64>,
}

enum Supply {
    Supplied,
    Deferred,
    Refused(RefusalReason),
}

/// Plans one step for one pool.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let pool = input.pool;
    let active: Vec<&NodeView> = input
        .nodes
        .iter()
        .filter(|n| n.is_active_replica())
        .collect();
    let mut b = Builder::new(input, &active);
    b.supply_requests(&active);

    // Then organic demand: the controller's, at least the minimum, plus what other pools hand
    // over.
    let organic_target = input.controller_target.max(pool.min_replicas) + input.borrowed;
    let organic: Vec<&NodeView> = active
        .iter()
        .copied()
        .filter(|n| n.request.is_none())
        .collect();
    let organic_have = organic.len() as u32;
    b.plan.unserved = b.supply(None, organic_target.saturating_sub(organic_have));
    b.wake_ahead_of_acquiring(&organic, organic_target);

    let mut warm_have = b.warm_left_after_wakes();
    if organic_have > organic_target {
        b.scale_in(&organic, organic_target, &mut warm_have);
    }
    // Back to the spot share once spot is there again; the scale-in above releases an
    // on-demand node each time a replacement serves.
    if pool.supply.rebalance_to_spot && organic_have == organic_target {
        b.rebalance_to_spot(&organic);
    }
    b.give_back_warm_above_target(&mut warm_have);
    b.refill_warm_pool(warm_have);

    if cfg!(debug_assertions) {
        postconditions::check(input, &b.plan);
    }
    b.plan
}
