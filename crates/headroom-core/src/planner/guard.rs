//! The plan's promises about money and instances, checked in every build (release too) before
//! the executor applies a plan: every launch and wake carries its hold (its price for the hold
//! horizon), the holds fit in what the budget has left, and the plan adds no more nodes than the
//! per-step limit, the per-period limit and the global ceiling allow. The debug postconditions check much more; these
//! are the ones whose failure would spend money or buy instances nobody allowed, so a release
//! build refuses the plan rather than trust it. A violation is a planner bug, not bad input.
//!
//! A launch's client token is minted by the executor, not the plan, so [`fresh_client_token`]
//! checks it where it is minted, before its hold is placed and its cloud call sent.

use super::{Action, Plan, PlanInput};
use crate::{AccountName, Money, NodeId, PoolName};

/// Which promise a plan (or a launch of it) broke, naming the pool and the numbers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanViolation {
    #[error(
        "pool {pool}: {action} holds ${hold}, not its price for the hold horizon (${expected})"
    )]
    WrongHold {
        pool: PoolName,
        /// `wake of <node>` or `launch on <offering>`.
        action: String,
        hold: Money,
        expected: Money,
    },
    #[error("pool {pool}: {action} names nothing the plan's input priced")]
    Unpriced { pool: PoolName, action: String },
    #[error(
        "pool {pool}: the plan holds ${holds} where account {account}'s budget has ${remaining} left (${spent} spent, ${held} held of its ${ceiling} ceiling)"
    )]
    PastBudget {
        pool: PoolName,
        account: AccountName,
        holds: Money,
        remaining: Money,
        ceiling: Money,
        spent: Money,
        held: Money,
    },
    #[error(
        "pool {pool}: {launches} launches and {wakes} wakes past the per-step limit of {limit}"
    )]
    PerStep {
        pool: PoolName,
        launches: u32,
        wakes: u32,
        limit: u32,
    },
    #[error(
        "pool {pool}: {launches} launches where the period's limit of {limit} leaves room for {room}"
    )]
    PerPeriod {
        pool: PoolName,
        launches: u32,
        limit: u32,
        room: u32,
    },
    #[error("pool {pool}: {launches} launches where the global ceiling leaves room for {room}")]
    GlobalCeiling {
        pool: PoolName,
        launches: u32,
        room: u32,
    },
    #[error(
        "pool {pool}: the launch of node {node} would send client token {token}, which live node {live} of pool {live_pool} carries"
    )]
    SharedClientToken {
        pool: PoolName,
        node: NodeId,
        token: String,
        live: NodeId,
        live_pool: PoolName,
    },
}

impl PlanViolation {
    /// Every [`PlanViolation::invariant`], for metrics that start at zero.
    pub const INVARIANTS: [&'static str; 6] = [
        "hold",
        "budget",
        "per_step",
        "per_period",
        "global_ceiling",
        "client_token",
    ];

    /// The invariant broken, as a metric label: one of [`PlanViolation::INVARIANTS`].
    pub fn invariant(&self) -> &'static str {
        match self {
            PlanViolation::WrongHold { .. } | PlanViolation::Unpriced { .. } => "hold",
            PlanViolation::PastBudget { .. } => "budget",
            PlanViolation::PerStep { .. } => "per_step",
            PlanViolation::PerPeriod { .. } => "per_period",
            PlanViolation::GlobalCeiling { .. } => "global_ceiling",
            PlanViolation::SharedClientToken { .. } => "client_token",
        }
    }
}

/// Checks `plan` against the money and instance invariants of its `input`.
pub fn check(input: &PlanInput<'_>, plan: &Plan) -> Result<(), PlanViolation> {
    let total = holds(input, plan)?;
    budget(input, total)?;
    node_limits(input, plan)
}

/// A launch of `node` about to send `token` (on behalf of `pool`): no live node, of any pool,
/// is that node or carries that token. Otherwise the cloud answers with the live node's
/// instance (the token is its idempotency key) and two ledger nodes claim one instance. Only a
/// repeated id can cause it (a seeded id source run twice on one ledger).
pub fn fresh_client_token<'a>(
    pool: &PoolName,
    node: &NodeId,
    token: &str,
    live: impl IntoIterator<Item = (&'a NodeId, &'a PoolName, &'a str)>,
) -> Result<(), PlanViolation> {
    match live
        .into_iter()
        .find(|(id, _, carried)| *id == node || *carried == token)
    {
        Some((id, live_pool, _)) => Err(PlanViolation::SharedClientToken {
            pool: pool.clone(),
            node: node.clone(),
            token: token.to_string(),
            live: id.clone(),
            live_pool: live_pool.clone(),
        }),
        None => Ok(()),
    }
}

/// Every launch and wake holds its price for the hold horizon: no node without its hold. Returns
/// the plan's holds.
fn holds(input: &PlanInput<'_>, plan: &Plan) -> Result<Option<Money>, PlanViolation> {
    let mut total = None::<Money>;
    for action in &plan.actions {
        let (action, hold, price) = match action {
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
        let pool = input.pool.name.clone();
        let Some(expected) = price.map(|p| p.per_hour_for(input.hold_horizon)) else {
            return Err(PlanViolation::Unpriced { pool, action });
        };
        if expected != hold {
            return Err(PlanViolation::WrongHold {
                pool,
                action,
                hold,
                expected,
            });
        }
        total = Some(total.unwrap_or(Money::ZERO) + hold);
    }
    Ok(total)
}

/// The plan's holds fit in what the budget has left after its spend and its other holds.
fn budget(input: &PlanInput<'_>, total: Option<Money>) -> Result<(), PlanViolation> {
    let (Some(standing), Some(total)) = (input.budget, total) else {
        return Ok(());
    };
    if !standing.admits(total) {
        return Err(PlanViolation::PastBudget {
            pool: input.pool.name.clone(),
            account: input.pool.account.clone(),
            holds: total,
            remaining: standing.remaining(),
            ceiling: standing.ceiling,
            spent: standing.spent,
            held: standing.held,
        });
    }
    Ok(())
}

/// Launches and wakes within the per-step limit, launches within the per-period limit and the
/// global ceiling.
fn node_limits(input: &PlanInput<'_>, plan: &Plan) -> Result<(), PlanViolation> {
    let pool = input.pool.name.clone();
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
    let limit = input.pool.max_scale_up_per_step;
    if launches + wakes > limit {
        return Err(PlanViolation::PerStep {
            pool,
            launches,
            wakes,
            limit,
        });
    }
    let room = input.launches_left_in_period();
    if let Some(limit) = input.pool.supply.max_launches_per_period
        && launches > room
    {
        return Err(PlanViolation::PerPeriod {
            pool,
            launches,
            limit,
            room,
        });
    }
    if let Some(room) = input.global_room
        && launches > room
    {
        return Err(PlanViolation::GlobalCeiling {
            pool,
            launches,
            room,
        });
    }
    Ok(())
}
