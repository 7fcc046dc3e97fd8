//! The `[kube]` table: parsed here, beside the code that uses it, with the engine's style of
//! errors (one line naming the key and the fix).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use headroom_config::ConfigErrors;
use headroom_core::PoolName;
use serde::Deserialize;

use crate::bootstrap::{self, Bootstrap, EksCluster};

/// The label every Headroom node carries with its ledger node id; matches a Node when its
/// provider ID does not (or is not set yet).
pub const NODE_LABEL: &str = "headroom.dev/node";
/// The label naming the node's pool; a Node labelled for another pool never matches.
pub const POOL_LABEL: &str = "headroom.dev/pool";

/// How Headroom reaches the cluster and what it expects of each pool's nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeSettings {
    /// A kubeconfig file; without one, the in-cluster service account (or, outside a cluster,
    /// `$KUBECONFIG` / `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (its current one when absent).
    pub context: Option<String>,
    pub register_timeout: Duration,
    /// From the same instant as `register_timeout`: a registered node whose model server is
    /// not Ready by then is failed, replaced and terminated.
    pub ready_timeout: Duration,
    pub drain_timeout: Duration,
    /// How launched nodes join the cluster; `None` sends no user data (the image or launch
    /// template bootstraps them).
    pub bootstrap: Option<Bootstrap>,
    pub pools: BTreeMap<PoolName, PoolKube>,
}

/// One pool's identity in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolKube {
    /// Equality label selector of the pool's model-server pods (`app=llm,tier=serve`).
    pub model_selector: String,
    /// Labels the pool's nodes register with (besides Headroom's own).
    pub node_labels: BTreeMap<String, String>,
    /// Taints they register with, `key=value:Effect`.
    pub node_taints: Vec<String>,
}

impl PoolKube {
    /// The kubelet flags that give a node of this pool its identity; a provider renders them
    /// into the node's bootstrap (user data / instance template metadata).
    pub fn kubelet_flags(&self, pool: &PoolName, node: &str) -> Vec<String> {
        let mut flags = vec![format!(
            "--node-labels={}",
            self.labels_with_identity(pool, node)
        )];
        if !self.node_taints.is_empty() {
            flags.push(format!(
                "--register-with-taints={}",
                self.node_taints.join(",")
            ));
        }
        flags
    }

    /// `k=v,…`: the pool's node labels and Headroom's pool and node labels, sorted by key.
    pub fn labels_with_identity(&self, pool: &PoolName, node: &str) -> String {
        let mut labels = self.node_labels.clone();
        labels.insert(POOL_LABEL.to_string(), pool.to_string());
        labels.insert(NODE_LABEL.to_string(), node.to_string());
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        labels.join(",")
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKube {
    #[serde(default)]
    enabled: bool,
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    register_timeout: Option<String>,
    ready_timeout: Option<String>,
    drain_timeout: Option<String>,
    bootstrap: Option<String>,
    bootstrap_template: Option<PathBuf>,
    eks: Option<RawEks>,
    #[serde(default)]
    pools: BTreeMap<String, RawPoolKube>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEks {
    cluster_name: Option<String>,
    api_server_endpoint: Option<String>,
    certificate_authority: Option<String>,
    service_cidr: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPoolKube {
    model_selector: Option<String>,
    #[serde(default)]
    node_labels: BTreeMap<String, String>,
    #[serde(default)]
    node_taints: Vec<String>,
}

impl KubeSettings {
    /// Reads `[kube]`. `None` when it is absent or `enabled = false` (the default: the
    /// simulated cloud marks nodes ready by itself). `pools` are the configured pool names;
    /// with `[kube]` enabled each needs a model-server selector.
    pub fn from_table(
        table: Option<&toml::Table>,
        pools: &[PoolName],
        origin: &str,
    ) -> Result<Option<KubeSettings>, ConfigErrors> {
        let Some(table) = table else {
            return Ok(None);
        };
        let mut errors = Vec::new();
        let mut add = |key: &str, what: String, fix: &str| {
            errors.push(format!("{origin}: key `{key}`: {what}; fix: {fix}"));
        };
        let raw: RawKube = match table.clone().try_into() {
            Ok(raw) => raw,
            Err(e) => {
                let message = e.message().replace('\n', " ");
                let fix = if message.contains("unknown field") {
                    "remove it or correct its spelling (known: enabled, kubeconfig, context, register_timeout, ready_timeout, drain_timeout, bootstrap, bootstrap_template, eks, pools; in [kube.eks]: cluster_name, api_server_endpoint, certificate_authority, service_cidr)"
                } else {
                    "correct the value"
                };
                add("kube", message, fix);
                return Err(ConfigErrors(errors));
            }
        };
        if !raw.enabled {
            return Ok(None);
        }
        let mut duration = |key: &str, text: Option<&String>, default: Duration| match text {
            None => default,
            Some(text) => match humantime::parse_duration(text) {
                Ok(d) if !d.is_zero() => d,
                _ => {
                    add(
                        key,
                        format!("{text:?} is not a duration above zero"),
                        "write a duration such as \"90s\", \"5m\" or \"1h\"",
                    );
                    default
                }
            },
        };
        let register_timeout = duration(
            "kube.register_timeout",
            raw.register_timeout.as_ref(),
            Duration::from_secs(600),
        );
        let ready_timeout = duration(
            "kube.ready_timeout",
            raw.ready_timeout.as_ref(),
            Duration::from_secs(1200),
        );
        let drain_timeout = duration(
            "kube.drain_timeout",
            raw.drain_timeout.as_ref(),
            Duration::from_secs(300),
        );
        if ready_timeout <= register_timeout {
            add(
                "kube.ready_timeout",
                format!(
                    "{} is not longer than register_timeout ({}); both count from the instance running",
                    humantime::format_duration(ready_timeout),
                    humantime::format_duration(register_timeout)
                ),
                "make ready_timeout longer than register_timeout (default 20m against 10m)",
            );
        }
        let bootstrap = parse_bootstrap(&raw, &mut add);
        let mut out = BTreeMap::new();
        for name in raw.pools.keys() {
            if !pools.iter().any(|p| p.as_str() == name) {
                add(
                    &format!("kube.pools.{name}"),
                    format!("names no configured pool {name:?}"),
                    "use the name of a [[pools]] entry or remove the table",
                );
            }
        }
        for pool in pools {
            let key = format!("kube.pools.{pool}");
            let Some(p) = raw.pools.get(pool.as_str()) else {
                add(
                    &key,
                    "missing: every pool needs the selector of its model-server pods".to_string(),
                    &format!("add [kube.pools.{pool}] with model_selector = \"app=...\""),
                );
                continue;
            };
            let selector = p.model_selector.clone().unwrap_or_default();
            if !is_equality_selector(&selector) {
                add(
                    &format!("{key}.model_selector"),
                    format!("{selector:?} is not a label selector of key=value pairs"),
                    "write e.g. \"app=llm-server\" or \"app=llm,tier=serve\"",
                );
            }
            for taint in &p.node_taints {
                if !is_taint(taint) {
                    add(
                        &format!("{key}.node_taints"),
                        format!("{taint:?} is not a taint"),
                        "write key=value:Effect with Effect NoSchedule, PreferNoSchedule or NoExecute",
                    );
                }
            }
            for (k, v) in &p.node_labels {
                if !is_label_key(k) || !is_label_value(v) {
                    add(
                        &format!("{key}.node_labels"),
                        format!("{k:?} = {v:?} is not a Kubernetes label"),
                        "use a key of [prefix/]name and a value of up to 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric",
                    );
                }
            }
            for label in [NODE_LABEL, POOL_LABEL] {
                if p.node_labels.contains_key(label) {
                    add(
                        &format!("{key}.node_labels"),
                        format!("{label} is set by Headroom itself"),
                        "remove it",
                    );
                }
            }
            out.insert(
                pool.clone(),
                PoolKube {
                    model_selector: selector,
                    node_labels: p.node_labels.clone(),
                    node_taints: p.node_taints.clone(),
                },
            );
        }
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        Ok(Some(KubeSettings {
            kubeconfig: raw.kubeconfig,
            context: raw.context,
            register_timeout,
            ready_timeout,
            drain_timeout,
            bootstrap,
            pools: out,
        }))
    }
}

/// `kube.bootstrap` and what it needs: `[kube.eks]` or `bootstrap_template` (read here, once).
fn parse_bootstrap(raw: &RawKube, add: &mut impl FnMut(&str, String, &str)) -> Option<Bootstrap> {
    match raw.bootstrap.as_deref() {
        None => None,
        Some("eks-al2023") => {
            let Some(eks) = &raw.eks else {
                add(
                    "kube.eks",
                    "missing: bootstrap = \"eks-al2023\" needs the cluster's settings".to_string(),
                    "add [kube.eks] with cluster_name, api_server_endpoint, certificate_authority and service_cidr (aws eks describe-cluster shows them)",
                );
                return None;
            };
            let mut field = |name: &str,
                             value: &Option<String>,
                             valid: fn(&str) -> bool,
                             fix: &str| {
                match value {
                    Some(v) if valid(v) => v.clone(),
                    Some(v) => {
                        add(
                            &format!("kube.eks.{name}"),
                            format!("{v:?} is not valid"),
                            fix,
                        );
                        String::new()
                    }
                    None => {
                        add(&format!("kube.eks.{name}"), "missing".to_string(), fix);
                        String::new()
                    }
                }
            };
            let cluster = EksCluster {
                cluster_name: field(
                    "cluster_name",
                    &eks.cluster_name,
                    |v| {
                        !v.is_empty()
                            && v.chars()
                                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                    },
                    "write the EKS cluster's name (letters, digits, '-' and '_')",
                ),
                api_server_endpoint: field(
                    "api_server_endpoint",
                    &eks.api_server_endpoint,
                    |v| v.starts_with("https://") && !v.contains(char::is_whitespace),
                    "write the cluster's endpoint, https://…eks.amazonaws.com",
                ),
                certificate_authority: field(
                    "certificate_authority",
                    &eks.certificate_authority,
                    |v| {
                        !v.is_empty()
                            && v.chars()
                                .all(|c| c.is_ascii_alphanumeric() || "+/=".contains(c))
                    },
                    "write the cluster's certificateAuthority.data, base64 as EKS prints it",
                ),
                service_cidr: field(
                    "service_cidr",
                    &eks.service_cidr,
                    is_cidr,
                    "write the cluster's service CIDR, e.g. \"10.100.0.0/16\"",
                ),
            };
            Some(Bootstrap::EksAl2023(cluster))
        }
        Some("script") => {
            let Some(path) = &raw.bootstrap_template else {
                add(
                    "kube.bootstrap_template",
                    "missing: bootstrap = \"script\" needs a template file".to_string(),
                    "set bootstrap_template to a file using {{node_labels}}, {{node_taints}}, {{kubelet_flags}}, {{pool}}, {{node}}, {{provider}}",
                );
                return None;
            };
            let shown = path.display();
            let template = match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) => {
                    add(
                        "kube.bootstrap_template",
                        format!("cannot read {shown}: {e}"),
                        "name a readable UTF-8 file (relative paths are from the working directory)",
                    );
                    return None;
                }
            };
            let unknown = bootstrap::unknown_placeholders(&template);
            if !unknown.is_empty() {
                add(
                    "kube.bootstrap_template",
                    format!(
                        "{shown} uses unknown placeholders {{{{{}}}}}",
                        unknown.join("}}, {{")
                    ),
                    &format!(
                        "use only {}",
                        bootstrap::PLACEHOLDERS
                            .map(|p| format!("{{{{{p}}}}}"))
                            .join(", ")
                    ),
                );
            }
            // Room for the labels, taints and flags filled in per node.
            if template.len() > bootstrap::MAX_USER_DATA_BYTES - 2048 {
                add(
                    "kube.bootstrap_template",
                    format!(
                        "{shown} is {} bytes; user data must stay under 16 KiB (EC2's limit)",
                        template.len()
                    ),
                    "shorten it to under 14 KiB, e.g. fetch the rest from a URL at boot",
                );
            }
            Some(Bootstrap::Script {
                path: path.clone(),
                template,
            })
        }
        Some(other) => {
            add(
                "kube.bootstrap",
                format!("{other:?} is not a bootstrap"),
                "write \"eks-al2023\" (nodeadm, with [kube.eks]) or \"script\" (with bootstrap_template), or remove it to send no user data",
            );
            None
        }
    }
}

/// Kubernetes label key: an optional DNS-subdomain prefix and `/`, and a name.
fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

/// Kubernetes label value (also a label key's name): up to 63 of `[A-Za-z0-9-_.]`, starting and
/// ending alphanumeric; empty is allowed.
fn is_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

fn is_cidr(v: &str) -> bool {
    v.split_once('/').is_some_and(|(ip, bits)| {
        let bits: Option<u8> = bits.parse().ok();
        match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(_)) => bits.is_some_and(|b| b <= 32),
            Ok(std::net::IpAddr::V6(_)) => bits.is_some_and(|b| b <= 128),
            Err(_) => false,
        }
    })
}

/// `k=v[,k=v…]`: the selectors this crate supports (set-based ones are not needed for a pool's
/// model server).
fn is_equality_selector(s: &str) -> bool {
    !s.is_empty()
        && s.split(',').all(|term| {
            term.split_once('=')
                .is_some_and(|(k, v)| !k.trim().is_empty() && !v.contains('=') && !k.contains('!'))
        })
}

fn is_taint(s: &str) -> bool {
    let Some((kv, effect)) = s.rsplit_once(':') else {
        return false;
    };
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    is_label_key(key)
        && is_label_value(value)
        && matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools() -> Vec<PoolName> {
        vec!["llm".parse().unwrap()]
    }

    fn parse(text: &str) -> Result<Option<KubeSettings>, ConfigErrors> {
        let table: toml::Table = text.parse().unwrap();
        KubeSettings::from_table(table.get("kube").and_then(|v| v.as_table()), &pools(), "t")
    }

    #[test]
    fn absent_or_disabled_is_none() {
        assert_eq!(KubeSettings::from_table(None, &pools(), "t"), Ok(None));
        assert_eq!(parse("[kube]\nenabled = false"), Ok(None));
    }

    #[test]
    fn a_full_table_parses() {
        let s = parse(
            r#"
[kube]
enabled = true
kubeconfig = "/etc/kube/config"
register_timeout = "4m"
ready_timeout = "15m"
drain_timeout = "90s"
[kube.pools.llm]
model_selector = "app=llm"
node_labels = { "gpu" = "l4" }
node_taints = ["nvidia.com/gpu=present:NoSchedule"]
"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.register_timeout, Duration::from_secs(240));
        assert_eq!(s.ready_timeout, Duration::from_secs(900));
        assert_eq!(s.bootstrap, None, "no bootstrap: no user data");
        assert_eq!(s.drain_timeout, Duration::from_secs(90));
        let pool = &s.pools[&"llm".parse::<PoolName>().unwrap()];
        assert_eq!(
            pool.kubelet_flags(&"llm".parse().unwrap(), "n-1"),
            vec![
                "--node-labels=gpu=l4,headroom.dev/node=n-1,headroom.dev/pool=llm".to_string(),
                "--register-with-taints=nvidia.com/gpu=present:NoSchedule".to_string(),
            ]
        );
    }

    #[test]
    fn mistakes_are_one_line_each_naming_the_key() {
        let err = parse(
            r#"
[kube]
enabled = true
drain_timeout = "soon"
[kube.pools.llm]
model_selector = "app in (a,b)"
node_taints = ["gpu"]
[kube.pools.other]
model_selector = "app=x"
"#,
        )
        .unwrap_err();
        let text = err.to_string();
        assert_eq!(err.0.len(), 4, "{text}");
        for key in [
            "kube.drain_timeout",
            "kube.pools.llm.model_selector",
            "kube.pools.llm.node_taints",
            "kube.pools.other",
        ] {
            assert!(text.contains(&format!("key `{key}`")), "{key}: {text}");
        }
        let unknown = parse("[kube]\nenabled = true\nwatch_all = true").unwrap_err();
        assert!(unknown.to_string().contains("watch_all"), "{unknown}");
        let missing = parse("[kube]\nenabled = true").unwrap_err();
        assert!(
            missing.to_string().contains("[kube.pools.llm]"),
            "{missing}"
        );
    }

    const POOL: &str = "[kube.pools.llm]\nmodel_selector = \"app=llm\"\n";

    #[test]
    fn an_eks_bootstrap_parses_with_its_cluster() {
        let s = parse(&format!(
            r#"
[kube]
enabled = true
bootstrap = "eks-al2023"
[kube.eks]
cluster_name = "gpu-prod"
api_server_endpoint = "https://ABC.gr7.us-east-1.eks.amazonaws.com"
certificate_authority = "LS0tLS1CRUdJTg=="
service_cidr = "10.100.0.0/16"
{POOL}"#
        ))
        .unwrap()
        .unwrap();
        assert_eq!(s.ready_timeout, Duration::from_secs(1200), "default 20m");
        let Some(Bootstrap::EksAl2023(eks)) = s.bootstrap else {
            panic!("{:?}", s.bootstrap)
        };
        assert_eq!(eks.cluster_name, "gpu-prod");
        assert_eq!(eks.service_cidr, "10.100.0.0/16");
    }

    #[test]
    fn a_script_bootstrap_reads_its_template_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("join.sh");
        std::fs::write(
            &path,
            "#!/bin/sh\nkubeadm join --node-labels={{node_labels}}\n",
        )
        .unwrap();
        let s = parse(&format!(
            "[kube]\nenabled = true\nbootstrap = \"script\"\nbootstrap_template = {:?}\n{POOL}",
            path.display().to_string()
        ))
        .unwrap()
        .unwrap();
        let Some(Bootstrap::Script { template, .. }) = s.bootstrap else {
            panic!("{:?}", s.bootstrap)
        };
        assert!(template.contains("{{node_labels}}"));

        std::fs::write(&path, "{{node_labels}} {{cluster_token}}").unwrap();
        let err = parse(&format!(
            "[kube]\nenabled = true\nbootstrap = \"script\"\nbootstrap_template = {:?}\n{POOL}",
            path.display().to_string()
        ))
        .unwrap_err();
        assert_eq!(err.0.len(), 1, "{err}");
        assert!(err.0[0].contains("key `kube.bootstrap_template`"), "{err}");
        assert!(err.0[0].contains("{{cluster_token}}"), "{err}");
        assert!(err.0[0].contains("fix: use only {{node_labels}}"), "{err}");
    }

    #[test]
    fn bootstrap_mistakes_are_one_line_each_naming_the_key() {
        let cases = [
            ("bootstrap = \"eks\"", "kube.bootstrap"),
            ("bootstrap = \"eks-al2023\"", "kube.eks"),
            ("bootstrap = \"script\"", "kube.bootstrap_template"),
            (
                "bootstrap = \"script\"\nbootstrap_template = \"/nonexistent/join.sh\"",
                "kube.bootstrap_template",
            ),
            (
                "bootstrap = \"eks-al2023\"\n[kube.eks]\ncluster_name = \"c\"\napi_server_endpoint = \"https://x\"\ncertificate_authority = \"QQ==\"\nservice_cidr = \"10.100.0.0\"",
                "kube.eks.service_cidr",
            ),
            ("register_timeout = \"30m\"", "kube.ready_timeout"),
        ];
        for (table, key) in cases {
            let err = parse(&format!("[kube]\nenabled = true\n{table}\n{POOL}")).unwrap_err();
            assert_eq!(err.0.len(), 1, "{table}: {err}");
            assert!(err.0[0].contains(&format!("key `{key}`")), "{table}: {err}");
            assert!(err.0[0].contains("; fix: "), "{table}: {err}");
        }
        let err = parse(
            "[kube]\nenabled = true\n[kube.pools.llm]\nmodel_selector = \"app=llm\"\nnode_labels = { \"gpu\" = \"l4 h100\" }\nnode_taints = [\"a b=c:NoSchedule\"]",
        )
        .unwrap_err();
        assert_eq!(err.0.len(), 2, "{err}");
        assert!(
            err.0[0].contains("key `kube.pools.llm.node_taints`"),
            "{err}"
        );
        assert!(
            err.0[1].contains("key `kube.pools.llm.node_labels`"),
            "{err}"
        );
    }
}
