//! The renewals phase: every running node's hold, and every parked node's (a stopped node pays
//! for its volumes), is renewed before it lapses, through the same transactional admission as a
//! launch (`Ledger::place_hold`), so a budget bounds what nodes spend, not only what they hold
//! when they start. A renewal the budget refuses applies the
//! budget's hard action to the node itself: it is stopped to warm (when its pool parks warm
//! nodes stopped, has room for one and the budget carries the park's hold) or released (a
//! parked node is), with a `budget` refusal naming the node
//! (alert `BudgetStoppedCapacity`). With `shed-lowest-tier`, lower tiers' nodes give way first
//! so that a higher tier's renewal fits.
//!
//! Runs each tick after demand is read (the budgets in force, the open requests that give each
//! node its tier) and before pools are decided, so the planner sees what is left.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use headroom_core::budget::BudgetStanding;
use headroom_core::renewal::{self, RunningHold};
use headroom_core::{
    HardAction, Money, NodeId, NodeState, PoolSpec, Priority, RefusalReason, Timestamp, WarmMode,
};
use headroom_ledger::{HoldOutcome, NodeEvent, RefusalRecord};

use super::input::TickInput;
use super::{Engine, EngineError, decide, lock};

/// When each live node's hold lapses, as this process placed it or read it back.
#[derive(Debug, Default)]
pub(super) struct RenewalBook {
    lapses: HashMap<NodeId, Timestamp>,
}

impl RenewalBook {
    /// Notes a hold just placed (a launch, a wake, a park, a renewal): it lapses at the price of
    /// the state it was placed in (the parked price for a park).
    pub fn note(&mut self, event: &NodeEvent) {
        if event.hold > Money::ZERO {
            let until = renewal::lapses_at(event.at, event.hold, event.hold_rate());
            self.lapses.insert(event.node.clone(), until);
        }
    }
}

/// Whether a node's hold is renewed in the state of its latest event: every state the cloud
/// bills compute in, from the first rung of the ladder to the end of a drain, and parked warm
/// when the node has a parked price (its volumes are billed). A node climbing its ladder within
/// the estimates never needs one (the horizon is at least twice the longest ladder,
/// `config::engine`), but one that overruns them is billed all the same.
fn renews(e: &NodeEvent) -> bool {
    e.state.is_billable() || (e.state == NodeState::Warm && e.parked_usd_per_hour > Money::ZERO)
}

impl Engine {
    /// The longest one activation of the loop may take to come round: a tick, plus one cloud
    /// call that runs to its timeout. Renewals lead a lapse by at least two of these.
    fn round(&self) -> Duration {
        self.config
            .engine
            .tick
            .saturating_add(self.config.engine.provider_timeout)
    }

    /// Renews the holds of owned pools' running and parked nodes that lapse within the renewal
    /// lead.
    pub(super) async fn renew_holds(&self, input: &mut TickInput) -> Result<(), EngineError> {
        let now = self.clock.now();
        let running: Vec<NodeEvent> = input
            .live
            .iter()
            .filter(|e| input.owned.contains(&e.pool) && renews(e))
            .filter(|e| input.budgets.contains_key(&e.account))
            .cloned()
            .collect();
        let unknown: Vec<NodeId> = {
            let mut book = lock(&self.renewals);
            let live: HashSet<&NodeId> = input.live.iter().map(|e| &e.node).collect();
            book.lapses.retain(|n, _| live.contains(n));
            running
                .iter()
                .filter(|e| !book.lapses.contains_key(&e.node))
                .map(|e| e.node.clone())
                .collect()
        };
        if !unknown.is_empty() {
            // Placed before this process took the pool (or before a restart).
            let placed = self.ledger.latest_holds(&unknown).await?;
            let mut book = lock(&self.renewals);
            placed.iter().for_each(|e| book.note(e));
        }
        let holds = self.running_holds(input, &running, now);
        let lead = renewal::renewal_lead(self.config.engine.hold_horizon, self.round());
        let due: Vec<RunningHold> = renewal::due(&holds, now, lead)
            .into_iter()
            .cloned()
            .collect();
        let mut stopped: HashSet<NodeId> = HashSet::new();
        for hold in &due {
            if !stopped.contains(&hold.node) {
                self.renew(input, hold, &holds, &mut stopped, now).await?;
            }
        }
        Ok(())
    }

    /// Each running node's hold: its tier (its request's priority) and when it lapses.
    fn running_holds(
        &self,
        input: &TickInput,
        running: &[NodeEvent],
        now: Timestamp,
    ) -> Vec<RunningHold> {
        let book = lock(&self.renewals);
        running
            .iter()
            .map(|e| {
                // A node with no hold on record has none left: it is due at once.
                let held_until = book.lapses.get(&e.node).copied().unwrap_or(now);
                let left_ms = (held_until - now).num_milliseconds().max(0);
                RunningHold {
                    node: e.node.clone(),
                    pool: e.pool.clone(),
                    tier: e
                        .request
                        .as_ref()
                        .and_then(|r| input.open.iter().find(|o| &o.id == r))
                        .map_or(Priority::Normal, |r| r.priority),
                    held_until,
                    // Never more than what the ledger says is still held: a node not billed all
                    // along holds more. Only ever used to choose who gives way.
                    held: e.hold_rate().per_hour_for_millis(left_ms),
                }
            })
            .collect()
    }

    /// Renews one node's hold, or applies the budget's hard action when it is refused.
    async fn renew(
        &self,
        input: &mut TickInput,
        hold: &RunningHold,
        holds: &[RunningHold],
        stopped: &mut HashSet<NodeId>,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        let Some(last) = input.node(&hold.node).cloned().filter(renews) else {
            return Ok(());
        };
        // At the price of the state the node is in: a parked node holds for its volumes.
        let amount = last
            .hold_rate()
            .per_hour_for(self.config.engine.hold_horizon);
        let renewal = NodeEvent::hold_renewal(&last, amount, now);
        let HoldOutcome::OverBudget(standing) = self.place_hold(input, &renewal).await? else {
            return Ok(());
        };
        let shed = input
            .budgets
            .get(&last.account)
            .is_some_and(|b| b.hard_action == HardAction::ShedLowestTier);
        if shed {
            let shortfall = (standing.spent + standing.held + amount.saturating_sub(hold.held))
                .saturating_sub(standing.ceiling);
            let peers: Vec<RunningHold> = holds
                .iter()
                .filter(|h| !stopped.contains(&h.node))
                .filter(|h| {
                    input
                        .node(&h.node)
                        .is_some_and(|e| e.account == last.account)
                })
                .cloned()
                .collect();
            let giving_way = renewal::give_way(&peers, hold, shortfall);
            if !giving_way.is_empty() {
                for other in giving_way {
                    let detail = format!(
                        "node {} ({} tier) stopped for budget: it gives way to node {} ({} tier), whose hold renewal account {} cannot carry otherwise",
                        other.node,
                        other.tier.as_str(),
                        hold.node,
                        hold.tier.as_str(),
                        last.account
                    );
                    self.stop_for_budget(input, &other.node, detail).await?;
                    stopped.insert(other.node.clone());
                }
                if let HoldOutcome::Placed = self.place_hold(input, &renewal).await? {
                    return Ok(());
                }
            }
        }
        let detail = renewal_refused_detail(&last, amount, &standing);
        self.stop_for_budget(input, &hold.node, detail).await?;
        stopped.insert(hold.node.clone());
        Ok(())
    }

    /// The budget's hard action on one running node: a `budget` refusal naming it, then stopped
    /// to warm when its pool parks warm nodes stopped and has room, else released.
    async fn stop_for_budget(
        &self,
        input: &mut TickInput,
        node: &NodeId,
        detail: String,
    ) -> Result<(), EngineError> {
        let Some(last) = input.node(node).cloned() else {
            return Ok(());
        };
        let Some(pool) = self.config.pool(&last.pool) else {
            return Ok(());
        };
        tracing::warn!(pool = %pool.name, node = %node, %detail, "hold renewal refused");
        self.record_budget_refusal(input, pool, &last, detail)
            .await?;
        let to_warm = last.state == NodeState::Serving
            && pool.supply.warm_mode == WarmMode::Stopped
            && decide::warm_count(input, &pool.name) < pool.warm_ceiling();
        if matches!(
            last.state,
            NodeState::Warm | NodeState::Standby | NodeState::Booting | NodeState::Draining
        ) {
            // Nothing to drain (warm, still climbing) or a drain the budget cannot wait for.
            return self.terminate_node(input, &last, "budget").await;
        }
        self.release(input, node, to_warm).await
    }

    /// A `budget` refusal naming `last`'s node (counted, and closing its request): the budget
    /// refused a hold the node needs to go on (a renewal, a park).
    pub(super) async fn record_budget_refusal(
        &self,
        input: &mut TickInput,
        pool: &PoolSpec,
        last: &NodeEvent,
        detail: String,
    ) -> Result<(), EngineError> {
        self.metrics
            .refusals
            .get_or_create(&crate::metrics::RefusalLabels {
                pool: pool.name.to_string(),
                account: pool.account.to_string(),
                reason: RefusalReason::Budget.code(),
                provider: last.provider.to_string(),
                offering: last.offering.to_string(),
            })
            .inc();
        self.append_refusal(
            input,
            &RefusalRecord {
                pool: pool.name.clone(),
                request: last.request.clone(),
                node: Some(last.node.clone()),
                offering: Some(last.offering.clone()),
                replicas: 1,
                reason: RefusalReason::Budget,
                detail,
                at: self.clock.now(),
            },
        )
        .await?;
        if let Some(request) = &last.request {
            input.close_request(request);
        }
        Ok(())
    }
}

fn renewal_refused_detail(last: &NodeEvent, amount: Money, standing: &BudgetStanding) -> String {
    node_refused_detail(
        last,
        "stopped",
        &format!("renewing its hold for ${amount}"),
        standing,
    )
}

/// Why a hold `last`'s node needs was refused: what became of the node (`outcome`) and what
/// the hold was for (`holding`).
pub(super) fn node_refused_detail(
    last: &NodeEvent,
    outcome: &str,
    holding: &str,
    standing: &BudgetStanding,
) -> String {
    format!(
        "node {} of pool {} {outcome} for budget: {holding} would take account {} over its ${} ceiling (${} spent, ${} held); raise the ceiling (PUT /v1/budgets/{}) or wait for the next period",
        last.node,
        last.pool,
        last.account,
        standing.ceiling,
        standing.spent,
        standing.held,
        last.account
    )
}
