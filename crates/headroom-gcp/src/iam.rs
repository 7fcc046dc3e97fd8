//! The IAM permissions each Compute API call of the provider needs. `iam-permissions.txt` (read
//! by Terraform) must be exactly their union; the tests below keep the two in step with the code.

/// (client method as the provider calls it, permissions it needs).
pub const CALLS: &[(&str, &[&str])] = &[
    (
        "insert",
        &[
            "compute.instances.create",
            "compute.disks.create",
            "compute.subnetworks.use",
            "compute.instances.setLabels",
            "compute.instances.setMetadata",
            "compute.instances.setServiceAccount",
            "compute.instanceTemplates.useReadOnly",
            "compute.images.useReadOnly",
        ],
    ),
    ("get", &["compute.instances.get"]),
    // Instances in a zone, and zone operations (preemptions) in a zone.
    (
        "list",
        &["compute.instances.list", "compute.zoneOperations.list"],
    ),
    ("delete", &["compute.instances.delete"]),
    ("start", &["compute.instances.start"]),
    ("stop", &["compute.instances.stop"]),
    ("suspend", &["compute.instances.suspend"]),
    ("resume", &["compute.instances.resume"]),
    ("wait", &["compute.zoneOperations.get"]),
    // Quota preflight: the region's quotas (a `get` on the Regions client).
    ("regions.get", &["compute.regions.get"]),
];

/// The permissions file, as Terraform reads it.
pub const PERMISSIONS_FILE: &str = include_str!("../iam-permissions.txt");

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_permissions_file_is_the_union_of_the_calls() {
        let file: BTreeSet<&str> = PERMISSIONS_FILE
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let needed: BTreeSet<&str> = CALLS.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        assert_eq!(file, needed, "iam-permissions.txt and src/iam.rs disagree");
    }

    #[test]
    fn every_client_call_in_the_provider_is_listed() {
        let source = include_str!("provider.rs");
        let methods = [
            "insert",
            "get",
            "list",
            "delete",
            "start",
            "stop",
            "suspend",
            "resume",
            "wait",
            "aggregated_list",
            "reset",
            "set_labels",
            "set_machine_type",
            "set_scheduling",
            "update",
            "patch",
            "bulk_insert",
        ];
        for method in methods {
            let called = source.contains(&format!(".{method}()"));
            let listed = CALLS.iter().any(|(m, _)| *m == method);
            assert!(
                !called || listed,
                "provider.rs calls .{method}() but src/iam.rs lists no permission for it"
            );
        }
    }
}
