//! Spend derived from a node's history: the ledger stores events, never balances.

use crate::{Money, NodeState, Timestamp};

/// One state change of one node, as the cost model needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSpan {
    pub at: Timestamp,
    pub state: NodeState,
    pub price_usd_per_hour: Money,
}

/// Money a node has cost from its first event up to `until`: every interval spent in a billable
/// state, at the price recorded when the interval began. Events must be in time order.
pub fn accrued(history: &[StateSpan], until: Timestamp) -> Money {
    let mut total = Money::ZERO;
    for (i, span) in history.iter().enumerate() {
        if !span.state.is_billable() {
            continue;
        }
        let end = history.get(i + 1).map_or(until, |next| next.at).min(until);
        let millis = (end - span.at).num_milliseconds();
        if millis > 0 {
            total += span.price_usd_per_hour.per_hour_for_millis(millis);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn only_billable_intervals_cost_money() {
        let price: Money = "36".parse().unwrap();
        let history = [
            StateSpan {
                at: at("2026-01-01T00:00:00Z"),
                state: NodeState::Launching,
                price_usd_per_hour: price,
            },
            StateSpan {
                at: at("2026-01-01T00:01:00Z"),
                state: NodeState::Booting,
                price_usd_per_hour: price,
            },
            StateSpan {
                at: at("2026-01-01T00:05:00Z"),
                state: NodeState::Serving,
                price_usd_per_hour: price,
            },
            StateSpan {
                at: at("2026-01-01T00:35:00Z"),
                state: NodeState::Warm,
                price_usd_per_hour: price,
            },
            StateSpan {
                at: at("2026-01-01T01:35:00Z"),
                state: NodeState::Terminated,
                price_usd_per_hour: price,
            },
        ];
        // Booting 4 min + serving 30 min = 34 min at $36/h = $20.40.
        assert_eq!(
            accrued(&history, at("2026-01-02T00:00:00Z")),
            "20.4".parse().unwrap()
        );
        // Cut off mid-serving: 4 + 10 minutes = $8.40.
        assert_eq!(
            accrued(&history, at("2026-01-01T00:15:00Z")),
            "8.4".parse().unwrap()
        );
    }
}
