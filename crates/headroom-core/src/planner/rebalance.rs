//! Rebalancing back to spot: make-before-break replacements for on-demand nodes above the
//! pool's spot share, once spot is available and cheaper again.

use super::{Action, Builder, Destination, NodeView};
use crate::{Market, NodeState};

impl Builder<'_> {
    /// Launches spot replacements for on-demand nodes above the pool's spot share, when the best
    /// available spot offering is cheaper than the on-demand node it would replace. Only while
    /// every organic node serves (one batch at a time, each at most a quarter of the pool): the
    /// replacements are surplus, and scale-in releases the dearest serving node — on-demand —
    /// once each of them serves. Never falls back to on-demand and never refuses: it is an
    /// optimisation, not demand. A pool at `max_replicas` goes past it by the batch meanwhile.
    pub(super) fn rebalance_to_spot(&mut self, organic: &[&NodeView]) {
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
            if self.governor(false, true).is_some() || self.period_left == 0 {
                return;
            }
            let hold = self.hold_for(spot.offering.price_usd_per_hour);
            // An optimisation waits for quota; it never records a skip.
            if self.quota_short(&spot.offering.id).is_some() || !self.admit(hold) {
                return;
            }
            self.draw_quota(&spot.offering.id);
            self.plan.actions.push(Action::Launch {
                offering: spot.offering.id.clone(),
                request: None,
                destination: Destination::Serve,
                hold,
                fallbacks: Vec::new(),
            });
            self.spend_limits(false, true);
            // Counted as if the on-demand node it replaces were already gone.
            self.spot_have += 1;
            self.on_demand_have -= 1;
            dearer_on_demand -= 1;
        }
    }
}
