//! The planner: "pool P needs N more ready replicas" in, a [`Plan`] (plain data) out.
//!
//! Order of supply, per replica: a running warm node (instant), a stopped warm node (skips node
//! acquisition and image pull), a free slot of a reservation the pool may use, then new capacity
//! split between on-demand and spot by the pool's market policy (an on-demand base, then a
//! percentage of the rest on spot), on the offering with the best price for its recent
//! availability. The governor's checks — max replicas, the global ceiling, the per-step and
//! per-period launch limits, the spot price cap and the budget — are applied as the plan is
//! built, so every unit of demand ends as exactly one action: a wake, a launch, a deferral to a
//! later step, or a refusal with a reason. The executor applies the plan; the planner changes
//! nothing.

use std::cmp::Reverse;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::budget::{BudgetStanding, HardAction};
use crate::{
    Market, Money, NodeId, NodeState, Offering, OfferingId, PoolSpec, Priority, RefusalReason,
    RequestId, Timestamp,
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
    /// The pool's nodes that are not final.
    pub nodes: &'a [NodeView],
    /// Ready replicas the controller wants for organic traffic.
    pub controller_target: u32,
    /// Replicas other pools could not supply and hand to this one (this pool is their
    /// smaller-model fallback).
    pub borrowed: u32,
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
}

/// Why a launch went somewhere other than the pool's first choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackKind {
    InstanceType,
    Zone,
    Region,
    /// Another pool (a smaller model) serves the traffic.
    SmallerModel,
}

impl FallbackKind {
    pub const ALL: [FallbackKind; 4] = [
        FallbackKind::InstanceType,
        FallbackKind::Zone,
        FallbackKind::Region,
        FallbackKind::SmallerModel,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FallbackKind::InstanceType => "instance_type",
            FallbackKind::Zone => "zone",
            FallbackKind::Region => "region",
            FallbackKind::SmallerModel => "smaller_model",
        }
    }

    /// How `chosen` differs from `first`: the widest step the fallback took.
    pub fn between(first: &Offering, chosen: &Offering) -> Option<FallbackKind> {
        if first.id == chosen.id {
            None
        } else if first.region != chosen.region {
            Some(FallbackKind::Region)
        } else if first.zone != chosen.zone {
            Some(FallbackKind::Zone)
        } else if first.instance_type != chosen.instance_type {
            Some(FallbackKind::InstanceType)
        } else {
            None
        }
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
        /// Set when the pool's first choice was unavailable or refused.
        fallback: Option<FallbackKind>,
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
}

#[derive(Clone)]
struct Builder<'a> {
    input: &'a PlanInput<'a>,
    plan: Plan,
    step_left: u32,
    period_left: u32,
    replica_room: u32,
    global_room: Option<u32>,
    /// Warm nodes that can be woken, the next to wake last.
    warm: Vec<&'a NodeView>,
    /// Available offerings, best rank first, with reservation slots left.
    offerings: Vec<(&'a OfferingChoice, Option<u32>)>,
    /// The pool's first choice per market, whatever is available: what a fallback is measured
    /// against.
    first_on_demand: Option<&'a Offering>,
    first_spot: Option<&'a Offering>,
    on_demand_have: u32,
    spot_have: u32,
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

    /// The governor's limits on one more node, in the order an operator reads them.
    fn governor(&self, counts_as_replica: bool) -> Option<Supply> {
        if counts_as_replica && self.replica_room == 0 {
            return Some(Supply::Refused(RefusalReason::MaxReplicas));
        }
        if self.global_room == Some(0) {
            return Some(Supply::Refused(RefusalReason::GlobalCeiling));
        }
        if self.step_left == 0 {
            return Some(Supply::Deferred);
        }
        None
    }

    fn spend_limits(&mut self, counts_as_replica: bool, launched: bool) {
        self.step_left -= 1;
        if counts_as_replica {
            self.replica_room -= 1;
        }
        if let Some(room) = &mut self.global_room
            && launched
        {
            *room -= 1;
        }
        if launched {
            self.period_left -= 1;
        }
    }

    /// Whether the next new replica should be spot, by the pool's market policy.
    fn wants_spot(&self) -> bool {
        let policy = &self.input.pool.supply;
        if self.on_demand_have < policy.on_demand_base {
            return false;
        }
        let above = self.on_demand_have - policy.on_demand_base + self.spot_have;
        (self.spot_have as u64) * 100 < policy.spot_percent_above_base as u64 * (above as u64 + 1)
    }

    /// The best available offering for a new node: a reservation slot, else the wanted market,
    /// else the other one (on-demand when spot is refused, and the other way round).
    fn choose(&self, destination: Destination) -> Option<usize> {
        let slot = self.offerings.iter().position(|(c, free)| {
            c.offering.market == Market::Reserved && free.is_some_and(|f| f > 0)
        });
        // Reservations serve; warm nodes wait on capacity bought by the hour.
        if destination == Destination::Serve && slot.is_some() {
            return slot;
        }
        let first = if self.wants_spot() {
            Market::Spot
        } else {
            Market::OnDemand
        };
        let second = if first == Market::Spot {
            Market::OnDemand
        } else {
            Market::Spot
        };
        [first, second].into_iter().find_map(|market| {
            self.offerings
                .iter()
                .position(|(c, _)| c.offering.market == market)
        })
    }

    fn first_choice(&self, market: Market) -> Option<&'a Offering> {
        match market {
            Market::Spot => self.first_spot,
            _ => self.first_on_demand,
        }
    }

    /// Launches one node on the best offering, or says why not.
    fn launch(&mut self, request: Option<&RequestId>, destination: Destination) -> Supply {
        let Some(index) = self.choose(destination) else {
            return Supply::Refused(RefusalReason::NoOffering);
        };
        let (choice, free) = self.offerings[index];
        let offering = &choice.offering;
        let hold = self.hold_for(offering.price_usd_per_hour);
        if !self.admit(hold) {
            return Supply::Refused(RefusalReason::Budget);
        }
        if let Some(free) = free {
            self.offerings[index].1 = Some(free - 1);
        }
        let wanted = if self.wants_spot() {
            Market::Spot
        } else {
            Market::OnDemand
        };
        let fallback = match offering.market {
            Market::Reserved => None,
            _ => self
                .first_choice(wanted)
                .or(self.first_choice(offering.market))
                .and_then(|first| FallbackKind::between(first, offering)),
        };
        if destination == Destination::Serve {
            if offering.market == Market::Spot {
                self.spot_have += 1;
            } else {
                self.on_demand_have += 1;
            }
        }
        self.plan.actions.push(Action::Launch {
            offering: offering.id.clone(),
            request: request.cloned(),
            destination,
            hold,
            fallback,
        });
        Supply::Supplied
    }

    /// Supplies one ready replica for `request`, or says why not.
    fn supply_one(&mut self, request: Option<&RequestId>) -> Supply {
        if let Some(stop) = self.governor(true) {
            return stop;
        }
        if let Some(node) = self.warm.last().copied() {
            let hold = self.hold_for(node.price_usd_per_hour);
            if !self.admit(hold) {
                return Supply::Refused(RefusalReason::Budget);
            }
            self.warm.pop();
            if node.is_on_demand() {
                self.on_demand_have += 1;
            } else {
                self.spot_have += 1;
            }
            self.plan.actions.push(Action::Wake {
                node: node.id.clone(),
                request: request.cloned(),
                hold,
            });
            self.spend_limits(true, false);
            return Supply::Supplied;
        }
        if self.period_left == 0 {
            return Supply::Deferred;
        }
        match self.launch(request, Destination::Serve) {
            Supply::Supplied => {
                self.spend_limits(true, true);
                Supply::Supplied
            }
            other => other,
        }
    }

    /// Launches spot replacements for on-demand nodes above the pool's spot share, when the best
    /// available spot offering is cheaper than the on-demand node it would replace. Only while
    /// every organic node serves (one batch at a time, each at most a quarter of the pool): the
    /// replacements are surplus, and scale-in releases the dearest serving node — on-demand —
    /// once each of them serves. Never falls back to on-demand and never refuses: it is an
    /// optimisation, not demand. A pool at `max_replicas` goes past it by the batch meanwhile.
    fn rebalance_to_spot(&mut self, organic: &[&NodeView]) {
        if organic.iter().any(|n| n.state != NodeState::Serving) {
            return;
        }
        let Some(index) = self
            .offerings
            .iter()
            .position(|(c, _)| c.offering.market == Market::Spot)
        else {
            return;
        };
        let spot = self.offerings[index].0;
        let mut dearer_on_demand = organic
            .iter()
            .filter(|n| n.market == Market::OnDemand)
            .filter(|n| spot.rank_price() < n.price_usd_per_hour.micros() as i128)
            .count() as u32;
        let policy = &self.input.pool.supply;
        let batch = (organic.len() as u32).div_ceil(4).max(1);
        for _ in 0..batch {
            let above =
                (self.on_demand_have + self.spot_have).saturating_sub(policy.on_demand_base);
            let wanted_spot = above * policy.spot_percent_above_base / 100;
            let over_base = self.on_demand_have.saturating_sub(policy.on_demand_base);
            if self.spot_have >= wanted_spot || over_base == 0 || dearer_on_demand == 0 {
                return;
            }
            // Replacements may go past max_replicas while they boot (as an auto scaling group's
            // capacity rebalancing does): the pool ends where it was. The other limits hold.
            if self.governor(false).is_some() || self.period_left == 0 {
                return;
            }
            let hold = self.hold_for(spot.offering.price_usd_per_hour);
            if !self.admit(hold) {
                return;
            }
            self.plan.actions.push(Action::Launch {
                offering: spot.offering.id.clone(),
                request: None,
                destination: Destination::Serve,
                hold,
                fallback: None,
            });
            self.spend_limits(false, true);
            // Counted as if the on-demand node it replaces were already gone.
            self.spot_have += 1;
            self.on_demand_have -= 1;
            dearer_on_demand -= 1;
        }
    }

    /// Supplies a capacity request, all or nothing when the budget's hard action is `Refuse`.
    fn supply_request(&mut self, request: &RequestId, count: u32) {
        if self.input.budget_action != HardAction::Refuse {
            self.supply(Some(request), count);
            return;
        }
        let before = self.clone();
        self.supply(Some(request), count);
        if self.plan.actions[before.plan.actions.len()..]
            .iter()
            .any(|a| {
                matches!(
                    a,
                    Action::Refuse {
                        reason: RefusalReason::Budget,
                        ..
                    }
                )
            })
        {
            *self = before;
            self.plan.actions.push(Action::Refuse {
                request: Some(request.clone()),
                count,
                reason: RefusalReason::Budget,
            });
        }
    }

    /// Supplies `count` replicas; the first refusal covers the rest of the count. Returns the
    /// count refused for want of any offering.
    fn supply(&mut self, request: Option<&RequestId>, count: u32) -> u32 {
        for supplied in 0..count {
            match self.supply_one(request) {
                Supply::Supplied => {}
                Supply::Deferred => {
                    self.plan.deferred += count - supplied;
                    return 0;
                }
                Supply::Refused(reason) => {
                    self.plan.actions.push(Action::Refuse {
                        request: request.cloned(),
                        count: count - supplied,
                        reason,
                    });
                    return if reason == RefusalReason::NoOffering {
                        count - supplied
                    } else {
                        0
                    };
                }
            }
        }
        0
    }
}

/// Scale-in order: the dearest capacity goes first — on-demand, then spot, then reserved (already
/// paid for) — and the most expensive within each.
fn release_rank(node: &NodeView) -> (u8, Reverse<Money>) {
    let market = match node.market {
        Market::OnDemand => 0,
        Market::Spot => 1,
        Market::Reserved => 2,
    };
    (market, Reverse(node.price_usd_per_hour))
}

/// Plans one step for one pool.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let pool = input.pool;
    let policy = &pool.supply;
    let active: Vec<&NodeView> = input
        .nodes
        .iter()
        .filter(|n| n.is_active_replica())
        .collect();
    let allowed = |c: &&OfferingChoice| {
        pool.offerings.contains(&c.offering.id)
            && !(c.offering.market == Market::Spot
                && policy
                    .spot_max_price
                    .is_some_and(|cap| c.offering.price_usd_per_hour > cap))
    };
    let mut offerings: Vec<(&OfferingChoice, Option<u32>)> = input
        .offerings
        .iter()
        .filter(allowed)
        .filter(|c| c.available)
        .filter(|c| c.offering.market != Market::Reserved || c.reservation_free.is_some())
        .map(|c| (c, c.reservation_free))
        .collect();
    // Best rank first; ties keep the pool's preference order (stable sort).
    offerings.sort_by_key(|(c, _)| c.rank_price());
    let first = |market: Market| {
        input
            .offerings
            .iter()
            .filter(allowed)
            .filter(|c| c.offering.market == market)
            .min_by_key(|c| c.offering.price_usd_per_hour)
            .map(|c| &c.offering)
    };

    // Wake order: running warm nodes first (instant), then stopped ones, cheapest first within
    // each; the vector is popped from the back.
    let mut warm: Vec<&NodeView> = input
        .nodes
        .iter()
        .filter(|n| n.state.is_warm() && !n.reclaiming)
        // A warm node of a refused offering may meet the same stockout when started.
        .filter(|n| {
            n.state == NodeState::Standby
                || input
                    .offerings
                    .iter()
                    .any(|c| c.offering.id == n.offering && c.available)
        })
        .collect();
    warm.sort_by_key(|n| (n.state == NodeState::Standby, Reverse(n.price_usd_per_hour)));

    let period_left = policy
        .max_launches_per_period
        .map_or(u32::MAX, |max| max.saturating_sub(input.launches_in_period));
    let mut b = Builder {
        input,
        plan: Plan::default(),
        step_left: pool.max_scale_up_per_step,
        period_left,
        replica_room: pool.max_replicas.saturating_sub(active.len() as u32),
        global_room: input.global_room,
        warm,
        offerings,
        first_on_demand: first(Market::OnDemand),
        first_spot: first(Market::Spot),
        on_demand_have: active.iter().filter(|n| n.is_on_demand()).count() as u32,
        spot_have: active.iter().filter(|n| !n.is_on_demand()).count() as u32,
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
        let have = active
            .iter()
            .filter(|n| n.request.as_ref() == Some(&request.id))
            .count() as u32;
        b.supply_request(&request.id, request.replicas.saturating_sub(have));
    }

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

    // Warm-pool bookkeeping: what is left after the wakes above.
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

    // Scale in: only serving nodes go (a node still climbing the ladder finishes first), the
    // dearest first; into the warm pool while it is below its floor, if the pool reuses them.
    if organic_have > organic_target {
        let mut releasable: Vec<&NodeView> = organic
            .iter()
            .copied()
            .filter(|n| n.state == NodeState::Serving)
            .collect();
        releasable.sort_by_key(|n| release_rank(n));
        // Nodes still on the ladder are surplus too but cannot go yet; keep enough serving ones
        // to meet the target meanwhile.
        let surplus = ((organic_have - organic_target) as usize)
            .min(releasable.len().saturating_sub(organic_target as usize));
        for node in releasable.into_iter().take(surplus) {
            let to_warm = policy.reuse_on_scale_in && warm_have < pool.warm_pool_size;
            if to_warm {
                warm_have += 1;
            }
            b.plan.actions.push(Action::Release {
                node: node.id.clone(),
                to_warm,
            });
        }
    }

    // Back to the spot share once spot is there again; the scale-in above releases an
    // on-demand node each time a replacement serves.
    if policy.rebalance_to_spot && organic_have == organic_target {
        b.rebalance_to_spot(&organic);
    }

    // A warm pool above its floor (the floor was lowered) gives back its dearest nodes.
    if warm_have > pool.warm_pool_size {
        let mut parked: Vec<&NodeView> = b.warm.clone();
        parked.sort_by_key(|n| release_rank(n));
        for node in parked
            .into_iter()
            .take((warm_have - pool.warm_pool_size) as usize)
        {
            b.plan.actions.push(Action::Release {
                node: node.id.clone(),
                to_warm: false,
            });
            warm_have -= 1;
        }
    }

    // Refill the warm pool with whatever the limits leave. Warm nodes do not count as replicas.
    while warm_have < pool.warm_pool_size && b.governor(false).is_none() && b.period_left > 0 {
        if !matches!(b.launch(None, Destination::Warm), Supply::Supplied) {
            break;
        }
        b.spend_limits(false, true);
        warm_have += 1;
    }
    b.plan
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::pool::{ColdStartLadder, ScalingPolicy, SupplyPolicy};
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

#[cfg(test)]
mod supply_tests {
    use std::time::Duration;

    use super::*;
    use crate::ProviderKind;
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

    fn launched(plan: &Plan) -> Vec<(String, Option<FallbackKind>)> {
        plan.actions
            .iter()
            .filter_map(|a| match a {
                Action::Launch {
                    offering, fallback, ..
                } => Some((offering.to_string(), *fallback)),
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
            [("r1-z2-p4d-on-demand".to_string(), Some(FallbackKind::Zone))]
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
            let mut gone = first.clone();
            gone.available = false;
            let offerings = [gone, offering(other, "30")];
            let p = pool(&ids(&offerings), SupplyPolicy::default());
            assert_eq!(
                launched(&run(&p, &offerings, &[], 1))[0].1,
                Some(kind),
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
