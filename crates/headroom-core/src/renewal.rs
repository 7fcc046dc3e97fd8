//! Hold renewals: a budget bounds spend, not only what a launch holds.
//!
//! A launch or wake holds its price for `engine.hold_horizon`; the hold is spent down as the
//! node runs. Left alone, a node would run on unchecked once its hold is used up, so the engine
//! renews every running node's hold before it lapses, through the same transactional admission
//! as a launch. This module is the pure part: when a hold lapses, when its renewal is due, in
//! which order renewals go, and which lower tiers give way to a higher tier's renewal when the
//! budget's hard action is `shed-lowest-tier`.

use std::time::Duration;

use crate::{Money, NodeId, PoolName, Priority, Timestamp};

/// The hold of one running node, as the renewal phase sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningHold {
    pub node: NodeId,
    pub pool: PoolName,
    /// The priority of the node's capacity request; organic capacity is `Normal`.
    pub tier: Priority,
    /// When the hold is used up if the node runs (is billed) without pause from its placing.
    pub held_until: Timestamp,
    /// What is still held for the node now.
    pub held: Money,
}

/// When a hold of `hold` placed at `placed_at` on a node priced `price` per hour is used up,
/// if the node is billed all along (it may not be yet, so this is never late). A free node's
/// hold never lapses.
pub fn lapses_at(placed_at: Timestamp, hold: Money, price: Money) -> Timestamp {
    if price <= Money::ZERO {
        return Timestamp::MAX_UTC;
    }
    let millis = (i128::from(hold.micros().max(0)) * 3_600_000) / i128::from(price.micros());
    let millis = i64::try_from(millis.min(i128::from(i64::MAX / 2))).unwrap_or(i64::MAX / 2);
    placed_at
        .checked_add_signed(chrono::Duration::milliseconds(millis))
        .unwrap_or(Timestamp::MAX_UTC)
}

/// How long before a hold lapses its renewal is tried: a quarter of the horizon, at least two
/// rounds of the loop (`round`: a tick and the cloud call it may wait on, so a renewal refused
/// or delayed by one round still acts before the lapse), never more than half the horizon (so a
/// renewal never holds more than a horizon and a half). The configuration keeps the horizon at
/// four rounds or more, so the lower bound always holds.
pub fn renewal_lead(horizon: Duration, round: Duration) -> Duration {
    (horizon / 4).max(round.saturating_mul(2)).min(horizon / 2)
}

impl RunningHold {
    /// Whether the hold lapses within `lead` of `now` (or already has).
    pub fn is_due(&self, now: Timestamp, lead: Duration) -> bool {
        let lead = chrono::Duration::from_std(lead).unwrap_or(chrono::Duration::MAX);
        match self.held_until.checked_sub_signed(lead) {
            Some(due_at) => due_at <= now,
            None => true,
        }
    }
}

/// The holds due for renewal at `now`, highest tier first (it claims what is left of the
/// budget first), then the soonest to lapse, then by node for a stable order.
pub fn due(holds: &[RunningHold], now: Timestamp, lead: Duration) -> Vec<&RunningHold> {
    let mut due: Vec<&RunningHold> = holds.iter().filter(|h| h.is_due(now, lead)).collect();
    due.sort_by(|a, b| {
        b.tier
            .cmp(&a.tier)
            .then(a.held_until.cmp(&b.held_until))
            .then(a.node.cmp(&b.node))
    });
    debug_assert!(due.windows(2).all(|w| w[0].tier >= w[1].tier));
    due
}

/// The nodes of tiers below `renewing`'s that give way so its renewal fits: lowest tier first,
/// within a tier the largest hold first (fewest nodes stopped), until what they release covers
/// `shortfall` or none is left. A higher tier never stops while a lower one runs on, so when
/// all of them together do not cover it they all give way (and then the renewing node too).
/// `holds` are the same account's running holds.
pub fn give_way<'a>(
    holds: &'a [RunningHold],
    renewing: &RunningHold,
    shortfall: Money,
) -> Vec<&'a RunningHold> {
    let mut lower: Vec<&RunningHold> = holds
        .iter()
        .filter(|h| h.tier < renewing.tier && h.node != renewing.node)
        .collect();
    lower.sort_by(|a, b| {
        a.tier
            .cmp(&b.tier)
            .then(b.held.cmp(&a.held))
            .then(a.node.cmp(&b.node))
    });
    let mut freed = Money::ZERO;
    let mut chosen = Vec::new();
    for h in lower {
        if freed >= shortfall {
            break;
        }
        freed += h.held;
        chosen.push(h);
    }
    debug_assert!(chosen.iter().all(|h| h.tier < renewing.tier));
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn hold(node: &str, tier: Priority, until: &str, held: &str) -> RunningHold {
        RunningHold {
            node: NodeId(node.into()),
            pool: "llm".parse().unwrap(),
            tier,
            held_until: at(until),
            held: held.parse().unwrap(),
        }
    }

    #[test]
    fn a_hold_lapses_when_its_money_is_used_up() {
        // $2 held at $4/h lasts 30 minutes.
        assert_eq!(
            lapses_at(
                at("2026-01-01T00:00:00Z"),
                "2".parse().unwrap(),
                "4".parse().unwrap()
            ),
            at("2026-01-01T00:30:00Z")
        );
        assert_eq!(
            lapses_at(
                at("2026-01-01T00:00:00Z"),
                "2".parse().unwrap(),
                Money::ZERO
            ),
            Timestamp::MAX_UTC
        );
    }

    #[test]
    fn the_lead_is_a_quarter_of_the_horizon_but_at_least_two_ticks_and_at_most_half() {
        let s = Duration::from_secs;
        assert_eq!(renewal_lead(s(3600), s(15)), s(900));
        assert_eq!(renewal_lead(s(600), s(60)), s(150));
        assert_eq!(renewal_lead(s(600), s(100)), s(200));
        assert_eq!(renewal_lead(s(600), s(200)), s(300));
    }

    #[test]
    fn due_holds_go_highest_tier_first_then_soonest() {
        let holds = [
            hold("a", Priority::Low, "2026-01-01T00:05:00Z", "1"),
            hold("b", Priority::Critical, "2026-01-01T00:09:00Z", "1"),
            hold("c", Priority::Critical, "2026-01-01T00:06:00Z", "1"),
            hold("d", Priority::High, "2026-01-01T01:00:00Z", "1"),
        ];
        let now = at("2026-01-01T00:00:00Z");
        let order: Vec<&str> = due(&holds, now, Duration::from_secs(600))
            .iter()
            .map(|h| h.node.0.as_str())
            .collect();
        assert_eq!(order, ["c", "b", "a"]);
        assert!(!holds[3].is_due(now, Duration::from_secs(600)));
    }

    #[test]
    fn lower_tiers_give_way_lowest_first_until_the_shortfall_is_covered() {
        let holds = [
            hold("low-small", Priority::Low, "2026-01-01T00:30:00Z", "0.5"),
            hold("low-big", Priority::Low, "2026-01-01T00:30:00Z", "1"),
            hold("normal", Priority::Normal, "2026-01-01T00:30:00Z", "2"),
            hold("high", Priority::High, "2026-01-01T00:05:00Z", "0.1"),
            hold("peer", Priority::High, "2026-01-01T00:30:00Z", "5"),
        ];
        let renewing = &holds[3];
        let names = |v: Vec<&RunningHold>| v.iter().map(|h| h.node.0.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(give_way(&holds, renewing, "0.8".parse().unwrap())),
            ["low-big"]
        );
        assert_eq!(
            names(give_way(&holds, renewing, "2".parse().unwrap())),
            ["low-big", "low-small", "normal"]
        );
        // The peer of the same tier never gives way; 3.5 below is not enough for 4, and they
        // all go (a higher tier never stops while a lower one runs).
        assert_eq!(
            names(give_way(&holds, renewing, "4".parse().unwrap())),
            ["low-big", "low-small", "normal"]
        );
        // The lowest tier has nobody below it.
        assert!(give_way(&holds, &holds[0], "0.1".parse().unwrap()).is_empty());
    }
}
