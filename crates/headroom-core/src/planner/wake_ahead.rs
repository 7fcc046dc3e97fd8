//! Warm nodes woken ahead of launches still being acquired.
//!
//! A launch counts toward the target from the moment it is asked for, but serves only after the
//! whole ladder; a warm node serves after the rungs after its disk. When the replicas serving or
//! past acquisition fall short of the target while warm nodes wait (a spot reclaim replaced by
//! launches, then a scale-in that parked the survivors; a stockout's retries), the pool waits a
//! cold start for capacity it holds parked. A wake is never slower than a node still being
//! acquired, so each such launch is swapped for a wake: the count stays, the capacity comes
//! sooner, and the launch is ended before it is acquired.

use super::scale_in::release_rank;
use super::{Action, Builder, NodeView};
use crate::NodeState;

impl Builder<'_> {
    /// Swaps organic launches still being acquired for wakes, as many as the target is short of
    /// replicas serving, booting or woken by this plan; the dearest launch first. Each swap
    /// spends one of the step's wakes and is refused, like any wake, when the budget cannot
    /// carry the woken node's hold. The count of replicas does not change.
    pub(super) fn wake_ahead_of_acquiring(&mut self, organic: &[&NodeView], organic_target: u32) {
        let mut acquiring: Vec<&NodeView> = organic
            .iter()
            .copied()
            .filter(|n| n.state == NodeState::Launching)
            .collect();
        if acquiring.is_empty() || self.warm.is_empty() {
            return;
        }
        let woken = self
            .plan
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Wake { request: None, .. }))
            .count() as u32;
        let sooner = organic
            .iter()
            .filter(|n| matches!(n.state, NodeState::Serving | NodeState::Booting))
            .count() as u32
            + woken;
        let short = organic_target.saturating_sub(sooner) as usize;
        acquiring.sort_by_key(|n| release_rank(n));
        for launch in acquiring.into_iter().take(short) {
            if self.step_left == 0 || !self.wake_next(None) {
                break;
            }
            // A swap adds no replica: only the step's count of wakes is spent.
            self.spend_limits(false, false);
            if launch.is_on_demand() {
                self.on_demand_have = self.on_demand_have.saturating_sub(1);
            } else {
                self.spot_have = self.spot_have.saturating_sub(1);
            }
            self.plan.actions.push(Action::Release {
                node: launch.id.clone(),
                to_warm: false,
            });
        }
    }
}
