//! Ledger behaviour, one suite run against both backends: a real SQLite file and a real
//! PostgreSQL database (a fresh one per test on the server `DATABASE_URL` names).

use std::sync::Arc;

use headroom_core::planner::Destination;
use headroom_core::{
    Budget, BudgetPeriod, HardAction, Market, Money, NodeId, NodeState, Priority, ProviderKind,
    RefusalReason, RequestState, Timestamp,
};
use headroom_ledger::prelude::*;
use headroom_ledger::{
    HoldOutcome, IdempotencyKey, LedgerError, NewCapacityRequest, NodeEvent, PostgresLedger,
    RefusalRecord, RequestPageQuery, SqliteLedger,
};

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

async fn sqlite() -> (tempfile::TempDir, SqliteLedger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open_path(&dir.path().join("ledger.db"))
        .await
        .unwrap();
    (dir, ledger)
}

fn new_request(key: Option<&str>, replicas: u32) -> NewCapacityRequest {
    NewCapacityRequest {
        pool: "llama".parse().unwrap(),
        replicas,
        priority: Priority::High,
        idempotency_key: key.map(|key| IdempotencyKey {
            account: "ml".parse().unwrap(),
            key: key.to_string(),
        }),
        at: t("2026-11-30T09:00:00Z"),
    }
}

fn event(
    node: &str,
    state: NodeState,
    at: &str,
    request: Option<&headroom_core::RequestId>,
    reason: &str,
) -> NodeEvent {
    NodeEvent {
        node: NodeId(node.into()),
        pool: "llama".parse().unwrap(),
        account: "ml".parse().unwrap(),
        offering: "use1-g5".parse().unwrap(),
        provider: ProviderKind::Sim,
        region: "us-east-1".into(),
        zone: "use1-az1".into(),
        instance_type: "g5.xlarge".into(),
        market: Market::OnDemand,
        request: request.cloned(),
        destination: Destination::Serve,
        state,
        instance: Some(format!("i-{node}")),
        client_token: format!("tok-{node}"),
        price_usd_per_hour: "1.006".parse().unwrap(),
        parked_usd_per_hour: Money::ZERO,
        gpus: 1,
        hold: if reason == "launch" {
            "1.006".parse().unwrap()
        } else {
            Money::ZERO
        },
        reason: Some(reason.into()),
        at: t(at),
    }
}

async fn idempotency_key_returns_the_first_request(ledger: &dyn Ledger) {
    let (first, created) = ledger
        .record_capacity_request(&new_request(Some("k1"), 2))
        .await
        .unwrap();
    assert!(created);
    let (again, created) = ledger
        .record_capacity_request(&new_request(Some("k1"), 2))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(again.id, first.id);
    match ledger
        .record_capacity_request(&new_request(Some("k1"), 3))
        .await
    {
        Err(LedgerError::IdempotencyConflict { existing, .. }) => assert_eq!(existing, first.id),
        other => panic!("a reused key with another body must conflict, got {other:?}"),
    }
    let (other, created) = ledger
        .record_capacity_request(&new_request(None, 2))
        .await
        .unwrap();
    assert!(created);
    assert_ne!(other.id, first.id);

    // Another account's use of the same key is its own request: it neither replays nor
    // conflicts with the first account's, and the client's key reads back as sent.
    let mut theirs = new_request(Some("k1"), 3);
    theirs.pool = "mistral".parse().unwrap();
    if let Some(key) = theirs.idempotency_key.as_mut() {
        key.account = "team-b".parse().unwrap();
    }
    let (their_request, created) = ledger.record_capacity_request(&theirs).await.unwrap();
    assert!(created, "a key is scoped to the account it charges");
    assert_ne!(their_request.id, first.id);
    assert_eq!(their_request.idempotency_key.as_deref(), Some("k1"));
    let (replayed, created) = ledger.record_capacity_request(&theirs).await.unwrap();
    assert!(!created);
    assert_eq!(replayed.id, their_request.id);
    let read = ledger.capacity_request(&first.id).await.unwrap().unwrap();
    assert_eq!(read.request.idempotency_key.as_deref(), Some("k1"));
}

/// Capacity requests arriving together share writes: with one key sent four times at once,
/// exactly one caller creates the request and the others get it back (or a conflict when their
/// body differs); requests without a key are each their own. The ledger holds one row per key
/// and per keyless request, and every request reads back as its caller was answered.
async fn concurrent_requests_resolve_each_key_once(ledger: Arc<dyn Ledger>) {
    const KEYS: u32 = 12;
    let mut tasks = tokio::task::JoinSet::new();
    for copy in 0..4 {
        for k in 0..KEYS {
            let ledger = ledger.clone();
            tasks.spawn(async move {
                // The fourth copy of every third key asks for something else.
                let replicas = if copy == 3 && k % 3 == 0 { 3 } else { 2 };
                let key = format!("k{k}");
                let answer = ledger
                    .record_capacity_request(&new_request(Some(&key), replicas))
                    .await;
                (Some(k), replicas, answer)
            });
        }
        let ledger = ledger.clone();
        tasks.spawn(async move {
            let answer = ledger.record_capacity_request(&new_request(None, 1)).await;
            (None, 1, answer)
        });
    }
    let mut by_key: std::collections::BTreeMap<u32, Vec<(u32, bool, headroom_core::RequestId)>> =
        Default::default();
    let mut keyless = std::collections::BTreeSet::new();
    let mut conflicts = Vec::new();
    while let Some(done) = tasks.join_next().await {
        match done.unwrap() {
            (Some(k), replicas, Ok((request, created))) => {
                assert_eq!(
                    request.idempotency_key.as_deref(),
                    Some(format!("k{k}").as_str())
                );
                by_key
                    .entry(k)
                    .or_default()
                    .push((replicas, created, request.id))
            }
            (None, _, Ok((request, created))) => {
                assert!(created, "a request without a key is always new");
                assert!(
                    keyless.insert(request.id),
                    "each keyless request is its own"
                );
            }
            (k, replicas, Err(LedgerError::IdempotencyConflict { existing, .. })) => {
                conflicts.push((k, replicas, existing))
            }
            (k, _, Err(other)) => panic!("key {k:?}: {other}"),
        }
    }
    assert_eq!(keyless.len(), 4);
    for k in 0..KEYS {
        let answers = by_key.remove(&k).unwrap_or_default();
        let created: Vec<_> = answers.iter().filter(|(_, c, _)| *c).collect();
        assert_eq!(created.len(), 1, "k{k}: created once, answers {answers:?}");
        let id = &created[0].2;
        assert!(
            answers.iter().all(|(_, _, other)| other == id),
            "k{k}: one request"
        );
        let stored = ledger.capacity_request(id).await.unwrap().unwrap().request;
        // Whichever body came first owns the key; a differing one conflicts, naming it.
        for (_, replicas, existing) in conflicts.iter().filter(|(c, _, _)| *c == Some(k)) {
            assert_eq!(
                existing, id,
                "k{k}: the conflict names the request holding the key"
            );
            assert_ne!(*replicas, stored.replicas);
        }
        for (replicas, _, _) in &answers {
            assert_eq!(
                *replicas, stored.replicas,
                "k{k}: a replay has the stored body"
            );
        }
    }
    let summary = ledger.summary(t("2026-11-30T10:00:00Z")).await.unwrap();
    assert_eq!(summary.capacity_requests, u64::from(KEYS) + 4);
}

/// The live nodes are each node's last event where that is not final, in ledger order: checked
/// against the definition on interleaved histories (nodes ended, renewed many times, parked).
async fn live_nodes_are_each_node_s_last_event_not_final(ledger: &dyn Ledger) {
    assert!(
        ledger.live_nodes().await.unwrap().is_empty(),
        "an empty ledger"
    );
    let at = |m: i64| t("2026-11-30T09:00:00Z") + chrono::Duration::minutes(m);
    // Node ids that do not sort like their order of creation, so that the walk by id and the
    // order by sequence differ.
    let nodes = ["n-c", "n-a", "n-e", "n-b", "n-d", "n-f"];
    for (i, node) in nodes.iter().enumerate() {
        let mut e = event(
            node,
            NodeState::Requested,
            "2026-11-30T09:00:00Z",
            None,
            "launch",
        );
        e.at = at(i as i64);
        ledger.append_node_event(&e).await.unwrap();
    }
    for round in 0..5 {
        for (i, node) in nodes.iter().enumerate() {
            let state = match (i, round) {
                // n-a ends early, n-b late; n-d is parked and woken again and again.
                (1, 1..) | (3, 4) => NodeState::Terminated,
                (4, r) if r % 2 == 0 => NodeState::Warm,
                (_, 0) => NodeState::Booting,
                _ => NodeState::Serving,
            };
            if (i, round) == (1, 2) || (i, round) == (1, 3) || (i, round) == (1, 4) {
                continue;
            }
            let mut e = event(node, state, "2026-11-30T09:00:00Z", None, "renewal");
            e.at = at(10 + round * 10 + i as i64);
            ledger.append_node_event(&e).await.unwrap();
        }
    }
    let all = ledger.node_events().await.unwrap();
    let mut last: std::collections::BTreeMap<String, NodeEvent> = Default::default();
    for e in all {
        last.insert(e.node.0.clone(), e);
    }
    let mut expected: Vec<NodeEvent> = last.into_values().filter(|e| !e.state.is_final()).collect();
    expected.sort_by_key(|e| e.at);
    let live = ledger.live_nodes().await.unwrap();
    let names = |v: &[NodeEvent]| {
        v.iter()
            .map(|e| (e.node.0.clone(), e.state))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&live), names(&expected));
    assert_eq!(
        names(&live),
        [
            ("n-c".to_string(), NodeState::Serving),
            ("n-e".to_string(), NodeState::Serving),
            ("n-d".to_string(), NodeState::Warm),
            ("n-f".to_string(), NodeState::Serving),
        ]
    );
}

async fn outcome_follows_node_events_and_refusals(ledger: &dyn Ledger) {
    let (req, _) = ledger
        .record_capacity_request(&new_request(None, 2))
        .await
        .unwrap();
    let outcome = ledger.capacity_request(&req.id).await.unwrap().unwrap();
    assert_eq!(
        (outcome.state, outcome.delivered),
        (RequestState::Pending, 0)
    );

    for (state, at, reason) in [
        (NodeState::Requested, "2026-11-30T09:00:00Z", "launch"),
        (NodeState::Launching, "2026-11-30T09:00:01Z", "accepted"),
        (NodeState::Booting, "2026-11-30T09:00:02Z", "running"),
        (NodeState::Serving, "2026-11-30T09:04:02Z", "ready"),
    ] {
        ledger
            .append_node_event(&event("n1", state, at, Some(&req.id), reason))
            .await
            .unwrap();
    }
    let outcome = ledger.capacity_request(&req.id).await.unwrap().unwrap();
    assert_eq!(
        (outcome.state, outcome.delivered),
        (RequestState::PartiallyDelivered, 1)
    );
    assert_eq!(ledger.live_nodes().await.unwrap().len(), 1);

    ledger
        .append_refusal(&RefusalRecord {
            pool: "llama".parse().unwrap(),
            request: Some(req.id.clone()),
            node: None,
            offering: None,
            replicas: 1,
            reason: RefusalReason::MaxReplicas,
            detail: "pool llama is at max_replicas 1".into(),
            at: t("2026-11-30T09:00:00Z"),
        })
        .await
        .unwrap();
    let outcome = ledger.capacity_request(&req.id).await.unwrap().unwrap();
    assert_eq!(outcome.state, RequestState::PartiallyDelivered);
    assert_eq!(outcome.refusals.len(), 1);
    assert!(
        ledger
            .open_capacity_requests()
            .await
            .unwrap()
            .iter()
            .all(|r| r.id != req.id),
        "a closing refusal ends the request"
    );

    ledger
        .append_node_event(&event(
            "n1",
            NodeState::Terminated,
            "2026-11-30T10:00:02Z",
            Some(&req.id),
            "release",
        ))
        .await
        .unwrap();
    assert!(ledger.live_nodes().await.unwrap().is_empty());

    // Spend: booting 4 min + serving 56 min = one hour at $1.006.
    let summary = ledger.summary(t("2026-11-30T12:00:00Z")).await.unwrap();
    assert_eq!(summary.spend, "1.006".parse().unwrap());
    assert_eq!(
        (summary.capacity_requested, summary.capacity_delivered),
        (1, 1)
    );
    assert_eq!(summary.refusals_by_reason.get("max_replicas"), Some(&1));
}

/// Pages of capacity requests: newest first by (created_at, id), each request once across a
/// walk, the filters applied in the query (the state derived there exactly as the outcome
/// derives it), and the limit honoured.
async fn capacity_requests_page_newest_first_with_filters(ledger: &dyn Ledger) {
    let llama: headroom_core::PoolName = "llama".parse().unwrap();
    let other: headroom_core::PoolName = "other".parse().unwrap();
    // 30 requests, three to an instant (ties broken by id), plus one of another pool.
    let mut ids = Vec::new();
    for i in 0..30 {
        let mut new = new_request(None, 2);
        new.at = t("2026-11-30T09:00:00Z") + chrono::Duration::seconds(i / 3);
        ids.push(ledger.record_capacity_request(&new).await.unwrap().0.id);
    }
    let mut foreign = new_request(None, 1);
    foreign.pool = other.clone();
    ledger.record_capacity_request(&foreign).await.unwrap();
    // One request of each state: delivered, partially delivered, refused, cancelled; the
    // rest pending.
    for (node, request) in [("d1", &ids[0]), ("d2", &ids[0]), ("p1", &ids[1])] {
        ledger
            .append_node_event(&event(
                node,
                NodeState::Serving,
                "2026-11-30T09:05:00Z",
                Some(request),
                "ready",
            ))
            .await
            .unwrap();
    }
    ledger
        .append_refusal(&RefusalRecord {
            pool: llama.clone(),
            request: Some(ids[2].clone()),
            node: None,
            offering: None,
            replicas: 2,
            reason: RefusalReason::Budget,
            detail: "over budget".into(),
            at: t("2026-11-30T09:00:01Z"),
        })
        .await
        .unwrap();
    ledger
        .cancel_capacity_request(&ids[3], t("2026-11-30T09:00:02Z"))
        .await
        .unwrap();

    let pools = [llama.clone()];
    let page = |state, since, before, limit| RequestPageQuery {
        pools: &pools,
        state,
        since,
        before,
        limit,
    };
    // A walk of pages of 7: every request once, newest first.
    let mut walked = Vec::new();
    let mut before = None;
    loop {
        let got = ledger
            .capacity_request_page(&page(None, None, before.clone(), 7))
            .await
            .unwrap();
        assert!(got.len() <= 7);
        let Some(last) = got.last() else { break };
        before = Some((last.request.created_at, last.request.id.clone()));
        walked.extend(got);
    }
    assert_eq!(walked.len(), 30);
    for pair in walked.windows(2) {
        let key =
            |o: &headroom_ledger::RequestOutcome| (o.request.created_at, o.request.id.clone());
        assert!(key(&pair[0]) > key(&pair[1]), "newest first, no repeats");
    }
    // Each outcome is what reading the request alone derives.
    for outcome in &walked {
        let single = ledger
            .capacity_request(&outcome.request.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(outcome, &single);
    }
    // The state filter agrees with the derived state, for every state.
    for state in RequestState::ALL {
        let got = ledger
            .capacity_request_page(&page(Some(state), None, None, 100))
            .await
            .unwrap();
        let expected = walked.iter().filter(|o| o.state == state).count();
        assert_eq!(got.len(), expected, "{state:?}");
        assert!(got.iter().all(|o| o.state == state));
        let wanted = if state == RequestState::Pending {
            26
        } else {
            1
        };
        assert_eq!(expected, wanted, "{state:?}");
    }
    // `since` is inclusive; other pools are out unless asked for; an empty pool list reads
    // nothing.
    let since = ledger
        .capacity_request_page(&page(None, Some(t("2026-11-30T09:00:08Z")), None, 100))
        .await
        .unwrap();
    assert_eq!(since.len(), 6);
    let both = [llama, other];
    let all = ledger
        .capacity_request_page(&RequestPageQuery {
            pools: &both,
            state: None,
            since: None,
            before: None,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 31);
    let none = ledger
        .capacity_request_page(&RequestPageQuery {
            pools: &[],
            state: None,
            since: None,
            before: None,
            limit: 100,
        })
        .await
        .unwrap();
    assert!(none.is_empty());
}

/// Pages of a pool's node events (in ledger order, within a range) and of its decision log
/// (newest first), keyed by sequence number.
async fn event_and_decision_pages_by_sequence(ledger: &dyn Ledger) {
    let llama: headroom_core::PoolName = "llama".parse().unwrap();
    for i in 0..12 {
        let at = t("2026-11-30T09:00:00Z") + chrono::Duration::minutes(i);
        let mut e = event(
            &format!("n{i}"),
            NodeState::Requested,
            "2026-11-30T09:00:00Z",
            None,
            "launch",
        );
        e.at = at;
        ledger.append_node_event(&e).await.unwrap();
        ledger
            .append_decision(&llama, at, &format!(r#"{{"n": {i}}}"#))
            .await
            .unwrap();
    }
    let (from, to) = (t("2026-11-30T09:02:00Z"), t("2026-11-30T09:10:00Z"));
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = ledger
            .pool_event_page(&llama, from, to, after, 3)
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.seq);
        seen.extend(page.into_iter().map(|r| (r.seq, r.row.node.0)));
    }
    let nodes: Vec<&str> = seen.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(nodes, ["n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"]);
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(
        ledger
            .pool_event_page(&"other".parse().unwrap(), from, to, None, 3)
            .await
            .unwrap()
            .is_empty()
    );

    let mut records = Vec::new();
    let mut before = None;
    loop {
        let page = ledger.decision_page(&llama, before, 5).await.unwrap();
        let Some(last) = page.last() else { break };
        before = Some(last.seq);
        records.extend(page.into_iter().map(|r| r.row));
    }
    let expected: Vec<String> = (0..12).rev().map(|i| format!(r#"{{"n": {i}}}"#)).collect();
    assert_eq!(records, expected);
}

async fn cancellation_is_recorded_once(ledger: &dyn Ledger) {
    let (req, _) = ledger
        .record_capacity_request(&new_request(None, 1))
        .await
        .unwrap();
    let at = t("2026-11-30T09:30:00Z");
    assert_eq!(
        ledger
            .cancel_capacity_request(&req.id, at)
            .await
            .unwrap()
            .state,
        RequestState::Cancelled
    );
    assert_eq!(
        ledger
            .cancel_capacity_request(&req.id, at)
            .await
            .unwrap()
            .state,
        RequestState::Cancelled
    );
    assert!(
        ledger
            .open_capacity_requests()
            .await
            .unwrap()
            .iter()
            .all(|r| r.id != req.id)
    );
    let unknown = headroom_core::RequestId("cr-nope".into());
    let (open, _) = ledger
        .record_capacity_request(&new_request(None, 1))
        .await
        .unwrap();
    // One query for the whole list (the engine asks every tick), the same answer as one by one.
    let cancelled = ledger
        .cancelled_requests(&[req.id.clone(), open.id.clone(), unknown.clone()])
        .await
        .unwrap();
    assert_eq!(cancelled, std::collections::HashSet::from([req.id.clone()]));
    assert!(matches!(
        ledger.cancel_capacity_request(&unknown, at).await,
        Err(LedgerError::UnknownRequest(_))
    ));
}

/// Whether a refusal closes a request is the core's call (`RefusalReason::closes_request`): the
/// ledger's open list and its outcomes must agree with it for every reason there is.
async fn refusals_close_requests_as_the_core_says(ledger: &dyn Ledger) {
    for reason in RefusalReason::ALL {
        let (req, _) = ledger
            .record_capacity_request(&new_request(None, 1))
            .await
            .unwrap();
        ledger
            .append_refusal(&RefusalRecord {
                pool: "llama".parse().unwrap(),
                request: Some(req.id.clone()),
                node: None,
                offering: None,
                replicas: 1,
                reason,
                detail: format!("refused: {reason}"),
                at: t("2026-11-30T09:00:01Z"),
            })
            .await
            .unwrap();
        let open = ledger
            .open_capacity_requests()
            .await
            .unwrap()
            .iter()
            .any(|r| r.id == req.id);
        let state = ledger
            .capacity_request(&req.id)
            .await
            .unwrap()
            .unwrap()
            .state;
        if reason.closes_request() {
            assert!(!open, "a request refused with {reason} must not stay open");
            assert_eq!(state, RequestState::Refused, "{reason}");
        } else {
            assert!(open, "a request refused with {reason} must stay open");
            assert_eq!(state, RequestState::Pending, "{reason}");
        }
    }
}

/// The outbox keeps the newest `ALERT_OUTBOX_BOUND` pending notifications, oldest first, and
/// closes the rest as dropped; a delivered one leaves the queue once.
async fn alert_outbox_is_bounded(ledger: &dyn Ledger) {
    let at = t("2026-11-30T09:00:00Z");
    let bound = headroom_ledger::ALERT_OUTBOX_BOUND;
    let mut pushed_out = 0;
    for n in 0..bound + 3 {
        pushed_out += ledger
            .enqueue_alert("https://hooks.example/a", &format!("alert {n}"), at)
            .await
            .unwrap();
    }
    assert_eq!(pushed_out, 3, "each enqueue says how many it pushed out");
    let pending = ledger.pending_alerts(bound + 10).await.unwrap();
    assert_eq!(pending.len() as i64, bound);
    assert_eq!(pending[0].body, "alert 3", "the oldest three were dropped");
    assert!(pending.windows(2).all(|w| w[0].seq < w[1].seq));
    let first = pending[0].seq;
    ledger.alert_delivered(first, at).await.unwrap();
    ledger.alert_delivered(first, at).await.unwrap();
    let pending = ledger.pending_alerts(2).await.unwrap();
    assert_eq!(pending.len(), 2);
    assert_eq!(pending[0].body, "alert 4");
    // A dropped notification leaves the queue too; closing it again is no error.
    ledger.alert_dropped(pending[0].seq, at).await.unwrap();
    ledger.alert_delivered(pending[0].seq, at).await.unwrap();
    let next = ledger.pending_alerts(1).await.unwrap();
    assert_eq!(next[0].body, "alert 5");
    assert_eq!(
        ledger.pending_alert_count().await.unwrap() as i64,
        bound - 2
    );
}

/// A pool's demand by minute reads back in order from a minute on; a minute written twice
/// keeps its first value; another pool's minutes stay apart.
async fn demand_minutes_round_trip(ledger: &dyn Ledger) {
    let (llama, other) = ("llama".parse().unwrap(), "other".parse().unwrap());
    let minutes: Vec<(i64, u32)> = (0..700).map(|m| (29_400_000 + m, (m % 9) as u32)).collect();
    ledger
        .record_demand_minutes(&llama, &minutes)
        .await
        .unwrap();
    ledger
        .record_demand_minutes(&llama, &[(29_400_000, 99), (29_400_700, 4)])
        .await
        .unwrap();
    ledger
        .record_demand_minutes(&other, &[(29_400_001, 7)])
        .await
        .unwrap();
    let back = ledger.demand_minutes(&llama, 29_400_000).await.unwrap();
    assert_eq!(back.len(), 701);
    assert_eq!(back[0], (29_400_000, 0), "the first value stands");
    assert_eq!(back[700], (29_400_700, 4));
    assert!(back.windows(2).all(|w| w[0].0 < w[1].0));
    let later = ledger.demand_minutes(&llama, 29_400_690).await.unwrap();
    assert_eq!(later.len(), 11);
}

/// A pool's controller memory reads back as its latest row; an instant written twice keeps its
/// first body; another pool's memory stays apart; a pool never written has none.
async fn controller_memory_round_trip(ledger: &dyn Ledger) {
    let (llama, other) = ("llama".parse().unwrap(), "other".parse().unwrap());
    assert_eq!(ledger.controller_memory(&llama).await.unwrap(), None);
    let at = t("2026-11-30T09:00:00.250Z");
    let later = at + chrono::Duration::milliseconds(1001);
    let body = format!(
        r#"{{"target": 3, "levels": [{}]}}"#,
        vec!["[\"2026-11-30T09:00:00Z\", 2]"; 900].join(", ")
    );
    ledger
        .record_controller_memory(&llama, at, &body)
        .await
        .unwrap();
    ledger
        .record_controller_memory(&llama, later, r#"{"target": 4}"#)
        .await
        .unwrap();
    ledger
        .record_controller_memory(&llama, later, r#"{"target": 99}"#)
        .await
        .unwrap();
    ledger
        .record_controller_memory(&other, later + chrono::Duration::seconds(5), &body)
        .await
        .unwrap();
    assert_eq!(
        ledger.controller_memory(&llama).await.unwrap(),
        Some((later, r#"{"target": 4}"#.to_string())),
        "the latest row, and the first body written at its instant"
    );
    let (at_back, body_back) = ledger.controller_memory(&other).await.unwrap().unwrap();
    assert_eq!(
        (at_back, body_back.len()),
        (later + chrono::Duration::seconds(5), body.len())
    );
}

/// A scope's alert book reads back as its latest row (an empty list once all resolved); an
/// instant written twice keeps its first body; the deployment-wide scope ("") and a pool's stay
/// apart; a scope never written has none.
async fn alert_book_round_trip(ledger: &dyn Ledger) {
    assert_eq!(ledger.alert_book("llama").await.unwrap(), None);
    let at = t("2026-11-30T09:00:00.250Z");
    let later = at + chrono::Duration::milliseconds(1001);
    let firing = r#"[{"alert": {"name": "PoolSignalsMissing"}}]"#;
    ledger.record_alert_book("llama", at, firing).await.unwrap();
    ledger
        .record_alert_book("llama", later, "[]")
        .await
        .unwrap();
    ledger
        .record_alert_book("llama", later, firing)
        .await
        .unwrap();
    ledger
        .record_alert_book("", later + chrono::Duration::seconds(5), firing)
        .await
        .unwrap();
    assert_eq!(
        ledger.alert_book("llama").await.unwrap(),
        Some((later, "[]".to_string())),
        "the latest row, and the first body written at its instant"
    );
    assert_eq!(
        ledger.alert_book("").await.unwrap(),
        Some((later + chrono::Duration::seconds(5), firing.to_string()))
    );
    assert_eq!(ledger.alert_book("other").await.unwrap(), None);
}

/// Windows declared through the API read back until cancelled; a retried add keeps the first;
/// a cancellation names the window's own pool.
async fn schedule_windows_round_trip(ledger: &dyn Ledger) {
    let (llama, other): (headroom_core::PoolName, headroom_core::PoolName) =
        ("llama".parse().unwrap(), "other".parse().unwrap());
    let at = t("2026-11-30T09:00:00Z");
    let spec = r#"{"name": "launch", "min_replicas": 4}"#;
    ledger
        .add_schedule_window("w-1", &llama, at, spec)
        .await
        .unwrap();
    ledger
        .add_schedule_window("w-1", &llama, at, r#"{"name": "retry"}"#)
        .await
        .unwrap();
    ledger
        .add_schedule_window("w-2", &other, at + chrono::Duration::seconds(1), spec)
        .await
        .unwrap();
    let windows = ledger.schedule_windows().await.unwrap();
    assert_eq!(windows.len(), 2);
    assert_eq!((windows[0].id.as_str(), &windows[0].pool), ("w-1", &llama));
    assert_eq!(windows[0].at, at);
    assert!(
        windows[0].spec.contains("launch") && !windows[0].spec.contains("retry"),
        "the first add stands: {}",
        windows[0].spec
    );
    assert!(
        !ledger
            .cancel_schedule_window(&other, "w-1", at)
            .await
            .unwrap(),
        "another pool's window is not this pool's to cancel"
    );
    assert!(
        ledger
            .cancel_schedule_window(&llama, "w-1", at)
            .await
            .unwrap()
    );
    assert!(
        !ledger
            .cancel_schedule_window(&llama, "w-1", at)
            .await
            .unwrap()
    );
    let left = ledger.schedule_windows().await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].id, "w-2");
}

async fn decisions_and_tokens_round_trip(ledger: &dyn Ledger) {
    let pool = "llama".parse().unwrap();
    // Written as Postgres prints JSONB, so both backends read back the same text.
    let records = [r#"{"n": 1, "why": "scale"}"#, r#"{"n": 2, "why": "hold"}"#];
    for (i, record) in records.iter().enumerate() {
        let at = t("2026-11-30T09:00:00Z") + chrono::Duration::seconds(i as i64);
        ledger.append_decision(&pool, at, record).await.unwrap();
    }
    assert_eq!(
        ledger.decisions(&pool, 10).await.unwrap(),
        vec![records[1].to_string(), records[0].to_string()],
        "newest first"
    );
    assert_eq!(ledger.decisions(&pool, 1).await.unwrap().len(), 1);
    assert!(
        ledger
            .decisions(&"other".parse().unwrap(), 10)
            .await
            .unwrap()
            .is_empty()
    );

    let token = |id: &str, created: &str| headroom_ledger::ApiToken {
        id: id.into(),
        secret_sha256: format!("sha-{id}"),
        accounts: vec!["ml".into(), "research".into()],
        scopes: vec!["read".into()],
        created_at: t(created),
        revoked_at: None,
    };
    let (a, b) = (
        token("tok-a", "2026-11-30T09:00:00Z"),
        token("tok-b", "2026-11-30T08:00:00Z"),
    );
    ledger.create_token(&a).await.unwrap();
    ledger.create_token(&b).await.unwrap();
    assert_eq!(ledger.tokens().await.unwrap(), vec![b.clone(), a.clone()]);
    let revoked_at = t("2026-11-30T10:00:00Z");
    assert!(ledger.revoke_token("tok-a", revoked_at).await.unwrap());
    assert!(
        ledger
            .revoke_token("tok-a", t("2026-11-30T11:00:00Z"))
            .await
            .unwrap()
    );
    assert!(!ledger.revoke_token("tok-nope", revoked_at).await.unwrap());
    let read = ledger.token("tok-a").await.unwrap().unwrap();
    assert_eq!(
        read.revoked_at,
        Some(revoked_at),
        "the first revocation counts"
    );
    assert_eq!(read.accounts, a.accounts);
    assert_eq!(ledger.token("tok-b").await.unwrap(), Some(b));
    assert_eq!(ledger.token("tok-nope").await.unwrap(), None);
}

/// Time windows are `[from, to)` and pool reads keep to their pool.
async fn windows_are_half_open(ledger: &dyn Ledger) {
    let at = |m: u32| t(&format!("2026-11-30T09:{m:02}:00Z"));
    let mut ids = vec![];
    for m in [0, 10, 20] {
        let (r, _) = ledger
            .record_capacity_request(&NewCapacityRequest {
                at: at(m),
                ..new_request(None, 1)
            })
            .await
            .unwrap();
        ledger
            .append_refusal(&RefusalRecord {
                pool: "llama".parse().unwrap(),
                request: Some(r.id.clone()),
                node: None,
                offering: Some("use1-g5".parse().unwrap()),
                replicas: 1,
                reason: RefusalReason::Cloud(headroom_core::ErrorClass::Capacity),
                detail: format!("refused at {m}"),
                at: at(m),
            })
            .await
            .unwrap();
        ids.push(r.id);
    }
    let outcomes = ledger
        .capacity_requests_between(&"llama".parse().unwrap(), at(0), at(20))
        .await
        .unwrap();
    let got: Vec<_> = outcomes.iter().map(|o| o.request.id.clone()).collect();
    assert_eq!(got, ids[..2]);
    assert_eq!(outcomes[0].refusals.len(), 1);
    assert!(
        ledger
            .capacity_requests_between(&"other".parse().unwrap(), at(0), at(30))
            .await
            .unwrap()
            .is_empty()
    );
    let refusals = ledger.refusals_between(at(10), at(21)).await.unwrap();
    let details: Vec<_> = refusals.iter().map(|r| r.detail.as_str()).collect();
    assert_eq!(details, ["refused at 10", "refused at 20"]);
    assert_eq!(refusals[0].offering, Some("use1-g5".parse().unwrap()));

    ledger
        .append_node_event(&event(
            "w1",
            NodeState::Requested,
            "2026-11-30T09:00:00Z",
            None,
            "launch",
        ))
        .await
        .unwrap();
    let mut elsewhere = event(
        "w2",
        NodeState::Requested,
        "2026-11-30T09:00:00Z",
        None,
        "launch",
    );
    elsewhere.pool = "other".parse().unwrap();
    ledger.append_node_event(&elsewhere).await.unwrap();
    let pool_events = ledger.pool_events(&"llama".parse().unwrap()).await.unwrap();
    assert_eq!(pool_events.len(), 1);
    assert_eq!(pool_events[0].node, NodeId("w1".into()));
    assert_eq!(ledger.live_nodes().await.unwrap().len(), 2);
    assert_eq!(ledger.summary(at(30)).await.unwrap().capacity_requested, 2);
}

/// Two hundred concurrent admissions against a budget that fits exactly fifty holds.
async fn concurrent_admissions_never_overspend(ledger: Arc<dyn Ledger>) {
    let now = t("2026-11-30T09:00:00Z");
    ledger
        .put_budget(
            &Budget {
                account: "ml".parse().unwrap(),
                period: BudgetPeriod::Day,
                ceiling: "50".parse().unwrap(),
                soft_threshold_percent: 80,
                hard_action: HardAction::Refuse,
            },
            now,
        )
        .await
        .unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..200 {
        let ledger = ledger.clone();
        tasks.spawn(async move {
            let mut e = event(
                &format!("c{n}"),
                NodeState::Requested,
                "2026-11-30T09:00:00Z",
                None,
                "launch",
            );
            e.hold = "1".parse().unwrap();
            ledger.place_hold(&e).await.unwrap()
        });
    }
    let mut admitted = 0;
    let mut over_budget = 0;
    while let Some(result) = tasks.join_next().await {
        match result.unwrap() {
            HoldOutcome::Placed => admitted += 1,
            HoldOutcome::OverBudget(standing) => {
                assert_eq!(
                    standing.held,
                    "50".parse().unwrap(),
                    "refused only once the ceiling is held"
                );
                over_budget += 1;
            }
        }
    }
    assert_eq!((admitted, over_budget), (50, 150));
    let budget = ledger
        .budget(&"ml".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    let standing = ledger.budget_standing(&budget, now).await.unwrap();
    assert_eq!(standing.held, "50".parse().unwrap());
    assert_eq!(
        ledger.live_nodes().await.unwrap().len(),
        50,
        "refused admissions write nothing"
    );
}

/// Sixteen accounts admitting at once, each against its own ceiling (account `i` fits `i + 1`
/// holds): no account passes its ceiling, and every caller gets the answer for its own event
/// (an admitted event is recorded under its account, a refused one is not, and a refusal
/// reports its own account's ceiling). With several ledgers (processes) on one database, the
/// same holds across them.
async fn concurrent_admissions_of_many_accounts(ledgers: Vec<Arc<dyn Ledger>>) {
    let ledger = ledgers[0].clone();
    let now = t("2026-11-30T09:00:00Z");
    const ACCOUNTS: u32 = 16;
    const ATTEMPTS: u32 = 24;
    for a in 0..ACCOUNTS {
        ledger
            .put_budget(
                &Budget {
                    account: format!("team-{a}").parse().unwrap(),
                    period: BudgetPeriod::Day,
                    ceiling: Money::from_micros(i64::from(a + 1) * 1_000_000),
                    soft_threshold_percent: 80,
                    hard_action: HardAction::Refuse,
                },
                now,
            )
            .await
            .unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..ATTEMPTS {
        for a in 0..ACCOUNTS {
            let ledger = ledgers[(n + a) as usize % ledgers.len()].clone();
            tasks.spawn(async move {
                let mut e = event(
                    &format!("a{a}-n{n}"),
                    NodeState::Requested,
                    "2026-11-30T09:00:00Z",
                    None,
                    "launch",
                );
                e.account = format!("team-{a}").parse().unwrap();
                e.hold = "1".parse().unwrap();
                let outcome = ledger.place_hold(&e).await.unwrap();
                (a, e.node, outcome)
            });
        }
    }
    let mut admitted: std::collections::BTreeMap<u32, std::collections::BTreeSet<NodeId>> =
        Default::default();
    let mut refused: std::collections::BTreeMap<u32, std::collections::BTreeSet<NodeId>> =
        Default::default();
    while let Some(result) = tasks.join_next().await {
        let (a, node, outcome) = result.unwrap();
        match outcome {
            HoldOutcome::Placed => admitted.entry(a).or_default().insert(node),
            HoldOutcome::OverBudget(standing) => {
                assert_eq!(
                    standing.ceiling,
                    Money::from_micros(i64::from(a + 1) * 1_000_000),
                    "a refusal answers with its own account's standing"
                );
                assert_eq!(standing.held, standing.ceiling, "refused only once full");
                refused.entry(a).or_default().insert(node)
            }
        };
    }
    for a in 0..ACCOUNTS {
        let account = format!("team-{a}").parse().unwrap();
        let mine = admitted.remove(&a).unwrap_or_default();
        assert_eq!(
            mine.len() as u32,
            a + 1,
            "team-{a} admits exactly its ceiling"
        );
        assert_eq!(
            refused.remove(&a).unwrap_or_default().len() as u32,
            ATTEMPTS - a - 1
        );
        let recorded: std::collections::BTreeSet<NodeId> = ledger
            .account_events(&account)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.node)
            .collect();
        assert_eq!(
            recorded, mine,
            "team-{a}: recorded exactly the admissions answered placed"
        );
        let budget = ledger.budget(&account).await.unwrap().unwrap();
        let standing = ledger.budget_standing(&budget, now).await.unwrap();
        assert_eq!(standing.held, budget.ceiling);
    }
}

/// Admissions of many accounts arriving together share transactions; one the database refuses
/// (a node with no GPUs breaks a CHECK) fails only its own caller: every other account's event
/// is admitted and recorded, and the refused one is not.
async fn an_admission_the_database_refuses_fails_alone(ledger: Arc<dyn Ledger>) {
    let now = t("2026-11-30T09:00:00Z");
    const ACCOUNTS: u32 = 24;
    for a in 0..=ACCOUNTS {
        ledger
            .put_budget(
                &Budget {
                    account: format!("team-{a}").parse().unwrap(),
                    period: BudgetPeriod::Day,
                    ceiling: "10".parse().unwrap(),
                    soft_threshold_percent: 80,
                    hard_action: HardAction::Refuse,
                },
                now,
            )
            .await
            .unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for round in 0..3 {
        for a in 0..=ACCOUNTS {
            let ledger = ledger.clone();
            tasks.spawn(async move {
                let mut e = event(
                    &format!("a{a}-r{round}"),
                    NodeState::Requested,
                    "2026-11-30T09:00:00Z",
                    None,
                    "launch",
                );
                e.account = format!("team-{a}").parse().unwrap();
                // The last account's second event is one the database refuses.
                if a == ACCOUNTS && round == 1 {
                    e.gpus = 0;
                }
                (a, round, ledger.place_hold(&e).await)
            });
        }
    }
    while let Some(done) = tasks.join_next().await {
        let (a, round, outcome) = done.unwrap();
        if a == ACCOUNTS && round == 1 {
            assert!(outcome.is_err(), "the refused event fails: {outcome:?}");
        } else {
            assert_eq!(
                outcome.unwrap(),
                HoldOutcome::Placed,
                "team-{a} round {round}"
            );
        }
    }
    for a in 0..=ACCOUNTS {
        let recorded = ledger
            .account_events(&format!("team-{a}").parse().unwrap())
            .await
            .unwrap();
        let expected = if a == ACCOUNTS { 2 } else { 3 };
        assert_eq!(recorded.len(), expected, "team-{a}'s events recorded");
        let budget = ledger
            .budget(&format!("team-{a}").parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        let standing = ledger.budget_standing(&budget, now).await.unwrap();
        assert_eq!(
            standing.held,
            Money::from_micros(1_006_000 * expected as i64),
            "team-{a} holds what it recorded"
        );
    }
}

/// Node events appended at once by many callers (nodes of a fleet changing state together, which
/// the ledger writes in shared batches) are each recorded once, every node's history in the order
/// its caller appended it, and an event the database refuses fails only its own caller.
async fn concurrent_appends_keep_each_nodes_order(ledger: Arc<dyn Ledger>) {
    const NODES: u32 = 30;
    let states = [
        (NodeState::Requested, "launch"),
        (NodeState::Launching, "accepted"),
        (NodeState::Booting, "booting"),
        (NodeState::Serving, "ready"),
        (NodeState::Terminated, "released"),
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..NODES {
        let ledger = ledger.clone();
        tasks.spawn(async move {
            let mut answers = Vec::new();
            for (i, (state, reason)) in states.iter().enumerate() {
                // Every event of a node at the same instant: only the order of appends orders them.
                let mut e = event(
                    &format!("n{n}"),
                    *state,
                    "2026-11-30T09:00:00Z",
                    None,
                    reason,
                );
                // Node 7's third event is one the database refuses.
                if n == 7 && i == 2 {
                    e.gpus = 0;
                }
                answers.push(ledger.append_node_event(&e).await);
                // Written twice (a retry after a lost answer): recorded once.
                if i == 1 {
                    answers.push(ledger.append_node_event(&e).await);
                }
            }
            (n, answers)
        });
    }
    while let Some(done) = tasks.join_next().await {
        let (n, answers) = done.unwrap();
        for (i, answer) in answers.iter().enumerate() {
            // Answers: launch, accepted, accepted again, booting, ready, released.
            if n == 7 && i == 3 {
                assert!(answer.is_err(), "n7's refused event fails: {answer:?}");
            } else {
                assert!(answer.is_ok(), "n{n} answer {i}: {answer:?}");
            }
        }
    }
    let recorded = ledger.node_events().await.unwrap();
    assert_eq!(recorded.len(), NODES as usize * states.len() - 1);
    for n in 0..NODES {
        let history: Vec<NodeState> = recorded
            .iter()
            .filter(|e| e.node.0 == format!("n{n}"))
            .map(|e| e.state)
            .collect();
        let expected: Vec<NodeState> = states
            .iter()
            .enumerate()
            .filter(|(i, _)| n != 7 || *i != 2)
            .map(|(_, (s, _))| *s)
            .collect();
        assert_eq!(history, expected, "n{n}'s history, in append order");
    }
}

/// Callers that give up while their admissions wait or run (a request timing out) leave every
/// other caller's answer true, and the ledger within its ceilings: an event answered placed is
/// recorded once, and an account holds exactly what it recorded.
async fn callers_that_give_up_leave_the_other_answers_true(ledger: Arc<dyn Ledger>) {
    let now = t("2026-11-30T09:00:00Z");
    const ACCOUNTS: u32 = 12;
    for a in 0..ACCOUNTS {
        ledger
            .put_budget(
                &Budget {
                    account: format!("team-{a}").parse().unwrap(),
                    period: BudgetPeriod::Day,
                    // Five of the eight launches below fit.
                    ceiling: Money::from_micros(5 * 1_006_000),
                    soft_threshold_percent: 80,
                    hard_action: HardAction::Refuse,
                },
                now,
            )
            .await
            .unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    let mut handles = Vec::new();
    for n in 0..8 {
        for a in 0..ACCOUNTS {
            let ledger = ledger.clone();
            handles.push(tasks.spawn(async move {
                let mut e = event(
                    &format!("a{a}-n{n}"),
                    NodeState::Requested,
                    "2026-11-30T09:00:00Z",
                    None,
                    "launch",
                );
                e.account = format!("team-{a}").parse().unwrap();
                (a, e.node.clone(), ledger.place_hold(&e).await.unwrap())
            }));
        }
    }
    tokio::task::yield_now().await;
    for (i, handle) in handles.iter().enumerate() {
        if i % 3 == 0 {
            handle.abort();
        }
    }
    let mut placed: std::collections::BTreeMap<u32, Vec<NodeId>> = Default::default();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok((a, node, HoldOutcome::Placed)) => placed.entry(a).or_default().push(node),
            Ok((_, _, HoldOutcome::OverBudget(standing))) => {
                assert_eq!(standing.held, standing.ceiling, "refused only once full")
            }
            Err(e) => assert!(e.is_cancelled(), "{e}"),
        }
    }
    for a in 0..ACCOUNTS {
        let account = format!("team-{a}").parse().unwrap();
        let recorded: Vec<NodeId> = ledger
            .account_events(&account)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.node)
            .collect();
        let unique: std::collections::BTreeSet<&NodeId> = recorded.iter().collect();
        assert_eq!(unique.len(), recorded.len(), "team-{a}: each event once");
        for node in placed.remove(&a).unwrap_or_default() {
            assert!(
                recorded.contains(&node),
                "team-{a}: {node:?} answered placed is recorded"
            );
        }
        let budget = ledger.budget(&account).await.unwrap().unwrap();
        let standing = ledger.budget_standing(&budget, now).await.unwrap();
        assert!(
            standing.held <= budget.ceiling,
            "team-{a} within its ceiling"
        );
        assert_eq!(
            standing.held,
            Money::from_micros(1_006_000 * recorded.len() as i64),
            "team-{a} holds what it recorded"
        );
    }
}

/// A renewal replaces what its node still holds: only the difference is admitted, the renewed
/// node reads back as its latest hold, and the summary does not count it as new capacity.
/// Account `ml`'s daily budget of `ceiling`, in force from 09:00.
async fn ml_day_budget(ledger: &dyn Ledger, ceiling: &str) -> Budget {
    let budget = Budget {
        account: "ml".parse().unwrap(),
        period: BudgetPeriod::Day,
        ceiling: ceiling.parse().unwrap(),
        soft_threshold_percent: 80,
        hard_action: HardAction::Refuse,
    };
    ledger
        .put_budget(&budget, t("2026-11-30T09:00:00Z"))
        .await
        .unwrap();
    budget
}

/// `node`'s launch intent at 09:00 at `price` an hour, holding `hold`.
fn held_launch(node: &str, price: &str, hold: &str) -> NodeEvent {
    let mut launch = event(
        node,
        NodeState::Requested,
        "2026-11-30T09:00:00Z",
        None,
        "launch",
    );
    launch.price_usd_per_hour = price.parse().unwrap();
    launch.hold = hold.parse().unwrap();
    launch
}

async fn a_renewal_admits_only_what_it_adds(ledger: Arc<dyn Ledger>) {
    let money = |s: &str| -> Money { s.parse().unwrap() };
    let budget = ml_day_budget(ledger.as_ref(), "3").await;
    // r1 holds $1 at $2/h and serves at once; r2 holds $1.5 and is not billed yet.
    let r1 = held_launch("r1", "2", "1");
    let mut r2 = r1.clone();
    r2.node = NodeId("r2".into());
    r2.hold = money("1.5");
    for e in [&r1, &r2] {
        assert_eq!(ledger.place_hold(e).await.unwrap(), HoldOutcome::Placed);
    }
    let serving = r1.next(NodeState::Serving, "ready", t("2026-11-30T09:00:00Z"));
    ledger.append_node_event(&serving).await.unwrap();
    // At 09:15 r1 spent $0.50 and holds $0.50; $0.50 is left. Renewing r1 for $1 adds $0.50.
    let renewal = NodeEvent::hold_renewal(&serving, money("1"), t("2026-11-30T09:15:00Z"));
    assert!(renewal.is_hold_renewal() && !renewal.begins_activation());
    assert_eq!(
        ledger.place_hold(&renewal).await.unwrap(),
        HoldOutcome::Placed
    );
    let standing = ledger
        .budget_standing(&budget, t("2026-11-30T09:15:00Z"))
        .await
        .unwrap();
    assert_eq!(
        (standing.spent, standing.held),
        (money("0.5"), money("2.5"))
    );
    // A minute later a renewal for $1.10 would add $0.1333 to $3 committed: refused.
    let again = NodeEvent::hold_renewal(&serving, money("1.1"), t("2026-11-30T09:16:00Z"));
    assert!(matches!(
        ledger.place_hold(&again).await.unwrap(),
        HoldOutcome::OverBudget(_)
    ));
    let nodes = [
        NodeId("r1".into()),
        NodeId("r2".into()),
        NodeId("none".into()),
    ];
    let holds = ledger.latest_holds(&nodes).await.unwrap();
    let latest: Vec<(&str, Money)> = holds.iter().map(|e| (e.node.0.as_str(), e.hold)).collect();
    assert_eq!(latest, [("r2", money("1.5")), ("r1", money("1"))]);
    let summary = ledger.summary(t("2026-11-30T09:16:00Z")).await.unwrap();
    assert_eq!(
        summary.capacity_delivered, 1,
        "a renewal is not new capacity"
    );
}

/// A node parked warm pays for its volumes at the parked price its events carry, read back from
/// the database: its spend counts in the summary and the budget's standing, its park places a
/// hold that replaces what its launch had left, a renewal while parked replaces that, and a
/// park hold the budget cannot carry is refused.
async fn a_parked_node_pays_and_holds_its_volumes(ledger: Arc<dyn Ledger>) {
    let money = |s: &str| -> Money { s.parse().unwrap() };
    let budget = ml_day_budget(ledger.as_ref(), "10").await;
    // p1 costs $2/h running and $0.50/h parked; it holds $2 and serves from 09:00.
    let mut launch = held_launch("p1", "2", "2");
    launch.parked_usd_per_hour = money("0.5");
    assert_eq!(
        ledger.place_hold(&launch).await.unwrap(),
        HoldOutcome::Placed
    );
    let serving = launch.next(NodeState::Serving, "ready", t("2026-11-30T09:00:00Z"));
    ledger.append_node_event(&serving).await.unwrap();
    // Parked at 10:00 (its launch hold spent) with $1 held for two hours of volumes.
    let mut parked = serving.next(NodeState::Warm, "released", t("2026-11-30T10:00:00Z"));
    parked.hold = money("1");
    assert_eq!(
        ledger.place_hold(&parked).await.unwrap(),
        HoldOutcome::Placed
    );

    let read = ledger.account_events(&budget.account).await.unwrap();
    assert_eq!(read.len(), 3);
    assert!(
        read.iter().all(|e| e.parked_usd_per_hour == money("0.5")),
        "the parked price reads back: {read:?}"
    );
    assert_eq!(read[2], parked);

    // At 11:00: $2 serving and $0.50 parked spent; $0.50 of the park's hold left.
    let at = t("2026-11-30T11:00:00Z");
    let standing = ledger.budget_standing(&budget, at).await.unwrap();
    assert_eq!(
        (standing.spent, standing.held),
        (money("2.5"), money("0.5"))
    );
    assert_eq!(ledger.summary(at).await.unwrap().spend, money("2.5"));

    // Renewed while parked: $1 afresh replaces the $0.50 left, so it adds $0.50.
    let renewal = NodeEvent::hold_renewal(&parked, money("1"), at);
    assert_eq!(renewal.parked_usd_per_hour, money("0.5"));
    assert_eq!(
        ledger.place_hold(&renewal).await.unwrap(),
        HoldOutcome::Placed
    );
    let standing = ledger.budget_standing(&budget, at).await.unwrap();
    assert_eq!((standing.spent, standing.held), (money("2.5"), money("1")));

    // p2 serves at $4/h with a $6 hold: $9.50 committed. At 11:30 it has spent $2 and holds $4;
    // p1 has spent $0.25 more and holds $0.75: $9.50 still. Parking p2 with $5 held adds $1.
    let mut p2 = launch.clone();
    p2.node = NodeId("p2".into());
    p2.client_token = "tok-p2".into();
    p2.price_usd_per_hour = money("4");
    p2.hold = money("6");
    p2.at = at;
    assert_eq!(ledger.place_hold(&p2).await.unwrap(), HoldOutcome::Placed);
    let p2_serving = p2.next(NodeState::Serving, "ready", at);
    ledger.append_node_event(&p2_serving).await.unwrap();
    let mut p2_parked = p2_serving.next(NodeState::Warm, "released", t("2026-11-30T11:30:00Z"));
    p2_parked.hold = money("5");
    match ledger.place_hold(&p2_parked).await.unwrap() {
        HoldOutcome::OverBudget(standing) => {
            assert_eq!(
                (standing.spent, standing.held),
                (money("4.75"), money("4.75"))
            );
        }
        HoldOutcome::Placed => panic!("a park hold over the ceiling was placed"),
    }
    // A $4.50 hold adds $0.50: it fits, to the cent.
    p2_parked.hold = money("4.5");
    assert_eq!(
        ledger.place_hold(&p2_parked).await.unwrap(),
        HoldOutcome::Placed
    );
}

async fn budgets_are_versioned(ledger: Arc<dyn Ledger>) {
    let now = t("2026-11-30T09:00:00Z");
    let mut budget = Budget {
        account: "team-a".parse().unwrap(),
        period: BudgetPeriod::Month,
        ceiling: "1000".parse().unwrap(),
        soft_threshold_percent: 80,
        hard_action: HardAction::Refuse,
    };
    ledger.put_budget(&budget, now).await.unwrap();
    budget.ceiling = "2500.5".parse().unwrap();
    budget.hard_action = HardAction::Clamp;
    ledger.put_budget(&budget, now).await.unwrap();
    assert_eq!(ledger.budgets().await.unwrap(), vec![budget.clone()]);
    assert_eq!(
        ledger.budget(&"team-b".parse().unwrap()).await.unwrap(),
        None
    );
}

/// Two processes admit for one account. The first remembers the head of the account's
/// checkpoint chain it wrote; the second then fills the budget. The first's next admission
/// would fit what it last saw, but not what the ledger holds: it is refused, with the
/// standing the ledger holds, and nothing of it is written. Then a hold renewal in the second
/// process and a new admission in the first each see the other's writes.
async fn a_process_whose_view_is_stale_decides_on_the_ledger(
    first: Arc<dyn Ledger>,
    second: Arc<dyn Ledger>,
) {
    let now = t("2026-11-30T09:00:00Z");
    let budget = Budget {
        account: "ml".parse().unwrap(),
        period: BudgetPeriod::Day,
        ceiling: "3".parse().unwrap(),
        soft_threshold_percent: 80,
        hard_action: HardAction::Refuse,
    };
    first.put_budget(&budget, now).await.unwrap();
    let launch = |node: &str| {
        let mut e = event(
            node,
            NodeState::Requested,
            "2026-11-30T09:00:00Z",
            None,
            "launch",
        );
        e.hold = "1".parse().unwrap();
        e
    };
    assert_eq!(
        first.place_hold(&launch("n1")).await.unwrap(),
        HoldOutcome::Placed
    );
    assert_eq!(
        second.place_hold(&launch("n2")).await.unwrap(),
        HoldOutcome::Placed
    );
    assert_eq!(
        second.place_hold(&launch("n3")).await.unwrap(),
        HoldOutcome::Placed
    );
    match first.place_hold(&launch("n4")).await.unwrap() {
        HoldOutcome::OverBudget(standing) => {
            assert_eq!(
                standing.held,
                "3".parse().unwrap(),
                "the ledger's standing, not the first's"
            )
        }
        placed => panic!("admitted past the ceiling on a stale view: {placed:?}"),
    }
    let nodes: std::collections::BTreeSet<String> = first
        .account_events(&budget.account)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.node.0)
        .collect();
    assert_eq!(nodes, ["n1", "n2", "n3"].map(String::from).into());
    // n1 ends in the first process; the second, whose view has it open, admits into the room.
    first
        .append_node_event(&launch("n1").next(
            NodeState::Refused,
            "capacity",
            t("2026-11-30T09:00:01Z"),
        ))
        .await
        .unwrap();
    let mut n5 = launch("n5");
    n5.at = t("2026-11-30T09:00:02Z");
    assert_eq!(second.place_hold(&n5).await.unwrap(), HoldOutcome::Placed);
    // The first, whose last write is two admissions behind, still sees the ceiling.
    let mut n6 = launch("n6");
    n6.at = t("2026-11-30T09:00:03Z");
    assert!(matches!(
        first.place_hold(&n6).await.unwrap(),
        HoldOutcome::OverBudget(_)
    ));
    let standing = first
        .budget_standing(&budget, t("2026-11-30T09:00:03Z"))
        .await
        .unwrap();
    assert_eq!(standing.held, "3".parse().unwrap());
}

/// Runs every behaviour check against one backend, each on a fresh ledger.
/// A reader that keeps what it read under a revision sees every write it guards move it, and
/// nothing else; the live nodes kept from the events after a sequence number are the live
/// nodes, wherever the backend offers that chain.
async fn revisions_move_with_the_writes_they_guard(ledger: &dyn Ledger) {
    let moved = |a: Option<i64>, b: Option<i64>| a.is_some() && a != b;
    let r0 = ledger.revision().await.unwrap();
    ml_day_budget(ledger, "10").await;
    let r1 = ledger.revision().await.unwrap();
    assert!(r1.budgets.is_some(), "both backends count budget versions");
    assert!(moved(r1.budgets, r0.budgets), "{r0:?} then {r1:?}");
    assert_eq!((r1.windows, r1.requests), (r0.windows, r0.requests));
    let at = t("2026-11-30T09:00:00Z");
    let llama: headroom_core::PoolName = "llama".parse().unwrap();
    ledger
        .add_schedule_window(
            "w-1",
            &llama,
            at,
            r#"{"name": "launch", "min_replicas": 2}"#,
        )
        .await
        .unwrap();
    let r2 = ledger.revision().await.unwrap();
    assert!(r2.windows.is_some(), "both backends count windows");
    assert!(moved(r2.windows, r1.windows));
    assert!(
        ledger
            .cancel_schedule_window(&llama, "w-1", at)
            .await
            .unwrap()
    );
    let r3 = ledger.revision().await.unwrap();
    assert!(moved(r3.windows, r2.windows));
    assert_eq!(r3.budgets, r2.budgets);
    // Requests, their cancellations and refusals: one revision where the backend gives it.
    let (first, _) = ledger
        .record_capacity_request(&new_request(None, 1))
        .await
        .unwrap();
    let r4 = ledger.revision().await.unwrap();
    ledger.cancel_capacity_request(&first.id, at).await.unwrap();
    let r5 = ledger.revision().await.unwrap();
    ledger
        .append_refusal(&RefusalRecord {
            pool: llama.clone(),
            request: None,
            node: None,
            offering: None,
            replicas: 1,
            reason: RefusalReason::NoOffering,
            detail: "every offering stocked out".into(),
            at,
        })
        .await
        .unwrap();
    let r6 = ledger.revision().await.unwrap();
    if r3.requests.is_some() {
        assert!(moved(r4.requests, r3.requests));
        assert!(moved(r5.requests, r4.requests));
        assert!(moved(r6.requests, r5.requests));
    }
    assert_eq!(
        ledger.revision().await.unwrap(),
        r6,
        "reading moves nothing"
    );

    // The chain of node events: heads, then every event after them, applied in order.
    let Some((through, heads)) = ledger.live_nodes_through().await.unwrap() else {
        return;
    };
    assert!(heads.is_empty());
    let mut live: std::collections::BTreeMap<String, (i64, NodeEvent)> = Default::default();
    let mut through = through;
    for (i, (node, state)) in [
        ("n-b", NodeState::Requested),
        ("n-a", NodeState::Requested),
        ("n-b", NodeState::Booting),
        ("n-a", NodeState::Terminated),
        ("n-c", NodeState::Requested),
        ("n-b", NodeState::Serving),
    ]
    .into_iter()
    .enumerate()
    {
        let mut e = event(node, state, "2026-11-30T09:00:00Z", None, "step");
        e.at = at + chrono::Duration::minutes(i as i64);
        ledger.append_node_event(&e).await.unwrap();
        for s in ledger.node_events_after(through, 2).await.unwrap() {
            through = s.seq;
            if s.row.state.is_final() {
                live.remove(&s.row.node.0);
            } else {
                live.insert(s.row.node.0.clone(), (s.seq, s.row));
            }
        }
        let mut kept: Vec<(i64, NodeEvent)> = live.values().cloned().collect();
        kept.sort_by_key(|(seq, _)| *seq);
        let kept: Vec<NodeEvent> = kept.into_iter().map(|(_, e)| e).collect();
        assert_eq!(kept, ledger.live_nodes().await.unwrap(), "after event {i}");
    }
    let (again, heads) = ledger.live_nodes_through().await.unwrap().unwrap();
    assert_eq!(again, through);
    let heads: Vec<NodeEvent> = heads.into_iter().map(|s| s.row).collect();
    assert_eq!(heads, ledger.live_nodes().await.unwrap());
}

macro_rules! behaviour_suite {
    ($module:ident, $open:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn idempotency() {
                let (_guard, ledger) = $open.await;
                idempotency_key_returns_the_first_request(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn live_nodes() {
                let (_guard, ledger) = $open.await;
                live_nodes_are_each_node_s_last_event_not_final(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn outcomes() {
                let (_guard, ledger) = $open.await;
                outcome_follows_node_events_and_refusals(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn closing_refusals() {
                let (_guard, ledger) = $open.await;
                refusals_close_requests_as_the_core_says(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn alert_outbox() {
                let (_guard, ledger) = $open.await;
                alert_outbox_is_bounded(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn demand_minutes() {
                let (_guard, ledger) = $open.await;
                demand_minutes_round_trip(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn controller_memory() {
                let (_guard, ledger) = $open.await;
                controller_memory_round_trip(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn alert_book() {
                let (_guard, ledger) = $open.await;
                alert_book_round_trip(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn schedule_windows() {
                let (_guard, ledger) = $open.await;
                schedule_windows_round_trip(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn decisions_and_tokens() {
                let (_guard, ledger) = $open.await;
                decisions_and_tokens_round_trip(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn windows() {
                let (_guard, ledger) = $open.await;
                windows_are_half_open(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn request_pages() {
                let (_guard, ledger) = $open.await;
                capacity_requests_page_newest_first_with_filters(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn sequence_pages() {
                let (_guard, ledger) = $open.await;
                event_and_decision_pages_by_sequence(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn cancellation() {
                let (_guard, ledger) = $open.await;
                cancellation_is_recorded_once(ledger.as_ref()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_admissions() {
                let (_guard, ledger) = $open.await;
                concurrent_admissions_never_overspend(ledger).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_admissions_of_many_accounts() {
                let (_guard, ledger) = $open.await;
                super::concurrent_admissions_of_many_accounts(vec![ledger]).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_requests_with_keys() {
                let (_guard, ledger) = $open.await;
                concurrent_requests_resolve_each_key_once(ledger).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn a_refused_admission_fails_alone() {
                let (_guard, ledger) = $open.await;
                an_admission_the_database_refuses_fails_alone(ledger).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_appends() {
                let (_guard, ledger) = $open.await;
                concurrent_appends_keep_each_nodes_order(ledger).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn callers_that_give_up() {
                let (_guard, ledger) = $open.await;
                callers_that_give_up_leave_the_other_answers_true(ledger).await;
            }

            #[tokio::test]
            async fn renewals() {
                let (_guard, ledger) = $open.await;
                a_renewal_admits_only_what_it_adds(ledger).await;
            }

            #[tokio::test]
            async fn parked_nodes() {
                let (_guard, ledger) = $open.await;
                a_parked_node_pays_and_holds_its_volumes(ledger).await;
            }

            #[tokio::test]
            async fn revisions() {
                let (_guard, ledger) = $open.await;
                revisions_move_with_the_writes_they_guard(ledger.as_ref()).await;
            }

            #[tokio::test]
            async fn budget_versions() {
                let (_guard, ledger) = $open.await;
                budgets_are_versioned(ledger).await;
            }
        }
    };
}

async fn sqlite_ledger() -> (tempfile::TempDir, Arc<dyn Ledger>) {
    let (dir, ledger) = sqlite().await;
    (dir, Arc::new(ledger))
}

/// A ledger on a fresh database of the PostgreSQL server `DATABASE_URL` names
/// (`./scripts/test` starts a throwaway cluster and sets it).
async fn postgres_ledger() -> (String, Arc<dyn Ledger>) {
    let db_url = headroom_testkit::fresh_postgres_database("headroom_test").await;
    let ledger = PostgresLedger::connect(&db_url).await.unwrap();
    (db_url, Arc::new(ledger))
}

/// A test ledger's database reached outside the ledger, for the statements it never runs: as
/// a SQL shell would, and on PostgreSQL as the superuser, whom the triggers bind all the same.
enum RawDb {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl RawDb {
    /// The SQLite file [`sqlite`] made in `dir`.
    async fn sqlite(dir: &tempfile::TempDir) -> RawDb {
        let path = dir.path().join("ledger.db");
        let url = format!("sqlite://{}", path.display());
        RawDb::Sqlite(sqlx::SqlitePool::connect(&url).await.unwrap())
    }

    /// The PostgreSQL database at `db_url`, as [`postgres_ledger`] returns it.
    async fn postgres(db_url: &str) -> RawDb {
        RawDb::Postgres(sqlx::PgPool::connect(db_url).await.unwrap())
    }

    /// Runs `sql`: the integers it returns (a count, or a row a `DELETE … RETURNING` removed),
    /// its error as text.
    async fn run(&self, sql: &str) -> Result<Vec<i64>, String> {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        match self {
            RawDb::Sqlite(pool) => sqlx::query_scalar(sql).fetch_all(pool).await,
            RawDb::Postgres(pool) => sqlx::query_scalar(sql).fetch_all(pool).await,
        }
        .map_err(|e| e.to_string())
    }
}

behaviour_suite!(sqlite_backend, sqlite_ledger());
behaviour_suite!(postgres_backend, postgres_ledger());

/// Two processes admitting on one database, over the same accounts at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_admissions_from_two_processes_never_overspend() {
    let (url, first) = postgres_ledger().await;
    let second: Arc<dyn Ledger> = Arc::new(PostgresLedger::connect(&url).await.unwrap());
    concurrent_admissions_of_many_accounts(vec![first, second]).await;
}

#[tokio::test]
async fn postgres_a_stale_view_decides_on_the_ledger() {
    let (url, first) = postgres_ledger().await;
    let second: Arc<dyn Ledger> = Arc::new(PostgresLedger::connect(&url).await.unwrap());
    a_process_whose_view_is_stale_decides_on_the_ledger(first, second).await;
}

#[tokio::test]
async fn sqlite_a_stale_view_decides_on_the_ledger() {
    let (dir, first) = sqlite().await;
    let second = SqliteLedger::open_path(&dir.path().join("ledger.db"))
        .await
        .unwrap();
    a_process_whose_view_is_stale_decides_on_the_ledger(Arc::new(first), Arc::new(second)).await;
}

#[tokio::test]
async fn postgres_a_statement_stuck_on_a_lock_is_cancelled_at_the_statement_timeout() {
    let url = headroom_testkit::fresh_postgres_database("headroom_test").await;
    let bound = std::time::Duration::from_secs(1);
    let ledger = PostgresLedger::connect_bounded(&url, bound).await.unwrap();
    // Someone else holds the events table: a migration gone wrong, a stray `LOCK` in a shell.
    let raw = sqlx::PgPool::connect(&url).await.unwrap();
    let mut holder = raw.begin().await.unwrap();
    sqlx::query("LOCK TABLE node_events IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let stuck = event(
        "n1",
        NodeState::Requested,
        "2026-11-30T09:00:00Z",
        None,
        "launch",
    );
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        ledger.append_node_event(&stuck),
    )
    .await
    .expect("a ledger call still waiting on the lock after 20 s");
    let took = started.elapsed();
    assert!(outcome.is_err(), "the write went through a held lock");
    assert!(took >= bound, "failed after {took:?}, before the timeout");
    // Nothing was written, and the ledger serves once the lock is gone.
    holder.rollback().await.unwrap();
    assert!(ledger.node_events().await.unwrap().is_empty());
    ledger.append_node_event(&stuck).await.unwrap();
    assert_eq!(ledger.node_events().await.unwrap().len(), 1);
}

/// A node parked at $0.50/h, as a process writes it before a restart.
fn parked_at_half_a_dollar() -> NodeEvent {
    let mut parked = event(
        "p1",
        NodeState::Warm,
        "2026-11-30T10:00:00Z",
        None,
        "released",
    );
    parked.parked_usd_per_hour = "0.5".parse().unwrap();
    parked.hold = "1".parse().unwrap();
    parked
}

/// A restarted process reads back the parked price its predecessor wrote: the SQLite file
/// reopened.
#[tokio::test]
async fn sqlite_a_parked_price_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let written = parked_at_half_a_dollar();
    {
        let ledger = SqliteLedger::open_path(&path).await.unwrap();
        ledger.append_node_event(&written).await.unwrap();
    }
    let reopened = SqliteLedger::open_path(&path).await.unwrap();
    assert_eq!(reopened.node_events().await.unwrap(), [written]);
}

/// A row written as a build before the parked price wrote it (its column list without
/// `parked_price_micros`) reads back 0, and a node parked on it costs nothing parked.
#[tokio::test]
async fn sqlite_a_row_without_a_parked_price_reads_back_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = SqliteLedger::open_path(&path).await.unwrap();
    let raw = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO node_events (node_id, pool, account, offering_id, provider, region, zone,
            instance_type, market, request_id, destination, state, instance_id, client_token,
            price_micros, gpus, hold_micros, reason, at_ms, event_key)
         VALUES ('old', 'llama', 'ml', 'use1-g5', 'sim', 'us-east-1', 'use1-az1', 'g5.xlarge',
            'on-demand', NULL, 'serve', 'warm', 'i-old', 'tok-old', 1006000, 1, 0, 'released',
            1796029200000, 'old/warm/released/0')",
    )
    .execute(&raw)
    .await
    .unwrap();
    let events = ledger.node_events().await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].parked_usd_per_hour, Money::ZERO);
    assert_eq!(
        headroom_ledger::derive::spend(&events, None, None, t("2026-11-30T19:00:00Z")),
        Money::ZERO
    );
}

/// The same on PostgreSQL: a new connection of a new process.
#[tokio::test]
async fn postgres_a_parked_price_survives_reconnecting() {
    let db_url = headroom_testkit::fresh_postgres_database("headroom_test").await;
    let written = parked_at_half_a_dollar();
    {
        let ledger = PostgresLedger::connect(&db_url).await.unwrap();
        ledger.append_node_event(&written).await.unwrap();
    }
    let reconnected = PostgresLedger::connect(&db_url).await.unwrap();
    assert_eq!(reconnected.node_events().await.unwrap(), [written]);
}

#[tokio::test]
async fn postgres_ledger_is_append_only() {
    let (db_url, ledger) = postgres_ledger().await;
    let (req, _) = ledger
        .record_capacity_request(&new_request(None, 1))
        .await
        .unwrap();
    ledger
        .append_node_event(&event(
            "n1",
            NodeState::Requested,
            "2026-11-30T09:00:00Z",
            Some(&req.id),
            "launch",
        ))
        .await
        .unwrap();
    // An operator with a SQL shell on the same database still cannot rewrite history.
    let raw = sqlx::PgPool::connect(&db_url).await.unwrap();
    for sql in [
        "UPDATE node_events SET price_micros = 0",
        "DELETE FROM node_events",
        "TRUNCATE node_events CASCADE",
        "UPDATE capacity_requests SET replicas = 9",
        "DELETE FROM capacity_requests",
    ] {
        let err = sqlx::query(sql).execute(&raw).await.expect_err(sql);
        assert!(err.to_string().contains("append-only"), "{sql}: {err}");
    }
    assert_eq!(ledger.node_events().await.unwrap().len(), 1);
}

#[tokio::test]
async fn sqlite_ledger_is_append_only_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = SqliteLedger::open_path(&path).await.unwrap();
    let (req, _) = ledger
        .record_capacity_request(&new_request(Some("keep"), 1))
        .await
        .unwrap();
    ledger
        .append_node_event(&event(
            "n1",
            NodeState::Requested,
            "2026-11-30T09:00:00Z",
            Some(&req.id),
            "launch",
        ))
        .await
        .unwrap();

    // Anyone with the file and a SQL shell still cannot rewrite history.
    let raw = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    for sql in [
        "UPDATE node_events SET price_micros = 0",
        "DELETE FROM node_events",
        "UPDATE capacity_requests SET replicas = 9",
        "DELETE FROM capacity_requests",
    ] {
        let err = sqlx::query(sql).execute(&raw).await.expect_err(sql);
        assert!(err.to_string().contains("append-only"), "{sql}: {err}");
    }
    raw.close().await;
    drop(ledger);

    let reopened = SqliteLedger::open_path(&path).await.unwrap();
    let (again, created) = reopened
        .record_capacity_request(&new_request(Some("keep"), 1))
        .await
        .unwrap();
    assert!(!created, "the idempotency key must survive a restart");
    assert_eq!(again.id, req.id);
    assert_eq!(reopened.node_events().await.unwrap().len(), 1);
}

/// What the fault test may do to the database behind a ledger.
#[derive(Clone)]
enum Backdoor {
    Sqlite(String),
    Postgres(String),
}

impl Backdoor {
    /// Begins a transaction that writes a hold worth the whole budget, then rolls it back.
    async fn aborted_transaction(&self) {
        let sql = "INSERT INTO budget_versions (account, period, ceiling_micros, soft_threshold_percent, hard_action, at_ms) VALUES ('ml', 'day', 1, 80, 'refuse', 0)";
        match self {
            Backdoor::Sqlite(url) => {
                let pool = sqlx::SqlitePool::connect(url).await.unwrap();
                let mut tx = pool.begin().await.unwrap();
                sqlx::query(sql).execute(&mut *tx).await.unwrap();
                tx.rollback().await.unwrap();
                pool.close().await;
            }
            Backdoor::Postgres(url) => {
                let pool = sqlx::PgPool::connect(url).await.unwrap();
                let mut tx = pool.begin().await.unwrap();
                sqlx::query(
                    "INSERT INTO budget_versions (account, period, ceiling_micros, soft_threshold_percent, hard_action, at) VALUES ('ml', 'day', 1, 80, 'refuse', now())",
                )
                .execute(&mut *tx)
                .await
                .unwrap();
                tx.rollback().await.unwrap();
                pool.close().await;
            }
        }
    }

    /// Drops every connection the ledger holds (Postgres); SQLite has none to drop.
    async fn drop_connections(&self) {
        if let Backdoor::Postgres(url) = self {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
        }
    }
}

/// Retries a ledger write a bounded number of times, as a client whose connection dropped would.
macro_rules! retried {
    ($e:expr) => {{
        let mut attempt = 0;
        loop {
            match $e.await {
                Ok(v) => break v,
                Err(err) if attempt < 5 => {
                    attempt += 1;
                    let _ = err;
                }
                Err(err) => panic!("write failed after retries: {err}"),
            }
        }
    }};
}

/// Replicas of a request that are neither refused nor launched yet.
async fn unplanned(
    ledger: &dyn Ledger,
    id: &headroom_core::RequestId,
    replicas: u32,
    launched: &std::collections::HashMap<headroom_core::RequestId, u32>,
) -> u32 {
    let outcome = retried!(ledger.capacity_request(id)).unwrap();
    let refused: u32 = outcome
        .refusals
        .iter()
        .filter(|r| r.reason.closes_request())
        .map(|r| r.replicas)
        .sum();
    replicas.saturating_sub(refused + launched.get(id).copied().unwrap_or(0))
}

/// A random stream of requests, admissions, node progress, refusals, repeated writes, dropped
/// connections and aborted transactions, replayable from `seed`; the invariants are checked after
/// every step.
async fn faults_keep_the_invariants(ledger: Arc<dyn Ledger>, backdoor: Backdoor, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let start = t("2026-11-30T09:00:00Z");
    let budget = Budget {
        account: "ml".parse().unwrap(),
        period: BudgetPeriod::Day,
        ceiling: "20".parse().unwrap(),
        soft_threshold_percent: 80,
        hard_action: HardAction::Refuse,
    };
    ledger.put_budget(&budget, start).await.unwrap();
    let mut now = start;
    let mut requests: Vec<(headroom_core::RequestId, u32)> = vec![];
    let mut nodes: Vec<NodeEvent> = vec![];
    let mut last_event: Option<NodeEvent> = None;
    let mut launched: std::collections::HashMap<headroom_core::RequestId, u32> = Default::default();
    for step in 0..120 {
        now += chrono::Duration::seconds(rng.i64(1..20));
        match rng.u8(0..10) {
            0 => {
                let replicas = rng.u32(1..4);
                let (r, _) = retried!(ledger.record_capacity_request(&NewCapacityRequest {
                    at: now,
                    ..new_request(None, replicas)
                }));
                requests.push((r.id, replicas));
            }
            1..=3 if !requests.is_empty() => {
                // Like the planner, launch only for replicas neither refused nor already launched.
                let (id, replicas) = requests[rng.usize(..requests.len())].clone();
                if unplanned(ledger.as_ref(), &id, replicas, &launched).await == 0 {
                    continue;
                }
                let mut e = event(
                    &format!("s{seed}-n{step}"),
                    NodeState::Requested,
                    "2026-11-30T09:00:00Z",
                    Some(&id),
                    "launch",
                );
                e.at = now;
                e.hold = Money::from_micros(rng.i64(500_000..3_000_000));
                if let HoldOutcome::Placed = retried!(ledger.place_hold(&e)) {
                    nodes.push(e.clone());
                    *launched.entry(id).or_default() += 1;
                }
                last_event = Some(e);
            }
            4..=5 if !nodes.is_empty() => {
                let i = rng.usize(..nodes.len());
                let next_state = match nodes[i].state {
                    NodeState::Requested => NodeState::Launching,
                    NodeState::Launching => NodeState::Booting,
                    NodeState::Booting => NodeState::Serving,
                    _ => NodeState::Terminated,
                };
                let e = nodes[i].next(next_state, "progress", now);
                retried!(ledger.append_node_event(&e));
                if next_state == NodeState::Terminated {
                    nodes.remove(i);
                } else {
                    nodes[i] = e.clone();
                }
                last_event = Some(e);
            }
            6 if !requests.is_empty() => {
                let (id, replicas) = requests[rng.usize(..requests.len())].clone();
                let pending = unplanned(ledger.as_ref(), &id, replicas, &launched).await;
                if pending > 0 {
                    retried!(ledger.append_refusal(&RefusalRecord {
                        pool: "llama".parse().unwrap(),
                        request: Some(id.clone()),
                        node: None,
                        offering: None,
                        replicas: pending,
                        reason: RefusalReason::Budget,
                        detail: "fault test".into(),
                        at: now,
                    }));
                }
            }
            7 => {
                // The acknowledgement of the last write was lost: write it again.
                if let Some(e) = &last_event {
                    retried!(ledger.append_node_event(e));
                    retried!(ledger.place_hold(e));
                }
            }
            8 => backdoor.drop_connections().await,
            _ => backdoor.aborted_transaction().await,
        }

        // Invariants, after every step.
        let standing = retried!(ledger.budget_standing(&budget, now));
        assert!(
            standing.spent + standing.held <= budget.ceiling,
            "seed {seed} step {step}: spent {} + held {} over {}",
            standing.spent,
            standing.held,
            budget.ceiling
        );
        assert_eq!(
            retried!(ledger.budget(&budget.account)),
            Some(budget.clone()),
            "an aborted write changed the budget"
        );
        let events = retried!(ledger.node_events());
        for history in headroom_ledger::derive::histories(&events).values() {
            let ends = history.iter().filter(|e| e.state.is_final()).count();
            assert!(
                ends <= 1,
                "seed {seed} step {step}: node {} ended {ends} times",
                history[0].node
            );
            let keys: std::collections::BTreeSet<String> =
                history.iter().map(|e| e.key()).collect();
            assert_eq!(
                keys.len(),
                history.len(),
                "seed {seed} step {step}: a repeated write counted twice"
            );
        }
        for (id, replicas) in &requests {
            let outcome = retried!(ledger.capacity_request(id)).unwrap();
            let refused: u32 = outcome
                .refusals
                .iter()
                .filter(|r| r.reason.closes_request())
                .map(|r| r.replicas)
                .sum();
            assert!(
                outcome.delivered + refused <= *replicas,
                "seed {seed} step {step}: request {id} delivered {} + refused {refused} > requested {replicas}",
                outcome.delivered
            );
        }
    }
}

#[tokio::test]
async fn sqlite_faults_keep_the_invariants() {
    for seed in 1..=3 {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("faults.db").display());
        let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::connect(&url).await.unwrap());
        faults_keep_the_invariants(ledger, Backdoor::Sqlite(url), seed).await;
    }
}

#[tokio::test]
async fn postgres_faults_keep_the_invariants() {
    for seed in 1..=3 {
        let (url, ledger) = postgres_ledger().await;
        faults_keep_the_invariants(ledger, Backdoor::Postgres(url), seed).await;
    }
}

#[tokio::test]
async fn postgres_pool_leases_have_one_owner_and_pass_on_when_it_goes() {
    let (url, first) = postgres_ledger().await;
    let second = PostgresLedger::connect(&url).await.unwrap();
    let pools: Vec<headroom_core::PoolName> = vec!["a".parse().unwrap(), "b".parse().unwrap()];
    assert_eq!(first.pool_leases(&pools).await.unwrap().len(), 2);
    assert!(
        second.pool_leases(&pools).await.unwrap().is_empty(),
        "a pool has one owner at a time"
    );
    assert_eq!(
        first.pool_leases(&pools).await.unwrap().len(),
        2,
        "the owner keeps its leases"
    );
    drop(first);
    // The server notices the closed connection at once; allow it a bounded moment.
    let mut taken = 0;
    for _ in 0..50 {
        taken = second.pool_leases(&pools).await.unwrap().len();
        if taken == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(taken, 2, "the leases pass on when their owner is gone");
}

/// Managed PostgreSQL (RDS, Cloud SQL) expects encrypted connections: `?sslmode=require` must
/// give one. `./scripts/test` starts its throwaway server with TLS on (a self-signed
/// certificate), so this checks the real handshake.
#[tokio::test]
async fn postgres_connections_can_be_encrypted() {
    // A database of its own: the ledger below migrates the one it opens.
    let url = headroom_testkit::fresh_postgres_database("headroom_test").await;
    let separator = if url.contains('?') { '&' } else { '?' };
    let tls_url = format!("{url}{separator}sslmode=require");
    let pool = sqlx::PgPool::connect(&tls_url).await.unwrap_or_else(|e| {
        panic!("no TLS connection to {tls_url}: {e}; the server needs ssl=on (./scripts/test starts it so)")
    });
    let encrypted: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(encrypted, "sslmode=require gave a plain connection");
    // The ledger itself opens over the same URL.
    PostgresLedger::connect(&tls_url).await.unwrap();
}

#[path = "ledger/append_only.rs"]
mod append_only;

#[path = "ledger/memory_retention.rs"]
mod memory_retention;

#[path = "ledger/log_retention.rs"]
mod log_retention;
