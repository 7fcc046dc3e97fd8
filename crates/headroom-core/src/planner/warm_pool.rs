//! The warm pool's floor: what is left after the plan's wakes, parked nodes given back when the
//! floor was lowered, and new warm nodes to refill it.

use super::scale_in::release_rank;
use super::{Action, Builder, Destination, NodeView, Supply};

impl Builder<'_> {
    /// Warm and warming nodes the pool keeps after the plan's wakes so far.
    pub(super) fn warm_left_after_wakes(&self) -> u32 {
        let woken = self
            .plan
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Wake { .. }))
            .count() as u32;
        (self
            .input
            .nodes
            .iter()
            .filter(|n| n.is_warm_or_warming())
            .count() as u32)
            .saturating_sub(woken)
    }

    /// A warm pool above its floor (the floor was lowered) gives back its dearest nodes.
    pub(super) fn give_back_warm_above_floor(&mut self, warm_have: &mut u32) {
        let floor = self.input.pool.warm_pool_size;
        if *warm_have <= floor {
            return;
        }
        let mut parked: Vec<&NodeView> = self.warm.clone();
        parked.sort_by_key(|n| release_rank(n));
        for node in parked.into_iter().take((*warm_have - floor) as usize) {
            self.plan.actions.push(Action::Release {
                node: node.id.clone(),
                to_warm: false,
            });
            *warm_have -= 1;
        }
    }

    /// Refills the warm pool with whatever the limits leave. Warm nodes do not count as replicas.
    pub(super) fn refill_warm_pool(&mut self, mut warm_have: u32) {
        let floor = self.input.pool.warm_pool_size;
        while warm_have < floor && self.governor(false, true).is_none() && self.period_left > 0 {
            if !matches!(self.launch(None, Destination::Warm), Supply::Supplied) {
                break;
            }
            self.spend_limits(false, true);
            warm_have += 1;
        }
    }
}
