//! The `instances` routes: insert, get, list, delete, the verbs, and the preemption control.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::failures::{
    Call, failing_get, failure, fault_reply, invalid, not_found, quota_exceeded,
};
use super::filter::{last_segment, matches_filter, parse_filter, valid_label, valid_name};
use super::operations::{check_request_id, new_operation, record_operation, replayed};
use super::{API, ComputeServer, Reply, regions};

pub(super) async fn insert(
    State(server): State<ComputeServer>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    body: Option<Json<Value>>,
) -> Reply {
    let now = server.now();
    let mut st = server.state();
    st.calls.push(format!("POST /zones/{zone}/instances"));
    let request_id = check_request_id(&q)?;
    if let Some(op) = replayed(&st, request_id.as_deref()) {
        return Ok(Json(op));
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

pub(super) async fn get_instance(
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

pub(super) async fn list_instances(
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

pub(super) async fn delete_instance(
    State(server): State<ComputeServer>,
    Path((project, zone, name)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let now = server.now();
    let mut st = server.state();
    st.calls
        .push(format!("DELETE /zones/{zone}/instances/{name}"));
    let request_id = check_request_id(&q)?;
    if let Some(op) = replayed(&st, request_id.as_deref()) {
        return Ok(Json(op));
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

pub(super) async fn verb(
    State(server): State<ComputeServer>,
    Path((project, zone, name, verb)): Path<(String, String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let now = server.now();
    let mut st = server.state();
    st.calls
        .push(format!("POST /zones/{zone}/instances/{name}/{verb}"));
    let request_id = check_request_id(&q)?;
    if let Some(op) = replayed(&st, request_id.as_deref()) {
        return Ok(Json(op));
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

pub(super) async fn control_preempt(
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
