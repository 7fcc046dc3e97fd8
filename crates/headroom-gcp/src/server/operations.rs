//! Zone operations: making and storing them, `requestId`s, and `zoneOperations` get, wait and list.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::failures::{ApiFailure, failing_get, failure, invalid};
use super::filter::{matches_filter, parse_filter};
use super::{API, ComputeServer, PREEMPTED, Reply, ServerState};

pub(super) fn new_operation(
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
pub(super) fn record_operation(st: &mut ServerState, op: Value, request_id: Option<&str>) -> Value {
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

/// The operation a call with `request_id` already made, if one did: GCE answers a retried
/// `requestId` with that operation instead of acting twice.
pub(super) fn replayed(st: &ServerState, request_id: Option<&str>) -> Option<Value> {
    let name = st.requests.get(request_id?)?;
    st.operations.get(name).map(|(op, _)| op.clone())
}

pub(super) fn check_request_id(q: &HashMap<String, String>) -> Result<Option<String>, ApiFailure> {
    match q.get("requestId") {
        None => Ok(None),
        Some(r) if uuid::Uuid::parse_str(r).is_ok() && r.len() == 36 => Ok(Some(r.clone())),
        Some(r) => Err(invalid(format!(
            "Invalid value for field 'requestId': '{r}'. The request id must be a valid UUID."
        ))),
    }
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

pub(super) async fn get_operation(
    State(server): State<ComputeServer>,
    Path((project, zone, op)): Path<(String, String, String)>,
) -> Reply {
    let mut st = server.state();
    st.calls.push(format!("GET /zones/{zone}/operations/{op}"));
    failing_get(&mut st)?;
    poll(&mut st, &project, &zone, &op)
}

pub(super) async fn wait_operation(
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

pub(super) async fn list_operations(
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
