//! A local HTTP server that speaks the subset of the Kubernetes API Headroom uses: list and
//! watch Nodes and Pods (chunked JSON lines, resourceVersions, label and field selectors),
//! PATCH a Node (cordon), POST a pod's eviction (429 while a PodDisruptionBudget forbids it),
//! DELETE a pod. Tests drive the cluster's side (a node registering, pods becoming Ready, the
//! kubelet finishing an evicted pod) through its methods, and can close every watch or compact
//! the history so resumed watches get `410 Gone` and the client must re-list.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde_json::{Value, json};
use tokio::sync::broadcast;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Node,
    Pod,
}

#[derive(Debug, Clone)]
enum Broadcast {
    Event {
        rv: u64,
        kind: Kind,
        type_: &'static str,
        object: Value,
    },
    CloseAll,
}

#[derive(Debug, Default)]
struct Inner {
    rv: u64,
    nodes: BTreeMap<String, Value>,
    /// (namespace, name) → pod.
    pods: BTreeMap<(String, String), Value>,
    /// Every change, for watches that resume from a resourceVersion.
    history: Vec<(u64, Kind, &'static str, Value)>,
    /// Kinds whose history was compacted: a watch of them gets `410 Gone` until the client lists
    /// them again.
    expired: BTreeSet<Kind>,
    /// Pods whose eviction a PodDisruptionBudget forbids.
    pdb_blocked: BTreeSet<(String, String)>,
    /// What the server was asked to change, in order: `PATCH node/x {...}`,
    /// `EVICT ns/name -> 429`, ...
    log: Vec<String>,
    lists: u32,
    watches: u32,
}

#[derive(Debug, Clone)]
pub struct FakeApi {
    inner: Arc<Mutex<Inner>>,
    events: broadcast::Sender<Broadcast>,
    pub url: String,
}

#[derive(Debug, serde::Deserialize)]
struct ListQuery {
    watch: Option<String>,
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(rename = "labelSelector")]
    label_selector: Option<String>,
    #[serde(rename = "fieldSelector")]
    field_selector: Option<String>,
}

impl FakeApi {
    pub async fn start() -> FakeApi {
        let (events, _) = broadcast::channel(1024);
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let api = FakeApi {
            inner: Arc::new(Mutex::new(Inner {
                rv: 100,
                ..Inner::default()
            })),
            events,
            url,
        };
        let app = Router::new()
            .route("/api/v1/nodes", get(list_or_watch_nodes))
            .route("/api/v1/nodes/{name}", patch(patch_node))
            .route("/api/v1/pods", get(list_or_watch_pods))
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}",
                axum::routing::delete(delete_pod),
            )
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}/eviction",
                post(evict_pod),
            )
            .with_state(api.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.ok();
        });
        api
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a change and tells the open watches.
    fn emit(&self, inner: &mut Inner, kind: Kind, type_: &'static str, mut object: Value) -> Value {
        inner.rv += 1;
        let rv = inner.rv;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        inner.history.push((rv, kind, type_, object.clone()));
        let _ = self.events.send(Broadcast::Event {
            rv,
            kind,
            type_,
            object: object.clone(),
        });
        object
    }

    fn put_node(&self, name: &str, object: Value, type_: &'static str) {
        let mut inner = self.lock();
        let object = self.emit(&mut inner, Kind::Node, type_, object);
        inner.nodes.insert(name.to_string(), object);
    }

    fn put_pod(&self, ns: &str, name: &str, object: Value, type_: &'static str) {
        let mut inner = self.lock();
        let object = self.emit(&mut inner, Kind::Pod, type_, object);
        inner
            .pods
            .insert((ns.to_string(), name.to_string()), object);
    }

    /// A kubelet registers its Node (not Ready yet).
    pub fn register_node(&self, name: &str, provider_id: &str, labels: &[(&str, &str)]) {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": { "name": name, "labels": labels },
            "spec": { "providerID": provider_id },
            "status": { "conditions": [ { "type": "Ready", "status": "False" } ] },
        });
        self.put_node(name, node, "ADDED");
    }

    pub fn set_node_ready(&self, name: &str, ready: bool) {
        let mut node = self.lock().nodes[name].clone();
        node["status"]["conditions"][0]["status"] = json!(if ready { "True" } else { "False" });
        self.put_node(name, node, "MODIFIED");
    }

    /// Someone (a drain, an operator) marks the Node unschedulable.
    pub fn cordon(&self, name: &str) {
        let mut node = self.lock().nodes[name].clone();
        node["spec"]["unschedulable"] = json!(true);
        self.put_node(name, node, "MODIFIED");
    }

    /// Removes a Node without telling any watch: what a client misses while its watch is down
    /// and the history it would resume from has been compacted.
    pub fn delete_node_unseen(&self, name: &str) {
        let mut inner = self.lock();
        inner.rv += 1;
        inner.nodes.remove(name);
    }

    /// A pod scheduled on `node`, Ready or not; `owner` e.g. `Some("DaemonSet")`.
    pub fn add_pod(
        &self,
        ns: &str,
        name: &str,
        node: &str,
        labels: &[(&str, &str)],
        ready: bool,
        owner: Option<&str>,
    ) {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let owners: Vec<Value> = owner
            .map(|kind| json!({ "apiVersion": "apps/v1", "kind": kind, "name": "owner", "uid": "u-1" }))
            .into_iter()
            .collect();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "namespace": ns, "labels": labels, "ownerReferences": owners },
            "spec": { "nodeName": node, "containers": [ { "name": "main" } ] },
            "status": { "phase": "Running", "conditions": [ { "type": "Ready", "status": if ready { "True" } else { "False" } } ] },
        });
        self.put_pod(ns, name, pod, "ADDED");
    }

    /// A pod the scheduler could not place (Pending, PodScheduled False: Unschedulable).
    pub fn add_unschedulable_pod(&self, ns: &str, name: &str, labels: &[(&str, &str)]) {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "namespace": ns, "labels": labels },
            "spec": { "containers": [ { "name": "main" } ], "nodeSelector": { "gpu": "l4" } },
            "status": { "phase": "Pending", "conditions": [ { "type": "PodScheduled", "status": "False", "reason": "Unschedulable" } ] },
        });
        self.put_pod(ns, name, pod, "ADDED");
    }

    /// Gives a pod its IP, as the kubelet reports it once the sandbox runs.
    pub fn set_pod_ip(&self, ns: &str, name: &str, ip: &str) {
        let mut pod = self.lock().pods[&(ns.to_string(), name.to_string())].clone();
        pod["status"]["podIP"] = json!(ip);
        self.put_pod(ns, name, pod, "MODIFIED");
    }

    pub fn set_pod_ready(&self, ns: &str, name: &str, ready: bool) {
        let mut pod = self.lock().pods[&(ns.to_string(), name.to_string())].clone();
        pod["status"]["conditions"][0]["status"] = json!(if ready { "True" } else { "False" });
        self.put_pod(ns, name, pod, "MODIFIED");
    }

    pub fn pod_exists(&self, ns: &str, name: &str) -> bool {
        self.lock()
            .pods
            .contains_key(&(ns.to_string(), name.to_string()))
    }

    pub fn pod_terminating(&self, ns: &str, name: &str) -> bool {
        self.lock()
            .pods
            .get(&(ns.to_string(), name.to_string()))
            .is_some_and(|p| !p["metadata"]["deletionTimestamp"].is_null())
    }

    /// A PodDisruptionBudget forbids (or again allows) evicting this pod.
    pub fn block_eviction(&self, ns: &str, name: &str, blocked: bool) {
        let key = (ns.to_string(), name.to_string());
        let mut inner = self.lock();
        if blocked {
            inner.pdb_blocked.insert(key);
        } else {
            inner.pdb_blocked.remove(&key);
        }
    }

    /// The kubelet finishes every evicted pod: they leave the node.
    pub fn finish_terminating(&self) {
        let gone: Vec<(String, String)> = self
            .lock()
            .pods
            .iter()
            .filter(|(_, p)| !p["metadata"]["deletionTimestamp"].is_null())
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            let mut inner = self.lock();
            if let Some(pod) = inner.pods.remove(&key) {
                self.emit(&mut inner, Kind::Pod, "DELETED", pod);
            }
        }
    }

    /// Ends every open watch (the client re-watches from its last resourceVersion).
    pub fn close_watches(&self) {
        let _ = self.events.send(Broadcast::CloseAll);
    }

    /// Forgets the history: every watch started from now on gets `410 Gone` until its kind is
    /// listed again.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.expired = BTreeSet::from([Kind::Node, Kind::Pod]);
        inner.history.clear();
    }

    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// (lists served, watches started).
    pub fn counts(&self) -> (u32, u32) {
        let inner = self.lock();
        (inner.lists, inner.watches)
    }
}

fn labels_match(object: &Value, selector: Option<&str>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return true;
    };
    selector.split(',').all(|term| match term.split_once('=') {
        Some((k, v)) => object["metadata"]["labels"][k.trim()].as_str() == Some(v.trim()),
        None => false,
    })
}

fn fields_match(object: &Value, selector: Option<&str>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return true;
    };
    selector.split(',').all(|term| match term.split_once('=') {
        Some(("spec.nodeName", v)) => object["spec"]["nodeName"].as_str() == Some(v),
        Some(("metadata.name", v)) => object["metadata"]["name"].as_str() == Some(v),
        _ => false,
    })
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "apiVersion": "v1", "kind": "Status", "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "reason": reason, "message": message, "code": code,
    });
    (
        StatusCode::from_u16(code).unwrap(),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn list_or_watch_nodes(State(api): State<FakeApi>, Query(q): Query<ListQuery>) -> Response {
    list_or_watch(api, Kind::Node, q)
}

async fn list_or_watch_pods(State(api): State<FakeApi>, Query(q): Query<ListQuery>) -> Response {
    list_or_watch(api, Kind::Pod, q)
}

fn list_or_watch(api: FakeApi, kind: Kind, q: ListQuery) -> Response {
    let watching = matches!(q.watch.as_deref(), Some("true" | "1"));
    let matches = {
        let labels = q.label_selector.clone();
        let fields = q.field_selector.clone();
        move |o: &Value| labels_match(o, labels.as_deref()) && fields_match(o, fields.as_deref())
    };
    if !watching {
        let mut inner = api.lock();
        inner.lists += 1;
        inner.expired.remove(&kind);
        let items: Vec<Value> = match kind {
            Kind::Node => inner
                .nodes
                .values()
                .filter(|o| matches(o))
                .cloned()
                .collect(),
            Kind::Pod => inner
                .pods
                .values()
                .filter(|o| matches(o))
                .cloned()
                .collect(),
        };
        let list_kind = if kind == Kind::Node {
            "NodeList"
        } else {
            "PodList"
        };
        let body = json!({
            "apiVersion": "v1", "kind": list_kind,
            "metadata": { "resourceVersion": inner.rv.to_string() },
            "items": items,
        });
        return ([("content-type", "application/json")], body.to_string()).into_response();
    }
    let from: u64 = q
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0);
    // Subscribe before reading the history, so nothing falls between the two.
    let rx = api.events.subscribe();
    let (backlog, gone) = {
        let mut inner = api.lock();
        inner.watches += 1;
        let gone = inner.expired.contains(&kind);
        let backlog: Vec<(u64, &'static str, Value)> = inner
            .history
            .iter()
            .filter(|(rv, k, _, o)| *rv > from && *k == kind && matches(o))
            .map(|(rv, _, t, o)| (*rv, *t, o.clone()))
            .collect();
        (backlog, gone)
    };
    let line = |type_: &str, object: &Value| -> Result<Bytes, std::io::Error> {
        let mut text = json!({ "type": type_, "object": object }).to_string();
        text.push('\n');
        Ok(Bytes::from(text))
    };
    if gone {
        // What an API server answers when the resourceVersion is too old: an ERROR event.
        let expired = json!({
            "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "message": "too old resource version", "reason": "Expired", "code": 410,
        });
        let body = Body::from_stream(futures::stream::iter([line("ERROR", &expired)]));
        return ([("content-type", "application/json")], body).into_response();
    }
    let mut last = from;
    let mut sent = Vec::new();
    for (rv, type_, object) in backlog {
        last = rv;
        sent.push(line(type_, &object));
    }
    let live = futures::stream::unfold((rx, last), move |(mut rx, last)| {
        let matches = matches.clone();
        async move {
            loop {
                match rx.recv().await {
                    Ok(Broadcast::CloseAll) | Err(broadcast::error::RecvError::Closed) => {
                        return None;
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => return None,
                    Ok(Broadcast::Event {
                        rv,
                        kind: k,
                        type_,
                        object,
                    }) => {
                        if rv <= last || k != kind || !matches(&object) {
                            continue;
                        }
                        let mut text = json!({ "type": type_, "object": object }).to_string();
                        text.push('\n');
                        return Some((Ok::<Bytes, std::io::Error>(Bytes::from(text)), (rx, rv)));
                    }
                }
            }
        }
    });
    let body = Body::from_stream(futures::StreamExt::chain(futures::stream::iter(sent), live));
    ([("content-type", "application/json")], body).into_response()
}

async fn patch_node(
    State(api): State<FakeApi>,
    Path(name): Path<String>,
    body: String,
) -> Response {
    let patch: Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(e) => return status(400, "BadRequest", &e.to_string()),
    };
    let Some(mut node) = api.lock().nodes.get(&name).cloned() else {
        return status(404, "NotFound", &format!("nodes \"{name}\" not found"));
    };
    merge(&mut node, &patch);
    api.lock().log.push(format!("PATCH node/{name} {patch}"));
    api.put_node(&name, node.clone(), "MODIFIED");
    let node = api.lock().nodes[&name].clone();
    ([("content-type", "application/json")], node.to_string()).into_response()
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            for (k, v) in fields {
                if v.is_null() {
                    target.as_object_mut().unwrap().remove(k);
                } else {
                    merge(&mut target[k], v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

async fn evict_pod(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let key = (ns.clone(), name.clone());
    let (pod, blocked) = {
        let inner = api.lock();
        (
            inner.pods.get(&key).cloned(),
            inner.pdb_blocked.contains(&key),
        )
    };
    let Some(mut pod) = pod else {
        api.lock().log.push(format!("EVICT {ns}/{name} -> 404"));
        return status(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    if blocked {
        api.lock().log.push(format!("EVICT {ns}/{name} -> 429"));
        return status(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
        );
    }
    api.lock().log.push(format!("EVICT {ns}/{name} -> 201"));
    // Evicted: deleted gracefully; the kubelet removes it later (`finish_terminating`).
    pod["metadata"]["deletionTimestamp"] = json!("2026-11-30T09:00:00Z");
    api.put_pod(&ns, &name, pod, "MODIFIED");
    status(201, "", "")
}

async fn delete_pod(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let mut inner = api.lock();
    inner.log.push(format!("DELETE {ns}/{name}"));
    match inner.pods.remove(&(ns, name.clone())) {
        Some(pod) => {
            let pod = api.emit(&mut inner, Kind::Pod, "DELETED", pod);
            ([("content-type", "application/json")], pod.to_string()).into_response()
        }
        None => status(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}
