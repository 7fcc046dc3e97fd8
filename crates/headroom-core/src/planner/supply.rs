//! The order of supply: warm nodes to wake, offerings ranked by price and recent refusals, the
//! market policy's split between on-demand and spot, and one replica at a time through the
//! governor.

use std::cmp::Reverse;

use super::{
    Action, Builder, Destination, FallbackKind, NodeView, OfferingChoice, OpenRequest, Plan,
    PlanInput, SkipReason, SkippedOffering, Supply,
};
use crate::{Market, NodeState, Offering, OfferingId, RefusalReason, RequestId};

impl<'a> Builder<'a> {
    /// Starts a plan with the pool's supply in order and every limit at what `input` allows.
    pub(super) fn new(input: &'a PlanInput<'a>, active: &[&NodeView]) -> Builder<'a> {
        let pool = input.pool;
        let policy = &pool.supply;
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
        // Best rank first; prices within a percent of each other are the same price, and the
        // pool's preference order (a stable sort) decides between them: pennies an hour should
        // not send launches to the region the pool lists as its fallback.
        offerings.sort_by_key(|(c, _)| price_band(c.rank_price()));
        let first = |market: Market| {
            input
                .offerings
                .iter()
                .filter(allowed)
                .filter(|c| c.offering.market == market)
                .min_by_key(|c| price_band(c.offering.price_usd_per_hour.micros() as i128))
                .map(|c| &c.offering)
        };
        let period_left = input.launches_left_in_period();
        Builder {
            input,
            plan: Plan::default(),
            step_left: pool.max_scale_up_per_step,
            period_left,
            replica_room: pool.max_replicas.saturating_sub(active.len() as u32),
            global_room: input.global_room,
            warm: wake_order(input),
            offerings,
            first_on_demand: first(Market::OnDemand),
            first_spot: first(Market::Spot),
            on_demand_have: active.iter().filter(|n| n.is_on_demand()).count() as u32,
            spot_have: active.iter().filter(|n| !n.is_on_demand()).count() as u32,
            budget: input.budget,
            quota_left: input.quotas.iter().map(|q| q.remaining()).collect(),
        }
    }

    /// The first quota that cannot take one more node of `offering`, with one node's draw.
    pub(super) fn quota_short(&self, offering: &OfferingId) -> Option<(usize, u32)> {
        self.input.quotas.iter().enumerate().find_map(|(i, q)| {
            let per_node = q.draw(offering)?;
            (self.quota_left[i] < u64::from(per_node)).then_some((i, per_node))
        })
    }

    /// Takes one node of `offering` off every quota that covers it.
    pub(super) fn draw_quota(&mut self, offering: &OfferingId) {
        for (i, q) in self.input.quotas.iter().enumerate() {
            if let Some(per_node) = q.draw(offering) {
                self.quota_left[i] = self.quota_left[i].saturating_sub(u64::from(per_node));
            }
        }
    }

    /// The best-ranked offering `wanted` accepts that every quota can take, recording those
    /// passed over for quota on the way.
    fn first_fitting(
        &mut self,
        wanted: impl Fn(&OfferingChoice, Option<u32>) -> bool,
    ) -> Option<usize> {
        for i in 0..self.offerings.len() {
            let (choice, free) = self.offerings[i];
            if !wanted(choice, free) {
                continue;
            }
            let Some((quota, per_node)) = self.quota_short(&choice.offering.id) else {
                return Some(i);
            };
            if !self
                .plan
                .skipped
                .iter()
                .any(|s| s.offering == choice.offering.id)
            {
                self.plan.skipped.push(SkippedOffering {
                    offering: choice.offering.id.clone(),
                    reason: SkipReason::Quota,
                    quota: self.input.quotas[quota].name.clone(),
                    remaining: self.quota_left[quota],
                    per_node,
                });
            }
        }
        None
    }

    /// Capacity requests first, highest priority then oldest, each for what its own active
    /// nodes do not already cover.
    pub(super) fn supply_requests(&mut self, active: &[&NodeView]) {
        let mut requests: Vec<&OpenRequest> = self.input.requests.iter().collect();
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
            self.supply_request(&request.id, request.replicas.saturating_sub(have));
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

    /// The best available offering for a new node that its quotas can take: a reservation
    /// slot, else the wanted market, else the other one (on-demand when spot is refused, and the
    /// other way round).
    fn choose(&mut self, destination: Destination) -> Option<usize> {
        // Reservations serve; warm nodes wait on capacity bought by the hour.
        if destination == Destination::Serve {
            let slot = self.first_fitting(|c, free| {
                c.offering.market == Market::Reserved && free.is_some_and(|f| f > 0)
            });
            if slot.is_some() {
                return slot;
            }
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
        [first, second]
            .into_iter()
            .find_map(|market| self.first_fitting(|c, _| c.offering.market == market))
    }

    fn first_choice(&self, market: Market) -> Option<&'a Offering> {
        match market {
            Market::Spot => self.first_spot,
            _ => self.first_on_demand,
        }
    }

    /// Launches one node on the best offering, or says why not.
    pub(super) fn launch(
        &mut self,
        request: Option<&RequestId>,
        destination: Destination,
    ) -> Supply {
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
        self.draw_quota(&offering.id);
        let wanted = if self.wants_spot() {
            Market::Spot
        } else {
            Market::OnDemand
        };
        let fallbacks = match offering.market {
            Market::Reserved => Vec::new(),
            _ => self
                .first_choice(wanted)
                .or(self.first_choice(offering.market))
                .map(|first| FallbackKind::between(first, offering))
                .unwrap_or_default(),
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
            fallbacks,
        });
        Supply::Supplied
    }

    /// Wakes the next warm node for `request` (the limits are the caller's to spend), or says
    /// false when there is none or the budget cannot carry its hold.
    pub(super) fn wake_next(&mut self, request: Option<&RequestId>) -> bool {
        let Some(node) = self.warm.last().copied() else {
            return false;
        };
        let hold = self.hold_for(node.price_usd_per_hour);
        if !self.admit(hold) {
            return false;
        }
        self.warm.pop();
        // A stopped node starts again against the running-instance quota.
        if node.state != NodeState::Standby {
            self.draw_quota(&node.offering);
        }
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
        true
    }

    /// Supplies one ready replica for `request`, or says why not.
    fn supply_one(&mut self, request: Option<&RequestId>) -> Supply {
        let wakes = !self.warm.is_empty();
        if let Some(stop) = self.governor(true, !wakes) {
            return stop;
        }
        if !self.warm.is_empty() {
            if !self.wake_next(request) {
                return Supply::Refused(RefusalReason::Budget);
            }
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

    /// Supplies `count` replicas; the first refusal covers the rest of the count. Returns the
    /// count refused for want of any offering.
    pub(super) fn supply(&mut self, request: Option<&RequestId>, count: u32) -> u32 {
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

/// Wake order: running warm nodes first (instant), then stopped ones, cheapest first within
/// each; the vector is popped from the back.
fn wake_order<'a>(input: &PlanInput<'a>) -> Vec<&'a NodeView> {
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
    warm
}

/// A price's band: prices a percent apart or less mostly share one (log-scale buckets).
fn price_band(micros: i128) -> i64 {
    ((micros.max(1) as f64).ln() / 1.01f64.ln()).floor() as i64
}
