//! What the moto tests share: a moto server on a free port (tests/moto_server.py adds fault
//! injection), and offerings and launch specs for it.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_ec2::config::{Credentials, Region};
use headroom_aws::{AwsProvider, AwsSettings};
use headroom_cloud::{Clock, LaunchSpec, OwnershipTags};
use headroom_core::{Market, Offering, ProviderKind};

pub const REGION: &str = "us-east-1";
pub const ZONE: &str = "us-east-1a";
/// The instance type every test launches; stockouts use others.
pub const GOOD_TYPE: &str = "g6.xlarge";
pub const IMAGE: &str = "ami-12345678";

/// A moto server on a free port, stopped on drop.
pub struct Moto {
    child: Child,
    port: u16,
    faults: PathBuf,
    dir: tempfile::TempDir,
}

impl Moto {
    pub fn start() -> Moto {
        let import = Command::new("python3")
            .args(["-c", "import moto.server, flask"])
            .output();
        match import {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "moto is not installed for python3 ({}); install it with: python3 -m pip install 'moto[server]'",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or_default()
            ),
            Err(e) => panic!(
                "cannot run python3 ({e}); install Python 3, then: python3 -m pip install 'moto[server]'"
            ),
        }
        let dir = tempfile::tempdir().unwrap();
        let faults = dir.path().join("faults.json");
        std::fs::write(&faults, "{}").unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.path().join("moto.log")).unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/moto_server.py");
        let child = Command::new("python3")
            .arg(script)
            .arg(port.to_string())
            .arg(&faults)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("python3 must start");
        let mut moto = Moto {
            child,
            port,
            faults,
            dir,
        };
        for _ in 0..300 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return moto;
            }
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!("moto exited with {status}: {}", moto.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("moto did not listen on {port} within 30s: {}", moto.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("moto.log")).unwrap_or_default()
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn set_faults(&self, json: &str) {
        std::fs::write(&self.faults, json).unwrap();
    }

    /// The contract suite's faults on this server, over `base` (the test's own faults, the
    /// members of a JSON object). `fleet`: the provider launches by CreateFleet, which reads
    /// the instance back after the create.
    pub fn contract_faults(&self, base: &str, fleet: bool) -> ContractFaults {
        ContractFaults {
            file: self.faults.clone(),
            base: base.to_string(),
            fleet,
            failing: std::sync::Mutex::new(None),
            misses: std::sync::Mutex::new(0),
        }
    }

    pub fn loader(&self) -> aws_config::ConfigLoader {
        // Static credentials and an explicit region: nothing probes the environment or IMDS.
        aws_config::defaults(BehaviorVersion::latest())
            .credentials_provider(Credentials::new("test", "test", None, None, "moto"))
    }

    pub fn settings(&self) -> AwsSettings {
        AwsSettings {
            endpoint_url: Some(self.endpoint()),
            image_id: Some(IMAGE.to_string()),
            ..AwsSettings::default()
        }
    }

    pub async fn provider(&self, clock: Arc<dyn Clock>) -> AwsProvider {
        self.provider_with(self.settings(), clock).await
    }

    pub async fn provider_with(&self, settings: AwsSettings, clock: Arc<dyn Clock>) -> AwsProvider {
        AwsProvider::with_loader(self.loader(), settings, vec![REGION.to_string()], clock)
            .await
            .unwrap()
    }

    /// A plain EC2 client on the same server, for what Headroom would never do itself.
    pub async fn raw_client(&self) -> aws_sdk_ec2::Client {
        let config = self
            .loader()
            .region(Region::new(REGION))
            .endpoint_url(self.endpoint())
            .load()
            .await;
        aws_sdk_ec2::Client::new(&config)
    }

    /// Every instance moto holds, whatever its tags and state.
    pub async fn all_instances(&self) -> Vec<aws_sdk_ec2::types::Instance> {
        self.raw_client()
            .await
            .describe_instances()
            .send()
            .await
            .unwrap()
            .reservations()
            .iter()
            .flat_map(|r| r.instances().to_vec())
            .collect()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn clock() -> Arc<dyn Clock> {
    Arc::new(headroom_cloud::SystemClock::new())
}

pub fn offering(id: &str, instance_type: &str, market: Market, price: &str) -> Offering {
    Offering {
        id: id.parse().unwrap(),
        provider: ProviderKind::Aws,
        region: REGION.to_string(),
        zone: ZONE.to_string(),
        instance_type: instance_type.to_string(),
        market,
        price_usd_per_hour: price.parse().unwrap(),
        gpus_per_node: 1,
        warm_usd_per_hour: headroom_core::Money::ZERO,
    }
}

pub fn spec(cluster: &str, offering: &Offering, node: &str) -> LaunchSpec {
    LaunchSpec {
        offering: offering.clone(),
        client_token: format!("hr-{node}"),
        tags: OwnershipTags {
            cluster: cluster.to_string(),
            pool: "llm".to_string(),
            node: node.to_string(),
            request: Some("req-1".to_string()),
        },
        user_data: None,
    }
}

/// Faults the shared contract suite asks for, written into moto's fault file: HTTP 500 on the
/// launch call, and (for CreateFleet, the path that reads an instance back) DescribeInstances
/// missing right after a create. Ownership on AWS is the tags alone (no description to fall
/// back from), which the suite's listing checks already cover.
#[derive(Debug)]
pub struct ContractFaults {
    file: PathBuf,
    base: String,
    fleet: bool,
    failing: std::sync::Mutex<Option<String>>,
    misses: std::sync::Mutex<u32>,
}

impl ContractFaults {
    fn write(&self) {
        let mut parts = Vec::new();
        if !self.base.is_empty() {
            parts.push(self.base.clone());
        }
        if let Some(t) = self.failing.lock().unwrap().as_ref() {
            let key = if self.fleet { "fleet_http" } else { "launch" };
            parts.push(format!(
                r#""{key}": {{"{t}": {{"code": "InternalError", "status": 500}}}}"#
            ));
        }
        let misses = *self.misses.lock().unwrap();
        if misses > 0 {
            parts.push(format!(r#""describe_misses": {misses}"#));
        }
        std::fs::write(&self.file, format!("{{{}}}", parts.join(", "))).unwrap();
    }
}

impl headroom_cloud::contract::ContractFaults for ContractFaults {
    fn fail_launches(&self, offering: &headroom_core::Offering) -> bool {
        *self.failing.lock().unwrap() = Some(offering.instance_type.clone());
        self.write();
        true
    }
    fn heal(&self) {
        *self.failing.lock().unwrap() = None;
        *self.misses.lock().unwrap() = 0;
        self.write();
    }
    fn miss_reads_after_create(&self, n: u32) -> bool {
        if !self.fleet {
            // RunInstances answers with the instance itself: nothing is read back.
            return false;
        }
        *self.misses.lock().unwrap() = n;
        self.write();
        true
    }
}
