//! Values derived from ledger rows. Pure functions: the backends fetch rows, these compute.

use std::collections::BTreeMap;

use headroom_core::budget::BudgetStanding;
use headroom_core::cost::{StateSpan, accrued};
use headroom_core::{AccountName, Budget, Money, NodeId, Timestamp};

use crate::NodeEvent;

/// Events grouped per node, in ledger order.
pub fn histories(events: &[NodeEvent]) -> BTreeMap<&NodeId, Vec<&NodeEvent>> {
    let mut by_node: BTreeMap<&NodeId, Vec<&NodeEvent>> = BTreeMap::new();
    for event in events {
        by_node.entry(&event.node).or_default().push(event);
    }
    by_node
}

fn spans(history: &[&NodeEvent]) -> Vec<StateSpan> {
    history
        .iter()
        .map(|e| StateSpan {
            at: e.at,
            state: e.state,
            price_usd_per_hour: e.price_usd_per_hour,
        })
        .collect()
}

/// Spend of one node up to `until`.
pub fn node_spend(history: &[&NodeEvent], until: Timestamp) -> Money {
    accrued(&spans(history), until)
}

/// Money still held for one node: the hold of its current activation less what that activation
/// has cost so far. Released (zero) once the node is final or parked warm (stopped, not billed);
/// a wake places a new hold.
pub fn node_held(history: &[&NodeEvent], until: Timestamp) -> Money {
    let Some(last) = history.last() else {
        return Money::ZERO;
    };
    if last.state.is_final() || last.state == headroom_core::NodeState::Warm {
        return Money::ZERO;
    }
    let Some(start) = history.iter().rposition(|e| e.hold > Money::ZERO) else {
        return Money::ZERO;
    };
    let since = &history[start..];
    let cost = node_spend(since, until);
    since[0].hold.saturating_sub(cost).max(Money::ZERO)
}

/// Total spend up to `until`, optionally for one account and from `from`.
pub fn spend(
    events: &[NodeEvent],
    account: Option<&AccountName>,
    from: Option<Timestamp>,
    until: Timestamp,
) -> Money {
    histories(events)
        .values()
        .filter(|h| account.is_none_or(|a| &h[0].account == a))
        .map(|h| {
            let total = node_spend(h, until);
            match from {
                Some(from) => total - node_spend(h, from.min(until)),
                None => total,
            }
        })
        .sum()
}

/// Open holds at `until`, optionally for one account.
pub fn held(events: &[NodeEvent], account: Option<&AccountName>, until: Timestamp) -> Money {
    histories(events)
        .values()
        .filter(|h| account.is_none_or(|a| &h[0].account == a))
        .map(|h| node_held(h, until))
        .sum()
}

/// Where `budget`'s account stands at `now`: spend within the period containing `now`, and every
/// hold still open. `events` may hold other accounts' events; they are ignored.
pub fn standing(events: &[NodeEvent], budget: &Budget, now: Timestamp) -> BudgetStanding {
    let (period_start, _) = budget.period.bounds(now);
    BudgetStanding {
        ceiling: budget.ceiling,
        spent: spend(events, Some(&budget.account), Some(period_start), now),
        held: held(events, Some(&budget.account), now),
    }
}
