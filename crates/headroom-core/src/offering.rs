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
