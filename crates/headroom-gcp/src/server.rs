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

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use headroom_cloud::Clock;
use serde_json::{Value, json};

mod regions;
pub use regions::DEFAULT_LIMITS;

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

/// An HTTP error in the Compute API's shape.
#[derive(Debug)]
pub struct ApiFailure {
    status: StatusCode,
    reason: &'static str,
    domain: &'static str,
    message: String,
}

impl IntoResponse for ApiFailure {
    fn into_response(self) -> Response {
        let body = json!({
            "error": {
                "code": self.status.as_u16(),
                "message": self.message,
                "errors": [{ "message": self.message, "domain": self.domain, "reason": self.reason }],
            }
        });
        (self.status, Json(body)).into_response()
    }
}

fn failure(status: StatusCode, reason: &'static str, message: String) -> ApiFailure {
    let domain = match reason {
        "quotaExceeded" | "rateLimitExceeded" => "usageLimits",
        _ => "global",
    };
    ApiFailure {
        status,
        reason,
        domain,
        message,
    }
}

fn invalid(message: String) -> ApiFailure {
    failure(StatusCode::BAD_REQUEST, "invalid", message)
}

fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !name.is_empty()
        && name.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-')
}

fn valid_label(s: &str, key: bool) -> bool {
    s.len() <= 63
        && (!key || s.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

fn last_segment(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// A parsed list filter: `a = "b" AND (c = d)`; `eq` works as `=`.
fn parse_filter(filter: &str) -> Result<Vec<(String, String)>, ApiFailure> {
    let mut terms = Vec::new();
    for part in filter.split(" AND ") {
        let part = part
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .trim();
        if part.is_empty() {
            continue;
        }
        let (field, value) = part
            .split_once(" = ")
            .or_else(|| part.split_once(" eq "))
            .ok_or_else(|| invalid(format!("Invalid list filter expression '{part}'.")))?;
        terms.push((
            field.trim().to_string(),
            value.trim().trim_matches('"').to_string(),
        ));
    }
    Ok(terms)
}

fn field<'a>(resource: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(resource, |v, key| v.get(key))
}

fn matches_filter(resource: &Value, terms: &[(String, String)]) -> bool {
    terms.iter().all(|(path, want)| {
        field(resource, path).is_some_and(|v| match v {
            Value::String(s) => s == want,
            other => serde_json::from_str::<Value>(want).ok().as_ref() == Some(other),
        })
    })
}

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

fn new_operation(
    st: &mut ServerState,
    project: &str,
    zone: &str,
    target: &Value,
    kind: &str,
    now: &str,
    error: Option<(&str, u16, &str)>,
) -> Value {
    st.next_id += 1;
    let id = st.next_id;
    let name = format!("operation-{id:012}");
    let target_name = target["name"].as_str().unwrap_or_default();
    let mut op = json!({
        "kind": "compute#operation",
        "id": format!("{}", 7_000_000_000_u64 + id),
        "name": name,
        "zone": format!("{API}/projects/{project}/zones/{zone}"),
        "operationType": kind,
        "targetLink": format!("{API}/projects/{project}/zones/{zone}/instances/{target_name}"),
        "status": "DONE",
        "user": if kind == PREEMPTED { "system" } else { "headroom@local" },
        "progress": 100,
        "insertTime": now,
        "startTime": now,
        "endTime": now,
        "selfLink": format!("{API}/projects/{project}/zones/{zone}/operations/{name}"),
    });
    if let Some(target_id) = target.get("id") {
        op["targetId"] = target_id.clone();
    }
    if let Some((code, http, message)) = error {
        op["error"] = json!({ "errors": [{ "code": code, "message": message }] });
        op["httpErrorStatusCode"] = json!(http);
        op["httpErrorMessage"] = json!(match http {
            403 => "FORBIDDEN",
            409 => "CONFLICT",
            _ => "SERVICE UNAVAILABLE",
        });
    }
    op
}

/// Stores an operation (RUNNING for the configured polls) and returns what the call answers.
fn record_operation(st: &mut ServerState, op: Value, request_id: Option<&str>) -> Value {
    let name = op["name"].as_str().unwrap_or_default().to_string();
    let polls = st.operation_polls;
    let mut answer = op.clone();
    if polls > 0 {
        answer["status"] = json!("RUNNING");
        answer["progress"] = json!(0);
        if let Some(obj) = answer.as_object_mut() {
            obj.remove("error");
            obj.remove("httpErrorStatusCode");
            obj.remove("httpErrorMessage");
            obj.remove("endTime");
        }
    }
    st.operations.insert(name.clone(), (op, polls));
    if let Some(r) = request_id {
        st.requests.insert(r.to_string(), name);
    }
    answer
}

fn check_request_id(q: &HashMap<String, String>) -> Result<Option<String>, ApiFailure> {
    match q.get("requestId") {
        None => Ok(None),
        Some(r) if uuid::Uuid::parse_str(r).is_ok() && r.len() == 36 => Ok(Some(r.clone())),
        Some(r) => Err(invalid(format!(
            "Invalid value for field 'requestId': '{r}'. The request id must be a valid UUID."
        ))),
    }
}

/// Where a call is aimed, for the replies it builds.
#[derive(Debug, Clone, Copy)]
struct Call<'a> {
    project: &'a str,
    zone: &'a str,
    now: &'a str,
    request_id: Option<&'a str>,
}

/// The call's operation, ending with `QUOTA_EXCEEDED` (HTTP 403) and `message`, as GCE ends an
/// insert, start or resume past a regional quota.
fn quota_exceeded(
    st: &mut ServerState,
    call: &Call<'_>,
    target: &Value,
    op_kind: &str,
    message: &str,
) -> Reply {
    let error = Some(("QUOTA_EXCEEDED", 403, message));
    let op = new_operation(
        st,
        call.project,
        call.zone,
        target,
        op_kind,
        call.now,
        error,
    );
    Ok(Json(record_operation(st, op, call.request_id)))
}

fn fault_reply(
    st: &mut ServerState,
    kind: FaultKind,
    call: &Call<'_>,
    target: &Value,
    op_kind: &str,
) -> Reply {
    let Call {
        project,
        zone,
        now,
        request_id,
    } = *call;
    let what = format!(
        "{} in {zone}",
        last_segment(target["machineType"].as_str().unwrap_or_default())
    );
    match kind {
        FaultKind::CapacityInOperation(code) => {
            let message = format!(
                "The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill the request. Try a different zone, or try again later. ({what})"
            );
            let op = new_operation(
                st,
                project,
                zone,
                target,
                op_kind,
                now,
                Some((&code, 503, &message)),
            );
            Ok(Json(record_operation(st, op, request_id)))
        }
        FaultKind::QuotaInOperation => {
            let message =
                format!("Quota 'NVIDIA_A100_GPUS' exceeded. Limit: 0.0 in region ({what}).");
            quota_exceeded(st, call, target, op_kind, &message)
        }
        FaultKind::QuotaHttp => Err(failure(
            StatusCode::FORBIDDEN,
            "quotaExceeded",
            format!("Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally ({what})."),
        )),
        FaultKind::RateLimit429 => Err(failure(
            StatusCode::TOO_MANY_REQUESTS,
            "rateLimitExceeded",
            "Rate Limit Exceeded".into(),
        )),
        FaultKind::RateLimit403 => Err(failure(
            StatusCode::FORBIDDEN,
            "rateLimitExceeded",
            "Rate Limit Exceeded".into(),
        )),
        FaultKind::Permission => Err(failure(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "Required 'compute.instances.create' permission for 'projects/{project}/zones/{zone}'"
            ),
        )),
        FaultKind::Invalid => Err(invalid(format!(
            "Invalid value for field 'resource.machineType' ({what})."
        ))),
        FaultKind::Internal => Err(failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "backendError",
            "Internal error. Please try again or contact Google Support.".into(),
        )),
        FaultKind::Unavailable => Err(failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "backendError",
            "Backend Error".into(),
        )),
    }
}

async fn insert(
    State(server): State<ComputeServer>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    body: Option<Json<Value>>,
) -> Reply {
    let now = server.now();
    let mut st = server.state();
    st.calls.push(format!("POST /zones/{zone}/instances"));
    let request_id = check_request_id(&q)?;
    if let Some(r) = &request_id
        && let Some(op_name) = st.requests.get(r)
        && let Some((op, _)) = st.operations.get(op_name)
    {
        return Ok(Json(op.clone()));
    }
    let Some(Json(mut vm)) = body else {
        return Err(invalid("Required field 'resource' not specified".into()));
    };
    let name = vm["name"].as_str().unwrap_or_default().to_string();
    if !valid_name(&name) {
        return Err(invalid(format!(
            "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        )));
    }
    let Some(machine_type) = vm["machineType"].as_str().map(str::to_string) else {
        return Err(invalid(
            "Invalid value for field 'resource.machineType': ''.".into(),
        ));
    };
    if let Some(labels) = vm.get("labels").and_then(Value::as_object) {
        for (k, v) in labels {
            if !valid_label(k, true) || !v.as_str().is_some_and(|v| valid_label(v, false)) {
                return Err(invalid(format!(
                    "Invalid value for field 'resource.labels': '{k}'. Label keys and values must be lowercase letters, digits, '_' or '-', at most 63 characters."
                )));
            }
        }
    }
    if let Some(items) = vm.pointer("/metadata/items").and_then(Value::as_array) {
        // GCE's bounds: keys of letters, digits, '-' and '_' up to 128; a value up to 256 KB.
        for item in items {
            let key = item["key"].as_str().unwrap_or_default();
            let value = item["value"].as_str().unwrap_or_default();
            let key_ok = !key.is_empty()
                && key.len() <= 128
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !key_ok || value.len() > 256 * 1024 {
                return Err(invalid(format!(
                    "Invalid value for field 'resource.metadata': '{key}'. Metadata keys must be letters, digits, '-' or '_' (at most 128) and values at most 256 KB."
                )));
            }
        }
    }
    let from_template =
        q.contains_key("sourceInstanceTemplate") || q.contains_key("sourceMachineImage");
    let has_disk = vm["disks"].as_array().is_some_and(|d| !d.is_empty());
    if !from_template && !has_disk {
        return Err(invalid(
            "Invalid value for field 'resource.disks': ''. No disks are specified.".into(),
        ));
    }
    let short_type = last_segment(&machine_type).to_string();
    if let Some(kind) = server.take_fault(&mut st, &zone, &short_type) {
        let call = Call {
            project: &project,
            zone: &zone,
            now: &now,
            request_id: request_id.as_deref(),
        };
        return fault_reply(&mut st, kind, &call, &vm, "insert");
    }
    let key = (project.clone(), zone.clone(), name.clone());
    if !st.instances.contains_key(&key)
        && let Some(message) = regions::exceeded(&st, &project, &zone, &vm)
    {
        let call = Call {
            project: &project,
            zone: &zone,
            now: &now,
            request_id: request_id.as_deref(),
        };
        return quota_exceeded(&mut st, &call, &vm, "insert", &message);
    }
    if st.instances.contains_key(&key) && st.duplicates_in_operation {
        let message = format!(
            "The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists"
        );
        let op = new_operation(
            &mut st,
            &project,
            &zone,
            &vm,
            "insert",
            &now,
            Some(("RESOURCE_ALREADY_EXISTS", 409, &message)),
        );
        return Ok(Json(record_operation(&mut st, op, request_id.as_deref())));
    }
    if st.instances.contains_key(&key) {
        return Err(failure(
            StatusCode::CONFLICT,
            "alreadyExists",
            format!(
                "The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists"
            ),
        ));
    }
    st.next_id += 1;
    let id = 1_000_000_000_000_u64 + st.next_id;
    vm["kind"] = json!("compute#instance");
    vm["id"] = json!(id.to_string());
    vm["zone"] = json!(format!("{API}/projects/{project}/zones/{zone}"));
    vm["machineType"] = json!(format!(
        "{API}/projects/{project}/zones/{zone}/machineTypes/{short_type}"
    ));
    vm["selfLink"] = json!(format!(
        "{API}/projects/{project}/zones/{zone}/instances/{name}"
    ));
    vm["status"] = json!("RUNNING");
    vm["creationTimestamp"] = json!(now);
    vm["lastStartTimestamp"] = json!(now);
    if let Some(t) = q.get("sourceInstanceTemplate") {
        vm["sourceInstanceTemplate"] = json!(t);
    }
    let hide = st.reads_missing_after_insert;
    if hide > 0 {
        st.hidden.insert(key.clone(), hide);
    }
    st.instances.insert(key, vm.clone());
    let op = new_operation(&mut st, &project, &zone, &vm, "insert", &now, None);
    Ok(Json(record_operation(&mut st, op, request_id.as_deref())))
}

/// Consumes one injected GET failure, if any is left.
fn failing_get(st: &mut ServerState) -> Result<(), ApiFailure> {
    if st.failing_gets == 0 {
        return Ok(());
    }
    st.failing_gets -= 1;
    Err(failure(
        StatusCode::SERVICE_UNAVAILABLE,
        "backendError",
        "Backend Error".into(),
    ))
}

fn not_found(project: &str, zone: &str, name: &str) -> ApiFailure {
    failure(
        StatusCode::NOT_FOUND,
        "notFound",
        format!("The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found"),
    )
}

async fn get_instance(
    State(server): State<ComputeServer>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Reply {
    let mut st = server.state();
    st.calls.push(format!("GET /zones/{zone}/instances/{name}"));
    failing_get(&mut st)?;
    let key = (project.clone(), zone.clone(), name.clone());
    if let Some(left) = st.hidden.get_mut(&key)
        && *left > 0
    {
        *left -= 1;
        return Err(not_found(&project, &zone, &name));
    }
    st.instances
        .get(&(project.clone(), zone.clone(), name.clone()))
        .cloned()
        .map(Json)
        .ok_or_else(|| not_found(&project, &zone, &name))
}

async fn list_instances(
    State(server): State<ComputeServer>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let mut st = server.state();
    st.calls.push(format!("GET /zones/{zone}/instances"));
    failing_get(&mut st)?;
    let terms = parse_filter(q.get("filter").map(String::as_str).unwrap_or(""))?;
    let all: Vec<Value> = st
        .instances
        .iter()
        .filter(|((p, z, _), vm)| *p == project && *z == zone && matches_filter(vm, &terms))
        .map(|(_, vm)| vm.clone())
        .collect();
    let max = q
        .get("maxResults")
        .and_then(|m| m.parse::<usize>().ok())
        .unwrap_or(500)
        .clamp(1, 500);
    let start = q
        .get("pageToken")
        .and_then(|t| t.parse::<usize>().ok())
        .unwrap_or(0);
    let items: Vec<Value> = all.iter().skip(start).take(max).cloned().collect();
    let mut page = json!({
        "kind": "compute#instanceList",
        "id": format!("projects/{project}/zones/{zone}/instances"),
        "items": items,
        "selfLink": format!("{API}/projects/{project}/zones/{zone}/instances"),
    });
    if start + max < all.len() {
        page["nextPageToken"] = json!((start + max).to_string());
    }
    Ok(Json(page))
}

async fn delete_instance(
    State(server): State<ComputeServer>,
    Path((project, zone, name)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let now = server.now();
    let mut st = server.state();
    st.calls
        .push(format!("DELETE /zones/{zone}/instances/{name}"));
    let request_id = check_request_id(&q)?;
    if let Some(r) = &request_id
        && let Some(op_name) = st.requests.get(r)
        && let Some((op, _)) = st.operations.get(op_name)
    {
        return Ok(Json(op.clone()));
    }
    let Some(vm) = st
        .instances
        .remove(&(project.clone(), zone.clone(), name.clone()))
    else {
        return Err(not_found(&project, &zone, &name));
    };
    let op = new_operation(&mut st, &project, &zone, &vm, "delete", &now, None);
    Ok(Json(record_operation(&mut st, op, request_id.as_deref())))
}

async fn verb(
    State(server): State<ComputeServer>,
    Path((project, zone, name, verb)): Path<(String, String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let now = server.now();
    let mut st = server.state();
    st.calls
        .push(format!("POST /zones/{zone}/instances/{name}/{verb}"));
    let request_id = check_request_id(&q)?;
    if let Some(r) = &request_id
        && let Some(op_name) = st.requests.get(r)
        && let Some((op, _)) = st.operations.get(op_name)
    {
        return Ok(Json(op.clone()));
    }
    let key = (project.clone(), zone.clone(), name.clone());
    let Some(vm) = st.instances.get(&key).cloned() else {
        return Err(not_found(&project, &zone, &name));
    };
    let status = vm["status"].as_str().unwrap_or_default().to_string();
    let (new_status, stamp) = match (verb.as_str(), status.as_str()) {
        ("start", "TERMINATED" | "STOPPED") => ("RUNNING", "lastStartTimestamp"),
        ("start", _) => (status.as_str(), ""),
        ("stop", "RUNNING" | "SUSPENDED" | "PROVISIONING" | "STAGING") => {
            ("TERMINATED", "lastStopTimestamp")
        }
        ("stop", _) => (status.as_str(), ""),
        ("suspend", "RUNNING") => ("SUSPENDED", "lastSuspendedTimestamp"),
        ("suspend", "SUSPENDED") => (status.as_str(), ""),
        ("resume", "SUSPENDED") => ("RUNNING", "lastStartTimestamp"),
        ("suspend" | "resume", _) => {
            return Err(invalid(format!(
                "The resource 'projects/{project}/zones/{zone}/instances/{name}' is not ready: {verb} is not allowed in status {status}"
            )));
        }
        _ => {
            return Err(failure(
                StatusCode::NOT_FOUND,
                "notFound",
                format!("Unknown method instances.{verb}"),
            ));
        }
    };
    if matches!(verb.as_str(), "start" | "resume") && new_status != status {
        let short_type = last_segment(vm["machineType"].as_str().unwrap_or_default()).to_string();
        if let Some(kind) = server.take_fault(&mut st, &zone, &short_type) {
            let call = Call {
                project: &project,
                zone: &zone,
                now: &now,
                request_id: request_id.as_deref(),
            };
            return fault_reply(&mut st, kind, &call, &vm, &verb);
        }
        if let Some(message) = regions::exceeded(&st, &project, &zone, &vm) {
            let call = Call {
                project: &project,
                zone: &zone,
                now: &now,
                request_id: request_id.as_deref(),
            };
            return quota_exceeded(&mut st, &call, &vm, &verb, &message);
        }
    }
    let new_status = new_status.to_string();
    if let Some(vm) = st.instances.get_mut(&key) {
        vm["status"] = json!(new_status);
        if !stamp.is_empty() {
            vm[stamp] = json!(now);
        }
        if let Some(obj) = vm.as_object_mut() {
            obj.remove("statusMessage");
        }
    }
    let op = new_operation(&mut st, &project, &zone, &vm, &verb, &now, None);
    Ok(Json(record_operation(&mut st, op, request_id.as_deref())))
}

/// One poll of an operation: RUNNING while polls are left, then the stored (final) operation.
fn poll(st: &mut ServerState, project: &str, zone: &str, op: &str) -> Reply {
    let Some((stored, left)) = st.operations.get_mut(op) else {
        return Err(failure(
            StatusCode::NOT_FOUND,
            "notFound",
            format!("The resource 'projects/{project}/zones/{zone}/operations/{op}' was not found"),
        ));
    };
    if *left > 0 {
        *left -= 1;
        let mut running = stored.clone();
        running["status"] = json!("RUNNING");
        if let Some(obj) = running.as_object_mut() {
            obj.remove("error");
            obj.remove("httpErrorStatusCode");
            obj.remove("httpErrorMessage");
        }
        return Ok(Json(running));
    }
    Ok(Json(stored.clone()))
}

async fn get_operation(
    State(server): State<ComputeServer>,
    Path((project, zone, op)): Path<(String, String, String)>,
) -> Reply {
    let mut st = server.state();
    st.calls.push(format!("GET /zones/{zone}/operations/{op}"));
    failing_get(&mut st)?;
    poll(&mut st, &project, &zone, &op)
}

async fn wait_operation(
    State(server): State<ComputeServer>,
    Path((project, zone, op)): Path<(String, String, String)>,
) -> Reply {
    let delay = {
        let mut st = server.state();
        st.calls
            .push(format!("POST /zones/{zone}/operations/{op}/wait"));
        match st.operations.get(&op) {
            Some((_, left)) if *left > 0 => st.wait_delay,
            _ => std::time::Duration::ZERO,
        }
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    poll(&mut server.state(), &project, &zone, &op)
}

async fn list_operations(
    State(server): State<ComputeServer>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let mut st = server.state();
    st.calls.push(format!("GET /zones/{zone}/operations"));
    failing_get(&mut st)?;
    let terms = parse_filter(q.get("filter").map(String::as_str).unwrap_or(""))?;
    let zone_link = format!("{API}/projects/{project}/zones/{zone}");
    let items: Vec<Value> = st
        .operations
        .values()
        .map(|(op, _)| op)
        .filter(|op| op["zone"] == zone_link.as_str() && matches_filter(op, &terms))
        .cloned()
        .collect();
    Ok(Json(json!({
        "kind": "compute#operationList",
        "id": format!("projects/{project}/zones/{zone}/operations"),
        "items": items,
        "selfLink": format!("{zone_link}/operations"),
    })))
}

async fn control_preempt(
    State(server): State<ComputeServer>,
    Path((project, zone, name)): Path<(String, String, String)>,
) -> Response {
    if server.preempt(&project, &zone, &name) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        invalid(format!(
            "projects/{project}/zones/{zone}/instances/{name} is not a running spot VM"
        ))
        .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_and_match() {
        let terms =
            parse_filter("(labels.headroom-cluster = \"c1\") AND (status = RUNNING)").unwrap();
        let vm = json!({"labels": {"headroom-cluster": "c1"}, "status": "RUNNING"});
        assert!(matches_filter(&vm, &terms));
        let other = json!({"labels": {"headroom-cluster": "c2"}, "status": "RUNNING"});
        assert!(!matches_filter(&other, &terms));
        assert!(parse_filter("labels.x ~ y").is_err());
        assert!(parse_filter("").unwrap().is_empty());
    }

    #[test]
    fn names_and_labels_are_checked_like_gce() {
        assert!(valid_name("hr-0123abc"));
        assert!(!valid_name("Hr-x") && !valid_name("1abc") && !valid_name("a-") && !valid_name(""));
        assert!(valid_label("headroom-cluster", true) && !valid_label("Upper", false));
        assert!(!valid_label(&"a".repeat(64), false));
    }
}
