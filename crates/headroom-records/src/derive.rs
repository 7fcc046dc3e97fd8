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
            parked_usd_per_hour: e.parked_usd_per_hour,
        })
        .collect()
}

/// The instant a ledger's figures are computed to when read at `now`: `now`, or the ledger's
/// latest entry when that is later. A ledger written on a scaled or skewed clock (the demo's,
/// another replica's) holds entries ahead of the reader's clock; its figures never go back.
/// Every reader of spend (the summary, reports, budgets) takes its instant from here.
pub fn as_of(events: &[NodeEvent], now: Timestamp) -> Timestamp {
    events.iter().map(|e| e.at).fold(now, Timestamp::max)
}

/// Spend of one node up to `until`.
pub fn node_spend(history: &[&NodeEvent], until: Timestamp) -> Money {
    let spend = accrued(&spans(history), until);
    // Prices are never negative (the config refuses them), so neither is what they add up to.
    debug_assert!(spend >= Money::ZERO, "a node spent {spend}");
    spend
}

/// Money still held for one node: its latest hold (a launch's, a wake's, a park's, a renewal's)
/// less what the node has cost since. Released (zero) once the node is final. A node parked warm
/// pays for its volumes and keeps the hold its park placed (renewed like a running node's);
/// one parked without a parked price (its events written before the ledger recorded one) costs
/// nothing parked and holds nothing, as parked nodes did then.
pub fn node_held(history: &[&NodeEvent], until: Timestamp) -> Money {
    let Some(last) = history.last() else {
        return Money::ZERO;
    };
    let unpriced_park =
        last.state == headroom_core::NodeState::Warm && last.parked_usd_per_hour == Money::ZERO;
    if last.state.is_final() || unpriced_park {
        return Money::ZERO;
    }
    let Some(start) = history.iter().rposition(|e| e.hold > Money::ZERO) else {
        return Money::ZERO;
    };
    let since = &history[start..];
    let cost = node_spend(since, until);
    let held = since[0].hold.saturating_sub(cost).max(Money::ZERO);
    debug_assert!(held <= since[0].hold, "held {held} over the hold placed");
    held
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
                Some(from) => {
                    let before = node_spend(h, from.min(until));
                    // Accrual only grows with time, so a window's spend is never negative.
                    debug_assert!(before <= total, "spend fell from {before} to {total}");
                    total - before
                }
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
        .map(|h| {
            let held = node_held(h, until);
            // A final node has released its hold: no money is held for a node that is gone.
            debug_assert!(
                held == Money::ZERO || h.last().is_some_and(|e| !e.state.is_final()),
                "node {} is final but holds {held}",
                h[0].node
            );
            held
        })
        .sum()
}

/// Where `budget`'s account stands at `now`: spend within the period containing `now`, and every
/// hold still open. `events` may hold other accounts' events; they are ignored.
pub fn standing(events: &[NodeEvent], budget: &Budget, now: Timestamp) -> BudgetStanding {
    let (period_start, _) = budget.period.bounds(now);
    let standing = BudgetStanding {
        ceiling: budget.ceiling,
        spent: spend(events, Some(&budget.account), Some(period_start), now),
        held: held(events, Some(&budget.account), now),
    };
    debug_assert!(standing.spent >= Money::ZERO && standing.held >= Money::ZERO);
    // Money arithmetic saturates; remaining is the ceiling less both, and the governor's
    // admission test agrees with it.
    debug_assert_eq!(
        standing.remaining(),
        budget
            .ceiling
            .saturating_sub(standing.spent)
            .saturating_sub(standing.held)
    );
    debug_assert_eq!(
        standing.admits(Money::ZERO),
        standing.remaining() >= Money::ZERO
    );
    standing
}

/// Requested versus delivered for a set of capacity requests.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Fill {
    pub requested: u32,
    pub delivered: u32,
    /// Replicas refused by a closing refusal (budget, max replicas, no offering).
    pub refused: u32,
    pub refused_by_reason: BTreeMap<String, u32>,
    /// Neither delivered nor refused yet (or cancelled before either).
    pub pending: u32,
    /// Delivered over requested; 1 when nothing was requested.
    pub fill_ratio: f64,
    /// From the request to each delivered replica's first moment serving.
    pub time_to_capacity_p50_s: Option<f64>,
    pub time_to_capacity_p95_s: Option<f64>,
}

/// Nearest-rank percentile of `sorted` milliseconds, in seconds.
pub fn percentile_s(sorted: &[i64], percent: u32) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (sorted.len() * percent as usize).div_ceil(100).max(1);
    Some(sorted[rank - 1] as f64 / 1000.0)
}

/// When each node first served.
fn first_serving(events: &[NodeEvent]) -> BTreeMap<&NodeId, Timestamp> {
    let mut first = BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| e.state == headroom_core::NodeState::Serving)
    {
        first.entry(&e.node).or_insert(e.at);
    }
    first
}

/// Requested versus delivered over `outcomes`, with times to capacity from `events`.
pub fn fill(outcomes: &[crate::RequestOutcome], events: &[NodeEvent]) -> Fill {
    let serving = first_serving(events);
    let mut waits_ms = Vec::new();
    let mut refused_by_reason: BTreeMap<String, u32> = BTreeMap::new();
    let (mut requested, mut delivered) = (0u32, 0u32);
    for outcome in outcomes {
        let request = &outcome.request;
        debug_assert!(
            outcome.delivered <= request.replicas,
            "request {}",
            request.id
        );
        requested += request.replicas;
        delivered += outcome.delivered;
        for r in outcome
            .refusals
            .iter()
            .filter(|r| r.reason.closes_request())
        {
            *refused_by_reason.entry(r.reason.code()).or_default() += r.replicas;
        }
        let mut times: Vec<Timestamp> = events
            .iter()
            .filter(|e| e.request.as_ref() == Some(&request.id))
            .filter_map(|e| serving.get(&e.node).copied())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        times.sort();
        times.truncate(outcome.delivered as usize);
        waits_ms.extend(
            times
                .iter()
                .map(|t| (*t - request.created_at).num_milliseconds().max(0)),
        );
    }
    waits_ms.sort_unstable();
    let refused: u32 = refused_by_reason.values().sum();
    debug_assert!(
        delivered <= requested,
        "delivered {delivered} of {requested}"
    );
    debug_assert!(
        waits_ms.len() <= delivered as usize,
        "a wait without a delivery"
    );
    Fill {
        requested,
        delivered,
        refused,
        refused_by_reason,
        pending: requested.saturating_sub(delivered + refused),
        fill_ratio: if requested == 0 {
            1.0
        } else {
            delivered as f64 / requested as f64
        },
        time_to_capacity_p50_s: percentile_s(&waits_ms, 50),
        time_to_capacity_p95_s: percentile_s(&waits_ms, 95),
    }
}

/// Capacity the controller asked for on its own (no request), launched or woken in a range.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OrganicFill {
    /// Launches and wakes toward serving (not counting those a cloud refused).
    pub requested: u32,
    /// Launches a cloud refused, after which the planner fell back to another offering.
    pub cloud_refused: u32,
    /// Of those, how many reached serving.
    pub delivered: u32,
    /// From the launch intent or wake to serving.
    pub time_to_capacity_p50_s: Option<f64>,
    pub time_to_capacity_p95_s: Option<f64>,
}

/// Organic activations of one pool that began in `[from, to)`.
pub fn organic_fill(events: &[NodeEvent], from: Timestamp, to: Timestamp) -> OrganicFill {
    let mut waits_ms = Vec::new();
    let (mut requested, mut cloud_refused) = (0, 0);
    for history in histories(events).values() {
        for (i, start) in history.iter().enumerate() {
            let activation = start.request.is_none()
                && start.destination == crate::Destination::Serve
                && start.begins_activation()
                && start.at >= from
                && start.at < to;
            if !activation {
                continue;
            }
            if history
                .get(i + 1)
                .is_some_and(|next| next.state == headroom_core::NodeState::Refused)
            {
                cloud_refused += 1;
                continue;
            }
            requested += 1;
            let served = history[i + 1..]
                .iter()
                .take_while(|e| !e.begins_activation())
                .find(|e| e.state == headroom_core::NodeState::Serving);
            if let Some(served) = served {
                waits_ms.push((served.at - start.at).num_milliseconds().max(0));
            }
        }
    }
    waits_ms.sort_unstable();
    debug_assert!(
        waits_ms.len() <= requested as usize,
        "served more than was activated"
    );
    OrganicFill {
        requested,
        cloud_refused,
        delivered: waits_ms.len() as u32,
        time_to_capacity_p50_s: percentile_s(&waits_ms, 50),
        time_to_capacity_p95_s: percentile_s(&waits_ms, 95),
    }
}

#[cfg(test)]
mod tests {
    use super::percentile_s;

    #[test]
    fn nearest_rank_percentiles() {
        let ms: Vec<i64> = (1..=20).map(|s| s * 1000).collect();
        assert_eq!(percentile_s(&ms, 50), Some(10.0));
        assert_eq!(percentile_s(&ms, 95), Some(19.0));
        assert_eq!(percentile_s(&[4000], 95), Some(4.0));
        assert_eq!(percentile_s(&[], 50), None);
    }
}
