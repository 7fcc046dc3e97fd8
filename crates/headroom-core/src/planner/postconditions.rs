//! What a plan guarantees against its input, asserted in debug builds at the end of [`plan`]:
//! the module's promise that every unit of demand ends as exactly one action, the governor's
//! limits, and which nodes an action may touch. A failing assertion is a planner bug, not bad
//! input (except the first two, which state what the input is assumed to be).
//!
//! [`plan`]: super::plan

use std::collections::{BTreeMap, BTreeSet};

use super::{Action, Destination, NodeView, Plan, PlanInput};
use crate::budget::HardAction;
use crate::{Market, NodeId, NodeState, OfferingId, RefusalReason, RequestId};

pub(super) fn check(input: &PlanInput<'_>, plan: &Plan) {
    let nodes: BTreeMap<&NodeId, &NodeView> = input.nodes.iter().map(|n| (&n.id, n)).collect();
    debug_assert_eq!(nodes.len(), input.nodes.len(), "node ids are unique");
    let requests: BTreeSet<&RequestId> = input.requests.iter().map(|r| &r.id).collect();
    debug_assert_eq!(
        requests.len(),
        input.requests.len(),
        "request ids are unique"
    );

    // The money and instance invariants, which every build checks before applying a plan.
    if let Err(violation) = super::guard::check(input, plan) {
        panic!("{violation}");
    }
    let tally = Tally::of(input, plan);
    limits(input, plan, &tally);
    rebalancing(input, plan, &tally);
    touched_nodes(input, plan, &nodes, &tally);
    warm_floor(input, plan, &nodes, &tally);
    demand(input, plan, &tally);
    refusals(input, plan, &tally);
    launch_offerings(input, plan);
    quotas(input, plan);
}

/// Launches and wakes of stopped nodes fit in every quota's remaining units; a skipped
/// offering was short of the quota it names.
fn quotas(input: &PlanInput<'_>, plan: &Plan) {
    for quota in input.quotas {
        let drawn: u64 = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Launch { offering, .. } => quota.draw(offering),
                Action::Wake { node, .. } => input
                    .nodes
                    .iter()
                    .find(|n| &n.id == node && n.state != NodeState::Standby)
                    .and_then(|n| quota.draw(&n.offering)),
                _ => None,
            })
            .map(u64::from)
            .sum();
        let launched = plan.actions.iter().any(
            |a| matches!(a, Action::Launch { offering, .. } if quota.draw(offering).is_some()),
        );
        debug_assert!(
            !launched || drawn <= quota.remaining(),
            "{}: launches draw {drawn} of {} left",
            quota.name,
            quota.remaining()
        );
    }
    for skip in &plan.skipped {
        debug_assert!(
            skip.remaining < u64::from(skip.per_node),
            "{} was skipped with room for a node",
            skip.offering
        );
    }
}

/// The plan's counts, and the organic demand it was built for.
struct Tally {
    wakes: u32,
    launches: u32,
    serve_launches: u32,
    warm_launches: u32,
    /// Organic launches still being acquired, released for a wake each (`wake_ahead`): the
    /// wakes that replace them are no demand.
    swaps: u32,
    /// Active replicas in the input.
    active: u32,
    organic_have: u32,
    organic_target: u32,
    /// The organic launches are rebalancing replacements, not demand (rebalancing runs only
    /// when the organic replicas meet their target, so there is no organic demand then).
    rebalancing: bool,
}

impl Tally {
    fn of(input: &PlanInput<'_>, plan: &Plan) -> Tally {
        let count = |f: &dyn Fn(&Action) -> bool| plan.actions.iter().filter(|a| f(a)).count();
        let active: Vec<&NodeView> = input
            .nodes
            .iter()
            .filter(|n| n.is_active_replica())
            .collect();
        let organic_have = active.iter().filter(|n| n.request.is_none()).count() as u32;
        let organic_target = input.controller_target.max(input.pool.min_replicas) + input.borrowed;
        let is_launch_to = |a: &Action, to: Destination| matches!(a, Action::Launch { destination, .. } if *destination == to);
        Tally {
            wakes: count(&|a| matches!(a, Action::Wake { .. })) as u32,
            launches: count(&|a| matches!(a, Action::Launch { .. })) as u32,
            serve_launches: count(&|a| is_launch_to(a, Destination::Serve)) as u32,
            warm_launches: count(&|a| is_launch_to(a, Destination::Warm)) as u32,
            swaps: count(
                &|a| matches!(a, Action::Release { node, .. } if input.nodes.iter().any(|n| &n.id == node && n.state == NodeState::Launching)),
            ) as u32,
            active: active.len() as u32,
            organic_have,
            organic_target,
            rebalancing: input.pool.supply.rebalance_to_spot && organic_have == organic_target,
        }
    }

    fn organic_need(&self) -> u32 {
        self.organic_target.saturating_sub(self.organic_have)
    }

    /// Wakes and serving launches that supply demand (everything but rebalancing).
    fn supplied(&self, plan: &Plan) -> u32 {
        self.wakes + self.serve_launches - self.rebalance_launches(plan) - self.swaps
    }

    fn rebalance_launches(&self, plan: &Plan) -> u32 {
        if !self.rebalancing {
            return 0;
        }
        plan.actions
            .iter()
            .filter(|a| {
                matches!(
                    a,
                    Action::Launch {
                        request: None,
                        destination: Destination::Serve,
                        ..
                    }
                )
            })
            .count() as u32
    }
}

/// The max-replicas limit and what a deferral means (the per-step, per-period and global limits
/// are the guard's).
fn limits(input: &PlanInput<'_>, plan: &Plan, tally: &Tally) {
    let pool = input.pool;
    let step = pool.max_scale_up_per_step;
    let period_room = input.launches_left_in_period();
    // Rebalancing replacements may go past max_replicas while they boot; nothing else may.
    let supplied = tally.supplied(plan);
    debug_assert!(
        supplied == 0 || tally.active + supplied <= pool.max_replicas,
        "max_replicas"
    );
    debug_assert!(
        plan.deferred == 0 || tally.wakes + tally.launches == step || tally.launches == period_room,
        "demand is deferred only by a spent per-step or per-period limit"
    );
}

/// Rebalancing launches a batch of at most a quarter of the pool, on spot, only while every
/// organic node serves, for no more than the organic on-demand nodes it replaces.
fn rebalancing(input: &PlanInput<'_>, plan: &Plan, tally: &Tally) {
    let replacements = tally.rebalance_launches(plan);
    if replacements == 0 {
        return;
    }
    let organic: Vec<&NodeView> = input
        .nodes
        .iter()
        .filter(|n| n.is_active_replica() && n.request.is_none())
        .collect();
    debug_assert!(organic.iter().all(|n| n.state == NodeState::Serving));
    let batch = (organic.len() as u32).div_ceil(4).max(1);
    debug_assert!(replacements <= batch, "one batch of a quarter of the pool");
    let on_demand = organic
        .iter()
        .filter(|n| n.market == Market::OnDemand)
        .count() as u32;
    debug_assert!(
        replacements <= on_demand,
        "a replacement per on-demand node"
    );
    for action in &plan.actions {
        if let Action::Launch {
            offering,
            request: None,
            destination: Destination::Serve,
            fallbacks,
            ..
        } = action
        {
            debug_assert_eq!(market_of(input, offering), Some(Market::Spot));
            debug_assert!(fallbacks.is_empty(), "a replacement is never a fallback");
        }
    }
}

/// Woken and released nodes exist, are in a state that allows it, and are touched once.
fn touched_nodes(
    input: &PlanInput<'_>,
    plan: &Plan,
    nodes: &BTreeMap<&NodeId, &NodeView>,
    tally: &Tally,
) {
    let mut touched = BTreeSet::new();
    let mut serving_released = 0;
    for action in &plan.actions {
        let (id, woken) = match action {
            Action::Wake { node, .. } => (node, true),
            Action::Release { node, .. } => (node, false),
            _ => continue,
        };
        debug_assert!(touched.insert(id), "{id:?} is woken or released once");
        let node = nodes.get(id);
        debug_assert!(node.is_some(), "{id:?} is a node of the input");
        let Some(node) = node else { continue };
        debug_assert!(!node.reclaiming, "a reclaimed node is left alone");
        if woken {
            let offering_available = input
                .offerings
                .iter()
                .any(|c| c.offering.id == node.offering && c.available);
            debug_assert!(node.state.is_warm(), "only a warm node wakes");
            debug_assert!(node.state == NodeState::Standby || offering_available);
        } else if node.state == NodeState::Launching {
            debug_assert!(
                node.is_active_replica() && node.request.is_none(),
                "only an organic launch is swapped for a wake"
            );
        } else if node.state == NodeState::Serving {
            debug_assert!(node.is_active_replica() && node.request.is_none());
            serving_released += 1;
        } else {
            debug_assert!(
                node.state.is_warm(),
                "only a serving, warm or still-acquiring node is released"
            );
        }
    }
    debug_assert!(
        tally.swaps <= tally.wakes,
        "a launch is swapped only for a wake"
    );
    if serving_released > 0 {
        // Scale-in keeps serving nodes for the organic target (which is at least min_replicas)
        // while the rest still climb the ladder.
        let organic_serving = input
            .nodes
            .iter()
            .filter(|n| n.is_active_replica() && n.request.is_none())
            .filter(|n| n.state == NodeState::Serving)
            .count() as u32;
        debug_assert!(serving_released + tally.organic_target <= tally.organic_have);
        debug_assert!(organic_serving >= serving_released + tally.organic_target);
    }
}

/// Releases to the warm pool only fill it to its floor, giving back parked nodes never takes it
/// below the floor, and new warm nodes only refill it to the floor.
fn warm_floor(
    input: &PlanInput<'_>,
    plan: &Plan,
    nodes: &BTreeMap<&NodeId, &NodeView>,
    tally: &Tally,
) {
    let pool = input.pool;
    let mut to_warm = 0;
    let mut given_back = 0;
    for action in &plan.actions {
        if let Action::Release { node, to_warm: t } = action {
            let warm = nodes.get(node).is_some_and(|n| n.state.is_warm());
            debug_assert!(!(warm && *t), "a warm node is given back, not parked");
            if *t {
                to_warm += 1;
            } else if warm {
                given_back += 1;
            }
        }
    }
    let warm_before = input
        .nodes
        .iter()
        .filter(|n| n.is_warm_or_warming())
        .count() as u32;
    let floor = input.warm_size();
    // Warm and warming nodes after the wakes and the releases that park.
    let kept = warm_before - tally.wakes + to_warm;
    debug_assert!(to_warm == 0 || pool.supply.reuse_on_scale_in);
    debug_assert!(
        to_warm == 0 || kept <= floor,
        "parked up to the warm pool's size"
    );
    debug_assert!(
        given_back == 0 || kept >= given_back + floor,
        "given back down to the warm pool's size"
    );
    debug_assert!(
        tally.warm_launches == 0 || kept + tally.warm_launches <= pool.warm_pool_size + given_back,
        "new warm nodes refill up to the floor only"
    );
}

/// Every unit of demand ends as exactly one wake, launch, deferral or refusal; a budget that
/// refuses refuses a request whole; `unserved` is organic demand no offering could supply.
fn demand(input: &PlanInput<'_>, plan: &Plan, tally: &Tally) {
    let mut need: BTreeMap<Option<&RequestId>, u64> = BTreeMap::new();
    for request in input.requests {
        let have = input
            .nodes
            .iter()
            .filter(|n| n.is_active_replica() && n.request.as_ref() == Some(&request.id))
            .count() as u32;
        need.insert(
            Some(&request.id),
            request.replicas.saturating_sub(have) as u64,
        );
    }
    need.insert(None, tally.organic_need() as u64);
    let mut supplied: BTreeMap<Option<&RequestId>, u64> = BTreeMap::new();
    let mut refused: BTreeMap<Option<&RequestId>, u64> = BTreeMap::new();
    let mut budget_refused = BTreeSet::new();
    let mut no_offering = 0;
    for action in &plan.actions {
        match action {
            Action::Wake { request, .. }
            | Action::Launch {
                request,
                destination: Destination::Serve,
                ..
            } => *supplied.entry(request.as_ref()).or_default() += 1,
            Action::Refuse {
                request,
                count,
                reason,
            } => {
                debug_assert!(*count > 0, "a refusal refuses something");
                debug_assert!(need.contains_key(&request.as_ref()), "refuses known demand");
                *refused.entry(request.as_ref()).or_default() += *count as u64;
                if *reason == RefusalReason::Budget {
                    budget_refused.insert(request.as_ref());
                }
                if *reason == RefusalReason::NoOffering && request.is_none() {
                    no_offering += *count;
                }
            }
            _ => {}
        }
    }
    if tally.rebalancing {
        supplied.remove(&None);
    }
    if let Some(organic) = supplied.get_mut(&None) {
        *organic -= u64::from(tally.swaps);
    }
    for (demand, wanted) in &need {
        let ended = supplied.get(demand).unwrap_or(&0) + refused.get(demand).unwrap_or(&0);
        debug_assert!(ended <= *wanted, "{demand:?} gets no more than it asks");
    }
    let total: u64 = need.values().sum();
    let ended: u64 = supplied.values().sum::<u64>() + refused.values().sum::<u64>();
    debug_assert_eq!(
        total,
        ended + plan.deferred as u64,
        "each unit of demand ends once"
    );
    if input.budget_action == HardAction::Refuse {
        for request in budget_refused.iter().filter(|r| r.is_some()) {
            debug_assert!(!supplied.contains_key(request), "refused whole");
            debug_assert_eq!(refused.get(request), need.get(request), "refused whole");
        }
    }
    debug_assert_eq!(plan.unserved, no_offering);
    if plan.unserved > 0 {
        let organic_supplied = supplied.get(&None).copied().unwrap_or(0);
        debug_assert!(
            organic_supplied + plan.unserved as u64 <= tally.organic_need() as u64,
            "unserved only when organic demand exceeds supply"
        );
    }
}

/// A limit refuses only once it is spent: max_replicas by the replicas supplied, the global
/// ceiling by the launches, the offerings by every reservation slot used and nothing bought by
/// the hour being left (a launch on one would have been possible for the refused demand too).
fn refusals(input: &PlanInput<'_>, plan: &Plan, tally: &Tally) {
    let refused = |reason: RefusalReason| {
        plan.actions
            .iter()
            .any(|a| matches!(a, Action::Refuse { reason: r, .. } if *r == reason))
    };
    if refused(RefusalReason::MaxReplicas) {
        let room = input.pool.max_replicas.saturating_sub(tally.active);
        debug_assert_eq!(tally.supplied(plan), room, "max_replicas refuses when full");
    }
    if refused(RefusalReason::GlobalCeiling) {
        debug_assert_eq!(
            Some(tally.launches),
            input.global_room,
            "the ceiling is reached"
        );
    }
    if refused(RefusalReason::Budget) {
        debug_assert!(input.budget.is_some(), "only a budget refuses for budget");
    }
    if refused(RefusalReason::NoOffering) {
        // ...or when what was bought used up a quota (then the offering was passed over after).
        let quota_short = |id: &OfferingId| plan.skipped.iter().any(|s| &s.offering == id);
        debug_assert!(
            plan.actions.iter().all(|a| match a {
                Action::Launch { offering, .. } => {
                    market_of(input, offering) == Some(Market::Reserved) || quota_short(offering)
                }
                _ => true,
            }),
            "no offering refuses only when nothing is bought by the hour"
        );
        let usable_slots: u32 = input
            .offerings
            .iter()
            .filter(|c| c.offering.market == Market::Reserved && c.available)
            .filter(|c| input.pool.offerings.contains(&c.offering.id))
            .filter_map(|c| c.reservation_free)
            .sum();
        if plan.skipped.is_empty() {
            debug_assert_eq!(
                tally.launches, usable_slots,
                "every reservation slot is used"
            );
        }
    }
}

/// Launches go to available offerings the pool allows, spot under its price cap, reserved only
/// to serve and within the reservation's free slots.
fn launch_offerings(input: &PlanInput<'_>, plan: &Plan) {
    let pool = input.pool;
    let allowed = |id: &OfferingId| {
        input.offerings.iter().any(|c| {
            &c.offering.id == id
                && c.available
                && pool.offerings.contains(id)
                && !(c.offering.market == Market::Spot
                    && pool
                        .supply
                        .spot_max_price
                        .is_some_and(|cap| c.offering.price_usd_per_hour > cap))
        })
    };
    let mut reserved: BTreeMap<&OfferingId, u32> = BTreeMap::new();
    for action in &plan.actions {
        let Action::Launch {
            offering,
            request,
            destination,
            ..
        } = action
        else {
            continue;
        };
        debug_assert!(allowed(offering), "{offering} may be launched");
        if *destination == Destination::Warm {
            debug_assert!(request.is_none(), "a warm node is for no request");
        }
        if market_of(input, offering) == Some(Market::Reserved) {
            debug_assert_eq!(*destination, Destination::Serve, "reservations serve");
            *reserved.entry(offering).or_default() += 1;
        }
    }
    for (offering, launched) in reserved {
        let free: u32 = input
            .offerings
            .iter()
            .filter(|c| &c.offering.id == offering)
            .filter_map(|c| c.reservation_free)
            .sum();
        debug_assert!(
            launched <= free,
            "{offering}: within the reservation's free slots"
        );
    }
}

fn market_of(input: &PlanInput<'_>, offering: &OfferingId) -> Option<Market> {
    input
        .offerings
        .iter()
        .find(|c| &c.offering.id == offering)
        .map(|c| c.offering.market)
}
