//! Quota preflight on AWS: the EC2 instance-family quotas of the GPU families, read from Service
//! Quotas, with what is in use counted from DescribeInstances.
//!
//! EC2's running-instance quotas are in vCPUs per family and market: "Running On-Demand G and VT
//! instances" (L-DB2E81BA), "Running On-Demand P instances" (L-417A185B), and the spot ones, "All
//! G and VT Spot Instance Requests" (L-3819A6DF) and "All P Spot Instance Requests"
//! (L-7212CCBC). The limit is GetServiceQuota's applied value, or GetAWSDefaultServiceQuota's
//! where the account has none applied (Service Quotas answers NoSuchResourceException then).
//!
//! In use: Service Quotas publishes usage as a CloudWatch metric (AWS/Usage, ResourceCount) that
//! lags by minutes and needs another client and permission. The quota counts every running
//! instance of the family in the account and region, not only ours, so usage here is the vCPUs
//! of every pending or running instance of the family in the region (DescribeInstances without
//! the cluster filter), on-demand and spot apart by the instance's lifecycle. Open spot requests
//! that are not yet instances also count against a spot quota on EC2 and are not counted here.
//! Reserved offerings (capacity reservations) count against the on-demand quota, as on EC2.
//! Other families (Inf, Trn, DL, standard) are not read: their offerings are not limited.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{Filter, InstanceLifecycleType, InstanceType};
use headroom_cloud::{CloudError, Quotas};
use headroom_core::{Market, Offering, ProviderKind, QuotaDraw, QuotaHeadroom, QuotaUnit};

use crate::provider::{AwsProvider, api_error};

/// Service Quotas' code for EC2.
const EC2_SERVICE: &str = "ec2";

/// Pages of DescribeInstances read when counting use (1000 instances a page).
const MAX_USAGE_PAGES: usize = 20;

/// Instance types described per DescribeInstanceTypes call (EC2's limit is 100).
const TYPES_PER_CALL: usize = 100;

/// One EC2 instance-family quota Headroom reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ec2Quota {
    pub code: &'static str,
    pub name: &'static str,
    pub family: Family,
    pub spot: bool,
}

/// The quota families of the GPU instance types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// G (g4dn, g5, g6, g6e, gr6, …) and VT (vt1).
    GAndVt,
    /// P (p3, p4d, p5, …).
    P,
}

pub const EC2_GPU_QUOTAS: [Ec2Quota; 4] = [
    Ec2Quota {
        code: "L-DB2E81BA",
        name: "Running On-Demand G and VT instances",
        family: Family::GAndVt,
        spot: false,
    },
    Ec2Quota {
        code: "L-417A185B",
        name: "Running On-Demand P instances",
        family: Family::P,
        spot: false,
    },
    Ec2Quota {
        code: "L-3819A6DF",
        name: "All G and VT Spot Instance Requests",
        family: Family::GAndVt,
        spot: true,
    },
    Ec2Quota {
        code: "L-7212CCBC",
        name: "All P Spot Instance Requests",
        family: Family::P,
        spot: true,
    },
];

/// The quota family of an instance type (`g6.xlarge` → G and VT), from the letters before its
/// generation digit.
pub fn family_of(instance_type: &str) -> Option<Family> {
    let prefix: String = instance_type
        .chars()
        .take_while(|c| c.is_ascii_lowercase())
        .collect();
    match prefix.as_str() {
        "vt" => Some(Family::GAndVt),
        p if p.starts_with('g') => Some(Family::GAndVt),
        "p" => Some(Family::P),
        _ => None,
    }
}

/// The quota a running instance of `instance_type` counts against, on spot or not.
pub fn quota_of(instance_type: &str, spot: bool) -> Option<&'static Ec2Quota> {
    let family = family_of(instance_type)?;
    EC2_GPU_QUOTAS
        .iter()
        .find(|q| q.family == family && q.spot == spot)
}

impl AwsProvider {
    /// [`headroom_cloud::CloudProvider::quota_headroom`] on AWS.
    pub(crate) async fn read_quotas(
        &self,
        region: &str,
        offerings: &[Offering],
    ) -> Result<Quotas, CloudError> {
        let ours: Vec<(&Offering, &'static Ec2Quota)> = offerings
            .iter()
            .filter(|o| o.provider == ProviderKind::Aws && o.region == region)
            .filter_map(|o| Some((o, quota_of(&o.instance_type, o.market == Market::Spot)?)))
            .collect();
        if ours.is_empty() {
            return Ok(Quotas::Known(Vec::new()));
        }
        let in_use = self.family_use(region).await?;
        let types: BTreeSet<&str> = ours
            .iter()
            .map(|(o, _)| o.instance_type.as_str())
            .chain(in_use.keys().map(|(t, _)| t.as_str()))
            .collect();
        let vcpus = self.vcpus(region, &types).await?;
        let codes: BTreeSet<&'static str> = ours.iter().map(|(_, q)| q.code).collect();
        let mut quotas = Vec::new();
        for quota in EC2_GPU_QUOTAS.iter().filter(|q| codes.contains(q.code)) {
            let limit = self.quota_limit(region, quota.code).await?;
            let used: u64 = in_use
                .iter()
                .filter(|((t, spot), _)| quota_of(t, *spot) == Some(quota))
                .map(|((t, _), count)| count * u64::from(vcpus.get(t).copied().unwrap_or(0)))
                .sum();
            quotas.push(QuotaHeadroom {
                name: quota.code.to_string(),
                description: quota.name.to_string(),
                region: region.to_string(),
                unit: QuotaUnit::Vcpu,
                limit,
                in_use: used,
                covers: ours
                    .iter()
                    .filter(|(_, q)| q.code == quota.code)
                    .filter_map(|(o, _)| {
                        Some(QuotaDraw {
                            offering: o.id.clone(),
                            per_node: *vcpus.get(&o.instance_type)?,
                        })
                    })
                    .collect(),
            });
        }
        Ok(Quotas::Known(quotas))
    }

    /// The quota's value in whole vCPUs: the account's applied value, else AWS's default.
    async fn quota_limit(&self, region: &str, code: &str) -> Result<u64, CloudError> {
        let servicequotas = self.servicequotas_client(region)?;
        let applied = servicequotas
            .get_service_quota()
            .service_code(EC2_SERVICE)
            .quota_code(code)
            .send()
            .await;
        let value = match applied {
            Ok(out) => out.quota().and_then(|q| q.value()),
            Err(e) if e.code() == Some("NoSuchResourceException") => servicequotas
                .get_aws_default_service_quota()
                .service_code(EC2_SERVICE)
                .quota_code(code)
                .send()
                .await
                .map_err(|e| api_error(e, None))?
                .quota()
                .and_then(|q| q.value()),
            Err(e) => return Err(api_error(e, None)),
        };
        Ok(value.map_or(0, |v| v.max(0.0).floor() as u64))
    }

    /// Pending and running instances of the GPU families in `region`, whoever owns them, by
    /// (instance type, spot).
    async fn family_use(&self, region: &str) -> Result<BTreeMap<(String, bool), u64>, CloudError> {
        let ec2 = self.client(region)?;
        let mut counts = BTreeMap::new();
        let mut token: Option<String> = None;
        for _ in 0..MAX_USAGE_PAGES {
            let page = ec2
                .describe_instances()
                .filters(
                    Filter::builder()
                        .name("instance-state-name")
                        .values("pending")
                        .values("running")
                        .build(),
                )
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| api_error(e, None))?;
            for instance in page.reservations().iter().flat_map(|r| r.instances()) {
                let Some(kind) = instance.instance_type() else {
                    continue;
                };
                if family_of(kind.as_str()).is_none() {
                    continue;
                }
                let spot = instance.instance_lifecycle() == Some(&InstanceLifecycleType::Spot);
                *counts.entry((kind.as_str().to_string(), spot)).or_default() += 1;
            }
            token = page.next_token().map(str::to_string);
            if token.is_none() {
                return Ok(counts);
            }
        }
        tracing::warn!(%region, pages = MAX_USAGE_PAGES, "more instances than the usage count reads; quotas may show more headroom than they have");
        Ok(counts)
    }

    /// vCPUs per instance type, from DescribeInstanceTypes (remembered: they never change).
    async fn vcpus(
        &self,
        region: &str,
        types: &BTreeSet<&str>,
    ) -> Result<BTreeMap<String, u32>, CloudError> {
        let missing: Vec<String> = {
            let known = self.vcpus_of.lock().unwrap_or_else(|e| e.into_inner());
            types
                .iter()
                .filter(|t| !known.contains_key(**t))
                .map(|t| t.to_string())
                .collect()
        };
        let ec2 = self.client(region)?;
        for batch in missing.chunks(TYPES_PER_CALL) {
            let out = ec2
                .describe_instance_types()
                .set_instance_types(Some(
                    batch
                        .iter()
                        .map(|t| InstanceType::from(t.as_str()))
                        .collect(),
                ))
                .send()
                .await
                .map_err(|e| api_error(e, None))?;
            let mut known = self.vcpus_of.lock().unwrap_or_else(|e| e.into_inner());
            for info in out.instance_types() {
                let (Some(kind), Some(vcpus)) = (
                    info.instance_type(),
                    info.v_cpu_info().and_then(|v| v.default_v_cpus()),
                ) else {
                    continue;
                };
                known.insert(kind.as_str().to_string(), vcpus.max(0) as u32);
            }
        }
        let known = self.vcpus_of.lock().unwrap_or_else(|e| e.into_inner());
        Ok(types
            .iter()
            .filter_map(|t| Some((t.to_string(), *known.get(*t)?)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_types_map_to_their_family_s_quota_by_market() {
        assert_eq!(quota_of("g6.xlarge", false).unwrap().code, "L-DB2E81BA");
        assert_eq!(quota_of("g5g.2xlarge", false).unwrap().code, "L-DB2E81BA");
        assert_eq!(quota_of("gr6.4xlarge", true).unwrap().code, "L-3819A6DF");
        assert_eq!(quota_of("vt1.3xlarge", false).unwrap().code, "L-DB2E81BA");
        assert_eq!(quota_of("p5.48xlarge", false).unwrap().code, "L-417A185B");
        assert_eq!(quota_of("p4d.24xlarge", true).unwrap().code, "L-7212CCBC");
        assert_eq!(quota_of("m7i.large", false), None);
        assert_eq!(quota_of("inf2.xlarge", false), None);
        assert_eq!(quota_of("trn1.32xlarge", false), None);
    }
}
