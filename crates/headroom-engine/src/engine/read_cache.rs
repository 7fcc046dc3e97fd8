//! What a tick reads that seldom changes, kept between ticks: read again only when the ledger's
//! revision of its tables moved, whoever wrote (this process, another replica, the API).
//!
//! The revision is read before what it guards, so a cached value is never older than the
//! revision it is kept under: a write landing between the two only costs one more read.

use std::collections::{BTreeMap, HashMap, HashSet};

use headroom_core::{Budget, CapacityRequest, NodeId, RequestId, Timestamp};
use headroom_ledger::{NodeEvent, RefusalRecord, Sequenced, StoredWindow};

/// The tick's reads kept across ticks ([`super::Engine`] holds one; the tick lock orders its use).
#[derive(Debug, Default)]
pub(super) struct ReadCache {
    pub live: Option<LiveNodes>,
    pub budgets: Option<Kept<Vec<Budget>>>,
    pub windows: Option<Kept<Vec<StoredWindow>>>,
    pub open: Option<Kept<Vec<CapacityRequest>>>,
    /// The cancelled among the requests of live nodes, with the ids it was asked for.
    pub cancelled: Option<Kept<(Vec<RequestId>, HashSet<RequestId>)>>,
    /// Every refusal recorded from an instant on (the alert rules' window), under the requests'
    /// revision, which refusals move.
    pub refusals: Option<Kept<(Timestamp, Vec<RefusalRecord>)>>,
}

/// A value read under a revision of the tables it comes from.
#[derive(Debug, Clone)]
pub(super) struct Kept<T> {
    pub revision: i64,
    pub value: T,
}

impl<T: Clone> Kept<T> {
    /// The value when it was read under `revision` (`None`: the backend gives none, read again).
    pub fn at(kept: &Option<Kept<T>>, revision: Option<i64>) -> Option<T> {
        let revision = revision?;
        kept.as_ref()
            .filter(|k| k.revision == revision)
            .map(|k| k.value.clone())
    }
}

/// The latest event of every live node, kept up to date by applying the node events committed
/// after `through` in order (only where the ledger commits them in sequence order).
#[derive(Debug, Clone, Default)]
pub(super) struct LiveNodes {
    /// Every event up to this sequence number is applied.
    pub through: i64,
    by_seq: BTreeMap<i64, NodeEvent>,
    seq_of: HashMap<NodeId, i64>,
}

impl LiveNodes {
    /// The live nodes' latest events as read at some point after every event up to `through`
    /// was committed: applying the events after `through` again is harmless, since each one
    /// replaces its node's entry and the last one of a node is its latest.
    pub fn new(through: i64, heads: Vec<Sequenced<NodeEvent>>) -> LiveNodes {
        let mut live = LiveNodes {
            through,
            ..LiveNodes::default()
        };
        live.apply(heads);
        live.through = through;
        live
    }

    /// Applies events in sequence order: each becomes its node's latest; a final one ends it.
    pub fn apply(&mut self, events: Vec<Sequenced<NodeEvent>>) {
        for Sequenced { seq, row } in events {
            if let Some(old) = self.seq_of.remove(&row.node) {
                self.by_seq.remove(&old);
            }
            self.through = self.through.max(seq);
            if !row.state.is_final() {
                self.seq_of.insert(row.node.clone(), seq);
                self.by_seq.insert(seq, row);
            }
        }
    }

    /// What `Ledger::live_nodes` returns: the latest event of every live node, in ledger order.
    pub fn events(&self) -> Vec<NodeEvent> {
        self.by_seq.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::planner::Destination;
    use headroom_core::{Market, Money, NodeId, NodeState, ProviderKind, Timestamp};
    use headroom_ledger::{NodeEvent, Sequenced};

    use super::LiveNodes;

    fn event(node: &str, state: NodeState) -> NodeEvent {
        NodeEvent {
            node: NodeId(node.into()),
            pool: "p".parse().unwrap(),
            account: "a".parse().unwrap(),
            offering: "o".parse().unwrap(),
            provider: ProviderKind::Sim,
            region: "r".into(),
            zone: "z".into(),
            instance_type: "t".into(),
            market: Market::OnDemand,
            request: None,
            destination: Destination::Serve,
            state,
            instance: None,
            client_token: format!("hr-{node}"),
            price_usd_per_hour: Money::ZERO,
            parked_usd_per_hour: Money::ZERO,
            gpus: 1,
            hold: Money::ZERO,
            reason: None,
            at: Timestamp::default(),
        }
    }

    fn at(seq: i64, e: NodeEvent) -> Sequenced<NodeEvent> {
        Sequenced { seq, row: e }
    }

    #[test]
    fn the_latest_event_of_each_live_node_in_ledger_order() {
        let mut live = LiveNodes::new(
            3,
            vec![
                at(2, event("a", NodeState::Booting)),
                at(3, event("b", NodeState::Requested)),
            ],
        );
        live.apply(vec![
            at(4, event("a", NodeState::Serving)),
            at(5, event("c", NodeState::Requested)),
            at(6, event("b", NodeState::Refused)),
        ]);
        let nodes: Vec<(String, NodeState)> = live
            .events()
            .into_iter()
            .map(|e| (e.node.0, e.state))
            .collect();
        assert_eq!(
            nodes,
            vec![
                ("a".to_string(), NodeState::Serving),
                ("c".to_string(), NodeState::Requested)
            ]
        );
        assert_eq!(live.through, 6);
    }

    #[test]
    fn events_applied_twice_after_the_heads_change_nothing() {
        // Heads read a little after `through`: they already hold event 5.
        let heads = vec![
            at(4, event("a", NodeState::Serving)),
            at(5, event("b", NodeState::Booting)),
        ];
        let mut live = LiveNodes::new(3, heads);
        live.apply(vec![
            at(4, event("a", NodeState::Serving)),
            at(5, event("b", NodeState::Booting)),
        ]);
        assert_eq!(live.events().len(), 2);
        assert_eq!(live.through, 5);
    }
}
