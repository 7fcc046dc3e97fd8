//! Quota preflight on GCP: the regional GPU quotas `regions.get` reports (`quotas[]`, each a
//! metric with its limit and usage across the project), mapped to the offerings whose machine
//! types carry those GPUs. Pure, shared by the provider and the local Compute server.
//!
//! GPUs come with the machine type on the accelerator-optimized families (g2: L4, a2: A100,
//! a3: H100/H200), so the metric follows from the machine type; spot and preemptible VMs count
//! against the `PREEMPTIBLE_` metric instead. N1 VMs with attached GPUs are not mapped (the
//! accelerator is not in the machine type): their offerings are not limited. `CPUS` and the
//! per-family CPU quotas are not read.

/// The GPU quota metric for VMs of `machine_type` (`g2-standard-8` → `NVIDIA_L4_GPUS`), with the
/// `PREEMPTIBLE_` prefix for spot VMs.
pub fn gpu_metric(machine_type: &str, spot: bool) -> Option<String> {
    let base = if machine_type.starts_with("g2-") {
        "NVIDIA_L4_GPUS"
    } else if machine_type.starts_with("a2-ultragpu-") {
        "NVIDIA_A100_80GB_GPUS"
    } else if machine_type.starts_with("a2-") {
        "NVIDIA_A100_GPUS"
    } else if machine_type.starts_with("a3-megagpu-") {
        "NVIDIA_H100_MEGA_GPUS"
    } else if machine_type.starts_with("a3-ultragpu-") {
        "NVIDIA_H200_GPUS"
    } else if machine_type.starts_with("a3-") {
        "NVIDIA_H100_GPUS"
    } else {
        return None;
    };
    Some(if spot {
        format!("PREEMPTIBLE_{base}")
    } else {
        base.to_string()
    })
}

/// GPUs of one VM of `machine_type`: `-Ng` suffixes on a2/a3, G2's published shapes.
pub fn gpus_of(machine_type: &str) -> Option<u32> {
    if let Some(n) = machine_type
        .strip_suffix('g')
        .and_then(|rest| rest.rsplit('-').next())
        .and_then(|n| n.parse().ok())
    {
        return Some(n);
    }
    let vcpus: u32 = machine_type.strip_prefix("g2-standard-")?.parse().ok()?;
    Some(match vcpus {
        ..=16 | 32 => 1,
        24 => 2,
        48 => 4,
        _ => 8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_types_map_to_their_gpu_metric_and_count() {
        assert_eq!(
            gpu_metric("g2-standard-8", false).as_deref(),
            Some("NVIDIA_L4_GPUS")
        );
        assert_eq!(
            gpu_metric("g2-standard-8", true).as_deref(),
            Some("PREEMPTIBLE_NVIDIA_L4_GPUS")
        );
        assert_eq!(
            gpu_metric("a2-highgpu-2g", false).as_deref(),
            Some("NVIDIA_A100_GPUS")
        );
        assert_eq!(
            gpu_metric("a2-ultragpu-8g", false).as_deref(),
            Some("NVIDIA_A100_80GB_GPUS")
        );
        assert_eq!(
            gpu_metric("a3-highgpu-8g", false).as_deref(),
            Some("NVIDIA_H100_GPUS")
        );
        assert_eq!(gpu_metric("n1-standard-8", false), None);
        assert_eq!(gpus_of("a2-highgpu-2g"), Some(2));
        assert_eq!(gpus_of("a3-highgpu-8g"), Some(8));
        assert_eq!(gpus_of("g2-standard-8"), Some(1));
        assert_eq!(gpus_of("g2-standard-48"), Some(4));
        assert_eq!(gpus_of("n1-standard-8"), None);
    }
}
