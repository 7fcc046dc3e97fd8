//! Unit tests of the instance phase mapping and the interruption warning parser.

use std::time::Duration;

use headroom_cloud::{InstanceId, InstancePhase};
use headroom_core::LadderRung;

use super::{SPOT_TERMINATION, phase_of, warned_instance};

const READY_AFTER: Duration = Duration::from_secs(60);

fn phase(state: &str, reason: Option<&str>, secs: u64) -> InstancePhase {
    phase_of(state, reason, Duration::from_secs(secs), READY_AFTER)
}

#[test]
fn ec2_states_map_to_phases() {
    assert_eq!(phase("pending", None, 0), InstancePhase::Pending);
    assert_eq!(
        phase("running", None, 10),
        InstancePhase::Booting(LadderRung::NodeAcquisition)
    );
    assert_eq!(phase("running", None, 60), InstancePhase::Ready);
    assert_eq!(phase("stopping", None, 0), InstancePhase::Stopped);
    assert_eq!(
        phase("stopped", Some("Client.UserInitiatedShutdown"), 0),
        InstancePhase::Stopped
    );
    assert_eq!(phase("shutting-down", None, 0), InstancePhase::Terminated);
    assert_eq!(
        phase("terminated", Some("Client.UserInitiatedShutdown"), 0),
        InstancePhase::Terminated
    );
}

#[test]
fn the_spot_reason_is_an_interruption_whether_terminated_or_stopped() {
    for state in ["shutting-down", "terminated", "stopping", "stopped"] {
        assert_eq!(
            phase(state, Some(SPOT_TERMINATION), 0),
            InstancePhase::Interrupted,
            "{state}"
        );
    }
}

#[test]
fn an_interruption_warning_names_its_instance() {
    let warning = r#"{"version": "0", "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2", "region": "us-east-1",
        "detail": {"instance-id": "i-1234567890abcdef0", "instance-action": "terminate"}}"#;
    assert_eq!(
        warned_instance(warning),
        Some(InstanceId("i-1234567890abcdef0".to_string()))
    );
    let other = warning.replace(
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance State-change Notification",
    );
    assert_eq!(warned_instance(&other), None);
    assert_eq!(warned_instance("not json"), None);
}

#[test]
fn with_no_wait_a_running_instance_is_ready_at_once() {
    assert_eq!(
        phase_of("running", None, Duration::ZERO, Duration::ZERO),
        InstancePhase::Ready
    );
}
