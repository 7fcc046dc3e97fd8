//! `regions.get` on the local Compute server: the region with its `quotas[]` (metric, limit,
//! usage), in the shape of Google's REST reference (`Region`: kind, name, status, zones,
//! quotas, selfLink). Usage follows the instances the server holds: each VM that is not stopped
//! (GCE's TERMINATED) in a zone of the region counts its GPUs, under the `PREEMPTIBLE_` metric
//! when it is a spot or preemptible VM, and `CPUS` by the vCPUs its machine type names. As GCE
//! does, an insert, start or resume that would take a metric past its limit fails: its
//! operation ends with `QUOTA_EXCEEDED` (HTTP 403), naming the metric, the limit and the region.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::{ComputeServer, Reply, ServerState, last_segment};
use crate::quotas::{gpu_metric, gpus_of};

/// Limits a region has unless a test sets others ([`ComputeServer::set_quota`]).
pub const DEFAULT_LIMITS: [(&str, f64); 7] = [
    ("CPUS", 2400.0),
    ("NVIDIA_L4_GPUS", 8.0),
    ("PREEMPTIBLE_NVIDIA_L4_GPUS", 16.0),
    ("NVIDIA_A100_GPUS", 16.0),
    ("PREEMPTIBLE_NVIDIA_A100_GPUS", 16.0),
    ("NVIDIA_H100_GPUS", 16.0),
    ("PREEMPTIBLE_NVIDIA_H100_GPUS", 16.0),
];

impl ComputeServer {
    /// Sets `metric`'s limit in `region` (a granted increase, or none left).
    pub fn set_quota(&self, region: &str, metric: &str, limit: f64) {
        self.state()
            .quota_limits
            .insert((region.to_string(), metric.to_string()), limit);
    }
}

/// The zone's region: `us-central1-a` → `us-central1`.
fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(region, _)| region)
}

/// What one VM uses of the quotas: (metric, amount) pairs.
fn usage_of(instance: &Value) -> Vec<(String, f64)> {
    if instance["status"] == "TERMINATED" {
        return Vec::new();
    }
    let machine_type = last_segment(instance["machineType"].as_str().unwrap_or_default());
    let spot = instance["scheduling"]["provisioningModel"] == "SPOT"
        || instance["scheduling"]["preemptible"] == true;
    let mut used = Vec::new();
    if let (Some(metric), Some(gpus)) = (gpu_metric(machine_type, spot), gpus_of(machine_type)) {
        used.push((metric, f64::from(gpus)));
    }
    if let Some(vcpus) = machine_type
        .rsplit('-')
        .next()
        .and_then(|n| n.trim_end_matches('g').parse::<f64>().ok())
        .filter(|_| !machine_type.ends_with('g'))
    {
        used.push(("CPUS".to_string(), vcpus));
    }
    used
}

/// The region's limits: the defaults, with what a test set.
fn limits(st: &ServerState, region: &str) -> BTreeMap<String, f64> {
    let mut limits: BTreeMap<String, f64> = DEFAULT_LIMITS
        .iter()
        .map(|(m, l)| (m.to_string(), *l))
        .collect();
    for ((r, metric), limit) in &st.quota_limits {
        if r == region {
            limits.insert(metric.clone(), *limit);
        }
    }
    limits
}

/// What the project's VMs in the region use, per metric, but for the one named `except`.
fn usage(
    st: &ServerState,
    project: &str,
    region: &str,
    except: Option<(&str, &str)>,
) -> BTreeMap<String, f64> {
    let mut usage: BTreeMap<String, f64> = BTreeMap::new();
    for ((p, zone, name), instance) in &st.instances {
        if p == project
            && region_of(zone) == region
            && except != Some((zone.as_str(), name.as_str()))
        {
            for (metric, n) in usage_of(instance) {
                *usage.entry(metric).or_default() += n;
            }
        }
    }
    usage
}

/// Why running `vm` in `zone` now would exceed a regional quota: GCE's message, naming the
/// metric, its limit and the region. The VM itself is counted once, as running, whatever its
/// status now (a start, a resume).
pub(super) fn exceeded(st: &ServerState, project: &str, zone: &str, vm: &Value) -> Option<String> {
    let region = region_of(zone);
    let limits = limits(st, region);
    let name = vm["name"].as_str().unwrap_or_default();
    let usage = usage(st, project, region, Some((zone, name)));
    let mut running = vm.clone();
    running["status"] = json!("RUNNING");
    usage_of(&running).into_iter().find_map(|(metric, n)| {
        let limit = *limits.get(&metric)?;
        let used = usage.get(&metric).copied().unwrap_or(0.0);
        (used + n > limit)
            .then(|| format!("Quota '{metric}' exceeded.  Limit: {limit:.1} in region {region}."))
    })
}

pub(super) async fn get_region(
    State(server): State<ComputeServer>,
    Path((project, region)): Path<(String, String)>,
) -> Reply {
    let mut st = server.state();
    st.calls.push(format!("GET /regions/{region}"));
    super::failing_get(&mut st)?;
    let limits = limits(&st, &region);
    let usage = usage(&st, &project, &region, None);
    let zones: std::collections::BTreeSet<&String> = st
        .instances
        .keys()
        .filter(|(p, zone, _)| *p == project && region_of(zone) == region)
        .map(|(_, zone, _)| zone)
        .collect();
    let base = format!("https://compute.googleapis.com/compute/v1/projects/{project}");
    let quotas: Vec<Value> = limits
        .iter()
        .map(|(metric, limit)| {
            json!({
                "metric": metric,
                "limit": limit,
                "usage": usage.get(metric).copied().unwrap_or(0.0),
            })
        })
        .collect();
    Ok(Json(json!({
        "kind": "compute#region",
        "id": format!("{}", 1000 + region.len()),
        "name": region,
        "description": region,
        "status": "UP",
        "zones": zones.iter().map(|z| format!("{base}/zones/{z}")).collect::<Vec<_>>(),
        "quotas": quotas,
        "selfLink": format!("{base}/regions/{region}"),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_vm_uses_its_gpus_and_cpus_and_a_stopped_one_nothing() {
        let vm = |status: &str, spot: bool| {
            json!({
                "status": status,
                "machineType": "zones/us-central1-a/machineTypes/g2-standard-8",
                "scheduling": {"provisioningModel": if spot { "SPOT" } else { "STANDARD" }},
            })
        };
        assert_eq!(
            usage_of(&vm("RUNNING", false)),
            [
                ("NVIDIA_L4_GPUS".to_string(), 1.0),
                ("CPUS".to_string(), 8.0)
            ]
        );
        assert_eq!(
            usage_of(&vm("RUNNING", true))[0].0,
            "PREEMPTIBLE_NVIDIA_L4_GPUS"
        );
        assert!(usage_of(&vm("TERMINATED", false)).is_empty());
        assert_eq!(region_of("us-central1-a"), "us-central1");
    }
}
