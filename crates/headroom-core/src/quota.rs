//! Cloud quotas as the planner sees them: how much of each quota of a region is left, and what
//! one node of each offering draws on it. The engine reads them from the cloud (and caches
//! them); the planner only compares, so a destination a quota cannot take is skipped before a
//! launch instead of learning it from a refusal.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::OfferingId;

/// What a quota counts.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaUnit {
    /// Virtual CPUs of running instances (EC2's instance-family quotas).
    Vcpu,
    /// Accelerators (GCE's regional GPU quotas, the simulated cloud's).
    Gpu,
}

impl QuotaUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaUnit::Vcpu => "vcpu",
            QuotaUnit::Gpu => "gpu",
        }
    }
}

impl fmt::Display for QuotaUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one node of an offering draws on a quota, in the quota's unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaDraw {
    pub offering: OfferingId,
    pub per_node: u32,
}

/// One quota of one region, as the cloud reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaHeadroom {
    /// The cloud's own name (`L-DB2E81BA`, `NVIDIA_L4_GPUS`, `gpus`), searchable by an operator.
    pub name: String,
    /// What the cloud calls it ("Running On-Demand G and VT instances").
    pub description: String,
    pub region: String,
    pub unit: QuotaUnit,
    pub limit: u64,
    pub in_use: u64,
    /// The offerings (of those the provider was asked about) whose launches count against it.
    pub covers: Vec<QuotaDraw>,
}

impl QuotaHeadroom {
    /// Units left before the cloud refuses.
    pub fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.in_use)
    }

    /// What one node of `offering` draws on this quota, if the quota covers it.
    pub fn draw(&self, offering: &OfferingId) -> Option<u32> {
        self.covers
            .iter()
            .find(|d| &d.offering == offering)
            .map(|d| d.per_node)
    }

    /// Whole nodes of `offering` the quota can still take; `None` if it does not cover it.
    pub fn nodes_left(&self, offering: &OfferingId) -> Option<u64> {
        let per_node = self.draw(offering)?;
        Some(self.remaining() / u64::from(per_node.max(1)))
    }
}

/// Nodes of `offering` every quota in `quotas` still allows together: the tightest one.
/// `None` when no quota covers it (unlimited as far as Headroom knows).
pub fn nodes_left(quotas: &[QuotaHeadroom], offering: &OfferingId) -> Option<u64> {
    quotas.iter().filter_map(|q| q.nodes_left(offering)).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(limit: u64, in_use: u64, covers: &[(&str, u32)]) -> QuotaHeadroom {
        QuotaHeadroom {
            name: "L-DB2E81BA".into(),
            description: "Running On-Demand G and VT instances".into(),
            region: "us-east-1".into(),
            unit: QuotaUnit::Vcpu,
            limit,
            in_use,
            covers: covers
                .iter()
                .map(|(o, n)| QuotaDraw {
                    offering: o.parse().unwrap(),
                    per_node: *n,
                })
                .collect(),
        }
    }

    #[test]
    fn nodes_left_is_the_tightest_covering_quota_in_whole_nodes() {
        let g5: OfferingId = "g5".parse().unwrap();
        let other: OfferingId = "p4".parse().unwrap();
        let quotas = [quota(64, 40, &[("g5", 8)]), quota(16, 0, &[("g5", 8)])];
        assert_eq!(nodes_left(&quotas, &g5), Some(2));
        assert_eq!(nodes_left(&quotas, &other), None);
        // Over the limit (the cloud counts instances Headroom does not own): nothing left.
        assert_eq!(quota(8, 12, &[("g5", 4)]).nodes_left(&g5), Some(0));
    }
}
