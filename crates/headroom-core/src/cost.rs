//! Spend derived from a node's history: the ledger stores events, never balances.

use crate::{Money, NodeState, Timestamp};

/// One state change of one node, as the cost model needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSpan {
    pub at: Timestamp,
    pub state: NodeState,
    /// What the node's compute costs per hour, billed in the states [`NodeState::is_billable`].
    pub price_usd_per_hour: Money,
    /// What the node costs per hour parked warm and stopped (its volumes).
    pub parked_usd_per_hour: Money,
}

/// What a node costs per hour in `state`: its compute price in a billable state, its parked
/// price (its volumes) parked warm and stopped, nothing otherwise (not yet launched, or gone).
pub fn hourly_rate(state: NodeState, price: Money, parked: Money) -> Money {
    if state.is_billable() {
        price
    } else if state == NodeState::Warm {
        parked
    } else {
        Money::ZERO
    }
}

impl StateSpan {
    /// What this span costs per hour ([`hourly_rate`]).
    pub fn rate(&self) -> Money {
        hourly_rate(
            self.state,
            self.price_usd_per_hour,
            self.parked_usd_per_hour,
        )
    }
}

/// Money a node has cost from its first event up to `until`: every interval at the rate of its
/// state ([`hourly_rate`]: compute while billable, volumes while parked warm) at the prices
/// recorded when the interval began. Events must be in time order.
pub fn accrued(history: &[StateSpan], until: Timestamp) -> Money {
    let mut total = Money::ZERO;
    for (i, span) in history.iter().enumerate() {
        let rate = span.rate();
        if rate == Money::ZERO {
            continue;
        }
        let end = history.get(i + 1).map_or(until, |next| next.at).min(until);
        let millis = (end - span.at).num_milliseconds();
        if millis > 0 {
            total += rate.per_hour_for_millis(millis);
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
                parked_usd_per_hour: Money::ZERO,
            },
            StateSpan {
                at: at("2026-01-01T00:01:00Z"),
                state: NodeState::Booting,
                price_usd_per_hour: price,
                parked_usd_per_hour: Money::ZERO,
            },
            StateSpan {
                at: at("2026-01-01T00:05:00Z"),
                state: NodeState::Serving,
                price_usd_per_hour: price,
                parked_usd_per_hour: Money::ZERO,
            },
            StateSpan {
                at: at("2026-01-01T00:35:00Z"),
                state: NodeState::Warm,
                price_usd_per_hour: price,
                parked_usd_per_hour: Money::ZERO,
            },
            StateSpan {
                at: at("2026-01-01T01:35:00Z"),
                state: NodeState::Terminated,
                price_usd_per_hour: price,
                parked_usd_per_hour: Money::ZERO,
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

    #[test]
    fn a_parked_node_pays_its_volumes_at_the_parked_price() {
        let span = |t: &str, state: NodeState, parked: &str| StateSpan {
            at: at(t),
            state,
            price_usd_per_hour: "36".parse().unwrap(),
            parked_usd_per_hour: parked.parse().unwrap(),
        };
        let history = [
            span("2026-01-01T00:00:00Z", NodeState::Serving, "0.03"),
            span("2026-01-01T00:30:00Z", NodeState::Warm, "0.03"),
            span("2026-01-01T01:30:00Z", NodeState::Booting, "0.03"),
            span("2026-01-01T01:40:00Z", NodeState::Terminated, "0.03"),
        ];
        // Serving 30 min at $36/h, parked an hour at $0.03/h, booting 10 min at $36/h.
        assert_eq!(
            accrued(&history, at("2026-01-02T00:00:00Z")),
            "24.03".parse().unwrap()
        );
        // Cut off mid-park: $18 and a quarter hour of volumes.
        assert_eq!(
            accrued(&history, at("2026-01-01T00:45:00Z")),
            "18.0075".parse().unwrap()
        );
        // A row written before parked prices were recorded reads 0: parked, it bills nothing.
        let unpriced = [
            span("2026-01-01T00:00:00Z", NodeState::Warm, "0"),
            span("2026-01-01T05:00:00Z", NodeState::Terminated, "0"),
        ];
        assert_eq!(accrued(&unpriced, at("2026-01-02T00:00:00Z")), Money::ZERO);
    }
}
