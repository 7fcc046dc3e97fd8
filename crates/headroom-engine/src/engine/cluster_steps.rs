//! The engine's steps when a Kubernetes cluster is configured: a node serves only once the
//! cluster says its model server is ready, a node that never registers is failed and replaced,
//! and a node leaves only after a (bounded) drain. Kept apart from `observe.rs` and `execute.rs`
//! so the cloud-only path there reads on its own.

use std::collections::HashMap;
use std::sync::Arc;

use headroom_cloud::{Instance, InstancePhase};
use headroom_core::controller::ReplicaCounts;
use headroom_core::planner::Destination;
use headroom_core::{NodeId, NodeState, PoolName, PoolSpec, Timestamp};
use headroom_ledger::NodeEvent;

use super::input::TickInput;
use super::{Engine, EngineError, lock};
use crate::cluster::{Cluster, ClusterNodeKey, ClusterNodeView, DrainProgress};

impl Engine {
    /// Settles a node by what the cluster shows. Returns whether it did; when it did not, the
    /// cloud-only rules apply (a drain that finished, an interruption, a missing instance).
    pub(super) async fn settle_with_cluster(
        &self,
        input: &mut TickInput,
        cluster: &Arc<dyn Cluster>,
        last: &NodeEvent,
        instance: Option<&Instance>,
        now: Timestamp,
    ) -> Result<bool, EngineError> {
        let Some(instance) = instance else {
            return Ok(false);
        };
        match (last.state, instance.phase) {
            (
                NodeState::Launching | NodeState::Booting,
                InstancePhase::Booting(_) | InstancePhase::Ready,
            ) => {
                self.climb_with_cluster(input, cluster, last, instance, now)
                    .await?;
                Ok(true)
            }
            (NodeState::Draining, phase) if phase != InstancePhase::Interrupted => {
                self.drain(cluster, last, instance.interruption_notice, now)
                    .await
            }
            _ => Ok(false),
        }
    }

    /// A running instance is capacity only when the cluster shows its model server Ready.
    async fn climb_with_cluster(
        &self,
        input: &mut TickInput,
        cluster: &Arc<dyn Cluster>,
        last: &NodeEvent,
        instance: &Instance,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        let key = cluster_key(last, &instance.id.0);
        let view = cluster.node(&key);
        self.stamp_cluster_rungs(last, view, now).await?;
        // Time to register counts from the last event: the cloud reporting the instance running,
        // or the wake of a warm node.
        let waited = now - last.at;
        let mut last = last.clone();
        if last.state == NodeState::Launching {
            let mut booting = last.next(NodeState::Booting, "running", now);
            booting.instance = Some(instance.id.0.clone());
            self.record(input, booting.clone()).await?;
            last = booting;
        }
        if view.model_ready && !view.cordoned {
            lock(&self.observed).cluster_seen.remove(&last.node);
            if last.destination == Destination::Warm {
                self.stop_to_warm(input, &last, "warmed").await?;
            } else {
                let serving = last.next(NodeState::Serving, "model_server_ready", now);
                self.record(input, serving).await?;
            }
            return Ok(());
        }
        if view.cordoned {
            // Cordoned by the drain that parked it warm; woken now, it must take pods again.
            self.uncordon_woken(cluster, &last, &key).await;
        }
        // Registered or not, the clock runs from the same instant; only the bound differs.
        let (bound, failure, reason) = if view.registered {
            (
                cluster.ready_timeout(),
                "never_ready",
                "the Node registered but no Ready pod of the pool's model_selector ran on it in time; replaced and terminated",
            )
        } else {
            (
                cluster.register_timeout(),
                "never_registered",
                "no Kubernetes Node matched the instance's provider ID or node label in time; replaced and terminated",
            )
        };
        let bound = chrono::Duration::from_std(bound).unwrap_or(chrono::Duration::minutes(10));
        if waited < bound {
            return Ok(());
        }
        // Paying by the hour for a node the cluster cannot use: record it failed, which takes it
        // out of the planner's count (its replacement is planned this tick), and end it.
        tracing::warn!(pool = %last.pool, node = %last.node, instance = %instance.id, waited_s = waited.num_seconds(), failure, "node not usable by the cluster in time; terminating it");
        let failed = last.next(NodeState::Failed, failure, now);
        self.record(input, failed.clone()).await?;
        self.log_cluster_event(
            &last,
            serde_json::json!({
                "event": failure,
                "waited_s": waited.num_seconds(),
                "reason": reason,
            }),
            now,
        )
        .await?;
        lock(&self.observed).cluster_seen.remove(&last.node);
        if view.registered {
            // Cordon it and ask its pods to leave, once and without waiting: the instance goes
            // now, and nothing new should land on it meanwhile.
            let step = self.bounded(cluster.drain_step(&key), "drain step").await;
            if let Err(e) = step {
                tracing::warn!(node = %last.node, error = %e, "drain of a never-ready node failed; terminating anyway");
            }
        }
        self.terminate_node(input, &failed, failure).await
    }

    /// Whether a running warm node woken now can serve at once: the cluster shows its model
    /// server Ready and the node schedulable. A node parked by a drain had its pods evicted, so
    /// it climbs again until its model server is back.
    pub(super) fn standby_serves_now(&self, cluster: &Arc<dyn Cluster>, last: &NodeEvent) -> bool {
        let Some(instance) = &last.instance else {
            return false;
        };
        let view = cluster.node(&cluster_key(last, instance));
        view.model_ready && !view.cordoned
    }

    /// Uncordons a woken node; a failure is retried by the next tick's climb.
    pub(super) async fn uncordon_woken(
        &self,
        cluster: &Arc<dyn Cluster>,
        last: &NodeEvent,
        key: &ClusterNodeKey,
    ) {
        if let Err(e) = self.bounded(cluster.uncordon(key), "uncordon").await {
            tracing::warn!(node = %last.node, error = %e, "uncordon failed; next tick retries");
        }
    }

    /// Uncordons the woken running warm node `last`, if it has an instance.
    pub(super) async fn uncordon_standby(&self, cluster: &Arc<dyn Cluster>, last: &NodeEvent) {
        if let Some(instance) = &last.instance {
            let key = cluster_key(last, instance);
            if cluster.node(&key).cordoned {
                self.uncordon_woken(cluster, last, &key).await;
            }
        }
    }

    /// Stamps the cluster's rungs (registered, Node Ready, model server Ready) in the pool's
    /// decision log once per node, across restarts.
    async fn stamp_cluster_rungs(
        &self,
        last: &NodeEvent,
        view: ClusterNodeView,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        let before = lock(&self.observed)
            .cluster_seen
            .insert(last.node.clone(), view)
            .unwrap_or_default();
        for (rung, was, is) in [
            ("node_registered", before.registered, view.registered),
            ("node_ready", before.node_ready, view.node_ready),
            ("model_server_ready", before.model_ready, view.model_ready),
        ] {
            if is && !was {
                self.log_cluster_event(
                    last,
                    serde_json::json!({ "event": "cluster_rung", "rung": rung }),
                    now,
                )
                .await?;
            }
        }
        Ok(())
    }

    /// With a cluster, model-server pods the scheduler cannot place are replicas waiting for a
    /// node: the pool's organic target is at least its ready nodes plus the larger of the nodes
    /// on their way and those pods (a starting node will take a pending pod). The controller
    /// remembers the raised target, so it scales down from there by its own stabilised rules.
    pub(super) async fn floor_for_pending_pods(
        &self,
        pool: &PoolSpec,
        counts: ReplicaCounts,
        target: u32,
        now: Timestamp,
    ) -> Result<u32, EngineError> {
        let Some(cluster) = &self.cluster else {
            return Ok(target);
        };
        let pending = cluster.unschedulable_pods(&pool.name);
        let floor = counts.ready + (counts.requested + counts.starting).max(pending);
        let raised = pending > 0 && floor > target && !pool.scaling.shadow;
        let changed = {
            let mut control = lock(&self.control);
            let before = control
                .pending_pods
                .insert(pool.name.clone(), pending)
                .unwrap_or(0);
            if raised && let Some(memory) = control.memory.get_mut(&pool.name) {
                memory.target = floor;
            }
            before != pending
        };
        if changed {
            let entry = serde_json::json!({
                "event": "unschedulable_pods",
                "pods": pending,
                "target": if raised { floor } else { target },
                "reason": "model-server pods the scheduler cannot place; each needs a node",
            });
            self.log_event(&pool.name, entry, now).await?;
        }
        Ok(if raised { floor } else { target })
    }

    /// A call to the cluster, bounded like a cloud call: one that overruns is a failure the next
    /// tick retries, never a stalled loop.
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, crate::cluster::ClusterError>>,
        what: &str,
    ) -> Result<T, crate::cluster::ClusterError> {
        tokio::time::timeout(self.config.engine.provider_timeout, call)
            .await
            .unwrap_or_else(|_| Err(format!("{what} timed out").into()))
    }

    /// Reads back the rungs already stamped in `pool`'s decision log, so a process that takes the
    /// pool (at start or after another replica held it) does not stamp them a second time.
    /// Bounded by [`RUNG_LOOKBACK`] entries: a node climbs for minutes, and the decisions of
    /// those minutes are far fewer.
    pub(super) async fn load_rung_stamps(&self, pool: &PoolName) -> Result<(), EngineError> {
        let records = self.ledger.decisions(pool, RUNG_LOOKBACK).await?;
        let stamped = rungs_on_record(&records);
        let mut observed = lock(&self.observed);
        for (node, view) in stamped {
            let seen = observed.cluster_seen.entry(node).or_default();
            seen.registered |= view.registered;
            seen.node_ready |= view.node_ready;
            seen.model_ready |= view.model_ready;
        }
        Ok(())
    }

    /// One drain step. Returns whether the node is still draining; `false` means drained, or the
    /// bound (`drain_timeout`, or the interruption notice's deadline) has passed, and the caller
    /// stops or terminates it.
    pub(super) async fn drain(
        &self,
        cluster: &Arc<dyn Cluster>,
        last: &NodeEvent,
        reclaim_at: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<bool, EngineError> {
        let Some(instance) = &last.instance else {
            return Ok(false);
        };
        let key = cluster_key(last, instance);
        let mut deadline = last.at
            + chrono::Duration::from_std(cluster.drain_timeout())
                .unwrap_or(chrono::Duration::minutes(5));
        if let Some(reclaim_at) = reclaim_at {
            deadline = deadline.min(reclaim_at);
        }
        let step = self.bounded(cluster.drain_step(&key), "drain step").await;
        let (pods_left, blocked) = match step {
            Ok(DrainProgress::Drained) => {
                self.log_cluster_event(last, serde_json::json!({ "event": "drained" }), now)
                    .await?;
                return Ok(false);
            }
            Ok(DrainProgress::Waiting { pods_left, blocked }) => (pods_left, blocked),
            Err(e) => {
                tracing::warn!(node = %last.node, error = %e, "drain step failed; next tick retries");
                (0, 0)
            }
        };
        if now < deadline {
            tracing::debug!(node = %last.node, pods_left, blocked, "draining");
            return Ok(true);
        }
        tracing::warn!(node = %last.node, pods_left, blocked, "drain bound reached; going ahead");
        self.log_cluster_event(
            last,
            serde_json::json!({
                "event": "drain_timeout",
                "pods_left": pods_left,
                "blocked_by_disruption_budget": blocked,
            }),
            now,
        )
        .await?;
        Ok(false)
    }

    /// Starts draining a serving node under an interruption notice, within the notice.
    pub(super) async fn drain_on_notice(
        &self,
        input: &mut TickInput,
        cluster: &Arc<dyn Cluster>,
        last: &NodeEvent,
        reclaim_at: Timestamp,
    ) -> Result<(), EngineError> {
        let now = self.clock.now();
        let draining = last.next(NodeState::Draining, "interruption_notice", now);
        self.record(input, draining.clone()).await?;
        if !self
            .drain(cluster, &draining, Some(reclaim_at), now)
            .await?
        {
            self.terminate_node(input, &draining, "interrupted").await?;
        }
        Ok(())
    }

    async fn log_cluster_event(
        &self,
        last: &NodeEvent,
        mut entry: serde_json::Value,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        entry["node"] = serde_json::json!(last.node);
        self.log_event(&last.pool, entry, now).await
    }
}

/// Decisions read back at most, per pool, to find the rungs already stamped.
const RUNG_LOOKBACK: i64 = 1000;

/// The rungs each node has stamped, from a pool's decision log records (JSON documents).
fn rungs_on_record(records: &[String]) -> HashMap<NodeId, ClusterNodeView> {
    let mut out: HashMap<NodeId, ClusterNodeView> = HashMap::new();
    for record in records {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(record) else {
            continue;
        };
        if entry["event"] != "cluster_rung" {
            continue;
        }
        let Some(node) = entry["node"].as_str() else {
            continue;
        };
        let view = out.entry(NodeId(node.to_string())).or_default();
        match entry["rung"].as_str() {
            Some("node_registered") => view.registered = true,
            Some("node_ready") => view.node_ready = true,
            Some("model_server_ready") => view.model_ready = true,
            _ => {}
        }
    }
    out
}

pub(super) fn cluster_key(e: &NodeEvent, instance: &str) -> ClusterNodeKey {
    ClusterNodeKey {
        pool: e.pool.clone(),
        node: e.node.clone(),
        provider: e.provider,
        zone: e.zone.clone(),
        instance: instance.to_string(),
    }
}
