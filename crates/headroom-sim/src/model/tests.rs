//! The serving model's unit tests: rates, tiers, shedding, hand-over, exact waits, split intervals.

use std::collections::BTreeMap;

use crate::arrivals::Request;

use super::{Gate, Model, QueuePolicy, ReplicaSpec, Service, Totals, UtilMeter};

fn service() -> Service {
    Service {
        input_token_weight: 0.0,
        tokens_per_s: 250.0,
        request_tokens_per_s: 250.0,
        max_batch: 1,
    }
}

/// One ready replica, "a", of one GPU serving at `service`.
fn one(service: Service) -> BTreeMap<String, ReplicaSpec> {
    BTreeMap::from([("a".to_string(), ReplicaSpec { gpus: 1, service })])
}

fn policy() -> QueuePolicy {
    QueuePolicy {
        tiers: vec!["interactive".into(), "batch".into()],
        objective_s: vec![1.0, 60.0],
        deadline_s: vec![None, None],
        shed_tiers: vec![1],
        priorities: vec![
            headroom_core::Priority::Critical,
            headroom_core::Priority::Low,
        ],
        shed_depth: Some(5),
        smaller_model: vec![true, false],
    }
}

fn shed_low() -> Gate {
    Gate {
        priority: headroom_core::Priority::Low,
        admit: false,
        max_queued: None,
    }
}

fn req(at_s: f64, tier: u8) -> Request {
    Request {
        at_s,
        input_tokens: 0,
        output_tokens: 100,
        tier,
        pool: 0,
    }
}

#[test]
fn one_replica_serves_two_and_a_half_per_second() {
    let reqs: Vec<Request> = (0..100).map(|i| req(i as f64 * 0.1, 0)).collect();
    let mut m = Model::new(&reqs, policy(), false);
    m.set_ready(&one(service()));
    m.advance(0.0, 10.2);
    // 0.4 s each: the 25th ends at 10.0 s, the 26th is in service, the rest waits.
    assert_eq!(m.totals.served, 25);
    assert_eq!(m.in_service(), 1);
    assert_eq!(m.waiting(), 74);
}

#[test]
fn interactive_goes_first_and_batch_is_shed_when_deep() {
    let mut reqs: Vec<Request> = (0..10).map(|_| req(0.0, 1)).collect();
    reqs.push(req(0.0, 0));
    let mut m = Model::new(&reqs, policy(), true);
    m.advance(0.0, 0.5);
    assert_eq!(m.totals.shed, 0, "admission sheds nothing yet");
    m.set_admission(&[shed_low()]);
    m.advance(0.5, 1.0);
    assert_eq!(
        m.totals.shed, 0,
        "all ten arrived in the first step, before the answer"
    );
    let mut m = Model::new(&reqs, policy(), true);
    m.set_admission(&[shed_low()]);
    m.advance(0.0, 1.0);
    assert_eq!(m.totals.shed, 5, "batch is shed once five wait");
    m.set_ready(&one(service()));
    m.advance(1.0, 1.5);
    // The interactive request jumped the five waiting batch requests; it waited exactly its
    // 1 s objective, and the first batch request started at 1.4 s, well within 60 s.
    assert_eq!(m.totals.served, 1);
    assert_eq!(m.totals.within_slo, 2);
    assert_eq!(m.waiting(), 4);
}

#[test]
fn each_replica_serves_at_its_own_speed() {
    // One replica at 250 tokens/s and one twice as fast, one request at a time each: the
    // fast one finishes a 100-token request every 0.2 s, the slow one every 0.4 s.
    let reqs: Vec<Request> = (0..60).map(|_| req(0.0, 0)).collect();
    let fast = Service {
        tokens_per_s: 500.0,
        request_tokens_per_s: 500.0,
        ..service()
    };
    let mut m = Model::new(&reqs, policy(), false);
    m.set_ready(&BTreeMap::from([
        (
            "fast".to_string(),
            ReplicaSpec {
                gpus: 1,
                service: fast,
            },
        ),
        (
            "slow".to_string(),
            ReplicaSpec {
                gpus: 1,
                service: service(),
            },
        ),
    ]));
    // Just past 4 s, so the requests due at exactly 4 s have finished.
    m.advance(0.0, 4.05);
    assert_eq!(m.totals.served, 20 + 10);
}

#[test]
fn a_pool_hands_only_the_eligible_tiers_to_another_and_each_request_counts_once() {
    // Three interactive and three batch requests arrive at pool 0, which has no replica; pool
    // 1 (its smaller model) has one replica with two batch slots and traffic of its own.
    let mut reqs: Vec<Request> = (0..3).map(|_| req(0.0, 0)).collect();
    reqs.extend((0..3).map(|_| req(0.0, 1)));
    reqs.push(Request {
        pool: 1,
        ..req(0.0, 0)
    });
    let two_slots = Service {
        max_batch: 2,
        tokens_per_s: 500.0,
        ..service()
    };
    let mut big = Model::new(&reqs, policy(), false);
    let mut small = Model::new(&reqs, policy(), false).at_pool(1);
    small.set_ready(&one(two_slots));
    big.advance(0.0, 0.1);
    small.advance(0.0, 0.1);
    assert_eq!(
        (big.waiting(), small.waiting(), small.in_service()),
        (6, 0, 1)
    );
    // Its own request runs: one slot is spare.
    assert_eq!(small.spare_slots(), 1);
    let handed = big.hand_over(&[true, false], small.spare_slots());
    assert_eq!(handed.len(), 1);
    small.take_over(handed);
    // Batch is never handed over, however many slots are spare.
    let handed = big.hand_over(&[true, false], 10);
    assert_eq!(
        handed.len(),
        2,
        "the two interactive requests left, not batch"
    );
    small.take_over(handed);
    big.advance(0.1, 3.0);
    small.advance(0.1, 3.0);
    assert_eq!(big.waiting(), 3, "batch waits for the large model");
    assert_eq!(small.totals.served, 4);
    assert_eq!(small.totals.taken_over, 3);
    // Arrivals are counted where they arrived, starts where they started: once each.
    assert_eq!(big.totals.requests + small.totals.requests, 7);
    assert_eq!(big.totals.by_tier[0].requests, 3);
    assert_eq!(small.totals.by_tier[0].within_slo, 1 + 3);
}

#[test]
fn a_vanished_replica_gives_its_work_back() {
    let reqs = vec![req(0.0, 0)];
    let mut m = Model::new(&reqs, policy(), false);
    m.set_ready(&one(service()));
    m.advance(0.0, 0.2);
    assert_eq!(m.in_service(), 1);
    m.set_ready(&BTreeMap::new());
    assert_eq!(m.waiting(), 1);
    assert_eq!(m.in_service(), 0);
}

#[test]
fn utilisation_is_busy_time_not_queue_depth() {
    // A single slow request keeps the replica "100 % utilised" with nothing queued.
    let reqs = vec![Request {
        output_tokens: 10_000,
        ..req(0.0, 0)
    }];
    let svc = Service {
        request_tokens_per_s: 50.0,
        max_batch: 32,
        ..service()
    };
    let mut m = Model::new(&reqs, policy(), false);
    m.set_ready(&one(svc));
    let mut meter = UtilMeter::default();
    meter.read(&m, 0.0);
    m.advance(0.0, 15.0);
    let u = meter.read(&m, 15.0);
    assert_eq!(u.len(), 1);
    assert!((u[0].unwrap() - 1.0).abs() < 1e-9, "{u:?}");
    assert_eq!(m.waiting(), 0);
}

/// A one-slot replica serving in arrival order: each request starts when it arrives or when
/// the one before it finishes, whichever is later (Lindley's recursion). Returns the total
/// wait and how many waited within `objective`.
fn lindley(reqs: &[Request], seconds_per_request: f64, objective: f64) -> (f64, u64) {
    let (mut free_at, mut total, mut within) = (f64::NEG_INFINITY, 0.0, 0);
    for r in reqs {
        let start = free_at.max(r.at_s);
        total += start - r.at_s;
        within += u64::from(start - r.at_s <= objective + 1e-9);
        free_at = start + seconds_per_request;
    }
    (total, within)
}

/// `n` random requests over `span` seconds: tiers, sizes and gaps (some on whole 100 ms).
fn random_requests(rng: &mut fastrand::Rng, n: usize, span: f64) -> Vec<Request> {
    let mut at: Vec<f64> = (0..n)
        .map(|_| {
            let t = rng.f64() * span;
            // One in ten where the old step boundaries were, several at one instant.
            if rng.u8(0..10) == 0 {
                (t * 10.0).round() / 10.0
            } else {
                t
            }
        })
        .collect();
    at.sort_by(f64::total_cmp);
    at.into_iter()
        .map(|at_s| Request {
            at_s,
            input_tokens: rng.u32(0..400),
            output_tokens: rng.u32(1..300),
            tier: rng.u8(0..2),
            pool: 0,
        })
        .collect()
}

#[test]
fn a_lone_request_finishes_exactly_work_over_rate_after_it_arrives() {
    // 100 tokens at 250 tokens/s: 0.4 s from its arrival at 0.37 s, not from a step start.
    let reqs = vec![req(0.37, 0)];
    let mut m = Model::new(&reqs, policy(), false);
    m.set_ready(&one(service()));
    m.advance(0.0, 0.5);
    let left: Vec<f64> = m.in_service_work().map(|(_, w)| w).collect();
    assert_eq!(left.len(), 1);
    assert!((left[0] - (100.0 - 250.0 * 0.13)).abs() < 1e-9, "{left:?}");
    m.advance(0.5, 0.77 - 1e-6);
    assert_eq!(m.totals.served, 0);
    m.advance(0.77 - 1e-6, 0.77 + 1e-6);
    assert_eq!(m.totals.served, 1);
    assert_eq!(m.totals.queue_delay_s, 0.0);
    let busy: Vec<f64> = m.busy_counters().map(|(_, b)| b).collect();
    assert!((busy[0] - 0.4).abs() < 1e-9, "{busy:?}");
}

#[test]
fn a_deadline_expires_at_arrival_plus_deadline() {
    let policy = QueuePolicy {
        deadline_s: vec![Some(2.5), None],
        ..policy()
    };
    let reqs = vec![req(0.33, 0)];
    let mut m = Model::new(&reqs, policy, false);
    m.advance(0.0, 2.83 - 1e-6);
    assert_eq!((m.totals.timed_out, m.waiting()), (0, 1));
    m.advance(2.83 - 1e-6, 2.83 + 1e-6);
    assert_eq!((m.totals.timed_out, m.waiting()), (1, 0));
    assert_eq!(m.totals.missed, 1);
}

#[test]
fn one_slot_waits_are_exact_and_never_negative() {
    // Property: on one slot in arrival order (one tier, one size) the model's waits are
    // Lindley's, for random arrivals; a request served before it arrived would show a wait
    // shorter than the recursion's (its negative wait counted as 0).
    for seed in 0..200 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let reqs: Vec<Request> = random_requests(&mut rng, 60, 20.0)
            .into_iter()
            .map(|r| req(r.at_s, 0))
            .collect();
        let mut m = Model::new(&reqs, policy(), false);
        m.set_ready(&one(service()));
        // The run loop's way: one call a tick.
        for tick in 0..60 {
            m.advance(f64::from(tick), f64::from(tick + 1));
        }
        let (total, within) = lindley(&reqs, 0.4, 1.0);
        assert_eq!(m.totals.served, 60, "seed {seed}");
        assert!(
            (m.totals.queue_delay_s - total).abs() < 1e-6,
            "seed {seed}: {} against {total}",
            m.totals.queue_delay_s
        );
        assert_eq!(m.totals.within_slo, within, "seed {seed}");
    }
}

#[test]
fn how_the_caller_splits_an_interval_changes_nothing() {
    // Property: random requests, tiers, deadlines, a shedding gate and batches of three;
    // 0 → 30 s in one call against the same in random pieces.
    let policy = QueuePolicy {
        deadline_s: vec![Some(4.0), Some(9.0)],
        shed_depth: None,
        ..policy()
    };
    let svc = Service {
        input_token_weight: 0.1,
        tokens_per_s: 600.0,
        request_tokens_per_s: 250.0,
        max_batch: 3,
    };
    let ready = BTreeMap::from([
        (
            "a".to_string(),
            ReplicaSpec {
                gpus: 1,
                service: svc,
            },
        ),
        (
            "b".to_string(),
            ReplicaSpec {
                gpus: 2,
                service: svc,
            },
        ),
    ]);
    let gate = Gate {
        max_queued: Some(6),
        ..shed_low()
    };
    let mut shed = 0;
    for seed in 0..200 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let reqs = random_requests(&mut rng, 150, 25.0);
        let run = |cuts: &[f64]| {
            let mut m = Model::new(&reqs, policy.clone(), true);
            m.set_ready(&ready);
            m.set_admission(&[gate]);
            let mut from = 0.0;
            for &to in cuts.iter().chain(&[30.0]) {
                m.advance(from, to);
                from = to;
            }
            m.finish(30.0);
            m.totals
        };
        let mut cuts: Vec<f64> = (0..rng.usize(1..20)).map(|_| rng.f64() * 30.0).collect();
        // Some cuts on arrivals: an arrival at a boundary belongs to the next call.
        cuts.extend(reqs.iter().step_by(40).map(|r| r.at_s));
        cuts.sort_by(f64::total_cmp);
        let (a, b) = (run(&[]), run(&cuts));
        let counts = |t: &Totals| {
            (
                t.requests,
                t.within_slo,
                t.missed,
                t.shed,
                t.timed_out,
                t.served,
                t.peak_waiting,
                t.by_tier.clone(),
            )
        };
        assert_eq!(counts(&a), counts(&b), "seed {seed}, cuts {cuts:?}");
        for (x, y) in [
            (a.queue_delay_s, b.queue_delay_s),
            (a.busy_gpu_s, b.busy_gpu_s),
            (a.ready_gpu_s, b.ready_gpu_s),
        ] {
            assert!((x - y).abs() < 1e-6, "seed {seed}: {x} against {y}");
        }
        shed += a.shed;
    }
    assert!(shed > 0, "the gate never shed: the property missed a rule");
}

#[test]
fn an_idle_stretch_is_one_jump() {
    // Two requests a day apart: the model stops at each arrival and completion, not every
    // 100 ms of the 86,400 s between them.
    let reqs = vec![req(10.0, 0), req(86_410.0, 0)];
    let mut m = Model::new(&reqs, policy(), false);
    m.set_ready(&one(service()));
    m.advance(0.0, 90_000.0);
    assert_eq!(m.totals.served, 2);
    assert!(m.passes <= 6, "{} passes", m.passes);
    assert!((m.totals.busy_gpu_s - 0.8).abs() < 1e-9);
    assert_eq!(m.totals.ready_gpu_s, 90_000.0);
}
