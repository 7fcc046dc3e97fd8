//! Reserved capacity in the books. A reservation (or capacity block) is paid for every hour it
//! runs, whether nodes use it or not: the ledger bills the nodes that ran on it, and this module
//! prices the rest, the idle part, from the configured reservations.

pub use headroom_core::ReservedCapacity;
use headroom_core::{Money, Timestamp};
use headroom_records::NodeEvent;

use crate::spans;

/// The row an idle hour is charged to when grouping by account or pool: the one account
/// (or pool) that can use the reservation, or the reservation itself when several can.
pub fn owner(r: &ReservedCapacity, by: crate::GroupBy) -> String {
    let shared = || format!("reservation {}", r.offering);
    match by {
        crate::GroupBy::Account => {
            let mut accounts = r.pools.iter().map(|(_, a)| a);
            match accounts.next() {
                Some(first) if accounts.all(|a| a == first) => first.to_string(),
                _ => shared(),
            }
        }
        crate::GroupBy::Pool => match r.pools.as_slice() {
            [(pool, _)] => pool.to_string(),
            _ => shared(),
        },
        crate::GroupBy::Provider => r.provider.to_string(),
        crate::GroupBy::Region => format!("{}/{}", r.provider, r.region),
        crate::GroupBy::Market => headroom_core::Market::Reserved.to_string(),
    }
}

/// The reservations a reader acting for `accounts` (all, when `None`) sees: those only its
/// accounts' pools can use, so one tenant's report never shows another's idle capacity.
pub fn visible_to(
    reservations: &[ReservedCapacity],
    accounts: Option<&std::collections::BTreeSet<String>>,
) -> Vec<ReservedCapacity> {
    reservations
        .iter()
        .filter(|r| {
            accounts.is_none_or(|accounts| {
                !r.pools.is_empty() && r.pools.iter().all(|(_, a)| accounts.contains(a.as_str()))
            })
        })
        .cloned()
        .collect()
}

/// A stretch of time in which `idle_nodes` of a reservation ran no node.
#[derive(Debug, Clone, PartialEq)]
pub struct IdleStretch<'a> {
    pub reservation: &'a ReservedCapacity,
    pub start: Timestamp,
    pub end: Timestamp,
    pub idle_nodes: u32,
}

impl IdleStretch<'_> {
    pub fn node_hours(&self) -> f64 {
        (self.end - self.start).num_milliseconds().max(0) as f64 / 3_600_000.0
            * f64::from(self.idle_nodes)
    }

    pub fn cost(&self) -> Money {
        self.reservation
            .price_usd_per_hour
            .times(self.idle_nodes)
            .per_hour_for_millis((self.end - self.start).num_milliseconds().max(0))
    }
}

/// The idle stretches of every reservation within `[from, until)`: between two changes of how
/// many billable reserved nodes run on the offering, the reservation's nodes that none used.
pub fn idle_stretches<'a>(
    reservations: &'a [ReservedCapacity],
    events: &[NodeEvent],
    from: Timestamp,
    until: Timestamp,
) -> Vec<IdleStretch<'a>> {
    let all = spans(events, from, until);
    let mut out = Vec::new();
    for r in reservations {
        let start = r.starts_at.map_or(from, |s| s.max(from));
        let end = r.ends_at.map_or(until, |e| e.min(until));
        if end <= start || r.nodes == 0 {
            continue;
        }
        // +1 where a node starts running on the reservation, -1 where it stops.
        let mut changes: Vec<(Timestamp, i64)> = all
            .iter()
            .filter(|s| {
                s.event.offering == r.offering
                    && s.event.market == headroom_core::Market::Reserved
                    && s.event.state.is_billable()
            })
            .flat_map(|s| [(s.start.max(start), 1), (s.end.min(end), -1)])
            .filter(|(t, _)| *t >= start && *t <= end)
            .collect();
        changes.sort();
        let mut used: i64 = 0;
        let mut at = start;
        let mut push = |from: Timestamp, to: Timestamp, used: i64| {
            let idle = (i64::from(r.nodes) - used).max(0) as u32;
            if to > from && idle > 0 {
                out.push(IdleStretch {
                    reservation: r,
                    start: from,
                    end: to,
                    idle_nodes: idle,
                });
            }
        };
        for (t, delta) in changes {
            push(at, t, used);
            at = at.max(t);
            used += delta;
        }
        push(at, end, used);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use headroom_core::ProviderKind;

    fn at(h: u32) -> Timestamp {
        chrono::Utc.with_ymd_and_hms(2026, 11, 2, h, 0, 0).unwrap()
    }

    fn reservation(nodes: u32) -> ReservedCapacity {
        ReservedCapacity {
            offering: "p5-reserved".parse().unwrap(),
            provider: ProviderKind::Aws,
            region: "us-east-1".into(),
            zone: "us-east-1a".into(),
            instance_type: "p5.48xlarge".into(),
            nodes,
            gpus_per_node: 8,
            price_usd_per_hour: Money::from_micros(10_000_000),
            starts_at: None,
            ends_at: Some(at(10)),
            pools: vec![],
        }
    }

    #[test]
    fn an_unused_reservation_is_idle_for_its_whole_term_in_the_range() {
        let r = [reservation(2)];
        let idle = idle_stretches(&r, &[], at(0), at(12));
        assert_eq!(idle.len(), 1);
        assert_eq!(
            (idle[0].start, idle[0].end, idle[0].idle_nodes),
            (at(0), at(10), 2)
        );
        assert_eq!(idle[0].node_hours(), 20.0);
        assert_eq!(idle[0].cost(), Money::from_micros(200_000_000));
    }
}
