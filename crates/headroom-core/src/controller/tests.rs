use super::*;
use crate::pool::ColdStartLadder;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn t0() -> Timestamp {
    at("2026-11-30T09:00:00Z")
}

fn secs(n: i64) -> Timestamp {
    t0() + chrono::Duration::seconds(n)
}

fn pool(min: u32, max: u32, scaling: ScalingPolicy) -> PoolSpec {
    PoolSpec {
        name: "p".parse().unwrap(),
        account: "a".parse().unwrap(),
        offerings: vec![],
        min_replicas: min,
        max_replicas: max,
        max_scale_up_per_step: 100,
        warm_pool_size: 0,
        ladder: ColdStartLadder {
            node_acquisition: Duration::from_secs(60),
            image_pull: Duration::from_secs(30),
            weight_load: Duration::from_secs(60),
            compile: Duration::from_secs(30),
            warmup: Duration::from_secs(10),
        },
        scaling,
        supply: crate::pool::SupplyPolicy::default(),
    }
}

/// The defaults, with arrivals served at full throughput (the worked numbers' arithmetic).
fn base() -> ScalingPolicy {
    ScalingPolicy {
        target_utilization: 1.0,
        ..ScalingPolicy::default()
    }
}

/// Immediate policy: one breach scales up, no direction cooldown.
fn quick(policy: ScalingPolicy) -> ScalingPolicy {
    ScalingPolicy {
        scale_up_breaches: 1,
        direction_cooldown: Duration::ZERO,
        ..policy
    }
}

fn ready(n: u32) -> ReplicaCounts {
    ReplicaCounts {
        ready: n,
        ..ReplicaCounts::default()
    }
}

fn memory(target: u32) -> ControllerMemory {
    ControllerMemory {
        target,
        ..ControllerMemory::default()
    }
}

/// Seed 000: 8 workers at 2.5 req/s serve 20 req/s; a 30 s burst at 32 req/s leaves 360
/// queued; draining it within 60 s needs three more workers, so eleven — when a new worker can
/// serve within those 60 s. With seed 000's 90 s cold start it cannot: the controller buys what
/// drains the backlog by the time one could serve, two more, and says so.
#[test]
fn seed_000_backlog_needs_three_more_workers() {
    assert_eq!(drain_rule(20.0, 360.0, Duration::from_secs(60), 2.5) - 8, 3);
    let ladder = |cold_s: u64| ColdStartLadder {
        node_acquisition: Duration::from_secs(cold_s - 30),
        image_pull: Duration::from_secs(10),
        weight_load: Duration::from_secs(10),
        compile: Duration::from_secs(5),
        warmup: Duration::from_secs(5),
    };
    let decide_with = |cold_s: u64| {
        let mut p = pool(
            1,
            50,
            quick(ScalingPolicy {
                replica_throughput_rps: 2.5,
                ..base()
            }),
        );
        p.ladder = ladder(cold_s);
        decide(
            &p,
            Some(&Signals::queue(360, 20.0, t0())),
            ready(8),
            memory(8),
            t0(),
        )
    };
    let quick_ladder = decide_with(60);
    assert_eq!(
        (quick_ladder.target, quick_ladder.rule),
        (11, Rule::BacklogDrain)
    );
    let seed_000 = decide_with(90);
    assert_eq!((seed_000.target, seed_000.rule), (10, Rule::BacklogDrain));
    assert!(
        seed_000.reason.contains("a new replica serves in 90s"),
        "{}",
        seed_000.reason
    );
}

/// Seed 004 (the HPA notes): 4 replicas averaging 8 waiting against a target of 4 → 8;
/// against 1 → 32; a metric of 1.1 against 1 → no change (tolerance 0.1).
#[test]
fn hpa_rule_reproduces_the_worked_numbers() {
    assert_eq!(hpa_rule(4, 8.0, 4.0, 0.1), 8);
    assert_eq!(hpa_rule(4, 8.0, 1.0, 0.1), 32);
    assert_eq!(hpa_rule(4, 1.1, 1.0, 0.1), 4);
    let hpa = |target| {
        let p = pool(
            1,
            100,
            quick(ScalingPolicy {
                target_queue_per_replica: Some(target),
                ..base()
            }),
        );
        let s = Signals {
            arrival_rate_rps: None,
            ..Signals::queue(32, 0.0, t0())
        };
        decide(&p, Some(&s), ready(4), memory(4), t0())
    };
    assert_eq!((hpa(4.0).target, hpa(4.0).rule), (8, Rule::Hpa));
    assert_eq!(hpa(1.0).target, 32);
}

#[test]
fn starting_replicas_count_as_capacity_on_the_way() {
    // 4 ready with 8 waiting each against 4: the rule wants 8. Four more are already
    // starting (target 8): nothing new is asked for.
    let p = pool(
        1,
        100,
        quick(ScalingPolicy {
            target_queue_per_replica: Some(4.0),
            ..base()
        }),
    );
    let s = Signals {
        arrival_rate_rps: None,
        ..Signals::queue(32, 0.0, t0())
    };
    let counts = ReplicaCounts {
        starting: 4,
        ready: 4,
        ..ReplicaCounts::default()
    };
    let d = decide(&p, Some(&s), counts, memory(8), t0());
    assert_eq!((d.target, d.rule), (8, Rule::Steady));
}

#[test]
fn missing_or_stale_signals_hold_the_pool() {
    let p = pool(1, 50, ScalingPolicy::default());
    let missing = decide(&p, None, ready(8), memory(8), t0());
    assert_eq!(
        (missing.target, missing.scaling_hold),
        (8, Some(ScalingHold::SignalMissing))
    );
    let old = Signals::queue(10_000, 500.0, secs(-60));
    let stale = decide(&p, Some(&old), ready(8), memory(8), t0());
    assert_eq!(
        (stale.target, stale.scaling_hold),
        (8, Some(ScalingHold::SignalStale))
    );
    // Also never down: an idle but stale signal keeps 8.
    let idle = Signals::queue(0, 0.0, secs(-60));
    assert_eq!(decide(&p, Some(&idle), ready(8), memory(8), t0()).target, 8);
}

#[test]
fn scale_up_waits_for_two_breaching_windows() {
    let p = pool(
        1,
        50,
        ScalingPolicy {
            replica_throughput_rps: 10.0,
            ..base()
        },
    );
    let burst = |t| Signals::queue(40, 200.0, t);
    let first = decide(&p, Some(&burst(t0())), ready(8), memory(8), t0());
    assert_eq!(
        (first.target, first.limited),
        (8, Some(Limit::BreachWindow))
    );
    let early = decide(&p, Some(&burst(secs(5))), ready(8), first.memory, secs(5));
    assert_eq!(early.target, 8, "still inside the first window");
    let second = decide(&p, Some(&burst(secs(15))), ready(8), early.memory, secs(15));
    assert_eq!((second.target, second.rule), (21, Rule::BacklogDrain));
}

/// A buffer is spare ready capacity above what the rules want, as pause pods are under
/// Karpenter: a pool at its floor runs the floor plus the buffer, a pool in a rise the rise plus
/// the buffer (within `max_replicas`), and scale-in keeps it. It is not demand: the rules'
/// proposals, which size the warm pool and shedding, do not include it. An idle pool without a
/// floor stays at zero.
#[test]
fn a_buffer_keeps_spare_replicas_ready_above_demand_but_not_on_an_idle_pool() {
    let policy = ScalingPolicy {
        replica_throughput_rps: 10.0,
        buffer_replicas: 2,
        ..quick(base())
    };
    let p = pool(8, 16, policy);
    let calm = |t| Signals::queue(0, 40.0, t);
    let at_floor = decide(&p, Some(&calm(t0())), ready(8), memory(8), t0());
    assert_eq!(at_floor.target, 10, "{}", at_floor.reason);
    assert!(
        at_floor.reason.contains("plus a buffer of 2"),
        "{}",
        at_floor.reason
    );
    assert_eq!(at_floor.unclamped, 8, "the rules asked for the floor");
    let demand = at_floor.proposals.iter().map(|p| p.replicas).max();
    assert_eq!(demand, Some(8), "proposals are demand, without the buffer");
    // A rise to 120 req/s wants 12: the pool runs 14.
    let rise = decide(
        &p,
        Some(&Signals::queue(0, 120.0, secs(10))),
        ready(10),
        at_floor.memory,
        secs(10),
    );
    assert_eq!(rise.target, 14, "{}", rise.reason);
    // A rise past the pool's bounds: the buffer is clamped, the rules are not limited by it.
    let big = decide(
        &p,
        Some(&Signals::queue(0, 150.0, secs(20))),
        ready(14),
        rise.memory,
        secs(20),
    );
    assert_eq!((big.target, big.limited), (16, None), "{}", big.reason);
    // Back to calm: scale-in stops at the floor plus the buffer, never below.
    let (mut remembered, mut target) = (big.memory, big.target);
    for t in (30..=1800).step_by(10) {
        let d = decide(&p, Some(&calm(secs(t))), ready(target), remembered, secs(t));
        (remembered, target) = (d.memory, d.target);
    }
    assert_eq!(target, 10);
    // Without a floor and without demand, no buffer: the pool scales to zero.
    let to_zero = pool(0, 16, policy);
    let idle = decide(
        &to_zero,
        Some(&Signals::queue(0, 0.0, t0())),
        ready(0),
        memory(0),
        t0(),
    );
    assert_eq!(idle.target, 0, "{}", idle.reason);
    // Without a buffer the same pool runs its floor.
    let plain = pool(
        8,
        16,
        ScalingPolicy {
            buffer_replicas: 0,
            ..policy
        },
    );
    let d = decide(&plain, Some(&calm(t0())), ready(8), memory(8), t0());
    assert_eq!(d.target, 8, "{}", d.reason);
}

/// At zero replicas nothing serves while breach windows run or a scale-down cools down: the
/// first request brings the first replica at once; the rest waits for the windows as usual.
#[test]
fn a_pool_at_zero_gets_its_first_replica_at_once() {
    let p = pool(
        0,
        10,
        ScalingPolicy {
            replica_throughput_rps: 10.0,
            ..base()
        },
    );
    let one = |t| Signals::queue(1, 0.5, t);
    let first = decide(&p, Some(&one(t0())), ready(0), memory(0), t0());
    assert_eq!(first.target, 1, "{}", first.reason);
    assert_eq!(first.limited, Some(Limit::BreachWindow));
    // Just after scaling in to zero, inside the direction cooldown, a request still wakes one.
    let scaled_in = ControllerMemory {
        last_change: Some((t0(), Direction::Down)),
        ..memory(0)
    };
    let soon = decide(&p, Some(&one(secs(5))), ready(0), scaled_in, secs(5));
    assert_eq!(soon.target, 1, "{}", soon.reason);
    // A burst from zero: one at once, the rest after the breaching windows.
    let burst = |t| Signals::queue(40, 200.0, t);
    let b1 = decide(&p, Some(&burst(t0())), ready(0), memory(0), t0());
    assert_eq!(b1.target, 1);
    let b2 = decide(
        &p,
        Some(&burst(secs(15))),
        ReplicaCounts {
            starting: 1,
            ..ready(0)
        },
        b1.memory,
        secs(15),
    );
    assert!(b2.target > 1, "{}", b2.reason);
    // A pool with a floor is not affected: it is never at zero.
    let floored = pool(2, 10, p.scaling);
    let f = decide(&floored, Some(&burst(t0())), ready(2), memory(2), t0());
    assert_eq!(f.target, 2, "{}", f.reason);
}

/// Replicas of 10 req/s, at most two added a minute.
fn two_per_minute() -> PoolSpec {
    pool(
        1,
        50,
        quick(ScalingPolicy {
            replica_throughput_rps: 10.0,
            scale_up_limit: 2,
            scale_up_period: Duration::from_secs(60),
            ..base()
        }),
    )
}

#[test]
fn a_two_per_minute_limit_is_respected() {
    let p = two_per_minute();
    let mut m = memory(8);
    let mut targets = vec![];
    for t in [0, 10, 20, 59, 60, 61, 121] {
        let d = decide(
            &p,
            Some(&Signals::queue(40, 200.0, secs(t))),
            ready(8),
            m,
            secs(t),
        );
        targets.push(d.target);
        m = d.memory;
    }
    assert_eq!(targets, [10, 10, 10, 10, 12, 12, 14]);
}

/// The period's limit paces buying, not the pool's own parked nodes when the objective is at
/// risk: 40 queued and 200 req/s against 8 ready serving 80 brings the limit's 2 and the 5
/// parked nodes at once. Without the risk (an empty queue, arrivals that want ten replicas)
/// the limit holds whatever is parked.
#[test]
fn parked_nodes_come_back_past_the_period_limit_only_when_the_objective_is_at_risk() {
    let p = two_per_minute();
    let parked = ReplicaCounts {
        warm: 5,
        ..ready(8)
    };
    let at_risk = decide(
        &p,
        Some(&Signals::queue(40, 200.0, secs(0))),
        parked,
        memory(8),
        secs(0),
    );
    assert_eq!(at_risk.target, 15, "{}", at_risk.reason);
    let calm = decide(
        &p,
        Some(&Signals::queue(0, 99.0, secs(0))),
        ReplicaCounts {
            warm: 5,
            ..ready(6)
        },
        memory(6),
        secs(0),
    );
    assert_eq!(calm.target, 8, "{}", calm.reason);
    assert_eq!(calm.limited, Some(Limit::ScaleUpPeriod));
}

/// Twenty replicas, demand for three (27 req/s at 10 each, more than the 10 % margin below the
/// boundary of four) on a floor of two: the level is three. The pool's ladder climbs 190 s cold,
/// 100 s from the disk.
fn scale_in_run(parkable: u32, stabilization_s: u64) -> Vec<(i64, Decision)> {
    scale_in_run_with(parkable, stabilization_s, false)
}

fn scale_in_run_with(
    parkable: u32,
    stabilization_s: u64,
    supply_refused: bool,
) -> Vec<(i64, Decision)> {
    let p = pool(
        2,
        50,
        quick(ScalingPolicy {
            replica_throughput_rps: 10.0,
            scale_down_stabilization: Duration::from_secs(stabilization_s),
            scale_down_margin: 0.1,
            ..base()
        }),
    );
    let mut m = memory(20);
    let mut out = Vec::new();
    for t in (0..=300).step_by(30) {
        // The warm pool's room shrinks by what has been parked already (it goes first).
        let counts = ReplicaCounts {
            parkable: parkable.saturating_sub(20 - m.target),
            supply_refused,
            ..ready(m.target)
        };
        let d = decide(
            &p,
            Some(&Signals::queue(0, 27.0, secs(t))),
            counts,
            m,
            secs(t),
        );
        m = d.memory.clone();
        out.push((t, d));
    }
    out
}

fn targets(run: &[(i64, Decision)]) -> Vec<(i64, u32)> {
    run.iter().map(|(t, d)| (*t, d.target)).collect()
}

#[test]
fn scale_in_waits_a_cold_start_then_releases_the_whole_surplus() {
    let run = scale_in_run(0, 600);
    let t = targets(&run);
    assert!(
        t.iter().filter(|(at, _)| *at < 190).all(|(_, n)| *n == 20),
        "{t:?}"
    );
    assert_eq!(
        t[7],
        (210, 3),
        "down to demand plus the margin in one step: {t:?}"
    );
    assert!(t[7..].iter().all(|(_, n)| *n == 3));
    // While it waits, the decision says what the wait keeps idle and for how long.
    let waiting = &run[3].1;
    assert_eq!((waiting.rule, waiting.idle_replicas), (Rule::Steady, 17));
    assert!(
        waiting.reason.contains("released after 190s"),
        "{}",
        waiting.reason
    );
}

#[test]
fn surplus_the_warm_pool_can_take_is_parked_after_a_wake_and_the_rest_released_later() {
    let t = targets(&scale_in_run(4, 600));
    assert_eq!(t[3], (90, 20));
    assert_eq!(
        t[4],
        (120, 16),
        "four parked once a wake's worth (100 s) has passed: {t:?}"
    );
    assert_eq!(t[7], (210, 3), "the rest after a cold start's worth: {t:?}");
}

#[test]
fn surplus_the_cloud_refuses_to_replace_is_kept_for_the_whole_window() {
    // The same surplus, but every offering of the pool was refused since its last launch: the
    // four the warm pool takes are parked after a wake's worth as usual, the rest is not
    // released after a cold start's worth (it could not be bought back) but after the window.
    let run = scale_in_run_with(4, 240, true);
    let t = targets(&run);
    assert_eq!(t[4], (120, 16), "parked as usual: {t:?}");
    assert!(
        t.iter()
            .filter(|(at, _)| (120..240).contains(at))
            .all(|(_, n)| *n == 16),
        "{t:?}"
    );
    let waiting = &run[7].1;
    assert!(
        waiting.reason.contains("could not be bought back"),
        "{}",
        waiting.reason
    );
    assert_eq!(t[8], (240, 3), "released once the window has passed: {t:?}");
}

#[test]
fn the_stabilisation_window_caps_both_waits() {
    let t = targets(&scale_in_run(0, 60));
    assert_eq!((t[1], t[2]), ((30, 20), (60, 3)), "{t:?}");
}

#[test]
fn oldest_age_scales_out_after_two_windows_but_a_poisoned_request_does_not() {
    let p = pool(
        1,
        50,
        quick(ScalingPolicy {
            oldest_age_threshold: Some(Duration::from_secs(5)),
            replica_throughput_rps: 2.5,
            ..base()
        }),
    );
    let signals = |age, arrivals, departures, t| Signals {
        queue_depth: 2,
        oldest_age_s: Some(age),
        arrival_rate_rps: Some(arrivals),
        departure_rate_rps: Some(departures),
        ..Signals::queue(2, arrivals, t)
    };
    // A poisoned request: very old, tiny queue, departures keep up with arrivals.
    let mut m = memory(8);
    for t in [0, 15, 30, 45] {
        let d = decide(
            &p,
            Some(&signals(120.0, 20.0, 20.0, secs(t))),
            ready(8),
            m,
            secs(t),
        );
        assert_eq!(
            d.target, 8,
            "a poisoned request must not scale the pool out"
        );
        m = d.memory;
    }
    // Real pressure: arrivals exceed departures; the age rule answers from the second window.
    let age_answer = |d: &Decision| {
        d.proposals
            .iter()
            .find(|p| p.rule == Rule::OldestAge)
            .map(|p| p.replicas)
    };
    let first = decide(
        &p,
        Some(&signals(8.0, 30.0, 20.0, t0())),
        ready(8),
        memory(8),
        t0(),
    );
    assert_eq!(age_answer(&first), None);
    let m = ControllerMemory {
        target: 8,
        ..first.memory
    };
    let second = decide(
        &p,
        Some(&signals(9.0, 30.0, 20.0, secs(15))),
        ready(8),
        m,
        secs(15),
    );
    // 10 req/s more than departs, at 2.5 per replica: four more than the target of 8.
    assert_eq!(age_answer(&second), Some(12));
}

#[test]
fn work_waiting_with_nothing_departing_is_a_failure_not_a_scale_up() {
    let p = pool(
        1,
        50,
        quick(ScalingPolicy {
            replica_throughput_rps: 2.5,
            ..base()
        }),
    );
    let s = Signals {
        departure_rate_rps: Some(0.0),
        gpu_utilization: Some(0.05),
        ..Signals::queue(500, 20.0, t0())
    };
    let d = decide(&p, Some(&s), ready(8), memory(8), t0());
    assert_eq!(
        (d.target, d.scaling_hold),
        (8, Some(ScalingHold::DispatchFailure))
    );
    assert_eq!(d.classification, Some(Classification::DispatchOrDependency));
}

/// Replicas with full batches of long requests (25 s each) finish none within a 10 s window:
/// that is load, not a broken dispatch, and the backlog scales the pool out.
#[test]
fn busy_replicas_that_finish_nothing_in_the_window_are_load_not_a_failure() {
    let p = pool(
        1,
        50,
        quick(ScalingPolicy {
            replica_throughput_rps: 0.04,
            ..base()
        }),
    );
    let s = Signals {
        departure_rate_rps: Some(0.0),
        batch_occupancy: Some(1.0),
        ..Signals::queue(40, 0.2, t0())
    };
    let d = decide(&p, Some(&s), ready(2), memory(2), t0());
    assert_ne!(
        d.scaling_hold,
        Some(ScalingHold::DispatchFailure),
        "{}",
        d.reason
    );
    let s = Signals {
        received_at: secs(10),
        ..s
    };
    let later = decide(&p, Some(&s), ready(2), d.memory, secs(10));
    assert!(later.target > 2, "{}", later.reason);
}

#[test]
fn classification_reads_age_against_utilisation() {
    let p = pool(
        1,
        50,
        quick(ScalingPolicy {
            oldest_age_threshold: Some(Duration::from_secs(5)),
            replica_throughput_rps: 2.5,
            ..base()
        }),
    );
    let class = |age, util| {
        let s = Signals {
            oldest_age_s: Some(age),
            gpu_utilization: Some(util),
            ..Signals::queue(0, 20.0, t0())
        };
        decide(&p, Some(&s), ready(8), memory(8), t0()).classification
    };
    assert_eq!(class(9.0, 0.95), Some(Classification::CapacityPressure));
    assert_eq!(class(9.0, 0.20), Some(Classification::DispatchOrDependency));
    assert_eq!(class(0.5, 0.95), Some(Classification::Healthy));
    assert_eq!(class(0.5, 0.10), Some(Classification::Idle));
}

#[test]
fn one_change_of_direction_per_cooldown() {
    let (p, down) = scaled_down_in_a_cooldown();
    assert_eq!(
        down.target, 2,
        "no stabilisation: down to demand (and its margin) at once"
    );
    let up = decide(
        &p,
        Some(&Signals::queue(0, 150.0, secs(30))),
        ready(2),
        down.memory,
        secs(30),
    );
    assert_eq!(
        (up.target, up.scaling_hold),
        (2, Some(ScalingHold::DirectionCooldown))
    );
    let later = decide(
        &p,
        Some(&Signals::queue(0, 150.0, secs(130))),
        ready(2),
        up.memory,
        secs(130),
    );
    assert_eq!(later.target, 15);
}

#[test]
fn clamps_to_max_and_reports_unmet_demand() {
    let p = pool(
        1,
        10,
        quick(ScalingPolicy {
            replica_throughput_rps: 2.5,
            ..base()
        }),
    );
    let d = decide(
        &p,
        Some(&Signals::queue(0, 200.0, t0())),
        ready(1),
        memory(1),
        t0(),
    );
    assert_eq!(
        (d.target, d.unclamped, d.limited),
        (10, 80, Some(Limit::MaxReplicas))
    );
}

#[test]
fn measured_throughput_replaces_the_configured_one_under_saturation() {
    // Configured 2.5/s, but 8 saturated replicas complete only 8/s: 1/s each.
    let p = pool(
        1,
        100,
        quick(ScalingPolicy {
            replica_throughput_rps: 2.5,
            ..base()
        }),
    );
    let s = Signals {
        departure_rate_rps: Some(8.0),
        ..Signals::queue(60, 10.0, t0())
    };
    let d = decide(&p, Some(&s), ready(8), memory(8), t0());
    assert_eq!(
        d.target, 11,
        "10/s at 1/s each plus 60 queued over 60 s: {}",
        d.reason
    );
}

/// The defaults serve arrivals at 90 % of the replicas' throughput: seed 000's steady 20 req/s
/// at 2.5 each wants nine, not the eight that would run flat out.
#[test]
fn the_drain_rule_leaves_room_at_the_target_utilisation() {
    let p = pool(
        1,
        16,
        quick(ScalingPolicy {
            replica_throughput_rps: 2.5,
            ..ScalingPolicy::default()
        }),
    );
    let d = decide(
        &p,
        Some(&Signals::queue(0, 20.0, t0())),
        ready(8),
        memory(8),
        t0(),
    );
    assert_eq!((d.target, d.rule), (9, Rule::BacklogDrain), "{}", d.reason);
    assert!(d.reason.contains("90 % utilisation"), "{}", d.reason);
}

/// Ten queued requests and five a second are a small load of short prompts and a large one of
/// long prompts: a pool that knows its tokens per second sizes for the tokens; without it (or
/// without token counts in the signal) requests stay the unit.
#[test]
fn a_queue_of_long_prompts_needs_more_replicas_than_one_of_short_ones() {
    let policy = |tps: Option<f64>| {
        quick(ScalingPolicy {
            replica_throughput_rps: 10.0,
            replica_throughput_tps: tps,
            ..base()
        })
    };
    let prompts = |tokens_each: f64| Signals {
        queued_tokens: Some(10.0 * tokens_each),
        token_arrival_rate_tps: Some(5.0 * tokens_each),
        ..Signals::queue(10, 5.0, t0())
    };
    let target = |tps: Option<f64>, s: &Signals| {
        decide(
            &pool(1, 100, policy(tps)),
            Some(s),
            ready(2),
            memory(2),
            t0(),
        )
    };
    // 1,000 tok/s at 2,000 per replica plus 2,000 queued: 1 + 1.
    assert_eq!(target(Some(2000.0), &prompts(200.0)).target, 2);
    // 100,000 tok/s: 50 replicas, plus what drains 200,000 queued tokens within the 60 s
    // window: 52. The two ready replicas fall further behind every second until new ones land,
    // so the lead-time cap leaves the drain window standing.
    let long = target(Some(2000.0), &prompts(20_000.0));
    assert_eq!((long.target, long.rule), (52, Rule::BacklogDrain));
    assert!(long.reason.contains("tok/s"), "{}", long.reason);
    // Requests are the unit without the pool's token rate or the signal's token counts.
    assert_eq!(target(None, &prompts(20_000.0)).target, 2);
    assert_eq!(
        target(Some(2000.0), &Signals::queue(10, 5.0, t0())).target,
        2
    );
}

/// A floor of two, ten req/s per replica, one breach to scale up, no direction cooldown, and
/// `stabilization_s` of stabilisation.
fn ten_per_replica(stabilization_s: u64) -> PoolSpec {
    pool(
        2,
        50,
        quick(ScalingPolicy {
            replica_throughput_rps: 10.0,
            scale_down_stabilization: Duration::from_secs(stabilization_s),
            ..base()
        }),
    )
}

/// Drives `p` from a target of two with nothing queued and `rate(t)` arriving, every `step`
/// seconds up to `until`, each replica ready as soon as targeted: every decision with its time.
fn drive(p: &PoolSpec, step: usize, until: i64, rate: impl Fn(i64) -> f64) -> Vec<(i64, Decision)> {
    let mut m = memory(2);
    let mut out = Vec::new();
    for t in (0..=until).step_by(step) {
        let d = decide(
            p,
            Some(&Signals::queue(0, rate(t), secs(t))),
            ready(m.target),
            m,
            secs(t),
        );
        m = d.memory.clone();
        out.push((t, d));
    }
    out
}

/// Whether any decision of `run` heard the ramp rule.
fn ramp_proposed(run: &[(i64, Decision)]) -> Option<(i64, String)> {
    run.iter()
        .find(|(_, d)| d.proposals.iter().any(|p| p.rule == Rule::Ramp))
        .map(|(t, d)| (*t, d.reason.clone()))
}

/// Ten replicas' worth of bursts (100 req/s at 10 each) for a minute every five, over a base
/// of two (19 req/s, the margin below the boundary of three), then quiet from `quiet_from` on;
/// each activation 15 s apart, ready as targeted.
fn bursts_run(quiet_from: i64, until: i64) -> Vec<(i64, Decision)> {
    drive(&ten_per_replica(600), 15, until, |t| {
        if t < quiet_from && t % 300 < 60 {
            100.0
        } else {
            19.0
        }
    })
}

#[test]
fn bursts_that_recur_within_the_window_keep_their_capacity_across_the_gap() {
    let run = bursts_run(1500, 2400);
    let target_at = |t: i64| run.iter().find(|(at, _)| *at == t).unwrap().1.target;
    // Two gaps are not yet a pattern: the surplus goes after a cold start (190 s).
    assert_eq!(target_at(240), 10);
    assert_eq!(
        target_at(285),
        2,
        "released a cold start after the first burst"
    );
    assert_eq!(target_at(600 + 285), 2, "and after the third");
    // From the fourth rise on, three gaps (300 s) have recurred within the 600 s window: the
    // burst's capacity stays through the gap, and the decision says what each choice costs.
    for t in (960..1500).step_by(15) {
        assert_eq!(target_at(t), 10, "at {t}s: {:?}", targets(&run));
    }
    let kept = &run.iter().find(|(at, _)| *at == 1290).unwrap().1;
    assert_eq!((kept.rule, kept.idle_replicas), (Rule::Steady, 8));
    assert!(kept.reason.contains("rises recur"), "{}", kept.reason);
    assert!(kept.reason.contains("300s and 300s"), "{}", kept.reason);
    // Once the bursts stop, the whole window passes and the surplus goes.
    assert_eq!(target_at(1200 + 60 + 585), 10);
    assert_eq!(target_at(1200 + 60 + 600), 2);
}

#[test]
fn a_ramp_is_sized_for_the_rate_one_cold_start_ahead() {
    // 20 req/s growing by 1 req/s every 15 s (4 per minute), ten per replica, a 190 s ladder.
    let rate = |t: i64| 20.0 + (t / 15) as f64;
    let run = drive(&ten_per_replica(600), 15, 300, rate);
    let (t, d) = run
        .iter()
        .find(|(_, d)| d.rule == Rule::Ramp)
        .expect("the ramp rule never proposed");
    let (t, rate) = (*t, rate(*t));
    assert!(t >= 225, "four full windows of history first: {t}s");
    let drain = d
        .proposals
        .iter()
        .find(|p| p.rule == Rule::BacklogDrain)
        .unwrap()
        .replicas;
    assert_eq!(drain, (rate / 10.0).ceil() as u32);
    // About 4/60 req/s per second, 180 s ahead (the three windows the trend was seen over,
    // within the 190 s ladder): some 12 req/s more than now.
    let projected = ((rate + 4.0 / 60.0 * 180.0) / 10.0).ceil() as u32;
    assert!(
        d.target >= projected - 1 && d.target <= projected + 1 && d.target > drain,
        "target {} against drain {drain} and ~{projected} projected: {}",
        d.target,
        d.reason
    );
    assert!(d.reason.contains("projected 180s ahead"), "{}", d.reason);
}

#[test]
fn a_flat_or_spiky_rate_is_no_ramp() {
    // Noise around 20 req/s, and a ten-second spike: neither grows through four windows.
    let run = drive(&ten_per_replica(600), 5, 400, |t| {
        let noise = [0.0, 1.5, -1.0, 0.5, -1.5, 1.0][(t / 5) as usize % 6];
        let spike = if (200..210).contains(&t) { 60.0 } else { 0.0 };
        20.0 + noise + spike
    });
    assert_eq!(ramp_proposed(&run), None);
}

#[test]
fn traffic_that_starts_is_no_ramp() {
    // Nothing for two minutes, then 40 req/s seen through a rolling average that fills over
    // a minute: it grows in one window and a half, not steadily through four.
    let run = drive(&ten_per_replica(600), 5, 500, |t| {
        (40.0 * (t as f64 - 120.0) / 60.0).clamp(0.0, 40.0)
    });
    assert_eq!(ramp_proposed(&run), None);
}

#[test]
fn one_burst_that_wobbles_is_not_a_recurrence() {
    // Four minutes of a burst whose demand swings between 10 and 6 every 30 s.
    let run = drive(&ten_per_replica(600), 15, 900, |t| match t {
        0..240 if t % 60 < 30 => 100.0,
        0..240 => 60.0,
        _ => 19.0,
    });
    let (_, after) = run.iter().find(|(t, _)| *t == 240 + 210).unwrap();
    let rises = &run.last().unwrap().1.memory.rises;
    // Released a cold start (190 s) after the last high, not a whole window later.
    assert_eq!(after.target, 2, "{rises:?}");
    assert_eq!(rises.len(), 1, "one burst, one rise: {rises:?}");
}

/// The pool of the cooldown tests: ten req/s per replica, one breach, no stabilisation, a
/// 120 s direction cooldown; and its scale-down from ten to two at `t0` (19 req/s: two, even
/// with the scale-down margin on the rate).
fn scaled_down_in_a_cooldown() -> (PoolSpec, Decision) {
    let p = pool(
        2,
        50,
        ScalingPolicy {
            replica_throughput_rps: 10.0,
            scale_up_breaches: 1,
            scale_down_stabilization: Duration::ZERO,
            scale_down_period: Duration::ZERO,
            direction_cooldown: Duration::from_secs(120),
            ..base()
        },
    );
    let down = decide(
        &p,
        Some(&Signals::queue(0, 19.0, t0())),
        ready(10),
        memory(10),
        t0(),
    );
    (p, down)
}

/// Breaching windows counted while a direction cooldown holds the pool still count when it
/// ends: the pool scales up on the first tick after the cooldown, not two windows later.
#[test]
fn windows_counted_inside_a_cooldown_are_not_lost_to_it() {
    let (p, down) = scaled_down_in_a_cooldown();
    let p = PoolSpec {
        scaling: ScalingPolicy {
            scale_up_breaches: 2,
            ..p.scaling
        },
        ..p
    };
    let mut m = down.memory;
    for t in [30, 45, 60, 75, 90, 105] {
        let held = decide(
            &p,
            Some(&Signals::queue(0, 150.0, secs(t))),
            ready(2),
            m,
            secs(t),
        );
        assert_eq!(held.target, 2, "at {t}s: {}", held.reason);
        m = held.memory;
    }
    let after = decide(
        &p,
        Some(&Signals::queue(0, 150.0, secs(125))),
        ready(2),
        m,
        secs(125),
    );
    assert_eq!(
        (after.target, after.limited),
        (15, None),
        "{}",
        after.reason
    );
}

/// A queue that grows because arrivals outrun the ready replicas is no spike: the lead-time
/// cap leaves room to drain what it will have grown to when new replicas land. A backlog that
/// the ready replicas keep up with stays capped to what drains it by then.
#[test]
fn a_growing_queue_is_not_capped_as_a_spike() {
    let p = pool(
        1,
        100,
        quick(ScalingPolicy {
            replica_throughput_rps: 10.0,
            ..base()
        }),
    );
    let queue = Signals::queue(20_000, 100.0, t0());
    // Ten replicas serve the 100 req/s: the 20,000 queued drain over the 190 s a new replica
    // takes, 11 more, not the 34 that would drain them within the 60 s window.
    let keeping_up = decide(&p, Some(&queue), ready(10), memory(10), t0());
    assert_eq!(keeping_up.target, 21, "{}", keeping_up.reason);
    assert!(
        !keeping_up.reason.contains("more queued by then"),
        "{}",
        keeping_up.reason
    );
    // Two ready and eight on their way serve the 100 req/s once they land, about halfway
    // through the lead time: 100 - (2 + 8 / 2) × 10 = 40 req/s more queued for 190 s, which
    // new replicas drain within the drain window: 10 + 20000 / 1900 + 7600 / 600 gives 34 —
    // not the 44 that would count the eight as never serving in time.
    let on_the_way = ReplicaCounts {
        starting: 8,
        ..ready(2)
    };
    let bought = decide(&p, Some(&queue), on_the_way, memory(10), t0());
    assert_eq!(bought.target, 34, "{}", bought.reason);
    // Two replicas and nothing on the way serve 20: by the time new ones land, 80 × 190 =
    // 15,200 more are queued, and the drain rule's 10 + 34 stands.
    let falling_behind = decide(&p, Some(&queue), ready(2), memory(2), t0());
    assert_eq!(
        (falling_behind.target, falling_behind.rule),
        (44, Rule::BacklogDrain),
        "{}",
        falling_behind.reason
    );
}

#[test]
fn a_direction_change_inside_the_cooldown_only_when_the_objective_is_at_risk() {
    let (p, down) = scaled_down_in_a_cooldown();
    assert_eq!(down.target, 2);
    // 2,000 queued: two replicas drain 1,200 within the 60 s drain window, so it is at risk.
    let up = decide(
        &p,
        Some(&Signals::queue(2000, 20.0, secs(30))),
        ready(2),
        down.memory,
        secs(30),
    );
    assert!(up.target > 2, "{}", up.reason);
    assert_eq!(up.scaling_hold, None);
    assert!(
        up.reason.contains("against the direction cooldown"),
        "{}",
        up.reason
    );
}

/// A scale-in that left too little is undone at once: a queue past one per ready replica that
/// grows because arrivals outrun the ready replicas only gets older for the rest of the
/// cooldown. The same queue while the ready replicas keep up drains by itself and waits.
#[test]
fn a_queue_that_outruns_the_replicas_left_after_a_scale_in_is_a_risk_to_the_objective() {
    let (p, down) = scaled_down_in_a_cooldown();
    assert_eq!(down.target, 2);
    // Two replicas serve 20 req/s; 40 arrive and 30 wait: far from the 1,200 the drain window
    // allows, but growing by 20 a second.
    let outrun = decide(
        &p,
        Some(&Signals::queue(30, 40.0, secs(30))),
        ready(2),
        down.memory.clone(),
        secs(30),
    );
    assert_eq!(outrun.scaling_hold, None, "{}", outrun.reason);
    assert!(outrun.target > 2, "{}", outrun.reason);
    assert!(
        outrun.reason.contains("against the direction cooldown"),
        "{}",
        outrun.reason
    );
    // 15 arrive: the two replicas drain the 30 while serving them; the cooldown holds.
    let keeping_up = decide(
        &p,
        Some(&Signals::queue(30, 15.0, secs(30))),
        ready(2),
        down.memory,
        secs(30),
    );
    assert_eq!(
        (keeping_up.target, keeping_up.scaling_hold),
        (2, Some(ScalingHold::DirectionCooldown)),
        "{}",
        keeping_up.reason
    );
}

/// A burst on its way up: 110 queued outrun five ready replicas (50 req/s) while arrivals
/// still climb a request a second from 56. Replicas bought now land a cold start (190 s)
/// later, so the lead-time cap takes the rate of then, at most twice the rate now (112, 12
/// replicas), and the queue's growth at the mean rate ((84 - 50) × 190 = 6,460, drained within
/// the 60 s window: 11 more): the queue rule's 55 is capped at 23. The same queue after a flat
/// 56 req/s, or after a step to it, is capped at the rate of now: 6 + 2 = 8.
#[test]
fn a_rate_still_rising_under_a_growing_queue_is_capped_at_the_rate_the_replicas_land_on() {
    let p = pool(
        5,
        50,
        quick(ScalingPolicy {
            replica_throughput_rps: 10.0,
            target_queue_per_replica: Some(2.0),
            breach_window: Duration::from_secs(4),
            ..base()
        }),
    );
    let last = |rate: &dyn Fn(i64) -> f64| {
        let mut m = memory(5);
        let mut decision = None;
        for t in 0..=16 {
            let queue = 30 + 5 * t as u64;
            let s = Signals::queue(queue, rate(t), secs(t));
            let d = decide(&p, Some(&s), ready(5), m, secs(t));
            m = d.memory.clone();
            decision = Some(d);
        }
        decision.unwrap()
    };
    let rising = last(&|t| 40.0 + t as f64);
    assert_eq!(rising.target, 23, "{}", rising.reason);
    let flat = last(&|_| 56.0);
    assert_eq!(flat.target, 8, "{}", flat.reason);
    assert!(!flat.reason.contains("rising"), "{}", flat.reason);
    // A step from 40 to 56 four seconds ago (a spike) grew in one window only: no rise.
    let step = last(&|t| if t < 12 { 40.0 } else { 56.0 });
    assert_eq!(step.target, 8, "{}", step.reason);
}

#[test]
fn a_forecast_launches_ahead_of_a_recurring_rise_but_never_on_a_missing_signal() {
    let p = ten_per_replica(600);
    let forecast = crate::forecast::Forecast {
        replicas: 9,
        expected_at: secs(240),
        recurrence: crate::forecast::Recurrence::Daily,
    };
    let quiet = Signals::queue(0, 20.0, t0());
    let d = decide_with_forecast(&p, Some(&quiet), ready(2), memory(2), Some(&forecast), t0());
    assert_eq!((d.target, d.rule), (9, Rule::Forecast), "{}", d.reason);
    assert!(d.reason.contains("09:04 UTC"), "{}", d.reason);
    // The measured demand (two replicas) is what the controller learns its swings from.
    assert!(!d.memory.rising || d.memory.swing_high <= 2);
    let held = decide_with_forecast(&p, None, ready(2), memory(2), Some(&forecast), t0());
    assert_eq!(
        (held.target, held.scaling_hold),
        (2, Some(ScalingHold::SignalMissing))
    );
}

#[test]
fn a_scheduled_floor_holds_even_without_a_signal_and_never_passes_max_replicas() {
    let p = ten_per_replica(600);
    let window = ScheduledFloor {
        replicas: 6,
        why: "scheduled window batch".into(),
    };
    let quiet = Signals::queue(0, 20.0, t0());
    let d = decide_ahead(
        &p,
        Some(&quiet),
        ready(2),
        memory(2),
        None,
        Some(&window),
        t0(),
    );
    assert_eq!((d.target, d.rule), (6, Rule::Scheduled), "{}", d.reason);
    assert!(d.reason.contains("batch; target 2 → 6"), "{}", d.reason);
    // A known event does not wait for a metric: the floor stands while the pool holds.
    let held = decide_ahead(&p, None, ready(2), memory(2), None, Some(&window), t0());
    assert_eq!(
        (held.target, held.scaling_hold),
        (6, Some(ScalingHold::SignalMissing))
    );
    let too_many = ScheduledFloor {
        replicas: p.max_replicas + 5,
        why: "scheduled window huge".into(),
    };
    let capped = decide_ahead(
        &p,
        Some(&quiet),
        ready(2),
        memory(2),
        None,
        Some(&too_many),
        t0(),
    );
    assert_eq!(capped.target, p.max_replicas);
    // Demand above the window wins as always.
    let busy = Signals::queue(0, 100.0, t0());
    let d = decide_ahead(
        &p,
        Some(&busy),
        ready(6),
        memory(6),
        None,
        Some(&window),
        t0(),
    );
    assert!(d.target >= 6 && d.rule != Rule::Scheduled, "{d:?}");
}

/// The memory reads back from JSON as it was (the engine keeps it in the ledger so the next
/// owner of a pool decides as this one would have): a run whose memory goes through JSON at every
/// activation decides exactly as one that keeps it, through bursts, scale-ins and ramps with a
/// 300 s stabilisation window at 1 s activations; a body written before a field existed reads
/// back with that field's default.
#[test]
fn the_memory_round_trips_through_json_and_decides_the_same() {
    let p = ten_per_replica(300);
    let rate = |t: i64| match t % 400 {
        0..60 => 100.0,
        60..200 => 20.0 + (t % 400 - 60) as f64,
        _ => 20.0,
    };
    let (mut kept, mut stored) = (memory(2), memory(2));
    let mut largest = 0;
    for t in 0..=1600 {
        let signal = Signals::queue((t % 7) as u64, rate(t), secs(t));
        let a = decide(&p, Some(&signal), ready(kept.target), kept, secs(t));
        let b = decide(&p, Some(&signal), ready(stored.target), stored, secs(t));
        assert_eq!(
            (a.target, a.rule, &a.reason, a.scaling_hold),
            (b.target, b.rule, &b.reason, b.scaling_hold),
            "at {t}s"
        );
        let body = serde_json::to_string(&b.memory).unwrap();
        largest = largest.max(body.len());
        stored = serde_json::from_str(&body).unwrap();
        assert_eq!(stored, b.memory, "at {t}s");
        kept = a.memory;
    }
    assert!(largest > 0 && largest < 64 * 1024, "{largest} bytes");
    let old: ControllerMemory = serde_json::from_str(r#"{"target": 3}"#).unwrap();
    assert_eq!(old, memory(3));
}

/// Demand on the boundary between two counts: 19.5 req/s at 10 each wants two, but with the
/// 5 % scale-down margin on the rate (20.5 req/s) it wants three, so a pool at three keeps its
/// third replica through the dip; at 18 req/s (18.9 with the margin) it lets it go. Taken on
/// the count alone, 5 % of two rounds to nothing and the pool would flip on every wiggle.
#[test]
fn a_dip_within_the_margin_keeps_the_replica_a_deeper_one_releases() {
    let p = pool(
        1,
        20,
        ScalingPolicy {
            replica_throughput_rps: 10.0,
            scale_down_stabilization: Duration::ZERO,
            scale_down_period: Duration::ZERO,
            ..base()
        },
    );
    assert_eq!(p.scaling.scale_down_margin, 0.05);
    let at = |rate: f64| {
        decide(
            &p,
            Some(&Signals::queue(0, rate, t0())),
            ready(3),
            memory(3),
            t0(),
        )
    };
    let shallow = at(19.5);
    assert_eq!(shallow.unclamped, 2, "{}", shallow.reason);
    assert_eq!(shallow.target, 3, "{}", shallow.reason);
    let deep = at(18.0);
    assert_eq!(deep.target, 2, "{}", deep.reason);
}
