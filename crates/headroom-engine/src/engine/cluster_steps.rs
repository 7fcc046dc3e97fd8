//! The engine's steps when a Kubernetes cluster is configured: a node serves only once the
//! cluster says its model server is ready, a node that never registers is failed and replaced,
//! and a node leaves only after a (bounded) drain. Kept apart from `engine.rs` so the cloud-only
//! path there stays as it was.

use super::*;
use crate::cluster::{Cluster, ClusterNodeKey, ClusterNodeView, DrainProgress};

impl Engine {
    /// Settles a node by what the cluster shows. Returns whether it did; when it did not, the
    /// cloud-only rules apply (a drain that finished, an interruption, a missing instance).
    pub(super) async fn settle_with_cluster(
        &self,
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
                self.climb_with_cluster(cluster, last, instance, now)
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
            self.ledger.append_node_event(&booting).await?;
            last = booting;
        }
        if view.model_ready && !view.cordoned {
            self.state().cluster_seen.remove(&last.node);
            if last.destination == Destination::Warm {
                self.stop_to_warm(&last, "warmed").await?;
            } else {
                let serving = last.next(NodeState::Serving, "model_server_ready", now);
                self.ledger.append_node_event(&serving).await?;
            }
            return Ok(());
        }
        if view.cordoned {
            // Cordoned by the drain that parked it warm; woken now, it must take pods again.
            if let Err(e) = cluster.uncordon(&key).await {
                tracing::warn!(node = %last.node, error = %e, "uncordon failed; next tick retries");
            }
            return Ok(());
        }
        let timeout = chrono::Duration::from_std(cluster.register_timeout())
            .unwrap_or(chrono::Duration::minutes(10));
        if !view.registered && waited >= timeout {
            // Paying by the hour for a node the cluster cannot use: record it failed, which takes
            // it out of the planner's count (its replacement is planned this tick), and end it.
            tracing::warn!(pool = %last.pool, node = %last.node, instance = %instance.id, waited_s = waited.num_seconds(), "node never registered with the cluster; terminating it");
            let failed = last.next(NodeState::Failed, "never_registered", now);
            self.ledger.append_node_event(&failed).await?;
            self.log_cluster_event(
                &last,
                serde_json::json!({
                    "event": "never_registered",
                    "waited_s": waited.num_seconds(),
                    "reason": "no Kubernetes Node matched the instance's provider ID or node label in time; replaced and terminated",
                }),
                now,
            )
            .await?;
            self.state().cluster_seen.remove(&last.node);
            self.terminate_node(&failed, "never_registered").await?;
        }
        Ok(())
    }

    /// Stamps the cluster's rungs (registered, Node Ready, model server Ready) in the pool's
    /// decision log the first time this process sees each.
    async fn stamp_cluster_rungs(
        &self,
        last: &NodeEvent,
        view: ClusterNodeView,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        let before = self
            .state()
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
        let step = tokio::time::timeout(
            self.config.engine.provider_timeout,
            cluster.drain_step(&key),
        )
        .await
        .unwrap_or_else(|_| Err("drain step timed out".into()));
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
        cluster: &Arc<dyn Cluster>,
        last: &NodeEvent,
        reclaim_at: Timestamp,
    ) -> Result<(), EngineError> {
        let now = self.clock.now();
        let draining = last.next(NodeState::Draining, "interruption_notice", now);
        self.ledger.append_node_event(&draining).await?;
        if !self
            .drain(cluster, &draining, Some(reclaim_at), now)
            .await?
        {
            self.terminate_node(&draining, "interrupted").await?;
        }
        Ok(())
    }

    async fn log_cluster_event(
        &self,
        last: &NodeEvent,
        mut entry: serde_json::Value,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        entry["at"] = serde_json::json!(now);
        entry["node"] = serde_json::json!(last.node);
        self.ledger
            .append_decision(&last.pool, now, &entry.to_string())
            .await?;
        Ok(())
    }
}

fn cluster_key(e: &NodeEvent, instance: &str) -> ClusterNodeKey {
    ClusterNodeKey {
        pool: e.pool.clone(),
        node: e.node.clone(),
        provider: e.provider,
        zone: e.zone.clone(),
        instance: instance.to_string(),
    }
}
