//! Ledger behaviour, one suite run against both backends: a real SQLite file and a real
//! PostgreSQL database (a fresh one per test on the server `DATABASE_URL` names).

use std::sync::Arc;

use headroom_core::planner::Destination;
use headroom_core::{
    Budget, BudgetPeriod, HardAction, Market, Money, NodeId, NodeState, Priority, ProviderKind,
    RefusalReason, RequestState, Timestamp,
};
use headroom_ledger::{
    Admission, Ledger, LedgerError, NewCapacityRequest, NodeEvent, PostgresLedger, RefusalRecord,
    SqliteLedger,
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
            ledger.admit_node_event(&e).await.unwrap()
        });
    }
    let mut admitted = 0;
    let mut over_budget = 0;
    while let Some(result) = tasks.join_next().await {
        match result.unwrap() {
            Admission::Admitted => admitted += 1,
            Admission::OverBudget(standing) => {
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

/// Runs every behaviour check against one backend, each on a fresh ledger.
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
            async fn outcomes() {
                let (_guard, ledger) = $open.await;
                outcome_follows_node_events_and_refusals(ledger.as_ref()).await;
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

/// A fresh database on the PostgreSQL server `DATABASE_URL` names (`./scripts/test` starts a
/// throwaway cluster and sets it).
async fn postgres_ledger() -> (String, Arc<dyn Ledger>) {
    let url = std::env::var("DATABASE_URL")
        .expect("DATABASE_URL is not set: run ./scripts/test, which starts a throwaway PostgreSQL");
    let admin = sqlx::PgPool::connect(&url)
        .await
        .expect("cannot reach DATABASE_URL");
    let name = format!("headroom_test_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let (base, _) = url
        .rsplit_once('/')
        .expect("DATABASE_URL ends in /DATABASE");
    let db_url = format!("{base}/{name}");
    let ledger = PostgresLedger::connect(&db_url).await.unwrap();
    (db_url, Arc::new(ledger))
}

behaviour_suite!(sqlite_backend, sqlite_ledger());
behaviour_suite!(postgres_backend, postgres_ledger());

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
