//! Issue 37: `headroom serve` itself, on one pool with offerings on AWS (moto) and GCP (the local
//! Compute API server, in this process, so it outlives every `serve` it kills), killed with
//! SIGKILL between a cloud call and its outcome, round after round, and restarted on the same
//! SQLite ledger. Afterwards nothing leaked or was duplicated on either cloud.
//!
//! It needs a `headroom` binary built with both clouds, named by `HEADROOM_AWS_GCP_BIN`
//! (`cargo test --workspace` builds only the default one); `scripts/test` sets it.

// Shared with moto.rs, which uses all of it.
#[path = "support/multicloud.rs"]
mod multicloud_toml;
#[allow(dead_code)]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::{Clock, SystemClock};
use headroom_core::{NodeState, ProviderKind};
use headroom_gcp::naming::instance_name;
use headroom_gcp::server::{ComputeServer, RunningServer};
use headroom_ledger::SqliteLedger;
use headroom_ledger::prelude::*;
use support::{Moto, REGION};
use tokio::runtime::Runtime;

const BIN_VAR: &str = "HEADROOM_AWS_GCP_BIN";
/// How long the GCP insert's operation and the AWS RunInstances hold their answer back while the
/// instance already exists: the window a kill aims at.
const WINDOW: Duration = Duration::from_millis(400);
/// Every AWS offering refuses, so each launch falls back to GCP.
const AWS_STOCKED_OUT: &str = r#"{"launch": {"g6.xlarge": {"code": "InsufficientInstanceCapacity", "status": 500},
                                 "g5.xlarge": {"code": "InsufficientInstanceCapacity", "status": 500}}}"#;

fn binary() -> PathBuf {
    let Some(bin) = std::env::var_os(BIN_VAR) else {
        panic!(
            "{BIN_VAR} is not set: this test runs `headroom serve` built with both clouds. Run \
             `cargo build --locked --features aws,gcp && cp \"${{CARGO_TARGET_DIR:-target}}/debug/headroom\" /tmp/headroom-aws-gcp` \
             then `{BIN_VAR}=/tmp/headroom-aws-gcp cargo test -p headroom-aws --test multicloud_sigkill` \
             (scripts/test does this)"
        )
    };
    let bin = PathBuf::from(bin);
    assert!(bin.is_file(), "{BIN_VAR}={} is not a file", bin.display());
    bin
}

fn config(moto: &str, gcp: &str) -> String {
    let aws = |id: &str, instance_type: &str, price: &str| {
        multicloud_toml::aws_offering_toml(id, instance_type, price, 1)
    };
    format!(
        r#"
cluster_id = "multicloud-kill"
[engine]
tick = "100ms"
hold_horizon = "1h"
offering_cooldown = "1s"
{}{}
[[offerings]]
id = "gcp-a2"
provider = "gcp"
region = "us-central1"
zone = "us-central1-a"
instance_type = "a2-highgpu-1g"
market = "on-demand"
price_usd_per_hour = "3.67"
gpus = 1
[[pools]]
name = "llm"
account = "ml"
offerings = ["aws-g6", "aws-g5", "gcp-a2"]
max_replicas = 20
max_scale_up_per_step = 20
[pools.ladder]
node_acquisition = "1s"
image_pull = "1s"
weight_load = "1s"
compile = "1s"
warmup = "1s"
[pools.scaling]
replica_throughput_rps = 5.0
[[budgets]]
account = "ml"
period = "day"
ceiling_usd = "10000"
hard_action = "clamp"
[aws]
regions = ["{REGION}"]
endpoint_url = "{moto}"
image_id = "{}"
[gcp]
project = "headroom-test"
endpoint = "{gcp}"
credentials = "anonymous"
instance_template = "global/instanceTemplates/headroom-gpu"
operation_timeout = "10s"
"#,
        aws("aws-g6", "g6.xlarge", "0.80"),
        aws("aws-g5", "g5.xlarge", "1.01"),
        support::IMAGE,
    )
}

struct Rig {
    rt: Runtime,
    moto: Moto,
    gcp: RunningServer,
    bin: PathBuf,
    config: PathBuf,
    db: PathBuf,
    dir: tempfile::TempDir,
}

impl Rig {
    fn start() -> Rig {
        let bin = binary();
        let rt = Runtime::new().unwrap();
        let moto = Moto::start();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let gcp = rt
            .block_on(ComputeServer::start(
                clock,
                SocketAddr::from(([127, 0, 0, 1], 0)),
            ))
            .unwrap();
        // The insert's operation is RUNNING at first; the wait on it answers after WINDOW.
        gcp.server.set_operation_polls(1);
        gcp.server.set_wait_delay(WINDOW);
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("multicloud.toml");
        std::fs::write(&config, config_text(&moto, &gcp)).unwrap();
        let db = dir.path().join("ledger.db");
        // Creates the ledger (and its schema) before any `serve` opens it.
        drop(rt.block_on(SqliteLedger::open_path(&db)).unwrap());
        Rig {
            rt,
            moto,
            gcp,
            bin,
            config,
            db,
            dir,
        }
    }

    fn ledger(&self) -> SqliteLedger {
        self.rt.block_on(SqliteLedger::open_path(&self.db)).unwrap()
    }

    /// A capacity request for one more replica, written while no `serve` runs.
    fn request_one(&self) {
        let ledger = self.ledger();
        self.rt.block_on(headroom_testkit::request(
            &ledger,
            &SystemClock::new(),
            "llm",
            1,
        ));
    }

    fn serve(&self, life: usize) -> Child {
        let log = std::fs::File::create(self.dir.path().join(format!("serve-{life}.log"))).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Command::new(&self.bin)
            .args(["serve", "--no-auth", "--config"])
            .arg(&self.config)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--database-url"])
            .arg(format!("sqlite://{}", self.db.display()))
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start headroom serve")
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for life in 0..100 {
            if let Ok(text) =
                std::fs::read_to_string(self.dir.path().join(format!("serve-{life}.log")))
            {
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                out.push_str(&format!("--- serve {life} (last lines)\n"));
                for line in tail.into_iter().rev() {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// Client tokens of AWS instances that are not terminated, with how many instances each.
    fn aws_tokens(&self) -> BTreeMap<String, usize> {
        let mut tokens = BTreeMap::new();
        for i in self.rt.block_on(self.moto.all_instances()) {
            let state = i
                .state()
                .and_then(|s| s.name())
                .map(|s| s.as_str().to_string());
            if matches!(state.as_deref(), Some("terminated" | "shutting-down")) {
                continue;
            }
            let token = i
                .tags()
                .iter()
                .find(|t| t.key() == Some(headroom_aws::TAG_CLIENT_TOKEN))
                .and_then(|t| t.value())
                .unwrap_or("(untagged)")
                .to_string();
            *tokens.entry(token).or_default() += 1;
        }
        tokens
    }

    /// AWS instances terminated or being terminated.
    fn aws_terminated(&self) -> usize {
        self.rt
            .block_on(self.moto.all_instances())
            .iter()
            .filter(|i| {
                matches!(
                    i.state().and_then(|s| s.name()).map(|s| s.as_str()),
                    Some("terminated" | "shutting-down")
                )
            })
            .count()
    }

    /// Names of the GCP VMs.
    fn gcp_names(&self) -> BTreeSet<String> {
        self.gcp
            .server
            .instances()
            .iter()
            .filter_map(|i| i["name"].as_str().map(str::to_string))
            .collect()
    }

    fn events(&self) -> Vec<headroom_ledger::NodeEvent> {
        let ledger = self.ledger();
        self.rt.block_on(ledger.node_events()).unwrap()
    }

    /// The instances on `provider` (GCP VM names, AWS client tokens), and those of them whose
    /// launch has no outcome in the ledger.
    fn instances(&self, provider: ProviderKind) -> (BTreeSet<String>, BTreeSet<String>) {
        let answered: BTreeSet<String> = self
            .events()
            .into_iter()
            .filter(|e| e.state != NodeState::Requested)
            .map(|e| match provider {
                ProviderKind::Gcp => instance_name(&e.client_token),
                _ => e.client_token,
            })
            .collect();
        let all = match provider {
            ProviderKind::Gcp => self.gcp_names(),
            _ => self.aws_tokens().into_keys().collect(),
        };
        let unanswered = all.difference(&answered).cloned().collect();
        (all, unanswered)
    }

    /// Whether an instance made since `before` exists on `provider` whose launch has no outcome
    /// in the ledger: a kill now lands between the cloud call and its outcome.
    fn in_window(&self, provider: ProviderKind, before: &BTreeSet<String>) -> bool {
        let (_, unanswered) = self.instances(provider);
        unanswered.iter().any(|i| !before.contains(i))
    }

    /// Starts `serve`, waits for a new instance on `provider` without its outcome, kills it with
    /// SIGKILL at a random point of the window. Whether the kill landed inside it.
    fn kill_in_window(&self, life: usize, provider: ProviderKind) -> bool {
        self.request_one();
        let (before, _) = self.instances(provider);
        let mut child = self.serve(life);
        // Up to 20 s for the window to open.
        for _ in 0..1000 {
            if self.in_window(provider, &before) {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("serve exited with {status}:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(random_below(
            WINDOW.as_millis() as u64 * 3 / 4,
        )));
        child.kill().unwrap(); // SIGKILL: no shutdown code runs
        child.wait().unwrap();
        let inside = self.in_window(provider, &before);
        eprintln!(
            "serve {life} ({provider}): killed {} the window",
            if inside { "inside" } else { "outside" }
        );
        inside
    }
}

fn config_text(moto: &Moto, gcp: &RunningServer) -> String {
    config(&moto.endpoint(), &gcp.endpoint())
}

/// A pseudo-random number below `n`, different every call.
fn random_below(n: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    h.finish() % n.max(1)
}

/// First AWS has capacity and answers RunInstances late: `serve` is killed while that launch is
/// in flight, GCP beside it. Then every AWS offering is stocked out: each round's launch is the
/// GCP fallback, and `serve` is killed while the GCP insert's answer is held back (the VM
/// exists, the ledger has only the intent). One last life settles everything. Afterwards: every
/// instance on either cloud is a live node of the ledger and each live node has its instance,
/// one per client token; nothing was terminated (no node the ledger had an intent for was taken
/// for an orphan); no intent was written twice; the pool reached its target.
#[test]
fn sigkill_between_a_cloud_call_and_its_outcome_leaks_and_duplicates_nothing_on_either_cloud() {
    let rig = Rig::start();
    let gcp_rounds = 5;
    let aws_rounds = 3;

    rig.moto.set_faults(&format!(
        r#"{{"launch_answer_delay": {}}}"#,
        WINDOW.as_secs_f64()
    ));
    let mut aws_in_window = 0;
    for life in 0..aws_rounds {
        if rig.kill_in_window(life, ProviderKind::Aws) {
            aws_in_window += 1;
        }
    }
    let on_aws = rig.aws_tokens().len();
    rig.moto.set_faults(AWS_STOCKED_OUT);
    let mut gcp_in_window = 0;
    for life in aws_rounds..aws_rounds + gcp_rounds {
        if rig.kill_in_window(life, ProviderKind::Gcp) {
            gcp_in_window += 1;
        }
    }
    assert_eq!(
        rig.aws_tokens().len(),
        on_aws,
        "AWS instances appeared while it was stocked out, or went: {}",
        rig.logs()
    );

    eprintln!(
        "kills between the cloud call and its outcome: GCP {gcp_in_window} of {gcp_rounds}, AWS {aws_in_window} of {aws_rounds}"
    );
    assert!(
        gcp_in_window * 2 >= gcp_rounds && aws_in_window * 2 >= aws_rounds,
        "too few kills inside the window: GCP {gcp_in_window} of {gcp_rounds}, AWS {aws_in_window} of {aws_rounds}\n{}",
        rig.logs()
    );

    // One last life, long enough to reconcile everything.
    let wanted = gcp_rounds + aws_rounds;
    let life = wanted;
    let mut child = rig.serve(life);
    // Up to 60 s to reconcile.
    let settled = (0..600).any(|_| {
        let ledger = rig.ledger();
        let live = rig.rt.block_on(ledger.live_nodes()).unwrap();
        drop(ledger);
        if live.len() == wanted && live.iter().all(|e| e.state == NodeState::Serving) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
        false
    });
    child.kill().unwrap();
    child.wait().unwrap();

    let events = rig.events();
    let ledger = rig.ledger();
    let live = rig.rt.block_on(ledger.live_nodes()).unwrap();
    assert!(
        settled,
        "the pool did not reach {wanted} serving nodes: {live:#?}\n{}",
        rig.logs()
    );

    // The clouds' side against the ledger's.
    let aws = rig.aws_tokens();
    let gcp = rig.gcp_names();
    assert!(
        aws.values().all(|n| *n == 1),
        "an AWS client token launched twice: {aws:?}"
    );
    let live_aws: BTreeSet<String> = live
        .iter()
        .filter(|e| e.provider == ProviderKind::Aws)
        .map(|e| e.client_token.clone())
        .collect();
    let live_gcp: BTreeSet<String> = live
        .iter()
        .filter(|e| e.provider == ProviderKind::Gcp)
        .map(|e| instance_name(&e.client_token))
        .collect();
    assert_eq!(
        aws.keys().cloned().collect::<BTreeSet<_>>(),
        live_aws,
        "AWS instances and the ledger's live AWS nodes differ"
    );
    assert_eq!(
        gcp, live_gcp,
        "GCP VMs and the ledger's live GCP nodes differ"
    );
    // Which cloud a round's node ended on depends on where its kill landed (a launch that never
    // started may go to either cloud once AWS has capacity again); both clouds hold some.
    assert!(
        !live_aws.is_empty() && !live_gcp.is_empty(),
        "nodes on both clouds: {live:#?}"
    );
    assert!(
        live.iter().all(|e| e.instance.is_some()),
        "a live node without its instance: {live:#?}"
    );

    // Nothing terminated: no instance the ledger had an intent for was taken for an orphan.
    assert_eq!(rig.aws_terminated(), 0, "an AWS instance was terminated");
    let deletes: Vec<String> = rig
        .gcp
        .server
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("DELETE"))
        .collect();
    assert!(deletes.is_empty(), "a GCP VM was deleted: {deletes:?}");

    // One intent per node, one node per client token.
    let mut intents: BTreeMap<String, usize> = BTreeMap::new();
    let mut tokens: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in &events {
        if e.state == NodeState::Requested {
            *intents.entry(e.node.to_string()).or_default() += 1;
        }
        tokens
            .entry(e.client_token.clone())
            .or_default()
            .insert(e.node.to_string());
    }
    assert!(
        intents.values().all(|n| *n == 1),
        "an intent was written twice: {intents:?}"
    );
    assert!(
        tokens.values().all(|nodes| nodes.len() == 1),
        "a client token for two nodes: {tokens:?}"
    );
}
