//! What the pure crates link. ARCHITECTURE.md says the core, the configuration, the ledger's
//! records and the reports do no I/O; this checks it where it can be broken, on the dependency graph cargo
//! resolves (`cargo metadata`): no normal dependency of theirs, direct or not, is a database
//! driver, an async runtime, an HTTP stack or a cloud SDK. Dev and build dependencies are not
//! linked into the library and do not count. The graph is the whole workspace's, so a feature
//! another crate turns on counts too (stricter, never looser).

use std::collections::{BTreeMap, VecDeque};
use std::process::Command;

use serde_json::Value;

/// The crates that must stay pure.
const PURE: [&str; 4] = [
    "headroom-core",
    "headroom-config",
    "headroom-records",
    "headroom-report",
];

/// What a pure crate must not reach.
fn forbidden(package: &str) -> bool {
    const NAMES: [&str; 9] = [
        "sqlx",
        "sqlx-core",
        "tokio",
        "hyper",
        "reqwest",
        "ureq",
        "kube",
        "axum",
        "tower",
    ];
    const PREFIXES: [&str; 3] = ["sqlx-", "aws-", "google-cloud-"];
    NAMES.contains(&package) || PREFIXES.iter().any(|p| package.starts_with(p))
}

/// The workspace's resolved graph for this machine's platform, from `cargo metadata` run by the
/// cargo running the tests, offline: what the build fetched is all it reads (the graph of every
/// platform would want crates never downloaded here).
fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
    let version = Command::new(&cargo).arg("-vV").output().unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let host = version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap_or_else(|| panic!("`cargo -vV` names no host: {version}"));
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", host, "--manifest-path", manifest])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every path from `root` to a forbidden package over normal dependencies, the shortest to
/// each, as `a -> b -> c`.
fn forbidden_paths(metadata: &Value, root: &str) -> Vec<String> {
    let names: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let nodes: BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let start = names
        .iter()
        .find(|(id, name)| **name == root && nodes.contains_key(*id))
        .map(|(id, _)| *id)
        .unwrap_or_else(|| panic!("{root} is not in the workspace's resolved graph"));
    // Breadth first, each package's parent kept, so the path named is a shortest one.
    let mut parent: BTreeMap<&str, &str> = BTreeMap::from([(start, start)]);
    let mut queue = VecDeque::from([start]);
    let mut paths = Vec::new();
    while let Some(id) = queue.pop_front() {
        if forbidden(names[id]) {
            let mut path = vec![names[id]];
            let mut at = id;
            while at != start {
                at = parent[at];
                path.push(names[at]);
            }
            path.reverse();
            paths.push(path.join(" -> "));
            continue;
        }
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            let pkg = dep["pkg"].as_str().unwrap();
            if normal && !parent.contains_key(pkg) {
                parent.insert(pkg, id);
                queue.push_back(pkg);
            }
        }
    }
    paths
}

#[test]
fn the_core_config_records_and_reports_link_no_io_crate() {
    let metadata = metadata();
    let broken: Vec<String> = PURE
        .iter()
        .flat_map(|root| forbidden_paths(&metadata, root))
        .collect();
    assert!(
        broken.is_empty(),
        "a pure crate links an I/O crate (ARCHITECTURE.md, invariant 1):\n{}",
        broken.join("\n")
    );
}
