//! `KubeCluster`: the engine's `Cluster` over a real API server, through kube-rs. Nodes and each
//! pool's model-server pods are watched into reflector caches (the watcher re-lists after a
//! `410 Gone` and re-watches when the server closes a watch), so readiness reads never call the
//! API server; only drains do, a bounded amount per tick.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use headroom_core::{NodeId, PoolName, ProviderKind};
use headroom_engine::{Cluster, ClusterError, ClusterNodeKey, ClusterNodeView, DrainProgress};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;

use crate::KubeError;
use crate::settings::{KubeSettings, NODE_LABEL, POOL_LABEL, PoolKube};

/// Evictions asked for in one drain step; the rest wait for the next tick.
const MAX_EVICTIONS_PER_STEP: usize = 50;
/// Pods listed per node in one drain step (a GPU node runs a handful).
const MAX_PODS_PER_NODE: u32 = 500;
/// Every API call the client makes is bounded by this.
const API_TIMEOUT: Duration = Duration::from_secs(10);

/// A cluster seen through watches. Dropping it stops the watches.
pub struct KubeCluster {
    client: Client,
    settings: KubeSettings,
    nodes: Store<Node>,
    pods: BTreeMap<PoolName, Store<Pod>>,
    watches: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCluster")
            .field("default_namespace", &self.client.default_namespace())
            .field("settings", &self.settings)
            .field("nodes", &self.nodes.state().len())
            .finish_non_exhaustive()
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        for task in &self.watches {
            task.abort();
        }
    }
}

impl KubeCluster {
    /// Connects with the configured kubeconfig, or the in-cluster service account (falling back
    /// to `$KUBECONFIG` / `~/.kube/config`), and starts the watches.
    pub async fn connect(settings: KubeSettings) -> Result<KubeCluster, KubeError> {
        let mut config = match &settings.kubeconfig {
            Some(path) => {
                let file = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                    KubeError::Kubeconfig {
                        path: path.display().to_string(),
                        source,
                    }
                })?;
                let options = kube::config::KubeConfigOptions {
                    context: settings.context.clone(),
                    ..Default::default()
                };
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|source| KubeError::Kubeconfig {
                        path: path.display().to_string(),
                        source,
                    })?
            }
            None => kube::Config::infer().await.map_err(KubeError::Infer)?,
        };
        bound(&mut config);
        use_ring_for_tls();
        let client = Client::try_from(config).map_err(KubeError::Client)?;
        Ok(KubeCluster::start(client, settings))
    }

    /// A cluster at `url` with no credentials (tests, `kubectl proxy`).
    pub fn at_url(url: &str, settings: KubeSettings) -> Result<KubeCluster, KubeError> {
        let uri = url
            .parse()
            .map_err(|e| KubeError::Url(format!("{url}: {e}")))?;
        let mut config = kube::Config::new(uri);
        bound(&mut config);
        use_ring_for_tls();
        let client = Client::try_from(config).map_err(KubeError::Client)?;
        Ok(KubeCluster::start(client, settings))
    }

    /// Starts the watches: every Node, and each pool's model-server pods. Must run inside a
    /// tokio runtime.
    pub fn start(client: Client, settings: KubeSettings) -> KubeCluster {
        let mut watches = Vec::new();
        let (nodes, writer) = reflector::store();
        let stream = reflector::reflector(
            writer,
            watcher(Api::<Node>::all(client.clone()), watcher::Config::default()),
        );
        watches.push(tokio::spawn(drive(stream, "nodes".to_string())));
        let mut pods = BTreeMap::new();
        for (pool, kube) in &settings.pools {
            let (store, writer) = reflector::store();
            let config = watcher::Config::default().labels(&kube.model_selector);
            let stream =
                reflector::reflector(writer, watcher(Api::<Pod>::all(client.clone()), config));
            watches.push(tokio::spawn(drive(stream, format!("pods of pool {pool}"))));
            pods.insert(pool.clone(), store);
        }
        KubeCluster {
            client,
            settings,
            nodes,
            pods,
            watches,
        }
    }

    /// Waits until every watch has listed once (at most `timeout`).
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), KubeError> {
        let all = async {
            self.nodes.wait_until_ready().await.ok();
            for store in self.pods.values() {
                store.wait_until_ready().await.ok();
            }
        };
        tokio::time::timeout(timeout, all)
            .await
            .map_err(|_| KubeError::NotSynced(timeout))
    }

    pub fn settings(&self) -> &KubeSettings {
        &self.settings
    }

    fn find_node(&self, key: &ClusterNodeKey) -> Option<Arc<Node>> {
        self.nodes.find(|n| node_matches(n, key))
    }

    async fn set_unschedulable(&self, name: &str, cordon: bool) -> Result<(), KubeError> {
        let patch = serde_json::json!({ "spec": { "unschedulable": cordon } });
        Api::<Node>::all(self.client.clone())
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(KubeError::Api)?;
        Ok(())
    }
}

/// Connect and read timeouts for every call (watches are kept open by the server and
/// re-established by the watcher when they end).
fn bound(config: &mut kube::Config) {
    // The client's own retry of 429/503 backs off for up to minutes inside one call; an eviction
    // a PodDisruptionBudget refuses (429) is asked again on the engine's next tick instead.
    config.default_retry = false;
    config.connect_timeout = Some(API_TIMEOUT);
    config.write_timeout = Some(API_TIMEOUT);
    // A watch idles up to its server-side timeout (290 s) between events; reads wait longer.
    config.read_timeout = Some(Duration::from_secs(295));
}

/// Drives one watch forever: errors are logged and the watcher backs off and recovers (it
/// re-lists after `410 Gone`).
async fn drive<S, K>(stream: S, what: String)
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let stream = stream.default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        if let Err(e) = event {
            tracing::warn!(watch = %what, error = %e, "kubernetes watch error; recovering");
        }
    }
}

#[async_trait]
impl Cluster for KubeCluster {
    fn node(&self, key: &ClusterNodeKey) -> ClusterNodeView {
        let Some(node) = self.find_node(key) else {
            return ClusterNodeView::default();
        };
        let name = node.name_any();
        let model_ready = self.pods.get(&key.pool).is_some_and(|pods| {
            pods.find(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str())
                    && p.metadata.deletion_timestamp.is_none()
                    && condition_true(
                        p.status.as_ref().and_then(|s| s.conditions.as_ref()),
                        "Ready",
                    )
            })
            .is_some()
        });
        ClusterNodeView {
            registered: true,
            node_ready: condition_true(
                node.status.as_ref().and_then(|s| s.conditions.as_ref()),
                "Ready",
            ),
            model_ready,
            cordoned: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
        }
    }

    async fn drain_step(&self, key: &ClusterNodeKey) -> Result<DrainProgress, ClusterError> {
        let Some(node) = self.find_node(key) else {
            // Never registered (or already gone): nothing runs there.
            return Ok(DrainProgress::Drained);
        };
        let name = node.name_any();
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        if !cordoned {
            self.set_unschedulable(&name, true).await?;
        }
        let on_node = Api::<Pod>::all(self.client.clone())
            .list(
                &ListParams::default()
                    .fields(&format!("spec.nodeName={name}"))
                    .limit(MAX_PODS_PER_NODE),
            )
            .await
            .map_err(KubeError::Api)?;
        let evictable: Vec<&Pod> = on_node.items.iter().filter(|p| evictable(p)).collect();
        let mut left = evictable.len() as u32;
        let mut blocked = 0;
        for pod in evictable
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .take(MAX_EVICTIONS_PER_STEP)
        {
            let namespace = pod.namespace().unwrap_or_else(|| "default".to_string());
            let api = Api::<Pod>::namespaced(self.client.clone(), &namespace);
            match api.evict(&pod.name_any(), &EvictParams::default()).await {
                Ok(_) => {}
                // A PodDisruptionBudget forbids it now: asked again on the next tick.
                Err(kube::Error::Api(status)) if status.code == 429 => blocked += 1,
                Err(kube::Error::Api(status)) if status.code == 404 => left -= 1,
                Err(e) => return Err(KubeError::Api(e).into()),
            }
        }
        if left == 0 {
            Ok(DrainProgress::Drained)
        } else {
            Ok(DrainProgress::Waiting {
                pods_left: left,
                blocked,
            })
        }
    }

    async fn uncordon(&self, key: &ClusterNodeKey) -> Result<(), ClusterError> {
        if let Some(node) = self.find_node(key) {
            self.set_unschedulable(&node.name_any(), false).await?;
        }
        Ok(())
    }

    fn bootstrap(&self, pool: &PoolName, node: &NodeId, provider: ProviderKind) -> Option<String> {
        let bootstrap = self.settings.bootstrap.as_ref()?;
        let kube = self.settings.pools.get(pool)?;
        Some(crate::bootstrap::render(
            bootstrap, pool, &node.0, provider, kube,
        ))
    }

    fn ready_model_pods(&self, pool: &PoolName) -> Vec<String> {
        let Some(pods) = self.pods.get(pool) else {
            return Vec::new();
        };
        let mut addresses: Vec<String> = pods
            .state()
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && condition_true(
                        p.status.as_ref().and_then(|s| s.conditions.as_ref()),
                        "Ready",
                    )
            })
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .collect();
        addresses.sort();
        addresses
    }

    fn unschedulable_pods(&self, pool: &PoolName) -> u32 {
        let (Some(pods), Some(kube)) = (self.pods.get(pool), self.settings.pools.get(pool)) else {
            return 0;
        };
        pods.state()
            .iter()
            .filter(|p| waits_for_a_node_of(p, pool, kube))
            .count() as u32
    }

    fn register_timeout(&self) -> Duration {
        self.settings.register_timeout
    }

    fn ready_timeout(&self) -> Duration {
        self.settings.ready_timeout
    }

    fn drain_timeout(&self) -> Duration {
        self.settings.drain_timeout
    }
}

/// Whether a Node is the ledger node `key`: its provider ID names the instance (and zone), or it
/// carries Headroom's node label; either way it must not be labelled for another pool.
pub fn node_matches(node: &Node, key: &ClusterNodeKey) -> bool {
    let labels = node.labels();
    if labels
        .get(POOL_LABEL)
        .is_some_and(|p| p.as_str() != key.pool.as_str())
    {
        return false;
    }
    let by_provider = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .is_some_and(|id| provider_id_matches(id, key));
    by_provider || labels.get(NODE_LABEL) == Some(&key.node.0)
}

/// `aws:///<zone>/<instance>`, `gce://<project>/<zone>/<name>`, `sim:///<zone>/<instance>`.
pub fn provider_id_matches(provider_id: &str, key: &ClusterNodeKey) -> bool {
    let scheme = match key.provider {
        ProviderKind::Aws => "aws",
        ProviderKind::Gcp => "gce",
        ProviderKind::Sim => "sim",
    };
    let Some(rest) = provider_id
        .strip_prefix(scheme)
        .and_then(|r| r.strip_prefix("://"))
    else {
        return false;
    };
    let mut parts = rest.rsplit('/');
    let instance = parts.next().unwrap_or_default();
    let zone = parts.next().unwrap_or_default();
    instance == key.instance && (zone.is_empty() || zone == key.zone)
}

/// The provider ID a node of `key` reports, for the simulated cloud (and tests).
pub fn sim_provider_id(zone: &str, instance: &str) -> String {
    format!("sim:///{zone}/{instance}")
}

fn condition_true(conditions: Option<&Vec<impl ConditionLike>>, kind: &str) -> bool {
    conditions.is_some_and(|cs| cs.iter().any(|c| c.kind() == kind && c.status() == "True"))
}

trait ConditionLike {
    fn kind(&self) -> &str;
    fn status(&self) -> &str;
}

impl ConditionLike for k8s_openapi::api::core::v1::NodeCondition {
    fn kind(&self) -> &str {
        &self.type_
    }
    fn status(&self) -> &str {
        &self.status
    }
}

impl ConditionLike for k8s_openapi::api::core::v1::PodCondition {
    fn kind(&self) -> &str {
        &self.type_
    }
    fn status(&self) -> &str {
        &self.status
    }
}

/// Whether `pod` (one of the pool's model-server pods) is waiting for a node the pool would
/// add: Pending and refused by the scheduler as `Unschedulable`, with a node selector the pool's
/// labels satisfy and a toleration for each of its NoSchedule/NoExecute taints. Node affinity is
/// not read.
pub fn waits_for_a_node_of(pod: &Pod, pool: &PoolName, kube: &PoolKube) -> bool {
    let status = pod.status.as_ref();
    let unschedulable = status.and_then(|s| s.phase.as_deref()) == Some("Pending")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            });
    if !unschedulable || pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let spec = pod.spec.as_ref();
    let selector_fits = spec
        .and_then(|s| s.node_selector.as_ref())
        .is_none_or(|selector| {
            selector.iter().all(|(k, v)| match k.as_str() {
                POOL_LABEL => v == pool.as_str(),
                _ => kube.node_labels.get(k) == Some(v),
            })
        });
    let tolerations = spec
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let tolerates_taints = kube.node_taints.iter().all(|taint| {
        let Some((kv, effect)) = taint.rsplit_once(':') else {
            return true;
        };
        if effect == "PreferNoSchedule" {
            return true;
        }
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        tolerations.iter().any(|t| {
            let key_ok = match t.key.as_deref() {
                None | Some("") => t.operator.as_deref() == Some("Exists"),
                Some(k) => k == key,
            };
            let value_ok = t.operator.as_deref() == Some("Exists")
                || t.value.as_deref().unwrap_or_default() == value;
            let effect_ok = t
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == effect);
            key_ok && value_ok && effect_ok
        })
    });
    selector_fits && tolerates_taints
}

/// What `kubectl drain` evicts: not DaemonSet pods (they would come straight back), not mirror
/// pods (the kubelet owns them), not pods that already finished.
fn evictable(pod: &Pod) -> bool {
    let daemon = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    !daemon && !mirror && !finished
}

/// rustls picks its crypto provider by itself only when exactly one is compiled in; a binary
/// that also links the cloud SDKs has two (ring and aws-lc-rs), so say which. Harmless when a
/// provider is already installed.
fn use_ring_for_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> PoolName {
        "llm".parse().unwrap()
    }

    fn kube(taints: &[&str]) -> PoolKube {
        PoolKube {
            model_selector: "app=llm".to_string(),
            node_labels: [("gpu".to_string(), "l4".to_string())].into(),
            node_taints: taints.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn pod(phase: &str, reason: &str, spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "llm-0", "namespace": "serving" },
            "spec": spec,
            "status": { "phase": phase, "conditions": [
                { "type": "PodScheduled", "status": "False", "reason": reason }
            ] },
        }))
        .unwrap()
    }

    #[test]
    fn an_unschedulable_pod_the_pools_nodes_would_take_is_waiting_for_one() {
        let k = kube(&[
            "nvidia.com/gpu=present:NoSchedule",
            "soft=x:PreferNoSchedule",
        ]);
        let tolerating = serde_json::json!({ "containers": [],
            "nodeSelector": { "gpu": "l4", "headroom.dev/pool": "llm" },
            "tolerations": [ { "key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule" } ] });
        assert!(waits_for_a_node_of(
            &pod("Pending", "Unschedulable", tolerating.clone()),
            &pool(),
            &k
        ));
        // Tolerating everything works too.
        let all =
            serde_json::json!({ "containers": [], "tolerations": [ { "operator": "Exists" } ] });
        assert!(waits_for_a_node_of(
            &pod("Pending", "Unschedulable", all),
            &pool(),
            &k
        ));
        // Not refused by the scheduler (yet), or already running: not waiting for a node.
        assert!(!waits_for_a_node_of(
            &pod("Pending", "SchedulingGated", tolerating.clone()),
            &pool(),
            &k
        ));
        assert!(!waits_for_a_node_of(
            &pod("Running", "Unschedulable", tolerating),
            &pool(),
            &k
        ));
        // A selector the pool's nodes do not satisfy, another pool, or an untolerated taint.
        for spec in [
            serde_json::json!({ "containers": [], "nodeSelector": { "gpu": "h100" }, "tolerations": [ { "operator": "Exists" } ] }),
            serde_json::json!({ "containers": [], "nodeSelector": { "headroom.dev/pool": "other" }, "tolerations": [ { "operator": "Exists" } ] }),
            serde_json::json!({ "containers": [], "tolerations": [ { "key": "nvidia.com/gpu", "value": "absent" } ] }),
            serde_json::json!({ "containers": [] }),
        ] {
            assert!(
                !waits_for_a_node_of(&pod("Pending", "Unschedulable", spec.clone()), &pool(), &k),
                "{spec}"
            );
        }
        // Without taints, no toleration is needed.
        let bare = serde_json::json!({ "containers": [] });
        assert!(waits_for_a_node_of(
            &pod("Pending", "Unschedulable", bare),
            &pool(),
            &kube(&[])
        ));
    }
}
