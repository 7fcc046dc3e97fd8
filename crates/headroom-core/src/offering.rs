//! Offerings: where and how a node can be bought.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{AccountName, Money, OfferingId, PoolName, Timestamp};

/// Which cloud an offering lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// The embedded simulated cloud.
    Sim,
    Aws,
    Gcp,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Sim => "sim",
            ProviderKind::Aws => "aws",
            ProviderKind::Gcp => "gcp",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How capacity is bought.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Market {
    /// A specific reservation or capacity block, already paid for or committed.
    Reserved,
    OnDemand,
    /// Interruptible capacity at a dynamic price.
    Spot,
}

impl Market {
    pub fn as_str(self) -> &'static str {
        match self {
            Market::Reserved => "reserved",
            Market::OnDemand => "on-demand",
            Market::Spot => "spot",
        }
    }

    pub fn parse(s: &str) -> Option<Market> {
        match s {
            "reserved" => Some(Market::Reserved),
            "on-demand" => Some(Market::OnDemand),
            "spot" => Some(Market::Spot),
            _ => None,
        }
    }
}

impl fmt::Display for Market {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// (provider, region, zone, instance type, market) with its price.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offering {
    pub id: OfferingId,
    pub provider: ProviderKind,
    pub region: String,
    pub zone: String,
    pub instance_type: String,
    pub market: Market,
    pub price_usd_per_hour: Money,
    /// Accelerators per node, e.g. 8 for a p5.48xlarge.
    pub gpus_per_node: u32,
    /// What a parked (stopped) node still costs per hour: its volumes, which every cloud bills
    /// while the instance is stopped.
    pub warm_usd_per_hour: Money,
}

/// What a block volume costs per GB-month on `provider`: AWS gp3 ($0.08) and GCP pd-balanced
/// ($0.10), the volumes a GPU node's image and weights sit on; the simulated cloud bills as AWS.
pub fn volume_usd_per_gb_month(provider: ProviderKind) -> Money {
    match provider {
        ProviderKind::Sim | ProviderKind::Aws => Money::from_micros(80_000),
        ProviderKind::Gcp => Money::from_micros(100_000),
    }
}

/// Hours in the month the clouds price volumes by (365 × 24 / 12).
pub const HOURS_PER_MONTH: i64 = 730;

/// What a stopped node with `volume_gb` of volumes costs per hour on `provider`, to the
/// micro-dollar (rounded up: a parked node is never priced below its bill).
pub fn parked_usd_per_hour(provider: ProviderKind, volume_gb: u32) -> Money {
    let monthly = volume_usd_per_gb_month(provider).micros() * i64::from(volume_gb);
    Money::from_micros((monthly + HOURS_PER_MONTH - 1) / HOURS_PER_MONTH)
}

/// A reservation the deployment pays for: `nodes` instances of one offering at its hourly
/// price, from `starts_at` (or always) until `ends_at` (or always).
#[derive(Debug, Clone, PartialEq)]
pub struct ReservedCapacity {
    pub offering: OfferingId,
    pub provider: ProviderKind,
    pub region: String,
    pub zone: String,
    pub instance_type: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// What one reserved node costs per hour, used or not.
    pub price_usd_per_hour: Money,
    pub starts_at: Option<Timestamp>,
    pub ends_at: Option<Timestamp>,
    /// The pools that list the offering, with their accounts: who its idle part is charged to.
    pub pools: Vec<(PoolName, AccountName)>,
}
