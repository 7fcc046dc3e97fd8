//! The governor's checks as the plan is built: max replicas, the global ceiling, the per-step
//! and per-period launch limits, and the budget (with its hard action).

use super::{Action, Builder, Supply};
use crate::budget::HardAction;
use crate::{Money, RefusalReason, RequestId};

impl Builder<'_> {
    /// What a wake or launch holds against the budget: its price for the hold horizon.
    pub(super) fn hold_for(&self, price: Money) -> Money {
        price.per_hour_for(self.input.hold_horizon)
    }

    /// Holds `hold` against the budget if it fits under the ceiling.
    pub(super) fn admit(&mut self, hold: Money) -> bool {
        match &mut self.budget {
            None => true,
            Some(standing) if standing.admits(hold) => {
                standing.held += hold;
                true
            }
            Some(_) => false,
        }
    }

    /// The governor's limits on one more node, in the order an operator reads them. The global
    /// ceiling counts nodes, so it limits launches only: a warm node woken is already counted.
    pub(super) fn governor(&self, counts_as_replica: bool, launches: bool) -> Option<Supply> {
        if counts_as_replica && self.replica_room == 0 {
            return Some(Supply::Refused(RefusalReason::MaxReplicas));
        }
        if launches && self.global_room == Some(0) {
            return Some(Supply::Refused(RefusalReason::GlobalCeiling));
        }
        if self.step_left == 0 {
            return Some(Supply::Deferred);
        }
        None
    }

    /// Counts one wake (`launched` false) or launch against the limits it uses.
    pub(super) fn spend_limits(&mut self, counts_as_replica: bool, launched: bool) {
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

    /// Supplies a capacity request, all or nothing when the budget's hard action is `Refuse`.
    pub(super) fn supply_request(&mut self, request: &RequestId, count: u32) {
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
}
