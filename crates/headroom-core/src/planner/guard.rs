//! The plan's promises about money and instances, checked in every build (release too) before
//! the executor applies a plan: every launch and wake carries its hold (its price for the hold
//! horizon), the holds fit in what the budget has left, and the plan adds no more nodes than the
//! per-step limit, the per-period limit and the global ceiling allow. The debug postconditions check much more; these
//! are the ones whose failure would spend money or buy instances nobody allowed, so a release
//! build refuses the plan rather than trust it. A violation is a planner bug, not bad input.

use std::fmt;

use super::{Action, Plan, PlanInput};
use crate::Money;

/// Which promise a plan broke, with the numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// `hold`, `budget`, `per_step`, `per_period` or `global_ceiling`.
    pub invariant: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

/// Checks `plan` against the money and instance invariants of its `input`.
pub fn check(input: &PlanInput<'_>, plan: &Plan) -> Result<(), Violation> {
    let total = holds(input, plan)?;
    budget(input, total)?;
    node_limits(input, plan)
}

/// Every launch and wake holds its price for the hold horizon: no node without its hold. Returns
/// the plan's holds.
fn holds(input: &PlanInput<'_>, plan: &Plan) -> Result<Option<Money>, Violation> {
    let mut total = None::<Money>;
    for action in &plan.actions {
        let (what, hold, price) = match action {
            Action::Wake { node, hold, .. } => (
                format!("wake of {node}"),
                *hold,
                input
                    .nodes
                    .iter()
                    .find(|n| &n.id == node)
                    .map(|n| n.price_usd_per_hour),
            ),
            Action::Launch { offering, hold, .. } => (
                format!("launch on {offering}"),
                *hold,
                input
                    .offerings
                    .iter()
                    .find(|c| &c.offering.id == offering)
                    .map(|c| c.offering.price_usd_per_hour),
            ),
            Action::Release { .. } | Action::Refuse { .. } => continue,
        };
        let expected = price.map(|p| p.per_hour_for(input.hold_horizon));
        if expected != Some(hold) {
            return Err(Violation {
                invariant: "hold",
                detail: match expected {
                    Some(expected) => format!(
                        "{what} holds ${hold}, not its price for the hold horizon (${expected})"
                    ),
                    None => format!("{what} names nothing the plan's input priced"),
                },
            });
        }
        total = Some(total.unwrap_or(Money::ZERO) + hold);
    }
    Ok(total)
}

/// The plan's holds fit in what the budget has left after its spend and its other holds.
fn budget(input: &PlanInput<'_>, total: Option<Money>) -> Result<(), Violation> {
    let (Some(standing), Some(total)) = (input.budget, total) else {
        return Ok(());
    };
    if standing.spent + standing.held + total > standing.ceiling {
        return Err(Violation {
            invariant: "budget",
            detail: format!(
                "the plan holds ${total} where the budget has ${} left",
                standing.remaining()
            ),
        });
    }
    Ok(())
}

/// Launches and wakes within the per-step limit, launches within the per-period limit and the
/// global ceiling.
fn node_limits(input: &PlanInput<'_>, plan: &Plan) -> Result<(), Violation> {
    let launches = plan
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Launch { .. }))
        .count() as u32;
    let wakes = plan
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Wake { .. }))
        .count() as u32;
    let step = input.pool.max_scale_up_per_step;
    if launches + wakes > step {
        return Err(Violation {
            invariant: "per_step",
            detail: format!(
                "{launches} launches and {wakes} wakes past the per-step limit of {step}"
            ),
        });
    }
    let period_left = input.launches_left_in_period();
    if let Some(max) = input.pool.supply.max_launches_per_period
        && launches > period_left
    {
        return Err(Violation {
            invariant: "per_period",
            detail: format!(
                "{launches} launches where the period's limit of {max} leaves room for {period_left}"
            ),
        });
    }
    if let Some(room) = input.global_room
        && launches > room
    {
        return Err(Violation {
            invariant: "global_ceiling",
            detail: format!("{launches} launches where the global ceiling leaves room for {room}"),
        });
    }
    Ok(())
}
