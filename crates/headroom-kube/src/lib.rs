//! Headroom's Kubernetes view of the node layer (kube-rs): a node is capacity only once the
//! cluster shows it registered, Ready and running its pool's model server Ready; a node leaves
//! only after it is cordoned and its pods are evicted (PodDisruptionBudgets honoured), within a
//! bound. `KubeCluster` implements the engine's `Cluster` seam; `KubeSettings` reads `[kube]`.

mod bootstrap;
mod cluster;
mod settings;

pub use bootstrap::{Bootstrap, EksCluster, render as render_bootstrap};
pub use cluster::{KubeCluster, node_matches, provider_id_matches, sim_provider_id};
pub use settings::{KubeSettings, NODE_LABEL, POOL_LABEL, PoolKube};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum KubeError {
    #[error("kubeconfig {path}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error(
        "no kubeconfig given and none found (in-cluster service account, $KUBECONFIG, ~/.kube/config)"
    )]
    Infer(#[source] kube::config::InferConfigError),
    #[error("kubernetes API server URL {0}")]
    Url(String),
    #[error("kubernetes client")]
    Client(#[source] kube::Error),
    #[error("kubernetes API call")]
    Api(#[source] kube::Error),
    #[error("the cluster's watches did not list within {0:?}")]
    NotSynced(std::time::Duration),
}
