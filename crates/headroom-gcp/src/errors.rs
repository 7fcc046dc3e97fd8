//! GCP errors mapped to Headroom's taxonomy. [`classify`] is pure; the two adapters below pull
//! its inputs out of the client's error type and out of a finished operation.

use headroom_cloud::CloudError;
use headroom_core::{ErrorClass, ProviderKind};

/// What is known about one failure: the HTTP status if there was one, and the machine-readable
/// codes GCP gave (`error.errors[].reason` of an HTTP error such as `quotaExceeded`, or
/// `error.errors[].code` of a finished operation such as `ZONE_RESOURCE_POOL_EXHAUSTED`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorFacts {
    pub http_status: Option<u16>,
    pub codes: Vec<String>,
    pub message: String,
}

const CAPACITY_CODES: &[&str] = &[
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "RESOURCE_POOL_EXHAUSTED",
    "INSUFFICIENT_CAPACITY",
    "STOCKOUT",
];

const THROTTLE_CODES: &[&str] = &[
    "RATELIMITEXCEEDED",
    "USERRATELIMITEXCEEDED",
    "RATE_LIMIT_EXCEEDED",
    "RESOURCE_OPERATION_RATE_EXCEEDED",
    "OPERATION_RATE_EXCEEDED",
];

const INVALID_CODES: &[&str] = &[
    "INVALID",
    "BADREQUEST",
    "BAD_REQUEST",
    "INVALID_ARGUMENT",
    "INVALID_FIELD_VALUE",
    "INVALID_PARAMETER",
    "INVALID_USAGE",
    "REQUIRED",
    "FORBIDDEN",
    "PERMISSION_DENIED",
    "INSUFFICIENTPERMISSIONS",
    "ACCESSNOTCONFIGURED",
    "AUTHERROR",
    "UNAUTHORIZED",
    "UNSUPPORTED_OPERATION",
    "CONDITION_NOT_MET",
];

const NOT_FOUND_CODES: &[&str] = &["NOTFOUND", "RESOURCE_NOT_FOUND"];

const TRANSIENT_CODES: &[&str] = &[
    "INTERNAL_ERROR",
    "INTERNALERROR",
    "BACKENDERROR",
    "SERVICE_UNAVAILABLE",
    "UNAVAILABLE",
    "DEADLINE_EXCEEDED",
];

/// Classifies one failure. Codes win over the HTTP status, because GCP sends different classes
/// under one status: 403 is a quota (`quotaExceeded`), a rate limit (`rateLimitExceeded`) or a
/// permission error; a stockout inside an operation can carry a 503.
pub fn classify(facts: &ErrorFacts) -> ErrorClass {
    let codes: Vec<String> = facts.codes.iter().map(|c| c.to_ascii_uppercase()).collect();
    let any = |set: &[&str]| codes.iter().any(|c| set.contains(&c.as_str()));
    if any(CAPACITY_CODES) {
        return ErrorClass::Capacity;
    }
    // QUOTA_EXCEEDED, quotaExceeded, REGION_QUOTA_EXCEEDED, GPUS_QUOTA_EXCEEDED…
    if codes.iter().any(|c| c.contains("QUOTA")) {
        return ErrorClass::Quota;
    }
    if any(THROTTLE_CODES) {
        return ErrorClass::Throttled;
    }
    if any(NOT_FOUND_CODES) {
        return ErrorClass::NotFound;
    }
    if any(INVALID_CODES) {
        return ErrorClass::InvalidRequest;
    }
    if any(TRANSIENT_CODES) {
        return ErrorClass::Transient;
    }
    match facts.http_status {
        Some(429) => ErrorClass::Throttled,
        Some(404) => ErrorClass::NotFound,
        // 400 invalid, 401 credentials, 403 permission (no quota/rate reason), 409/412 conflicts.
        Some(400 | 401 | 403 | 409 | 412) => ErrorClass::InvalidRequest,
        Some(408) => ErrorClass::Transient,
        Some(s) if s >= 500 => ErrorClass::Transient,
        _ => ErrorClass::Unknown,
    }
}

/// Whether GCP said the resource already exists (a repeated insert under the same name).
pub fn already_exists(facts: &ErrorFacts) -> bool {
    facts.codes.iter().any(|c| {
        let c = c.to_ascii_uppercase();
        c == "ALREADYEXISTS" || c == "RESOURCE_ALREADY_EXISTS" || c == "ALREADY_EXISTS"
    }) || (facts.http_status == Some(409) && facts.codes.is_empty())
}

/// The most specific code, for the refusal's `code` (what an operator searches for).
fn primary_code(facts: &ErrorFacts, class: ErrorClass) -> String {
    facts
        .codes
        .first()
        .cloned()
        .or_else(|| facts.http_status.map(|s| format!("HTTP {s}")))
        .unwrap_or_else(|| class.as_str().to_string())
}

/// The classified error.
pub fn to_cloud_error(facts: &ErrorFacts) -> CloudError {
    let class = classify(facts);
    CloudError::Refused {
        provider: ProviderKind::Gcp,
        class,
        code: primary_code(facts, class),
        message: facts.message.clone(),
    }
}

/// Facts from the client's error. A call the client retried until its policy gave up comes back
/// as "retries exhausted" with no status: the last real error is in its `source()` chain.
pub fn facts_from_client(err: &google_cloud_gax::error::Error) -> ErrorFacts {
    if let Some(facts) = direct_facts(err) {
        return facts;
    }
    let mut source = std::error::Error::source(err);
    // The chain is short; the bound keeps a cyclic chain from looping.
    for _ in 0..8 {
        let Some(inner) = source else { break };
        if let Some(gax) = inner.downcast_ref::<google_cloud_gax::error::Error>()
            && let Some(facts) = direct_facts(gax)
        {
            return facts;
        }
        source = inner.source();
    }
    let code = if err.is_timeout() {
        "timeout"
    } else if err.is_exhausted() {
        "retries_exhausted"
    } else if err.is_connect() || err.is_io() || err.is_transport() {
        "connection"
    } else if err.is_authentication() {
        "authentication"
    } else if err.is_binding() || err.is_serialization() {
        "bad_request_binding"
    } else if err.is_deserialization() {
        "unreadable_response"
    } else {
        "unknown"
    };
    let http_status = match code {
        // No status, but the class is clear.
        "timeout" | "retries_exhausted" | "connection" => Some(503),
        "authentication" | "bad_request_binding" => Some(401),
        _ => None,
    };
    ErrorFacts {
        http_status,
        codes: vec![code.to_string()],
        message: err.to_string(),
    }
}

fn direct_facts(err: &google_cloud_gax::error::Error) -> Option<ErrorFacts> {
    let http_status = err.http_status_code();
    // A body the client did not parse into a status (kept raw) may still be a GCP error.
    let parsed = err
        .http_payload()
        .and_then(|p| google_cloud_gax::error::rpc::Status::try_from(p).ok());
    let status = err.status().or(parsed.as_ref());
    if http_status.is_none() && status.is_none() {
        return None;
    }
    let mut codes = Vec::new();
    let mut message = err.to_string();
    if let Some(status) = status {
        message = status.message.clone();
        for detail in &status.details {
            if let google_cloud_gax::error::rpc::StatusDetails::ErrorInfo(info) = detail
                && !info.reason.is_empty()
            {
                codes.push(info.reason.clone());
            }
        }
    }
    Some(ErrorFacts {
        http_status,
        codes,
        message,
    })
}

/// Facts from a finished operation's `error` and `httpErrorStatusCode`; `None` when it succeeded.
pub fn facts_from_operation(op: &google_cloud_compute_v1::model::Operation) -> Option<ErrorFacts> {
    let errors = op
        .error
        .as_ref()
        .map(|e| e.errors.as_slice())
        .unwrap_or(&[]);
    if errors.is_empty() && op.http_error_status_code.is_none() {
        return None;
    }
    let http_status = op
        .http_error_status_code
        .and_then(|s| u16::try_from(s).ok());
    Some(ErrorFacts {
        http_status,
        codes: errors.iter().filter_map(|e| e.code.clone()).collect(),
        message: errors
            .iter()
            .filter_map(|e| e.message.clone())
            .collect::<Vec<_>>()
            .join("; ")
            .chars()
            .take(500)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(http: Option<u16>, codes: &[&str]) -> ErrorClass {
        classify(&ErrorFacts {
            http_status: http,
            codes: codes.iter().map(|c| c.to_string()).collect(),
            message: String::new(),
        })
    }

    #[test]
    fn capacity_codes_in_operations_are_capacity_whatever_the_status() {
        for code in [
            "ZONE_RESOURCE_POOL_EXHAUSTED",
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
            "RESOURCE_POOL_EXHAUSTED",
            "INSUFFICIENT_CAPACITY",
        ] {
            assert_eq!(class(None, &[code]), ErrorClass::Capacity, "{code}");
            // Operations carry httpErrorStatusCode 503 with stockouts: still capacity.
            assert_eq!(class(Some(503), &[code]), ErrorClass::Capacity, "{code}");
        }
    }

    #[test]
    fn quota_codes_are_quota() {
        for code in [
            "QUOTA_EXCEEDED",
            "quotaExceeded",
            "REGION_QUOTA_EXCEEDED",
            "NVIDIA_A100_GPUS_QUOTA_EXCEEDED",
        ] {
            assert_eq!(class(Some(403), &[code]), ErrorClass::Quota, "{code}");
            assert_eq!(class(None, &[code]), ErrorClass::Quota, "{code}");
        }
    }

    #[test]
    fn rate_limits_are_throttled() {
        assert_eq!(
            class(Some(403), &["rateLimitExceeded"]),
            ErrorClass::Throttled
        );
        assert_eq!(
            class(Some(403), &["userRateLimitExceeded"]),
            ErrorClass::Throttled
        );
        assert_eq!(class(Some(429), &[]), ErrorClass::Throttled);
        assert_eq!(class(None, &["RATE_LIMIT_EXCEEDED"]), ErrorClass::Throttled);
    }

    #[test]
    fn permission_and_invalid_are_invalid_request() {
        assert_eq!(class(Some(403), &["forbidden"]), ErrorClass::InvalidRequest);
        assert_eq!(class(Some(403), &[]), ErrorClass::InvalidRequest);
        assert_eq!(class(Some(401), &[]), ErrorClass::InvalidRequest);
        assert_eq!(class(Some(400), &["invalid"]), ErrorClass::InvalidRequest);
        assert_eq!(class(Some(400), &[]), ErrorClass::InvalidRequest);
        assert_eq!(
            class(None, &["PERMISSION_DENIED"]),
            ErrorClass::InvalidRequest
        );
        assert_eq!(
            class(None, &["INVALID_FIELD_VALUE"]),
            ErrorClass::InvalidRequest
        );
    }

    #[test]
    fn server_errors_are_transient_and_the_rest_unknown() {
        for s in [500, 502, 503, 504] {
            assert_eq!(class(Some(s), &[]), ErrorClass::Transient, "{s}");
        }
        assert_eq!(class(Some(500), &["backendError"]), ErrorClass::Transient);
        assert_eq!(class(None, &["INTERNAL_ERROR"]), ErrorClass::Transient);
        assert_eq!(class(Some(404), &["notFound"]), ErrorClass::NotFound);
        assert_eq!(class(None, &["SOMETHING_NEW"]), ErrorClass::Unknown);
        assert_eq!(class(None, &[]), ErrorClass::Unknown);
    }

    #[test]
    fn already_exists_is_recognised_in_both_shapes() {
        let f = |http, code: &str| ErrorFacts {
            http_status: http,
            codes: vec![code.to_string()],
            message: String::new(),
        };
        assert!(already_exists(&f(Some(409), "alreadyExists")));
        assert!(already_exists(&f(None, "RESOURCE_ALREADY_EXISTS")));
        assert!(!already_exists(&f(Some(400), "invalid")));
    }

    #[test]
    fn operation_errors_are_read_from_the_operation() {
        use google_cloud_compute_v1::model::Operation;
        use google_cloud_compute_v1::model::operation::Error;
        use google_cloud_compute_v1::model::operation::error::Errors;
        let mut op = Operation::default();
        assert_eq!(facts_from_operation(&op), None);
        let mut e = Errors::default();
        e.code = Some("ZONE_RESOURCE_POOL_EXHAUSTED".into());
        e.message = Some("no a2 left".into());
        let mut err = Error::default();
        err.errors = vec![e];
        op.error = Some(err);
        op.http_error_status_code = Some(503);
        let facts = facts_from_operation(&op).unwrap();
        assert_eq!(classify(&facts), ErrorClass::Capacity);
        let cloud = to_cloud_error(&facts);
        assert_eq!(cloud.code(), "ZONE_RESOURCE_POOL_EXHAUSTED");
    }

    #[test]
    fn client_errors_without_status_are_transient() {
        let e = google_cloud_gax::error::Error::timeout("slow");
        assert_eq!(classify(&facts_from_client(&e)), ErrorClass::Transient);
        let inner = google_cloud_gax::error::Error::http(
            503,
            Default::default(),
            bytes::Bytes::from_static(b"unavailable"),
        );
        let e = google_cloud_gax::error::Error::exhausted(inner);
        let facts = facts_from_client(&e);
        assert_eq!(facts.http_status, Some(503), "{facts:?}");
        assert_eq!(classify(&facts), ErrorClass::Transient);
        let quota = google_cloud_gax::error::Error::http(
            403,
            Default::default(),
            bytes::Bytes::from_static(
                br#"{"error":{"code":403,"message":"Quota 'GPUS' exceeded","errors":[{"message":"Quota 'GPUS' exceeded","domain":"usageLimits","reason":"quotaExceeded"}]}}"#,
            ),
        );
        // The raw payload of an unparsed error is read too.
        let e = google_cloud_gax::error::Error::exhausted(quota);
        assert_eq!(classify(&facts_from_client(&e)), ErrorClass::Quota);
    }
}
