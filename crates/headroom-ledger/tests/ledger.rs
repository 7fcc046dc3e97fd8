//! Ledger behaviour on a real SQLite file. The behaviour checks take `&dyn Ledger` so the
//! PostgreSQL backend can run the very same suite.

use headroom_core::planner::Destination;
use headroom_core::{
    Market, Money, NodeId, NodeState, Priority, ProviderKind, RefusalReason, RequestState,
    Timestamp,
};
use headroom_ledger::{
    Ledger, LedgerError, NewCapacityRequest, NodeEvent, RefusalRecord, SqliteLedger,
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
        idempotency_key: key.map(str::to_string),
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
    assert!(matches!(
        ledger.cancel_capacity_request(&unknown, at).await,
        Err(LedgerError::UnknownRequest(_))
    ));
}

#[tokio::test]
async fn sqlite_idempotency() {
    let (_dir, ledger) = sqlite().await;
    idempotency_key_returns_the_first_request(&ledger).await;
}

#[tokio::test]
async fn sqlite_outcomes() {
    let (_dir, ledger) = sqlite().await;
    outcome_follows_node_events_and_refusals(&ledger).await;
}

#[tokio::test]
async fn sqlite_cancellation() {
    let (_dir, ledger) = sqlite().await;
    cancellation_is_recorded_once(&ledger).await;
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
