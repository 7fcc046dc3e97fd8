//! Scale-in: which serving nodes go when the pool has more organic replicas than it wants.

use std::cmp::Reverse;

use super::{Action, Builder, NodeView};
use crate::{Market, Money, NodeState};

impl Builder<'_> {
    /// Releases the organic surplus: only serving nodes go (a node still climbing the ladder
    /// finishes first), the dearest first; into the warm pool while it is below its size, if
    /// the pool reuses them (a parked node costs its disk only, and wakes in the rungs after
    /// it).
    pub(super) fn scale_in(
        &mut self,
        organic: &[&NodeView],
        organic_target: u32,
        warm_have: &mut u32,
    ) {
        let pool = self.input.pool;
        let organic_have = organic.len() as u32;
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
            let to_warm = pool.supply.reuse_on_scale_in && *warm_have < self.input.warm_size();
            if to_warm {
                *warm_have += 1;
            }
            self.plan.actions.push(Action::Release {
                node: node.id.clone(),
                to_warm,
            });
        }
    }
}

/// Scale-in order: the dearest capacity goes first — on-demand, then spot, then reserved (already
/// paid for) — and the most expensive within each.
pub(super) fn release_rank(node: &NodeView) -> (u8, Reverse<Money>) {
    let market = match node.market {
        Market::OnDemand => 0,
        Market::Spot => 1,
        Market::Reserved => 2,
    };
    (market, Reverse(node.price_usd_per_hour))
}
