//! Error replies in the Compute API's shape, and the replies injected faults and quotas make.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::filter::last_segment;
use super::operations::{new_operation, record_operation};
use super::{FaultKind, Reply, ServerState};

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

pub(super) fn failure(status: StatusCode, reason: &'static str, message: String) -> ApiFailure {
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

pub(super) fn invalid(message: String) -> ApiFailure {
    failure(StatusCode::BAD_REQUEST, "invalid", message)
}

/// Where a call is aimed, for the replies it builds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Call<'a> {
    pub(super) project: &'a str,
    pub(super) zone: &'a str,
    pub(super) now: &'a str,
    pub(super) request_id: Option<&'a str>,
}

/// The call's operation, ending with `QUOTA_EXCEEDED` (HTTP 403) and `message`, as GCE ends an
/// insert, start or resume past a regional quota.
pub(super) fn quota_exceeded(
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

pub(super) fn fault_reply(
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

/// Consumes one injected GET failure, if any is left.
pub(super) fn failing_get(st: &mut ServerState) -> Result<(), ApiFailure> {
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

pub(super) fn not_found(project: &str, zone: &str, name: &str) -> ApiFailure {
    failure(
        StatusCode::NOT_FOUND,
        "notFound",
        format!("The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found"),
    )
}
