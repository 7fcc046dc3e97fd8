//! The Kubernetes cluster `serve` takes readiness and drains from, when `[kube]` is enabled.
//! `headroom-kube` (kube-rs, k8s-openapi) is behind the cargo feature `kube`, so the default
//! build, which `headroom demo` needs, stays short.

use std::sync::Arc;

use headroom_config::Config;
use headroom_engine::Cluster;

/// Whether `[kube]` asks for a cluster (`enabled = true`).
#[cfg(not(feature = "kube"))]
fn enabled(config: &Config) -> bool {
    config
        .kube
        .as_ref()
        .and_then(|t| t.get("enabled"))
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}

#[cfg(feature = "kube")]
fn settings(config: &Config, origin: &str) -> anyhow::Result<Option<headroom_kube::KubeSettings>> {
    let pools: Vec<_> = config.pools.iter().map(|p| p.name.clone()).collect();
    Ok(headroom_kube::KubeSettings::from_table(
        config.kube.as_ref(),
        &pools,
        origin,
    )?)
}

/// Checks `[kube]` for `config check`, without connecting.
#[cfg(feature = "kube")]
pub fn check(config: &Config, origin: &str) -> anyhow::Result<()> {
    settings(config, origin).map(|_| ())
}

#[cfg(not(feature = "kube"))]
pub fn check(config: &Config, _origin: &str) -> anyhow::Result<()> {
    if enabled(config) {
        return Err(crate::BadInput(
            "kube.enabled: this build has no Kubernetes support; rebuild with `cargo build --release --features kube` or set enabled = false".to_string(),
        )
        .into());
    }
    Ok(())
}

/// Connects to the cluster and waits for its watches to list once.
#[cfg(feature = "kube")]
pub async fn cluster_for(
    config: &Config,
    origin: &str,
) -> anyhow::Result<Option<Arc<dyn Cluster>>> {
    use anyhow::Context;
    let Some(settings) = settings(config, origin)? else {
        return Ok(None);
    };
    let cluster = headroom_kube::KubeCluster::connect(settings)
        .await
        .context("kube: connecting to the cluster")?;
    cluster
        .wait_synced(std::time::Duration::from_secs(30))
        .await
        .context("kube: listing nodes and model-server pods")?;
    Ok(Some(Arc::new(cluster)))
}

#[cfg(not(feature = "kube"))]
pub async fn cluster_for(
    config: &Config,
    origin: &str,
) -> anyhow::Result<Option<Arc<dyn Cluster>>> {
    check(config, origin)?;
    Ok(None)
}
