use super::*;

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[test]
fn statuses_map_to_phases() {
    let now = t("2026-11-30T10:00:00Z");
    let times = Times {
        created: Some(t("2026-11-30T09:00:00Z")),
        last_start: Some(t("2026-11-30T09:00:00Z")),
        ..Times::default()
    };
    let p = |s, pre| phase_of(s, pre, times, now, Duration::ZERO);
    assert_eq!(p("PROVISIONING", false), InstancePhase::Pending);
    assert_eq!(p("STAGING", false), InstancePhase::Pending);
    assert_eq!(p("RUNNING", false), InstancePhase::Ready);
    for s in [
        "STOPPING",
        "TERMINATED",
        "STOPPED",
        "SUSPENDING",
        "SUSPENDED",
    ] {
        assert_eq!(p(s, false), InstancePhase::Stopped, "{s}");
    }
    assert_eq!(p("TERMINATED", true), InstancePhase::Interrupted);
    assert_eq!(p("DEPROVISIONING", false), InstancePhase::Terminated);
}

#[test]
fn running_is_booting_until_ready_after_with_the_rung_it_skips_to() {
    let ready_after = Duration::from_secs(300);
    let fresh = Times {
        created: Some(t("2026-11-30T09:58:00Z")),
        last_start: Some(t("2026-11-30T09:58:00Z")),
        ..Times::default()
    };
    let now = t("2026-11-30T10:00:00Z");
    assert_eq!(
        phase_of("RUNNING", false, fresh, now, ready_after),
        InstancePhase::Booting(LadderRung::ImagePull)
    );
    let restarted = Times {
        last_stop: Some(t("2026-11-30T09:30:00Z")),
        ..fresh
    };
    assert_eq!(
        phase_of("RUNNING", false, restarted, now, ready_after),
        InstancePhase::Booting(LadderRung::WeightLoad)
    );
    let resumed = Times {
        last_suspended: Some(t("2026-11-30T09:40:00Z")),
        ..restarted
    };
    // Suspend kept memory: weight load is skipped.
    assert_eq!(
        phase_of("RUNNING", false, resumed, now, ready_after),
        InstancePhase::Booting(LadderRung::Compile)
    );
    assert_eq!(
        phase_of(
            "RUNNING",
            false,
            fresh,
            t("2026-11-30T10:03:00Z"),
            ready_after
        ),
        InstancePhase::Ready
    );
}
