//! The `[kube]` table: parsed here, beside the code that uses it, with the engine's style of
//! errors (one line naming the key and the fix).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use headroom_core::PoolName;
use headroom_engine::ConfigErrors;
use serde::Deserialize;

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
    pub drain_timeout: Duration,
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
        let mut labels = self.node_labels.clone();
        labels.insert(POOL_LABEL.to_string(), pool.to_string());
        labels.insert(NODE_LABEL.to_string(), node.to_string());
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut flags = vec![format!("--node-labels={}", labels.join(","))];
        if !self.node_taints.is_empty() {
            flags.push(format!(
                "--register-with-taints={}",
                self.node_taints.join(",")
            ));
        }
        flags
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
    drain_timeout: Option<String>,
    #[serde(default)]
    pools: BTreeMap<String, RawPoolKube>,
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
                    "remove it or correct its spelling (known: enabled, kubeconfig, context, register_timeout, drain_timeout, pools)"
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
        let drain_timeout = duration(
            "kube.drain_timeout",
            raw.drain_timeout.as_ref(),
            Duration::from_secs(300),
        );
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
            drain_timeout,
            pools: out,
        }))
    }
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
    let key = kv.split_once('=').map_or(kv, |(k, _)| k);
    !key.is_empty() && matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute")
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
}
