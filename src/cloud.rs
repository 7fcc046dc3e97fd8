//! Chooses the cloud a configuration runs against: the simulated cloud unless its offerings name
//! AWS or GCP. The provider crates are behind cargo features (`aws`, `gcp`) so that the default
//! build, which `headroom demo` needs, stays short.

use std::sync::Arc;

use anyhow::bail;
use headroom_cloud::{Clock, CloudProvider};
use headroom_core::ProviderKind;
use headroom_engine::{Config, sim_cloud_for};

/// The provider for `config`'s offerings. One deployment talks to one cloud.
pub async fn cloud_for(
    config: &Config,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Arc<dyn CloudProvider>> {
    let providers = config.providers();
    if providers.len() > 1 {
        let names: Vec<&str> = providers.iter().map(|p| p.as_str()).collect();
        bail!(
            "offerings: they name several clouds ({}); run one Headroom deployment per cloud",
            names.join(", ")
        );
    }
    match providers.first().copied().unwrap_or(ProviderKind::Sim) {
        ProviderKind::Sim => Ok(Arc::new(sim_cloud_for(config, clock))),
        ProviderKind::Aws => aws(config, clock).await,
        ProviderKind::Gcp => gcp(config, clock).await,
    }
}

/// Checks the provider's own table of `config` (`[aws]`), as far as this build knows it.
pub fn check(config: &Config) -> anyhow::Result<()> {
    #[cfg(feature = "aws")]
    if config.providers().contains(&ProviderKind::Aws) || config.aws.is_some() {
        aws_settings(config)?;
    }
    #[cfg(not(feature = "aws"))]
    let _ = config;
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
            bail!("aws.group_warm_pools: {e}");
        }
    }
    Ok(Arc::new(provider))
}

#[cfg(not(feature = "aws"))]
async fn aws(_: &Config, _: Arc<dyn Clock>) -> anyhow::Result<Arc<dyn CloudProvider>> {
    bail!(
        "offerings: provider \"aws\" needs a build with the aws feature; rebuild with `cargo build --release --features aws`"
    )
}

#[cfg(not(feature = "gcp"))]
async fn gcp(_: &Config, _: Arc<dyn Clock>) -> anyhow::Result<Arc<dyn CloudProvider>> {
    bail!(
        "offerings: provider \"gcp\" needs a build with the gcp feature; rebuild with `cargo build --release --features gcp`"
    )
}

/// The GCP provider from the `[gcp]` table; it lists the inventory in the zones the GCP
/// offerings name (and `gcp.zones`).
#[cfg(feature = "gcp")]
async fn gcp(config: &Config, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<dyn CloudProvider>> {
    let settings = headroom_gcp::GcpSettings::parse(config.gcp.as_ref())?;
    settings.check_pools(config.pools.iter().map(|p| p.name.as_str()))?;
    let zones = config
        .offerings
        .iter()
        .filter(|o| o.offering.provider == ProviderKind::Gcp)
        .map(|o| o.offering.zone.clone());
    Ok(Arc::new(
        headroom_gcp::GcpProvider::new(settings, zones, clock).await?,
    ))
}
