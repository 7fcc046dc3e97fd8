//! The observe phase: bring every owned node's ledger state in line with the cloud's
//! inventory (booting → serving, interrupted → terminated, a drain finished), finish work a
//! crash interrupted (an intent without an outcome is launched again with the same client
//! token), record interruption notices, and hand orphans to [`super::orphans`].

use std::collections::{BTreeMap, HashMap, HashSet};

use headroom_cloud::{Instance, InstanceId, InstancePhase};
use headroom_core::planner::Destination;
use headroom_core::{NodeId, NodeState, PoolName, ProviderKind, Timestamp};
use headroom_ledger::NodeEvent;

use super::input::TickInput;
use super::{Engine, EngineError, lock};
use crate::cluster::ClusterNodeView;

/// What the observe phase remembers between ticks.
#[derive(Debug, Default)]
pub(super) struct ObserveMemory {
    /// Nodes whose interruption notice has been recorded.
    pub noticed: HashSet<NodeId>,
    /// What the cluster last showed for each climbing node, to stamp each rung once.
    pub cluster_seen: HashMap<NodeId, ClusterNodeView>,
    /// Orphans already written to the decision log (those still orphans).
    pub orphans_seen: HashSet<InstanceId>,
    /// Pools whose recent launches, refusals and rung stamps have been read back from the
    /// ledger (see `restore.rs`).
    pub restored: HashSet<PoolName>,
}

impl Engine {
    /// Moves ledger node states along with what the cloud reports, finishes interrupted work
    /// (intents without outcomes, drains), and terminates owned instances the ledger does not
    /// know.
    pub(super) async fn observe(
        &self,
        input: &mut TickInput,
        inventory: &[Instance],
        unread: &BTreeMap<ProviderKind, String>,
    ) -> Result<(), EngineError> {
        let now = self.clock.now();
        let by_token: HashMap<&str, &Instance> = inventory
            .iter()
            .map(|i| (i.client_token.as_str(), i))
            .collect();
        let known: HashSet<String> = input.live.iter().map(|e| e.client_token.clone()).collect();
        {
            let live_ids: HashSet<&NodeId> = input.live.iter().map(|e| &e.node).collect();
            let mut memory = lock(&self.observed);
            memory.noticed.retain(|n| live_ids.contains(n));
            memory.cluster_seen.retain(|n, _| live_ids.contains(n));
        }
        // A node on a cloud whose inventory could not be read is not missing: leave it be. An
        // intent without an outcome is still repeated (it reads no inventory), so its cloud's
        // errors count toward the bound that ends it and lets the pool fall back.
        let owned_live: Vec<NodeEvent> = input
            .live
            .iter()
            .filter(|e| input.owned.contains(&e.pool))
            .filter(|e| e.state == NodeState::Requested || !unread.contains_key(&e.provider))
            .cloned()
            .collect();
        self.halt_on_shared_tokens(inventory, &owned_live);
        for last in &owned_live {
            if let Some(instance) = by_token.get(last.client_token.as_str())
                && let Some(reclaim_at) = instance.interruption_notice
                && instance.phase != InstancePhase::Interrupted
                && !last.state.is_warm()
            {
                self.record_interruption_notice(last, reclaim_at).await?;
                if let Some(cluster) = &self.cluster
                    && last.state == NodeState::Serving
                {
                    self.drain_on_notice(input, cluster, last, reclaim_at)
                        .await?;
                }
            }
        }
        // Settled by the state read at the start of the tick: a node whose drain began on a
        // notice above matches none of the settling rules this tick.
        for last in &owned_live {
            let instance = by_token.get(last.client_token.as_str()).copied();
            self.settle(input, last, instance, now).await?;
        }
        // Another replica's pools are its to clean.
        let orphans: Vec<(PoolName, &Instance)> = inventory
            .iter()
            .filter(|i| !known.contains(&i.client_token))
            .filter_map(|i| Some((self.orphan_pool(i)?, i)))
            .filter(|(pool, _)| input.owned.contains(pool))
            .collect();
        input.orphans = self.handle_orphans(&orphans, now).await?;
        Ok(())
    }

    /// Halts the pool of any owned node whose client token two live instances carry: a launch
    /// repeated after the cloud forgot the token (its idempotency window passed) started a
    /// second instance the ledger does not know and the map by token would hide. Checked in
    /// every build; on-call terminates the extra instance by hand, since which one the workload
    /// uses is not the engine's to guess.
    fn halt_on_shared_tokens(&self, inventory: &[Instance], owned_live: &[NodeEvent]) {
        for (token, ids) in shared_tokens(inventory) {
            let Some(node) = owned_live.iter().find(|e| e.client_token == token) else {
                continue;
            };
            let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
            let why = format!(
                "live instances {} carry the client token {token} of node {} (the ledger names {}): a launch was repeated after the cloud forgot its token; terminate the extra instance",
                ids.join(", "),
                node.node,
                node.instance.as_deref().unwrap_or("no instance yet")
            );
            self.halt_pool(&node.pool, why);
        }
    }

    /// Records an interruption notice once per node: the decision log says what happened and
    /// when the node goes, the metric counts it, and the offering ranks lower for a while. The
    /// planner, which no longer counts the node, launches its replacement in this same tick.
    async fn record_interruption_notice(
        &self,
        last: &NodeEvent,
        reclaim_at: Timestamp,
    ) -> Result<(), EngineError> {
        let now = self.clock.now();
        if !lock(&self.observed).noticed.insert(last.node.clone()) {
            return Ok(());
        }
        self.note_interruption(&last.offering, now);
        tracing::warn!(pool = %last.pool, node = %last.node, offering = %last.offering, %reclaim_at, "spot interruption notice; replacing the node now");
        if let Some(pool) = self.config.pool(&last.pool) {
            self.metrics
                .interruption_notices
                .get_or_create(&crate::metrics::PoolLabels::of(pool))
                .inc();
        }
        let entry = serde_json::json!({
            "event": "interruption_notice",
            "node": last.node,
            "offering": last.offering,
            "reclaim_at": reclaim_at,
            "reason": "the cloud will reclaim this spot node; a replacement is planned now",
        });
        self.log_event(&last.pool, entry, now).await
    }

    /// Brings one node's ledger state in line with its instance.
    async fn settle(
        &self,
        input: &mut TickInput,
        last: &NodeEvent,
        instance: Option<&Instance>,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        if let Some(cluster) = &self.cluster
            && self
                .settle_with_cluster(input, cluster, last, instance, now)
                .await?
        {
            return Ok(());
        }
        let next = |state, reason: &str| {
            let mut e = last.next(state, reason, now);
            if let Some(i) = instance {
                e.instance = Some(i.id.0.clone());
            }
            e
        };
        match (last.state, instance.map(|i| i.phase)) {
            // An intent without an outcome: the process stopped between the two. The client token
            // makes repeating the launch safe: it returns the instance if the first call made one.
            (NodeState::Requested, _) => {
                let Some(pool) = self.config.pool(&last.pool) else {
                    return Ok(());
                };
                let Some(offering) = self.config.offering(&last.offering).cloned() else {
                    return self
                        .record(input, next(NodeState::Refused, "offering_removed"))
                        .await;
                };
                self.launch_for_intent(input, pool, &offering, last).await?;
            }
            (NodeState::Launching, Some(InstancePhase::Booting(_))) => {
                self.record(input, next(NodeState::Booting, "running"))
                    .await?;
            }
            (NodeState::Launching | NodeState::Booting, Some(InstancePhase::Ready)) => {
                if last.destination == Destination::Warm {
                    self.stop_to_warm(input, last, "warmed").await?;
                } else {
                    self.record(input, next(NodeState::Serving, "ready"))
                        .await?;
                }
            }
            (
                NodeState::Launching
                | NodeState::Booting
                | NodeState::Serving
                | NodeState::Warm
                | NodeState::Standby,
                Some(InstancePhase::Interrupted),
            ) => {
                let interrupted = next(NodeState::Interrupted, "spot_interruption");
                self.record(input, interrupted.clone()).await?;
                self.terminate_node(input, &interrupted, "interrupted")
                    .await?;
            }
            (NodeState::Interrupted | NodeState::Failed, _) => {
                self.terminate_node(input, last, "cleanup").await?;
            }
            (NodeState::Draining, _) => {
                if last.reason.as_deref() == Some("release_to_warm") && instance.is_some() {
                    self.stop_to_warm(input, last, "released").await?;
                } else {
                    self.terminate_node(input, last, "released").await?;
                }
            }
            (state, None) if state != NodeState::Requested => {
                // The cloud no longer lists it: it is gone, whatever the ledger thought.
                self.record(input, next(NodeState::Failed, "instance_missing"))
                    .await?;
                self.record(input, next(NodeState::Terminated, "instance_missing"))
                    .await?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// Client tokens that more than one live instance (neither terminated nor reclaimed) carries,
/// with those instances.
fn shared_tokens(inventory: &[Instance]) -> BTreeMap<&str, Vec<&InstanceId>> {
    let mut by_token: BTreeMap<&str, Vec<&InstanceId>> = BTreeMap::new();
    for instance in inventory {
        if !matches!(
            instance.phase,
            InstancePhase::Terminated | InstancePhase::Interrupted
        ) {
            by_token
                .entry(instance.client_token.as_str())
                .or_default()
                .push(&instance.id);
        }
    }
    by_token.retain(|_, ids| ids.len() > 1);
    by_token
}
