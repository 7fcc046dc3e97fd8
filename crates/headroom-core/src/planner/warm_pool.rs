//! The warm pool's size: what is left after the plan's wakes, parked nodes given back when the
//! size came down, and new warm nodes to refill it.

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

    /// A warm pool above its size (the recent bursts no longer call for it, or the floor was
    /// lowered) gives back its dearest nodes.
    pub(super) fn give_back_warm_above_target(&mut self, warm_have: &mut u32) {
        let floor = self.input.warm_size();
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

    /// Refills the warm pool to its floor with whatever the limits leave; above the floor it
    /// grows only by parking serving nodes scale-in releases (they are already up, so parking
    /// costs nothing but a disk, while a new warm node pays a whole cold climb). Warm nodes do
    /// not count as replicas.
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
