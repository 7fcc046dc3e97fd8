//! EC2 error codes → the cloud error taxonomy, as a pure function of the code and where it came
//! from. EC2 reports the same code in two shapes: as a failed API call (real EC2 answers capacity
//! errors with a 5xx status, moto with 400) and as a per-instance entry in an instant
//! CreateFleet's `Errors[]`, where the call itself succeeds. The Auto Scaling API (group mode)
//! has codes of its own, classified here too: its calls fail as API calls only.

use headroom_core::ErrorClass;

/// Where an error code was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSource {
    /// A failed API call, with its HTTP status when there was a response.
    Api { status: Option<u16> },
    /// One entry of a CreateFleet (type `instant`) response's `Errors[]`.
    FleetInstance,
}

/// Classifies an EC2 error code. The code decides when it is known; an unknown code falls back to
/// the HTTP status (5xx transient, 429 throttled), and otherwise to `Unknown` (alert, no retry).
pub fn classify(code: &str, source: ErrorSource) -> ErrorClass {
    match code {
        "InsufficientInstanceCapacity"
        | "InsufficientHostCapacity"
        | "InsufficientReservedInstanceCapacity"
        | "InsufficientCapacity"
        | "InsufficientCapacityOnHost"
        | "UnfulfillableCapacity"
        | "ReservationCapacityExceeded"
        | "SpotCapacityNotAvailable"
        | "capacity-not-available" => ErrorClass::Capacity,
        "MaxSpotInstanceCountExceeded"
        | "VcpuLimitExceeded"
        | "InstanceLimitExceeded"
        | "MaxSpotFleetRequestCountExceeded"
        | "ResourceLimitExceeded"
        // Auto Scaling: too many groups, launch configurations or warm pools in the account.
        | "LimitExceeded" => ErrorClass::Quota,
        "SpotMaxPriceTooLow" | "price-too-low" => ErrorClass::Price,
        "RequestLimitExceeded"
        | "Throttling"
        | "ThrottlingException"
        | "RequestThrottled"
        | "RequestThrottledException"
        | "TooManyRequestsException"
        | "SlowDown"
        // Auto Scaling: another activity (a scale-out, an instance refresh) holds the group, or
        // another caller changed it at the same moment; both pass within seconds.
        | "ScalingActivityInProgress"
        | "ResourceContention" => ErrorClass::Throttled,
        "InternalError" | "InternalFailure" | "ServiceUnavailable" | "Unavailable"
        | "RequestTimeout" | "RequestExpired" => ErrorClass::Transient,
        // Auto Scaling: the group is being changed (ResourceInUse) or refreshed; try next tick.
        "ResourceInUse" | "InstanceRefreshInProgress" => ErrorClass::Transient,
        // The instance is between states (stopping, pending): the next activation tries again.
        "IncorrectInstanceState" | "IncorrectState" => ErrorClass::Transient,
        "InvalidInstanceID.NotFound" | "InvalidInstanceID.Malformed" => ErrorClass::NotFound,
        "UnauthorizedOperation"
        | "AuthFailure"
        | "Blocked"
        | "OptInRequired"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch"
        | "MissingParameter"
        | "MissingAuthenticationToken"
        | "UnsupportedOperation"
        | "Unsupported"
        | "IdempotentParameterMismatch"
        | "DryRunOperation"
        // Auto Scaling (query protocol): a parameter our request got wrong (desired above the
        // group's max, a group that does not exist), or missing permissions.
        | "ValidationError"
        | "AccessDenied"
        | "AccessDeniedException"
        | "ServiceLinkedRoleFailure"
        | "AlreadyExists" => ErrorClass::InvalidRequest,
        // InvalidParameter, InvalidParameterValue, InvalidParameterCombination, InvalidAMIID.*,
        // InvalidLaunchTemplateName.*, InvalidSubnetID.*: all our request's fault.
        c if c.starts_with("Invalid") => ErrorClass::InvalidRequest,
        _ => match source {
            ErrorSource::Api { status: Some(429) } => ErrorClass::Throttled,
            ErrorSource::Api {
                status: Some(500..=599),
            } => ErrorClass::Transient,
            _ => ErrorClass::Unknown,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPES: [ErrorSource; 4] = [
        ErrorSource::Api { status: Some(400) },
        ErrorSource::Api { status: Some(500) },
        ErrorSource::Api { status: Some(503) },
        ErrorSource::FleetInstance,
    ];

    fn each_shape(code: &str, want: ErrorClass) {
        for source in SHAPES {
            assert_eq!(classify(code, source), want, "{code} from {source:?}");
        }
    }

    #[test]
    fn capacity_codes_are_capacity_in_every_shape() {
        for code in [
            "InsufficientInstanceCapacity",
            "InsufficientHostCapacity",
            "InsufficientReservedInstanceCapacity",
            "InsufficientCapacity",
            "UnfulfillableCapacity",
            "ReservationCapacityExceeded",
        ] {
            each_shape(code, ErrorClass::Capacity);
        }
    }

    #[test]
    fn quota_codes_are_quota_in_every_shape() {
        for code in [
            "MaxSpotInstanceCountExceeded",
            "VcpuLimitExceeded",
            "InstanceLimitExceeded",
        ] {
            each_shape(code, ErrorClass::Quota);
        }
    }

    #[test]
    fn spot_price_is_price() {
        each_shape("SpotMaxPriceTooLow", ErrorClass::Price);
    }

    #[test]
    fn throttling_is_throttled() {
        for code in ["RequestLimitExceeded", "Throttling", "ThrottlingException"] {
            each_shape(code, ErrorClass::Throttled);
        }
        assert_eq!(
            classify("SomethingNew", ErrorSource::Api { status: Some(429) }),
            ErrorClass::Throttled
        );
    }

    #[test]
    fn permissions_and_bad_parameters_are_invalid_requests() {
        for code in [
            "UnauthorizedOperation",
            "AuthFailure",
            "InvalidParameter",
            "InvalidParameterValue",
            "InvalidParameterCombination",
            "InvalidAMIID.NotFound",
            "InvalidLaunchTemplateName.NotFoundException",
            "MissingParameter",
        ] {
            each_shape(code, ErrorClass::InvalidRequest);
        }
    }

    #[test]
    fn auto_scaling_codes_are_classified() {
        for (code, class) in [
            ("ScalingActivityInProgress", ErrorClass::Throttled),
            ("ResourceContention", ErrorClass::Throttled),
            ("LimitExceeded", ErrorClass::Quota),
            ("ValidationError", ErrorClass::InvalidRequest),
            ("AccessDenied", ErrorClass::InvalidRequest),
            ("ServiceLinkedRoleFailure", ErrorClass::InvalidRequest),
            ("ResourceInUse", ErrorClass::Transient),
            ("InstanceRefreshInProgress", ErrorClass::Transient),
        ] {
            for status in [400, 403, 500] {
                let source = ErrorSource::Api {
                    status: Some(status),
                };
                assert_eq!(classify(code, source), class, "{code} with {status}");
            }
        }
    }

    #[test]
    fn unknown_instances_are_not_found() {
        each_shape("InvalidInstanceID.NotFound", ErrorClass::NotFound);
    }

    #[test]
    fn unknown_codes_follow_the_status_and_are_never_silently_retried_otherwise() {
        assert_eq!(
            classify("Brand.New", ErrorSource::Api { status: Some(500) }),
            ErrorClass::Transient
        );
        assert_eq!(
            classify("", ErrorSource::Api { status: Some(502) }),
            ErrorClass::Transient
        );
        assert_eq!(
            classify("Brand.New", ErrorSource::Api { status: Some(400) }),
            ErrorClass::Unknown
        );
        assert_eq!(
            classify("Brand.New", ErrorSource::FleetInstance),
            ErrorClass::Unknown
        );
        assert_eq!(
            classify("InternalError", ErrorSource::FleetInstance),
            ErrorClass::Transient
        );
    }
}
