//! A node's first-boot user data, rendered per launch so the kubelet registers with its pool's
//! labels and taints and Headroom's node label (`headroom.dev/node=<node id>`). Pure: the
//! settings hold everything (a script template is read once, when `[kube]` is parsed).

use std::path::PathBuf;

use headroom_core::{PoolName, ProviderKind};

use crate::settings::PoolKube;

/// How nodes join the cluster, from `kube.bootstrap`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bootstrap {
    /// Amazon Linux 2023 EKS-optimised images: a nodeadm `NodeConfig` in a MIME multipart
    /// document, the kubelet flags in `spec.kubelet.flags`.
    EksAl2023(EksCluster),
    /// A user's template (kubeadm join, k3s, a custom script) with placeholders filled per node.
    Script { path: PathBuf, template: String },
}

/// What nodeadm needs to join an EKS cluster (`aws eks describe-cluster` prints each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EksCluster {
    pub cluster_name: String,
    pub api_server_endpoint: String,
    /// The cluster's certificate authority data, base64 as EKS gives it.
    pub certificate_authority: String,
    pub service_cidr: String,
}

/// The placeholders a script template may use.
pub const PLACEHOLDERS: [&str; 6] = [
    "node_labels",
    "node_taints",
    "kubelet_flags",
    "pool",
    "node",
    "provider",
];

/// EC2 refuses user data over 16 KiB; GCE allows more, so the smaller bound holds for both.
pub const MAX_USER_DATA_BYTES: usize = 16 * 1024;

/// The MIME boundary of the nodeadm document; no rendered value can contain it (labels and
/// taints are checked to Kubernetes syntax, which has no `/` pairs or spaces).
const BOUNDARY: &str = "//headroom-nodeadm//";

/// The user data for node `node` of `pool`.
pub fn render(
    bootstrap: &Bootstrap,
    pool: &PoolName,
    node: &str,
    provider: ProviderKind,
    kube: &PoolKube,
) -> String {
    let flags = kube.kubelet_flags(pool, node);
    match bootstrap {
        Bootstrap::EksAl2023(eks) => node_config(eks, &flags),
        Bootstrap::Script { template, .. } => {
            let labels = kube.labels_with_identity(pool, node);
            let values = [
                ("node_labels", labels),
                ("node_taints", kube.node_taints.join(",")),
                ("kubelet_flags", flags.join(" ")),
                ("pool", pool.to_string()),
                ("node", node.to_string()),
                ("provider", provider.to_string()),
            ];
            fill(template, &values)
        }
    }
}

/// A nodeadm `NodeConfig` (node.eks.aws/v1alpha1) as the one part of a MIME multipart
/// document, the form EKS managed and self-managed AL2023 nodes read.
fn node_config(eks: &EksCluster, flags: &[String]) -> String {
    let mut doc = String::new();
    doc.push_str("MIME-Version: 1.0\n");
    doc.push_str(&format!(
        "Content-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n"
    ));
    doc.push_str(&format!("--{BOUNDARY}\n"));
    doc.push_str("Content-Type: application/node.eks.aws\n\n");
    doc.push_str("---\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n");
    doc.push_str("  cluster:\n");
    for (key, value) in [
        ("name", &eks.cluster_name),
        ("apiServerEndpoint", &eks.api_server_endpoint),
        ("certificateAuthority", &eks.certificate_authority),
        ("cidr", &eks.service_cidr),
    ] {
        doc.push_str(&format!("    {key}: {}\n", yaml_quoted(value)));
    }
    doc.push_str("  kubelet:\n    flags:\n");
    for flag in flags {
        doc.push_str(&format!("      - {}\n", yaml_quoted(flag)));
    }
    doc.push_str(&format!("\n--{BOUNDARY}--\n"));
    doc
}

/// A YAML double-quoted scalar: whatever `s` holds, it stays one string.
pub fn yaml_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Replaces each `{{name}}` with its value; text that is not a known placeholder is left as it
/// is (the settings refuse templates with unknown ones).
fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let value = after.find("}}").and_then(|end| {
            let name = after[..end].trim();
            values
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (v, end))
        });
        match value {
            Some((v, end)) => {
                out.push_str(v);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The `{{…}}` names in `template` that are not placeholders.
pub fn unknown_placeholders(template: &str) -> Vec<String> {
    let mut unknown = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            break;
        };
        let name = after[..end].trim();
        if !PLACEHOLDERS.contains(&name) && !unknown.iter().any(|u| u == name) {
            unknown.push(name.to_string());
        }
        rest = &after[end + 2..];
    }
    unknown
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn pool() -> PoolName {
        "llm".parse().unwrap()
    }

    fn kube() -> PoolKube {
        PoolKube {
            model_selector: "app=llm".to_string(),
            node_labels: BTreeMap::from([
                ("gpu".to_string(), "l4".to_string()),
                ("example.com/tier".to_string(), "serve".to_string()),
            ]),
            node_taints: vec![
                "nvidia.com/gpu=present:NoSchedule".to_string(),
                "dedicated=llm:NoExecute".to_string(),
            ],
        }
    }

    fn eks() -> Bootstrap {
        Bootstrap::EksAl2023(EksCluster {
            cluster_name: "gpu-prod".to_string(),
            api_server_endpoint: "https://ABC.gr7.us-east-1.eks.amazonaws.com".to_string(),
            certificate_authority: "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t".to_string(),
            service_cidr: "10.100.0.0/16".to_string(),
        })
    }

    #[test]
    fn eks_user_data_is_a_nodeadm_node_config_with_the_pools_labels_and_taints() {
        let text = render(&eks(), &pool(), "n-7", ProviderKind::Aws, &kube());
        assert!(text.starts_with("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//headroom-nodeadm//\"\n"), "{text}");
        assert!(text.contains("Content-Type: application/node.eks.aws\n"));
        assert!(text.contains("kind: NodeConfig\n"));
        assert!(text.contains("    name: \"gpu-prod\"\n"));
        assert!(
            text.contains(
                "    apiServerEndpoint: \"https://ABC.gr7.us-east-1.eks.amazonaws.com\"\n"
            )
        );
        assert!(
            text.contains("    certificateAuthority: \"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t\"\n")
        );
        assert!(text.contains("    cidr: \"10.100.0.0/16\"\n"));
        assert!(text.contains(
            "    flags:\n      - \"--node-labels=example.com/tier=serve,gpu=l4,headroom.dev/node=n-7,headroom.dev/pool=llm\"\n      - \"--register-with-taints=nvidia.com/gpu=present:NoSchedule,dedicated=llm:NoExecute\"\n"
        ), "{text}");
        assert!(text.ends_with("\n--//headroom-nodeadm//--\n"), "{text}");
    }

    #[test]
    fn a_pool_without_taints_gets_no_taint_flag() {
        let mut k = kube();
        k.node_taints.clear();
        let text = render(&eks(), &pool(), "n-1", ProviderKind::Aws, &k);
        assert!(!text.contains("register-with-taints"), "{text}");
        assert_eq!(text.matches("      - ").count(), 1);
    }

    #[test]
    fn a_script_template_is_filled_per_node() {
        let template = "#!/bin/sh\n# {{pool}}/{{ node }} on {{provider}}\nkubeadm join --node-labels '{{node_labels}}' --taints '{{node_taints}}'\nextra={{kubelet_flags}}\n{{not_ours}} {{ unclosed\n".to_string();
        let bootstrap = Bootstrap::Script {
            path: "t.sh".into(),
            template,
        };
        let text = render(&bootstrap, &pool(), "n-2", ProviderKind::Gcp, &kube());
        assert_eq!(
            text,
            "#!/bin/sh\n# llm/n-2 on gcp\nkubeadm join --node-labels 'example.com/tier=serve,gpu=l4,headroom.dev/node=n-2,headroom.dev/pool=llm' --taints 'nvidia.com/gpu=present:NoSchedule,dedicated=llm:NoExecute'\nextra=--node-labels=example.com/tier=serve,gpu=l4,headroom.dev/node=n-2,headroom.dev/pool=llm --register-with-taints=nvidia.com/gpu=present:NoSchedule,dedicated=llm:NoExecute\n{{not_ours}} {{ unclosed\n"
        );
        assert_eq!(
            unknown_placeholders("{{pool}} {{ not_ours }} {{x}} {{x}}"),
            ["not_ours", "x"]
        );
    }

    #[test]
    fn yaml_values_stay_one_string_whatever_they_hold() {
        assert_eq!(yaml_quoted("plain"), "\"plain\"");
        assert_eq!(
            yaml_quoted("a\"b\\c\nd: e\u{1}"),
            "\"a\\\"b\\\\c\\nd: e\\u0001\""
        );
    }
}
