//! Builds the cloud a configuration runs against: one provider per cloud its offerings name
//! (the simulated cloud when they name none), behind one composite when they name several. The
//! provider crates are behind cargo features (`aws`, `gcp`) so that the default build, which
//! `headroom demo` needs, stays short.

use std::sync::Arc;

use headroom_cloud::{Clock, CloudProvider, MultiCloud};
use headroom_config::Config;
use headroom_core::ProviderKind;
use headroom_engine::sim_cloud_for;

/// The provider for `config`'s offerings: each cloud they name, routed to by offering and
/// instance ([`MultiCloud`]) when there are several. Refuses what [`check`] refuses.
pub async fn cloud_for(
    config: &Config,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Arc<dyn CloudProvider>> {
    check(config)?;
    let mut kinds: Vec<ProviderKind> = config.providers().into_iter().collect();
    if kinds.is_empty() {
        kinds.push(ProviderKind::Sim);
    }
    let mut members = Vec::new();
    for kind in kinds {
        members.push(match kind {
            ProviderKind::Sim => Arc::new(sim_cloud_for(config, clock.clone())),
            ProviderKind::Aws => aws(config, clock.clone()).await?,
            ProviderKind::Gcp => gcp(config, clock.clone()).await?,
        });
    }
    match members.len() {
        1 => Ok(members.remove(0)),
        _ => Ok(Arc::new(MultiCloud::new(members)?)),
    }
}

/// What `serve` refuses before it talks to any cloud, and all that `config check` adds to the
/// configuration's own validation: a cloud the offerings name that this build lacks (one line
/// with the rebuild command), and each provider's own table (`[aws]`, `[gcp]`).
pub fn check(config: &Config) -> anyhow::Result<()> {
    let providers = config.providers();
    let lacking: Vec<ProviderKind> = providers
        .iter()
        .copied()
        .filter(|p| match p {
            ProviderKind::Sim => false,
            ProviderKind::Aws => !cfg!(feature = "aws"),
            ProviderKind::Gcp => !cfg!(feature = "gcp"),
        })
        .collect();
    if !lacking.is_empty() {
        let names: Vec<String> = lacking.iter().map(|p| format!("\"{p}\"")).collect();
        let features: Vec<&str> = providers
            .iter()
            .filter(|p| **p != ProviderKind::Sim)
            .map(|p| p.as_str())
            .collect();
        let (noun, verb) = if lacking.len() == 1 {
            ("provider", "needs a build with its feature")
        } else {
            ("providers", "need a build with their features")
        };
        return Err(crate::BadInput(format!(
            "offerings: {noun} {} {verb}; rebuild with `cargo build --release --features {}`",
            names.join(", "),
            features.join(",")
        ))
        .into());
    }
    #[cfg(feature = "aws")]
    if providers.contains(&ProviderKind::Aws) || config.aws.is_some() {
        aws_settings(config)?;
    }
    #[cfg(feature = "gcp")]
    if providers.contains(&ProviderKind::Gcp) || config.gcp.is_some() {
        gcp_settings(config)?;
    }
    Ok(())
}

/// The `[aws]` table, parsed and checked against the pools; mistakes are one line each.
#[cfg(feature = "aws")]
fn aws_settings(config: &Config) -> anyhow::Result<headroom_aws::AwsSettings> {
    let bad = |e: headroom_aws::AwsError| crate::BadInput(e.to_string());
    let settings = headroom_aws::AwsSettings::from_table(config.aws.as_ref()).map_err(bad)?;
    settings
        .check_pools(config.pools.iter().map(|p| p.name.as_str()))
        .map_err(bad)?;
    Ok(settings)
}

#[cfg(feature = "aws")]
async fn aws(config: &Config, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<dyn CloudProvider>> {
    let settings = aws_settings(config)?;
    let regions = settings.regions_or(
        config
            .offerings
            .iter()
            .filter(|o| o.offering.provider == ProviderKind::Aws)
            .map(|o| o.offering.region.as_str()),
    );
    let provider = headroom_aws::AwsProvider::new(settings, regions, clock)
        .await
        .map_err(|e| crate::BadInput(e.to_string()))?;
    // The Auto Scaling warm pools of group-mode pools are Headroom's configuration: put them at
    // start. A group that is missing or a permission that is lacking stops the start; a passing
    // fault (throttling, an activity in progress) only delays the warm pool to the next start.
    if let Err(e) = provider.sync_group_warm_pools().await {
        if e.class().is_retryable() {
            tracing::warn!(error = %e, "auto scaling warm pools not configured; the next start retries");
        } else {
            anyhow::bail!("aws.group_warm_pools: {e}");
        }
    }
    Ok(Arc::new(provider))
}

// Without the feature, `check` has refused the configuration before these are reached.
#[cfg(not(feature = "aws"))]
async fn aws(config: &Config, _: Arc<dyn Clock>) -> anyhow::Result<Arc<dyn CloudProvider>> {
    check(config)?;
    anyhow::bail!("offerings: provider \"aws\" needs a build with its feature")
}

#[cfg(not(feature = "gcp"))]
async fn gcp(config: &Config, _: Arc<dyn Clock>) -> anyhow::Result<Arc<dyn CloudProvider>> {
    check(config)?;
    anyhow::bail!("offerings: provider \"gcp\" needs a build with its feature")
}

/// The GCP provider from the `[gcp]` table; it lists the inventory in the zones the GCP
/// offerings name (and `gcp.zones`).
#[cfg(feature = "gcp")]
async fn gcp(config: &Config, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<dyn CloudProvider>> {
    let settings = gcp_settings(config)?;
    let zones = config
        .offerings
        .iter()
        .filter(|o| o.offering.provider == ProviderKind::Gcp)
        .map(|o| o.offering.zone.clone());
    Ok(Arc::new(
        headroom_gcp::GcpProvider::new(settings, zones, clock).await?,
    ))
}

/// The `[gcp]` table, parsed and checked against the pools.
#[cfg(feature = "gcp")]
fn gcp_settings(config: &Config) -> anyhow::Result<headroom_gcp::GcpSettings> {
    let bad = |e: headroom_gcp::GcpError| crate::BadInput(e.to_string());
    let settings = headroom_gcp::GcpSettings::parse(config.gcp.as_ref()).map_err(bad)?;
    settings
        .check_pools(config.pools.iter().map(|p| p.name.as_str()))
        .map_err(bad)?;
    Ok(settings)
}
