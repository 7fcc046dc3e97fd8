//! Standing checkpoints: an account's budget standing from a running total and the histories of
//! its open nodes, so that an admission's cost does not grow with the ledger. Pure, like
//! [`crate::derive`], and exactly equal to it (the SQL side asserts so in debug builds).
//!
//! A node's history splits into *runs*: a run begins with the first hold admitted for a node
//! not open in the checkpoint and lasts until the node is final (*settled*: it costs nothing
//! more); its spend within the period is added to the checkpoint's `settled` total once, at the
//! first admission that sees it settled. A node parked warm pays for its volumes, so its run
//! stays open while it is parked (a wake, a park or a renewal keeps the run it is in). Open runs
//! are priced from their node's history at every read. Spend is per span and a run's boundary
//! follows a span that costs nothing (a final state; in checkpoints written before parked nodes
//! were billed, a park whose row carries no parked price, which bills nothing), so the two add
//! up to [`crate::derive::standing`] to the micro-dollar.

use std::collections::BTreeMap;

use headroom_core::budget::BudgetStanding;
use headroom_core::{Budget, BudgetPeriod, Money, NodeId, NodeState, Timestamp};

use crate::NodeEvent;
use crate::derive::{histories, node_held, node_spend, standing};

/// One row of `standing_checkpoints`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub period: BudgetPeriod,
    pub period_start: Timestamp,
    /// Spend within the period of runs that had settled by this row.
    pub settled: Money,
    /// The open runs: each node and the ledger sequence number its run began at.
    pub open: Vec<(NodeId, i64)>,
}

/// Whether a run whose last event is in `state` costs nothing more: only once final (a node
/// parked warm still pays for its volumes).
pub fn settles(state: NodeState) -> bool {
    state.is_final()
}

/// `open` as stored: `node:seq` pairs separated by commas (node ids have neither).
pub fn encode_open(open: &[(NodeId, i64)]) -> String {
    let parts: Vec<String> = open.iter().map(|(n, s)| format!("{}:{s}", n.0)).collect();
    parts.join(",")
}

/// The stored form back; `None` if it is not what [`encode_open`] writes.
pub fn decode_open(text: &str) -> Option<Vec<(NodeId, i64)>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|part| {
            let (node, seq) = part.rsplit_once(':')?;
            Some((NodeId(node.to_string()), seq.parse().ok()?))
        })
        .collect()
}

/// Spend of `run` within `[start, now]`.
fn run_spend(run: &[&NodeEvent], start: Timestamp, now: Timestamp) -> Money {
    node_spend(run, now) - node_spend(run, start.min(now))
}

/// The standing at `now` from `checkpoint` and the full histories (with sequence numbers) of its
/// open nodes, and the checkpoint that holds after it (runs found settled folded into the
/// total). `None` when the checkpoint does not serve the budget's period: then the standing is
/// derived from the whole history once ([`seed`]).
pub fn advance(
    checkpoint: &Checkpoint,
    budget: &Budget,
    nodes: &BTreeMap<NodeId, Vec<(i64, NodeEvent)>>,
    now: Timestamp,
) -> Option<(BudgetStanding, Checkpoint)> {
    let (start, _) = budget.period.bounds(now);
    if checkpoint.period != budget.period || checkpoint.period_start > start {
        return None;
    }
    // A new period: what settled in the last one is not this one's spend.
    let mut settled = if checkpoint.period_start == start {
        checkpoint.settled
    } else {
        Money::ZERO
    };
    let (mut live, mut held) = (Money::ZERO, Money::ZERO);
    let mut open = Vec::with_capacity(checkpoint.open.len());
    for (node, from) in &checkpoint.open {
        let history = nodes.get(node).map(Vec::as_slice).unwrap_or_default();
        let run: Vec<&NodeEvent> = history
            .iter()
            .filter(|(seq, _)| seq >= from)
            .map(|(_, e)| e)
            .collect();
        let spend = run_spend(&run, start, now);
        match run.last() {
            Some(last) if !settles(last.state) => {
                let full: Vec<&NodeEvent> = history.iter().map(|(_, e)| e).collect();
                live += spend;
                held += node_held(&full, now);
                open.push((node.clone(), *from));
            }
            _ => settled += spend,
        }
    }
    let standing = BudgetStanding {
        ceiling: budget.ceiling,
        spent: settled + live,
        held,
    };
    debug_assert!(settled >= Money::ZERO && live >= Money::ZERO && held >= Money::ZERO);
    let next = Checkpoint {
        period: budget.period,
        period_start: start,
        settled,
        open,
    };
    Some((standing, next))
}

/// The standing and a first checkpoint from the account's whole history (with sequence
/// numbers): when an account has none yet, or its budget's period changed.
pub fn seed(
    events: &[(i64, NodeEvent)],
    budget: &Budget,
    now: Timestamp,
) -> (BudgetStanding, Checkpoint) {
    let plain: Vec<NodeEvent> = events.iter().map(|(_, e)| e.clone()).collect();
    let standing = standing(&plain, budget, now);
    let (start, _) = budget.period.bounds(now);
    let mut seqs: BTreeMap<&NodeId, Vec<i64>> = BTreeMap::new();
    for (seq, e) in events {
        seqs.entry(&e.node).or_default().push(*seq);
    }
    let mut live = Money::ZERO;
    let mut open = Vec::new();
    for (node, history) in histories(&plain) {
        let Some(last) = history.last().filter(|e| !settles(e.state)) else {
            continue;
        };
        debug_assert_eq!(last.account, budget.account);
        // The open run begins after the node last settled (or with its first event).
        let begins = history
            .iter()
            .rposition(|e| settles(e.state))
            .map_or(0, |i| i + 1);
        live += run_spend(&history[begins..], start, now);
        open.push((node.clone(), seqs[node][begins]));
    }
    let settled = standing.spent - live;
    debug_assert!(settled >= Money::ZERO, "settled {settled}");
    let checkpoint = Checkpoint {
        period: budget.period,
        period_start: start,
        settled,
        open,
    };
    (standing, checkpoint)
}

/// `checkpoint` after admitting `event`, recorded at `seq`: its node's run is open (a node
/// already open keeps the run it is in).
pub fn admit(mut checkpoint: Checkpoint, event: &NodeEvent, seq: i64) -> Checkpoint {
    if !checkpoint.open.iter().any(|(n, _)| n == &event.node) {
        checkpoint.open.push((event.node.clone(), seq));
    }
    checkpoint
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_runs_round_trip_as_stored() {
        let open = vec![(NodeId("n-1".into()), 4), (NodeId("n-2".into()), 17)];
        assert_eq!(decode_open(&encode_open(&open)), Some(open));
        assert_eq!(decode_open(""), Some(Vec::new()));
        assert_eq!(decode_open("n-1"), None);
    }

    /// A node parked warm pays for its volumes: its run stays open, and a checkpoint advanced
    /// over it stands exactly where the whole history does.
    #[test]
    fn a_parked_node_s_run_stays_open_and_matches_the_history() {
        let t = |s: &str| -> Timestamp { s.parse().unwrap() };
        let money = |s: &str| -> Money { s.parse().unwrap() };
        let launch = NodeEvent {
            node: NodeId("p1".into()),
            pool: "llama".parse().unwrap(),
            account: "ml".parse().unwrap(),
            offering: "o".parse().unwrap(),
            provider: headroom_core::ProviderKind::Sim,
            region: "r".into(),
            zone: "z".into(),
            instance_type: "t".into(),
            market: headroom_core::Market::OnDemand,
            request: None,
            destination: crate::Destination::Serve,
            state: NodeState::Requested,
            instance: None,
            client_token: "hr-p1".into(),
            price_usd_per_hour: money("2"),
            parked_usd_per_hour: money("0.5"),
            gpus: 1,
            hold: money("2"),
            reason: Some(crate::LAUNCH.into()),
            at: t("2026-11-30T09:00:00Z"),
        };
        let serving = launch.next(NodeState::Serving, "ready", t("2026-11-30T09:00:00Z"));
        let mut parked = serving.next(NodeState::Warm, "released", t("2026-11-30T10:00:00Z"));
        parked.hold = money("1");
        let budget = Budget {
            account: "ml".parse().unwrap(),
            period: BudgetPeriod::Day,
            ceiling: money("10"),
            soft_threshold_percent: 80,
            hard_action: headroom_core::HardAction::Refuse,
        };
        let events: Vec<(i64, NodeEvent)> = [launch, serving, parked]
            .into_iter()
            .zip(1..)
            .map(|(e, s)| (s, e))
            .collect();
        let (seeded, checkpoint) = seed(&events, &budget, t("2026-11-30T10:30:00Z"));
        assert_eq!(checkpoint.open, [(NodeId("p1".into()), 1)]);
        assert_eq!((seeded.spent, seeded.held), (money("2.25"), money("0.75")));
        let nodes: BTreeMap<NodeId, Vec<(i64, NodeEvent)>> =
            [(NodeId("p1".into()), events.clone())].into();
        let later = t("2026-11-30T12:00:00Z");
        let (standing_then, next) = advance(&checkpoint, &budget, &nodes, later).unwrap();
        let plain: Vec<NodeEvent> = events.into_iter().map(|(_, e)| e).collect();
        assert_eq!(
            standing_then,
            crate::derive::standing(&plain, &budget, later)
        );
        // Two parked hours at $0.50 on the hour served at $2; $1 held at the park, all spent.
        assert_eq!(
            (standing_then.spent, standing_then.held),
            (money("3"), Money::ZERO)
        );
        assert_eq!(next.open, checkpoint.open, "a parked node's run stays open");
    }
}
