//! A local Compute Engine API server: the subset of the REST API the provider uses, with paths
//! and JSON bodies as the real API has them, state in memory, and fault injection. The tests use
//! it as a library; `cargo run -p headroom-gcp --features test-server --example compute-server`
//! runs it standalone.
//!
//! Served: `instances` insert, get, list (with `labels.KEY = "VALUE"` filters and pages), delete,
//! start, stop, suspend, resume; `zoneOperations` get, wait and list (filter on
//! `operationType`). Inserts and verbs honour `requestId` (a repeat returns the first
//! operation); a second insert of a name fails with HTTP 409 `alreadyExists`. Operations finish
//! at once, or after N polls ([`ComputeServer::set_operation_polls`]); a wait on an unfinished
//! operation can be made to block a while, as GCE's does ([`ComputeServer::set_wait_delay`]),
//! which widens the window between an insert (the VM exists) and its answer. An inserted VM keeps its
//! whole body (labels, metadata items such as `user-data`, checked against GCE's bounds).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::routing::{get, post};
use axum::{Json, Router};
use headroom_cloud::Clock;
use serde_json::{Value, json};

mod failures;
mod filter;
mod instances;
mod operations;
mod regions;
#[cfg(test)]
mod tests;

pub use failures::ApiFailure;
pub use regions::DEFAULT_LIMITS;

use failures::failing_get;
use filter::{field, last_segment};
use instances::{control_preempt, delete_instance, get_instance, insert, list_instances, verb};
use operations::{get_operation, list_operations, new_operation, wait_operation};

/// Which calls a fault applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultMatch {
    /// Instances of this machine type (the last segment of `machineType`).
    MachineType(String),
    Zone(String),
    Any,
}

/// What a fault does. Faults apply to `insert`, `start` and `resume`: the calls that need
/// capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultKind {
    /// The operation finishes with this code (e.g. `ZONE_RESOURCE_POOL_EXHAUSTED`) and
    /// `httpErrorStatusCode` 503, as GCE reports stockouts; nothing is created.
    CapacityInOperation(String),
    /// HTTP 403, reason `quotaExceeded`.
    QuotaHttp,
    /// The operation finishes with `QUOTA_EXCEEDED` and `httpErrorStatusCode` 403.
    QuotaInOperation,
    /// HTTP 429, reason `rateLimitExceeded`.
    RateLimit429,
    /// HTTP 403, reason `rateLimitExceeded` (how GCE often sends it).
    RateLimit403,
    /// HTTP 403, reason `forbidden`.
    Permission,
    /// HTTP 400, reason `invalid`.
    Invalid,
    /// HTTP 503, reason `backendError`.
    Unavailable,
    /// HTTP 500, reason `backendError` (an internal error of the API).
    Internal,
}

#[derive(Debug, Clone)]
pub struct Fault {
    pub matches: FaultMatch,
    pub kind: FaultKind,
    /// How many calls fail; `None` for all of them.
    pub times: Option<u32>,
}

#[derive(Debug, Default)]
struct ServerState {
    next_id: u64,
    /// (project, zone, name) → the instance resource as JSON.
    instances: BTreeMap<(String, String, String), Value>,
    /// operation name → (operation JSON, polls left before DONE).
    operations: BTreeMap<String, (Value, u32)>,
    /// requestId → operation name.
    requests: HashMap<String, String>,
    faults: Vec<Fault>,
    operation_polls: u32,
    /// How long `zoneOperations.wait` blocks before answering an operation that is not done.
    wait_delay: std::time::Duration,
    /// Report a duplicate name inside the finished operation (`RESOURCE_ALREADY_EXISTS`)
    /// instead of as HTTP 409: GCE has used both shapes.
    duplicates_in_operation: bool,
    /// The next this many GETs (get, list, operation polls) answer HTTP 503.
    failing_gets: u32,
    /// After each insert, this many `instances.get` of the new VM answer 404 `notFound` (a
    /// read that lags the write).
    reads_missing_after_insert: u32,
    /// (project, zone, name) → `instances.get` calls still to answer 404.
    hidden: HashMap<(String, String, String), u32>,
    /// Every call as `METHOD path-suffix`, for tests.
    calls: Vec<String>,
    /// (region, metric) → quota limit set by a test (module `regions`).
    quota_limits: BTreeMap<(String, String), f64>,
}

/// The server's state and behaviour; clone handles share it.
#[derive(Debug, Clone)]
pub struct ComputeServer {
    state: Arc<Mutex<ServerState>>,
    clock: Arc<dyn Clock>,
}

/// A server listening on a local port.
#[derive(Debug)]
pub struct RunningServer {
    pub server: ComputeServer,
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl RunningServer {
    /// The endpoint to give the client (`with_endpoint`), e.g. `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Reply = Result<Json<Value>, ApiFailure>;

impl ComputeServer {
    pub fn new(clock: Arc<dyn Clock>) -> ComputeServer {
        ComputeServer {
            state: Arc::new(Mutex::new(ServerState::default())),
            clock,
        }
    }

    /// Binds `addr` (port 0 for any free one) and serves until the returned value is dropped.
    pub async fn start(clock: Arc<dyn Clock>, addr: SocketAddr) -> std::io::Result<RunningServer> {
        let server = ComputeServer::new(clock);
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let app = server.router();
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("compute server stopped: {e}");
            }
        });
        Ok(RunningServer { server, addr, task })
    }

    fn state(&self) -> MutexGuard<'_, ServerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> String {
        self.clock
            .now()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
    }

    pub fn inject(&self, fault: Fault) {
        self.state().faults.push(fault);
    }

    pub fn clear_faults(&self) {
        self.state().faults.clear();
    }

    /// Operations answer RUNNING to this many polls (get or wait) before DONE.
    pub fn set_operation_polls(&self, polls: u32) {
        self.state().operation_polls = polls;
    }

    /// `zoneOperations.wait` on an operation that is not done answers after `delay` (GCE's wait
    /// blocks while the operation runs, up to about two minutes); with
    /// [`ComputeServer::set_operation_polls`] it holds the insert's answer back while the VM
    /// already exists.
    pub fn set_wait_delay(&self, delay: std::time::Duration) {
        self.state().wait_delay = delay;
    }

    /// Reports a duplicate name inside the insert's operation rather than as HTTP 409.
    pub fn set_duplicates_in_operation(&self, yes: bool) {
        self.state().duplicates_in_operation = yes;
    }

    /// The next `n` GET calls answer HTTP 503 `backendError` (a flaky API).
    pub fn fail_next_gets(&self, n: u32) {
        self.state().failing_gets = n;
    }

    /// After each insert, the first `n` `instances.get` of the new VM answer 404 `notFound`,
    /// although the insert's operation finished and the VM exists (and is listed).
    pub fn miss_reads_after_insert(&self, n: u32) {
        self.state().reads_missing_after_insert = n;
    }

    /// Makes every VM readable again (ends [`ComputeServer::miss_reads_after_insert`]'s misses).
    pub fn clear_hidden(&self) {
        self.state().hidden.clear();
    }

    /// Forgets every requestId, as GCE does after its idempotency window (about an hour).
    pub fn forget_request_ids(&self) {
        self.state().requests.clear();
    }

    /// Puts an instance resource as is (one Headroom did not make).
    pub fn put_instance(&self, project: &str, zone: &str, instance: Value) {
        let name = instance["name"].as_str().unwrap_or_default().to_string();
        self.state()
            .instances
            .insert((project.to_string(), zone.to_string(), name), instance);
    }

    /// Every instance the server holds, as JSON.
    pub fn instances(&self) -> Vec<Value> {
        self.state().instances.values().cloned().collect()
    }

    /// Every call so far, as `METHOD /zones/Z/…` lines.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    /// Preempts a spot VM as GCE does: a `compute.instances.preempted` operation, and the VM
    /// TERMINATED (termination action STOP) or deleted (DELETE). False if it is not a running
    /// spot VM.
    pub fn preempt(&self, project: &str, zone: &str, name: &str) -> bool {
        let now = self.now();
        let mut st = self.state();
        let key = (project.to_string(), zone.to_string(), name.to_string());
        let Some(vm) = st.instances.get(&key).cloned() else {
            return false;
        };
        let spot =
            field(&vm, "scheduling.provisioningModel").and_then(Value::as_str) == Some("SPOT");
        if !spot || vm["status"] != "RUNNING" {
            return false;
        }
        let delete = field(&vm, "scheduling.instanceTerminationAction").and_then(Value::as_str)
            == Some("DELETE");
        if delete {
            st.instances.remove(&key);
        } else if let Some(vm) = st.instances.get_mut(&key) {
            vm["status"] = json!("TERMINATED");
            vm["statusMessage"] = json!("Instance was preempted.");
            vm["lastStopTimestamp"] = json!(now);
        }
        let op = new_operation(&mut st, project, zone, &vm, PREEMPTED, &now, None);
        let name = op["name"].as_str().unwrap_or_default().to_string();
        st.operations.insert(name, (op, 0));
        true
    }

    pub fn router(&self) -> Router {
        let base = "/compute/v1/projects/{project}/zones/{zone}";
        Router::new()
            .route(
                &format!("{base}/instances"),
                post(insert).get(list_instances),
            )
            .route(
                &format!("{base}/instances/{{name}}"),
                get(get_instance).delete(delete_instance),
            )
            .route(&format!("{base}/instances/{{name}}/{{verb}}"), post(verb))
            .route(&format!("{base}/operations"), get(list_operations))
            .route(&format!("{base}/operations/{{op}}"), get(get_operation))
            .route(
                &format!("{base}/operations/{{op}}/wait"),
                post(wait_operation),
            )
            .route(
                "/compute/v1/projects/{project}/regions/{region}",
                get(regions::get_region),
            )
            .route(
                "/__control/preempt/{project}/{zone}/{name}",
                post(control_preempt),
            )
            .with_state(self.clone())
    }

    /// The fault for this call, consuming one use of it.
    fn take_fault(
        &self,
        st: &mut ServerState,
        zone: &str,
        machine_type: &str,
    ) -> Option<FaultKind> {
        let fault = st.faults.iter_mut().find(|f| {
            let hit = match &f.matches {
                FaultMatch::MachineType(t) => t == machine_type,
                FaultMatch::Zone(z) => z == zone,
                FaultMatch::Any => true,
            };
            hit && f.times != Some(0)
        })?;
        if let Some(times) = &mut fault.times {
            *times -= 1;
        }
        Some(fault.kind.clone())
    }
}

const PREEMPTED: &str = "compute.instances.preempted";
const API: &str = "https://compute.googleapis.com/compute/v1";
