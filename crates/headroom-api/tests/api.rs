//! The router in-process (tower `oneshot`), on a real SQLite ledger and the simulated cloud.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use headroom_api::auth::Scope;
use headroom_api::{AppState, app};
use headroom_cloud::{ManualClock, SimCloud};
use headroom_engine::Engine;
use headroom_ledger::SqliteLedger;
use headroom_ledger::prelude::*;
use headroom_testkit::Rig;
use serde_json::{Value, json};
use tower::ServiceExt;

#[path = "api/connections.rs"]
mod connections;
#[path = "api/external_metrics.rs"]
mod external_metrics;
#[path = "api/pages.rs"]
mod pages;
#[path = "api/typed.rs"]
mod typed;

const EXAMPLE: &str = include_str!("../../../config/headroom.example.toml");

/// The example configuration with a floor of two under the batch pool, which the example lets
/// scale to zero: these tests read a pool's nodes, requests and metrics as soon as it runs.
/// Scale to zero has its own tests (the controller's, the simulator's `scale-to-zero`, the demo).
fn config() -> String {
    let floor = "name = \"mistral-7b-batch\"\naccount = \"research\"\nofferings = [\"use2-g6-spot\", \"use1-g6-spot\", \"use1-g6-od\"]\nmin_replicas = ";
    assert!(
        EXAMPLE.contains(&format!("{floor}0")),
        "the example's batch pool moved"
    );
    EXAMPLE.replace(&format!("{floor}0"), &format!("{floor}2"))
}

struct Api {
    _rig: Rig,
    router: axum::Router,
    ledger: Arc<SqliteLedger>,
    clock: Arc<ManualClock>,
    engine: Arc<Engine>,
    cloud: Arc<SimCloud>,
}

async fn api() -> Api {
    let rig = Rig::new(&config()).await;
    let cloud = rig.sim_cloud();
    let engine = rig.engine(cloud.clone());
    Api {
        cloud,
        // The demo's mode: open. Authentication has its own tests below.
        router: app(AppState::new(
            engine.clone(),
            false,
            headroom_api::Limits::default(),
        )),
        ledger: rig.ledger.clone(),
        clock: rig.clock.clone(),
        engine,
        _rig: rig,
    }
}

struct Reply {
    status: StatusCode,
    content_type: String,
    location: Option<String>,
    etag: Option<String>,
    body: Value,
}

impl Api {
    async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let header_text = |name| {
            response
                .headers()
                .get(name)
                .map(|v: &header::HeaderValue| v.to_str().unwrap().to_string())
        };
        let content_type = header_text(header::CONTENT_TYPE).unwrap_or_default();
        let location = header_text(header::LOCATION);
        let etag = header_text(header::ETAG);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
        Reply {
            status,
            content_type,
            location,
            etag,
            body,
        }
    }

    async fn get(&self, uri: &str) -> Reply {
        self.send(Request::get(uri).body(Body::empty()).unwrap())
            .await
    }

    async fn post_raw(
        &self,
        uri: &str,
        content_type: Option<&str>,
        key: Option<&str>,
        body: impl Into<Body>,
    ) -> Reply {
        let mut builder = Request::post(uri);
        if let Some(ct) = content_type {
            builder = builder.header(header::CONTENT_TYPE, ct);
        }
        if let Some(key) = key {
            builder = builder.header("idempotency-key", key);
        }
        self.send(builder.body(body.into()).unwrap()).await
    }

    async fn post(&self, uri: &str, key: Option<&str>, body: Value) -> Reply {
        self.post_raw(uri, Some("application/json"), key, body.to_string())
            .await
    }

    async fn ledger_rows(&self) -> (u64, usize) {
        let summary = self.ledger.summary(self.clock_now()).await.unwrap();
        (
            summary.capacity_requests,
            self.ledger.node_events().await.unwrap().len(),
        )
    }

    fn clock_now(&self) -> headroom_core::Timestamp {
        use headroom_cloud::Clock;
        self.clock.now()
    }
}

fn assert_problem(reply: &Reply, status: StatusCode, detail_contains: &str) {
    assert_eq!(reply.status, status, "{:?}", reply.body);
    assert_eq!(reply.content_type, "application/problem+json");
    assert_eq!(reply.body["status"], status.as_u16());
    assert!(
        reply.body["type"].as_str().unwrap().starts_with("https://"),
        "{:?}",
        reply.body
    );
    assert!(reply.body["title"].is_string());
    let detail = reply.body["detail"].as_str().unwrap();
    assert!(
        detail.contains(detail_contains),
        "detail {detail:?} lacks {detail_contains:?}"
    );
}

#[tokio::test]
async fn a_capacity_request_is_created_and_read_back() {
    let api = api().await;
    let created = api
        .post(
            "/v1/capacity-requests",
            None,
            json!({"pool": "llama-70b-interactive", "replicas": 2, "priority": "high"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    assert_eq!(
        created.location.as_deref(),
        Some(format!("/v1/capacity-requests/{id}").as_str())
    );
    assert_eq!(created.body["state"], "pending");
    assert_eq!(created.body["replicas"], 2);
    assert_eq!(created.body["delivered"], 0);
    assert_eq!(created.body["priority"], "high");

    let read = api.get(&format!("/v1/capacity-requests/{id}")).await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.body["id"], id.as_str());
    assert_eq!(read.body["pool"], "llama-70b-interactive");
    assert_eq!(read.body["refusals"], json!([]));
}

#[tokio::test]
async fn an_idempotency_key_makes_a_retry_return_the_same_request() {
    let api = api().await;
    let body = json!({"pool": "mistral-7b-batch", "replicas": 1});
    let first = api
        .post("/v1/capacity-requests", Some("retry-1"), body.clone())
        .await;
    let again = api
        .post("/v1/capacity-requests", Some("retry-1"), body)
        .await;
    assert_eq!(
        (first.status, again.status),
        (StatusCode::CREATED, StatusCode::OK)
    );
    assert_eq!(first.body["id"], again.body["id"]);
    assert_eq!(
        api.ledger_rows().await.0,
        1,
        "a retry must not create a second request"
    );

    let conflict = api
        .post(
            "/v1/capacity-requests",
            Some("retry-1"),
            json!({"pool": "mistral-7b-batch", "replicas": 3}),
        )
        .await;
    assert_problem(&conflict, StatusCode::CONFLICT, "different body");
    assert_eq!(api.ledger_rows().await.0, 1);
}

#[tokio::test]
async fn bad_input_gets_a_problem_and_changes_nothing() {
    let api = api().await;
    let uri = "/v1/capacity-requests";
    let json_ct = Some("application/json");
    let cases: Vec<(Reply, StatusCode, &str)> = vec![
        (api.post_raw(uri, json_ct, None, "{\"pool\": ").await, StatusCode::BAD_REQUEST, "not valid"),
        (api.post_raw(uri, json_ct, None, "").await, StatusCode::BAD_REQUEST, "not valid"),
        (api.post(uri, None, json!({"pool": "llama-70b-interactive", "replicas": "two"})).await, StatusCode::BAD_REQUEST, "invalid type"),
        (api.post(uri, None, json!({"pool": "llama-70b-interactive", "replicas": 0})).await, StatusCode::BAD_REQUEST, "replicas: must be at least 1"),
        (api.post(uri, None, json!({"pool": "llama-70b-interactive", "replicas": -3})).await, StatusCode::BAD_REQUEST, "replicas"),
        (api.post(uri, None, json!({"pool": "llama-70b-interactive", "replicas": 25})).await, StatusCode::BAD_REQUEST, "max_replicas of 24"),
        (api.post(uri, None, json!({"pool": "llama-70b-interactive", "replicas": 1e300})).await, StatusCode::BAD_REQUEST, "invalid type"),
        (api.post(uri, None, json!({"pool": "llama-70b-interactive", "replicas": 99999999999999999999u128 as f64})).await, StatusCode::BAD_REQUEST, ""),
        (api.post(uri, None, json!({"pool": "no-such-pool", "replicas": 1})).await, StatusCode::BAD_REQUEST, "no pool named no-such-pool"),
        (api.post(uri, None, json!({"pool": "x'; DROP TABLE capacity_requests; --", "replicas": 1})).await, StatusCode::BAD_REQUEST, "pool:"),
        (api.post(uri, None, json!({"pool": "llama-70b-interactive", "replicas": 1, "priority": "urgent"})).await, StatusCode::BAD_REQUEST, "priority"),
        (api.post(uri, None, json!({"pool": "llama-70b-interactive", "replicas": 1, "extra": true})).await, StatusCode::BAD_REQUEST, "unknown field"),
        (api.post(uri, None, json!(["llama-70b-interactive", 1])).await, StatusCode::BAD_REQUEST, "expected a JSON object"),
        (api.post_raw(uri, None, None, "{\"pool\":\"llama-70b-interactive\",\"replicas\":1}").await, StatusCode::UNSUPPORTED_MEDIA_TYPE, "application/json"),
        (api.post_raw(uri, Some("text/plain"), None, "{}").await, StatusCode::UNSUPPORTED_MEDIA_TYPE, "application/json"),
        (api.post_raw(uri, json_ct, None, vec![b' '; 10 * 1024 * 1024]).await, StatusCode::PAYLOAD_TOO_LARGE, "exceeds"),
        (api.post_raw(uri, json_ct, None, format!("{}{}", "[".repeat(10_000), "]".repeat(10_000))).await, StatusCode::BAD_REQUEST, "not valid"),
        (api.post(uri, Some(&"k".repeat(300)), json!({"pool": "llama-70b-interactive", "replicas": 1})).await, StatusCode::BAD_REQUEST, "Idempotency-Key"),
        (api.post_raw(uri, json_ct, None, r#"{"pool":"llama-70b-interactive","replicas":1,"replicas":3}"#).await, StatusCode::BAD_REQUEST, "\"replicas\" appears more than once"),
        (api.post_raw(uri, json_ct, None, r#"{"pool":"llama-70b-interactive","replicas":1,"priority":"low","pool":"mistral-7b-batch"}"#).await, StatusCode::BAD_REQUEST, "appears more than once"),
    ];
    for (reply, status, detail) in &cases {
        assert_problem(reply, *status, detail);
    }
    assert_eq!(
        api.ledger_rows().await,
        (0, 0),
        "bad input must not touch the ledger"
    );
}

#[tokio::test]
async fn unknown_things_are_404_problems() {
    let api = api().await;
    assert_problem(
        &api.get("/v1/capacity-requests/cr-doesnotexist").await,
        StatusCode::NOT_FOUND,
        "no capacity request",
    );
    assert_problem(
        &api.get("/v1/capacity-requests/..%2F..%2Fetc%2Fpasswd")
            .await,
        StatusCode::NOT_FOUND,
        "no capacity request",
    );
    assert_problem(
        &api.get("/v1/pools/nope").await,
        StatusCode::NOT_FOUND,
        "no pool named",
    );
    assert_problem(
        &api.get("/v1/nothing-here").await,
        StatusCode::NOT_FOUND,
        "no such endpoint",
    );
    let delete = api
        .send(Request::delete("/v1/pools").body(Body::empty()).unwrap())
        .await;
    assert_problem(&delete, StatusCode::METHOD_NOT_ALLOWED, "method");
}

#[tokio::test]
async fn pools_show_their_counts() {
    let api = api().await;
    let pools = api.get("/v1/pools").await;
    assert_eq!(pools.status, StatusCode::OK);
    let names: Vec<&str> = pools.body["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["llama-70b-interactive", "mistral-7b-batch"]);
    let pool = api.get("/v1/pools/llama-70b-interactive").await;
    assert_eq!(pool.status, StatusCode::OK);
    for key in [
        "desired",
        "requested",
        "starting",
        "ready",
        "warm",
        "draining",
    ] {
        assert!(
            pool.body[key].is_u64(),
            "{key} missing from {:?}",
            pool.body
        );
    }
    assert_eq!(pool.body["max_replicas"], 24);
    assert_eq!(pool.body["hold"], "signal_missing");
}

#[tokio::test]
async fn offerings_show_the_price_plans_use_live_or_configured() {
    let api = api().await;
    let spot: headroom_core::OfferingId = "use1-g6-spot".parse().unwrap();
    let max = api
        .engine
        .config()
        .offering(&spot)
        .unwrap()
        .price_usd_per_hour;
    let market: headroom_core::Money = "0.31".parse().unwrap();
    api.cloud.set_spot_price(&spot, market);
    api.engine.tick().await.unwrap();
    let reply = api.get("/v1/offerings").await;
    assert_eq!(reply.status, StatusCode::OK);
    let offerings = reply.body["offerings"].as_array().unwrap();
    assert_eq!(offerings.len(), api.engine.config().offerings.len());
    let quoted = offerings
        .iter()
        .find(|o| o["offering"] == "use1-g6-spot")
        .unwrap();
    assert_eq!(quoted["live_usd_per_hour"], json!(market));
    assert_eq!(quoted["effective_usd_per_hour"], json!(market));
    assert_eq!(quoted["configured_usd_per_hour"], json!(max));
    assert_eq!(quoted["above_max_price"], false);
    assert_eq!(quoted["recent_refusals"], 0);
    // Quota preflight: the simulated cloud's GPU quota of us-east-1 (256 in the example).
    let quota = &quoted["quotas"][0];
    assert_eq!(quota["quota"], "gpus", "{quoted}");
    assert_eq!(quota["unit"], "gpu");
    assert_eq!(quota["limit"], 256);
    assert_eq!(quota["per_node"], 1);
    let listed = offerings
        .iter()
        .find(|o| o["offering"] == "use1-g6-od")
        .unwrap();
    assert!(listed["live_usd_per_hour"].is_null(), "{listed}");
    assert_eq!(
        listed["effective_usd_per_hour"],
        listed["configured_usd_per_hour"]
    );
}

#[tokio::test]
async fn signals_are_validated_and_accepted() {
    let api = api().await;
    let uri = "/v1/pools/llama-70b-interactive/signals";
    let full = json!({
        "queue_depth": 40, "oldest_age_s": 2.5, "arrival_rate_rps": 200.0,
        "departure_rate_rps": 80.0, "error_rate_rps": 0.1, "batch_occupancy": 0.9,
        "gpu_utilization": 0.95, "queued_tokens": 48000.0, "token_arrival_rate_tps": 240000.0
    });
    assert_eq!(api.post(uri, None, full).await.status, StatusCode::ACCEPTED);
    api.engine.tick().await.unwrap();
    let kept = api.get("/v1/pools/llama-70b-interactive").await.body["last_signal"].clone();
    assert_eq!(
        (&kept["queued_tokens"], &kept["token_arrival_rate_tps"]),
        (&json!(48000.0), &json!(240000.0)),
        "{kept}"
    );
    for (body, detail) in [
        (
            json!({"queue_depth": 1, "queued_tokens": -3.0}),
            "queued_tokens",
        ),
        (json!({"queue_depth": -1}), "queue_depth"),
        (
            json!({"queue_depth": 1, "arrival_rate_rps": -5.0}),
            "arrival_rate_rps",
        ),
        (
            json!({"queue_depth": 1, "gpu_utilization": 1.5}),
            "gpu_utilization",
        ),
        (
            json!({"queue_depth": 1, "batch_occupancy": -0.1}),
            "batch_occupancy",
        ),
        (
            json!({"queue_depth": 1, "oldest_age_s": "old"}),
            "invalid type",
        ),
        (
            json!({"queue_depth": 1, "temperature": 80}),
            "unknown field",
        ),
    ] {
        assert_problem(
            &api.post(uri, None, body).await,
            StatusCode::BAD_REQUEST,
            detail,
        );
    }
    assert_problem(
        &api.post("/v1/pools/ghost/signals", None, json!({"queue_depth": 1}))
            .await,
        StatusCode::NOT_FOUND,
        "no pool",
    );
}

#[tokio::test]
async fn decisions_explain_themselves() {
    let api = api().await;
    api.engine.tick().await.unwrap();
    let signal = json!({"queue_depth": 40, "arrival_rate_rps": 200.0, "gpu_utilization": 0.97, "oldest_age_s": 3.0});
    api.post("/v1/pools/llama-70b-interactive/signals", None, signal)
        .await;
    api.engine.tick().await.unwrap();
    let log = api.get("/v1/pools/llama-70b-interactive/decisions").await;
    assert_eq!(log.status, StatusCode::OK);
    let newest = &log.body["decisions"][0];
    assert_eq!(newest["rule"], "backlog_drain", "{newest}");
    assert!(
        newest["reason"].as_str().unwrap().contains("200.0 req/s"),
        "{newest}"
    );
    assert_eq!(newest["signal"]["queue_depth"], 40);
    assert!(
        newest["proposals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["rule"] == "floor")
    );
    let oldest = log.body["decisions"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        oldest["hold"], "signal_missing",
        "the first tick had no signal: {oldest}"
    );
    let pool = api.get("/v1/pools/llama-70b-interactive").await;
    assert_eq!(pool.body["rule"], "backlog_drain");
    assert_problem(
        &api.get("/v1/pools/ghost/decisions").await,
        StatusCode::NOT_FOUND,
        "no pool",
    );
}

#[tokio::test]
async fn the_shadow_report_tallies_the_promotion_rules_over_a_range() {
    let api = api().await;
    let pool = "/v1/pools/llama-70b-interactive";
    // A minute with no signal (held), then a backlog that scales the pool up, then quiet.
    for _ in 0..12 {
        api.engine.tick().await.unwrap();
        api.clock.advance(std::time::Duration::from_secs(5));
    }
    let signalled_from = headroom_cloud::Clock::now(api.clock.as_ref());
    for queue in [400, 400, 400, 0, 0, 0] {
        let signal = json!({"queue_depth": queue, "arrival_rate_rps": 20.0, "oldest_age_s": 1.0});
        api.post(&format!("{pool}/signals"), None, signal).await;
        api.engine.tick().await.unwrap();
        api.clock.advance(std::time::Duration::from_secs(5));
    }
    let signalled_to = headroom_cloud::Clock::now(api.clock.as_ref());
    let report = api
        .get(&format!(
            "{pool}/shadow-report?from=2026-11-30T08:00:00Z&to=2026-11-30T10:00:00Z"
        ))
        .await;
    assert_eq!(report.status, StatusCode::OK, "{:?}", report.body);
    let r = &report.body;
    assert_eq!(r["pool"], "llama-70b-interactive");
    assert_eq!(r["shadow"], false);
    assert!(
        r["held_minutes"].as_f64().unwrap() >= 0.9,
        "the signal-less minute: {r}"
    );
    assert_eq!(r["scale_ups_on_missing_signal"], 0, "{r}");
    assert_eq!(r["changes_within_cooldown"], 0, "{r}");
    assert_eq!(r["ready"], true, "{r}");
    assert!(r["minutes"].as_f64().unwrap() > 1.0, "{r}");
    // What the targets ran, by the fluid model: the pool's floor at least, for the whole range.
    let hours = r["minutes"].as_f64().unwrap() / 60.0;
    assert!(r["replica_hours"].as_f64().unwrap() >= hours, "{r}");
    assert!(
        r["gpu_hours"].as_f64().unwrap() > r["replica_hours"].as_f64().unwrap(),
        "several GPUs a replica: {r}"
    );
    // The signal-less minute has no arrival rate: no estimate of idle capacity or queueing.
    assert_eq!(r["idle_gpu_minutes"], Value::Null, "{r}");
    assert_eq!(r["avoided_queue_request_minutes"], Value::Null, "{r}");
    // From the first signal on there is one: the recorded queue of 400 for the first three
    // ticks at least, and the model's against it.
    let signalled = api
        .get(&format!(
            "{pool}/shadow-report?from={}&to={}",
            signalled_from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            signalled_to.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ))
        .await;
    assert_eq!(signalled.status, StatusCode::OK, "{:?}", signalled.body);
    let r = &signalled.body;
    let recorded = r["history_queue_request_minutes"].as_f64().unwrap();
    assert!(recorded >= 400.0 * 5.0 / 60.0, "{r}");
    let modelled = r["modelled_queue_request_minutes"].as_f64().unwrap();
    let avoided = r["avoided_queue_request_minutes"].as_f64().unwrap();
    assert!((recorded - modelled - avoided).abs() < 1e-9, "{r}");
    assert!(r["idle_gpu_minutes"].as_f64().unwrap() >= 0.0, "{r}");
    assert_problem(
        &api.get(&format!("{pool}/shadow-report?from=yesterday"))
            .await,
        StatusCode::BAD_REQUEST,
        "from",
    );
    assert_problem(
        &api.get("/v1/pools/ghost/shadow-report").await,
        StatusCode::NOT_FOUND,
        "no pool",
    );
}

#[tokio::test]
async fn scheduled_windows_are_declared_listed_applied_and_cancelled() {
    let api = api().await;
    let schedules = "/v1/pools/llama-70b-interactive/schedules";
    let launch = json!({
        "name": "launch", "min_replicas": 12,
        "from": "2026-11-30T10:00", "to": "2026-11-30T13:00", "time_zone": "Europe/Paris"
    });
    let created = api.post(schedules, None, launch.clone()).await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    assert_eq!(
        created.location.as_deref(),
        Some(format!("{schedules}/{id}").as_str())
    );
    assert_eq!(created.body["source"], "api");
    assert_eq!(
        created.body["in_force"], true,
        "09:00 UTC is 10:00 in Paris"
    );
    assert_problem(
        &api.post(schedules, None, launch).await,
        StatusCode::CONFLICT,
        "already has a window named launch",
    );
    for (body, field) in [
        (
            json!({"name": "x", "min_replicas": 2, "start": "9am", "end": "10:00"}),
            "start:",
        ),
        (
            json!({"name": "x", "min_replicas": 99, "start": "09:00", "end": "10:00"}),
            "min_replicas:",
        ),
        (
            json!({"name": "x", "min_replicas": 2, "start": "09:00", "end": "10:00", "time_zone": "Mars/Olympus"}),
            "time_zone:",
        ),
        (
            json!({"name": "x", "min_replicas": 2, "start": "09:00", "end": "10:00", "cron": "* * *"}),
            "cron",
        ),
    ] {
        assert_problem(
            &api.post(schedules, None, body).await,
            StatusCode::BAD_REQUEST,
            field,
        );
    }
    let listed = api.get(schedules).await;
    assert_eq!(listed.status, StatusCode::OK);
    let windows = listed.body["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 1, "{windows:?}");
    assert_eq!(
        windows[0]["description"],
        "2026-11-30T09:00:00+00:00 to 2026-11-30T12:00:00+00:00"
    );

    // The next tick keeps 12 replicas, and says why.
    api.engine.tick().await.unwrap();
    let pool = api.get("/v1/pools/llama-70b-interactive").await;
    assert_eq!(pool.body["desired"], 12, "{:?}", pool.body);
    assert!(
        pool.body["reason"]
            .as_str()
            .unwrap()
            .contains("scheduled window launch"),
        "{:?}",
        pool.body["reason"]
    );

    let cancel = format!("{schedules}/{id}");
    let gone = api
        .send(
            Request::delete(cancel.as_str())
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
    assert_problem(
        &api.send(
            Request::delete(cancel.as_str())
                .body(Body::empty())
                .unwrap(),
        )
        .await,
        StatusCode::NOT_FOUND,
        "no window",
    );
    assert_problem(
        &api.send(
            Request::delete(format!("{schedules}/config:batch").as_str())
                .body(Body::empty())
                .unwrap(),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "in the configuration",
    );
    assert_eq!(api.get(schedules).await.body["windows"], json!([]));
}

#[tokio::test]
async fn health_and_readiness() {
    let api = api().await;
    assert_eq!(api.get("/healthz").await.status, StatusCode::OK);
    // Ready once the reconcile loop has ticked, and no longer when its ticks stop succeeding.
    assert_problem(
        &api.get("/readyz").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "has not completed a tick",
    );
    api.engine.tick().await.unwrap();
    assert_eq!(api.get("/readyz").await.status, StatusCode::OK);
    api.clock
        .advance(api.engine.readiness_window() + std::time::Duration::from_secs(1));
    assert_problem(
        &api.get("/readyz").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "last good tick",
    );
    api.engine.tick().await.unwrap();
    assert_eq!(api.get("/readyz").await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_request_can_be_cancelled() {
    let api = api().await;
    let created = api
        .post(
            "/v1/capacity-requests",
            None,
            json!({"pool": "mistral-7b-batch", "replicas": 1}),
        )
        .await;
    let id = created.body["id"].as_str().unwrap();
    let cancelled = api
        .send(
            Request::delete(format!("/v1/capacity-requests/{id}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(cancelled.status, StatusCode::OK);
    assert_eq!(cancelled.body["state"], "cancelled");
    let gone = api
        .send(
            Request::delete("/v1/capacity-requests/cr-none")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_problem(&gone, StatusCode::NOT_FOUND, "no capacity request");
}

async fn put(api: &Api, uri: &str, body: Value) -> Reply {
    api.send(
        Request::put(uri)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
    )
    .await
}

/// A budget PUT made conditional on the version its client read (If-Match with the ETag of a
/// GET) lands only while that version is in force: a stale one is a 412 and changes nothing.
#[tokio::test]
async fn a_budget_change_on_a_stale_version_is_refused() {
    let api = api().await;
    let uri = "/v1/budgets/team-vision";
    let put_if = |if_match: Option<&str>, ceiling: &str| {
        let mut request = Request::put(uri).header(header::CONTENT_TYPE, "application/json");
        if let Some(tag) = if_match {
            request = request.header(header::IF_MATCH, tag);
        }
        request
            .body(Body::from(
                json!({"period": "month", "ceiling_usd": ceiling}).to_string(),
            ))
            .unwrap()
    };
    assert_problem(
        &api.send(put_if(Some("*"), "100")).await,
        StatusCode::PRECONDITION_FAILED,
        "no longer the version",
    );
    let first = api.send(put_if(None, "100")).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    let read = api.get(uri).await;
    let tag = read.etag.clone().expect("an ETag");
    assert_eq!(first.etag.as_deref(), Some(tag.as_str()));
    // Someone else changes it; the first client's write on what it read is refused.
    let other = api.send(put_if(Some(&tag), "200")).await;
    assert_eq!(other.status, StatusCode::OK);
    assert_ne!(other.etag.as_deref(), Some(tag.as_str()));
    assert_problem(
        &api.send(put_if(Some(&tag), "300")).await,
        StatusCode::PRECONDITION_FAILED,
        "GET it again",
    );
    assert_eq!(
        api.get(uri).await.body["ceiling"],
        "200.000000",
        "unchanged"
    );
    let fresh = api.get(uri).await.etag.unwrap();
    let list = format!("\"nope\", {fresh}");
    assert_eq!(
        api.send(put_if(Some(&list), "300")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        api.send(put_if(Some("*"), "400")).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn budgets_are_set_read_and_validated() {
    let api = api().await;
    let set = put(
        &api,
        "/v1/budgets/team-vision",
        json!({"period": "month", "ceiling_usd": "12500.50", "soft_threshold_percent": 75, "hard_action": "clamp"}),
    )
    .await;
    assert_eq!(set.status, StatusCode::OK, "{:?}", set.body);
    assert_eq!(set.body["ceiling"], "12500.500000");
    assert_eq!(set.body["remaining"], "12500.500000");
    assert_eq!(set.body["spent"], "0.000000");
    assert_eq!(set.body["currency"], "USD");
    assert_eq!(set.body["period_start"], "2026-11-01T00:00:00Z");
    assert_eq!(set.body["period_end"], "2026-12-01T00:00:00Z");
    assert_eq!(set.body["hard_action"], "clamp");

    let read = api.get("/v1/budgets/team-vision").await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.body["ceiling"], "12500.500000");
    let list = api.get("/v1/budgets").await;
    let accounts: Vec<&str> = list.body["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["account"].as_str().unwrap())
        .collect();
    assert_eq!(accounts, ["team-vision"]);

    for (body, detail) in [
        (json!({"period": "week", "ceiling_usd": "10"}), "period"),
        (
            json!({"period": "day", "ceiling_usd": "-10"}),
            "ceiling_usd",
        ),
        (
            json!({"period": "day", "ceiling_usd": "0"}),
            "more than zero",
        ),
        (
            json!({"period": "day", "ceiling_usd": 10.5}),
            "invalid type",
        ),
        (
            json!({"period": "day", "ceiling_usd": "10", "soft_threshold_percent": 101}),
            "soft_threshold_percent",
        ),
        (
            json!({"period": "day", "ceiling_usd": "10", "hard_action": "panic"}),
            "hard_action",
        ),
        (
            json!({"period": "day", "ceiling_usd": "10", "owner": "bob"}),
            "unknown field",
        ),
    ] {
        assert_problem(
            &put(&api, "/v1/budgets/team-vision", body).await,
            StatusCode::BAD_REQUEST,
            detail,
        );
    }
    assert_problem(
        &put(
            &api,
            "/v1/budgets/Not%20An%20Account",
            json!({"period": "day", "ceiling_usd": "1"}),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "account",
    );
    assert_eq!(
        api.get("/v1/budgets/team-vision").await.body["ceiling"],
        "12500.500000",
        "rejected updates change nothing"
    );
    assert_problem(
        &api.get("/v1/budgets/nobody").await,
        StatusCode::NOT_FOUND,
        "PUT /v1/budgets/nobody",
    );
}

#[tokio::test]
async fn requested_versus_delivered_is_accounted_per_request_and_pool() {
    let api = api().await;
    let created = api
        .post(
            "/v1/capacity-requests",
            None,
            json!({"pool": "mistral-7b-batch", "replicas": 2}),
        )
        .await;
    let id = created.body["id"].as_str().unwrap().to_string();
    // The simulated ladder of these offerings is 240 s; step the loop through it.
    for _ in 0..=48 {
        api.engine.tick().await.unwrap();
        api.clock.advance(std::time::Duration::from_secs(5));
    }
    let read = api.get(&format!("/v1/capacity-requests/{id}")).await;
    assert_eq!(read.body["state"], "delivered", "{:?}", read.body);
    assert_eq!(read.body["fill"]["delivered"], 2);
    assert_eq!(read.body["fill"]["fill_ratio"], 1.0);
    assert_eq!(read.body["fill"]["time_to_capacity_p50_s"], 240.0);

    let ledger = api
        .get("/v1/pools/mistral-7b-batch/ledger?from=2026-11-30T00:00:00Z&to=2026-12-01T00:00:00Z")
        .await;
    assert_eq!(ledger.status, StatusCode::OK, "{:?}", ledger.body);
    assert_eq!(ledger.body["capacity_requests"]["requested"], 2);
    assert_eq!(ledger.body["capacity_requests"]["delivered"], 2);
    assert_eq!(ledger.body["capacity_requests"]["pending"], 0);
    // min_replicas = 2: the controller's own launches are accounted apart from requests.
    // The seeded spot interruption gives notice at 09:02:55 on a node still booting: its
    // replacement is launched at once, so three organic launches, two delivered.
    let decisions = api.get("/v1/pools/mistral-7b-batch/decisions").await;
    assert!(
        decisions.body["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["event"] == "interruption_notice"),
        "{:?}",
        decisions.body
    );
    assert_eq!(ledger.body["organic"]["requested"], 3);
    assert_eq!(ledger.body["organic"]["delivered"], 2);
    assert_eq!(ledger.body["organic"]["time_to_capacity_p95_s"], 240.0);
    // use2-g6-spot holds three nodes: the fourth launch was refused there and fell back.
    assert_eq!(ledger.body["organic"]["cloud_refused"], 1);
    assert_ne!(ledger.body["spend"], "0.000000");

    let earlier = api
        .get("/v1/pools/mistral-7b-batch/ledger?from=2026-11-29T00:00:00Z&to=2026-11-29T12:00:00Z")
        .await;
    assert_eq!(earlier.body["capacity_requests"]["requested"], 0);
    assert_eq!(earlier.body["capacity_requests"]["fill_ratio"], 1.0);

    for (query, detail) in [
        ("from=yesterday", "RFC 3339"),
        (
            "from=2026-12-01T00:00:00Z&to=2026-11-30T00:00:00Z",
            "before to",
        ),
        ("since=2026-11-30T00:00:00Z", "unknown query parameter"),
    ] {
        assert_problem(
            &api.get(&format!("/v1/pools/mistral-7b-batch/ledger?{query}"))
                .await,
            StatusCode::BAD_REQUEST,
            detail,
        );
    }
}

#[tokio::test]
async fn budget_reports_come_in_every_format_and_agree() {
    let api = api().await;
    for _ in 0..=60 {
        api.engine.tick().await.unwrap();
        api.clock.advance(std::time::Duration::from_secs(5));
    }
    let range = "from=2026-11-30T00:00:00Z&to=2026-12-01T00:00:00Z";
    let json = api
        .get(&format!(
            "/v1/reports/budget?{range}&group_by=pool&format=json"
        ))
        .await;
    assert_eq!(json.status, StatusCode::OK, "{:?}", json.body);
    let total = json.body["totals"]["spend"].as_str().unwrap().to_string();
    assert_ne!(total, "0.000000");
    assert_eq!(json.body["rows"].as_array().unwrap().len(), 2);

    let focus = api
        .get(&format!("/v1/reports/budget?{range}&format=focus"))
        .await;
    assert!(focus.content_type.starts_with("text/csv"));
    let text = focus.body.as_str().unwrap();
    let billed: headroom_core::Money = text
        .lines()
        .skip(1)
        .map(|l| {
            l.split(',')
                .next()
                .unwrap()
                .parse::<headroom_core::Money>()
                .unwrap()
        })
        .sum();
    assert_eq!(
        billed.to_string(),
        total,
        "FOCUS BilledCost sums to the report's spend"
    );

    let html = api
        .get(&format!("/v1/reports/budget?{range}&format=html"))
        .await;
    assert!(html.content_type.starts_with("text/html"));
    assert!(
        html.body
            .as_str()
            .unwrap()
            .contains(&format!("title=\"{total}\""))
    );
    let csv = api
        .get(&format!(
            "/v1/reports/budget?{range}&format=csv&group_by=market"
        ))
        .await;
    assert!(csv.body.as_str().unwrap().starts_with("market,"));

    for (query, detail) in [
        ("format=pdf", "format"),
        ("group_by=team", "group_by"),
        (
            "from=2026-12-01T00:00:00Z&to=2026-11-30T00:00:00Z",
            "before to",
        ),
        ("from=last-week", "RFC 3339"),
        ("colour=red", "unknown query parameter"),
    ] {
        assert_problem(
            &api.get(&format!("/v1/reports/budget?{query}")).await,
            StatusCode::BAD_REQUEST,
            detail,
        );
    }
}

/// A reservation the configuration names is paid whether used or not: over the five minutes
/// the engine ran, the report counts its two nodes' time as used or idle, the idle part as
/// spend, and FOCUS writes that part as `Unused` rows that keep its sum equal to the spend.
#[tokio::test]
async fn budget_reports_count_a_configured_reservation_s_idle_hours_as_spend() {
    let text = headroom_testkit::with_reserved_g6(
        &config(),
        "reservation_starts = \"2026-11-30T09:00:00Z\"",
    );
    let rig = Rig::new(&text).await;
    let engine = rig.engine(rig.sim_cloud());
    let router = app(AppState::new(
        engine.clone(),
        false,
        headroom_api::Limits::default(),
    ));
    for _ in 0..60 {
        engine.tick().await.unwrap();
        rig.clock.advance(std::time::Duration::from_secs(5));
    }
    let get = |uri: String| {
        let router = router.clone();
        async move {
            let response = router
                .oneshot(Request::get(uri).body(Body::empty()).unwrap())
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            String::from_utf8(bytes.to_vec()).unwrap()
        }
    };
    let range = "from=2026-11-30T00:00:00Z&to=2026-12-01T00:00:00Z";
    let json: Value = serde_json::from_str(
        &get(format!(
            "/v1/reports/budget?{range}&group_by=market&format=json"
        ))
        .await,
    )
    .unwrap();
    let totals = &json["totals"];
    let hours = |field: &str| totals[field].as_f64().unwrap();
    // Two reserved nodes from 09:00 to the engine's now (five minutes on): 1/6 node-hour.
    let reserved_hours = hours("reserved_used_node_hours") + hours("reserved_idle_node_hours");
    assert!(
        (reserved_hours - 2.0 * 300.0 / 3600.0).abs() < 1e-6,
        "{totals}"
    );
    let money = |v: &Value| v.as_str().unwrap().parse::<headroom_core::Money>().unwrap();
    let idle = money(&totals["reserved_idle"]);
    assert!(idle > headroom_core::Money::ZERO, "{totals}");
    let parts = money(&totals["on_demand"])
        + money(&totals["spot"])
        + money(&totals["reserved"])
        + idle
        + money(&totals["parked"]);
    assert_eq!(
        money(&totals["spend"]),
        parts,
        "spend is every market plus idle plus parked volumes"
    );

    let focus = get(format!("/v1/reports/budget?{range}&format=focus")).await;
    let mut reader = csv::Reader::from_reader(focus.as_bytes());
    let headers = reader.headers().unwrap().clone();
    let column = |name| headers.iter().position(|h| h == name).unwrap();
    let (billed, status) = (column("BilledCost"), column("CommitmentDiscountStatus"));
    let mut sum = headroom_core::Money::ZERO;
    let mut unused = headroom_core::Money::ZERO;
    for row in reader.records() {
        let row = row.unwrap();
        let cost: headroom_core::Money = row[billed].parse().unwrap();
        sum += cost;
        if &row[status] == "Unused" {
            unused += cost;
        }
    }
    assert_eq!(sum, money(&totals["spend"]), "FOCUS sums to the spend");
    assert_eq!(unused, idle, "the Unused rows are the idle part");
}

/// Reservations advice over the API: per pool and family, in JSON, CSV and HTML, from the same
/// history; a history of minutes is too short for a term commitment, and bad input is a problem.
#[tokio::test]
async fn reservations_are_advised_over_the_api_in_every_format() {
    let api = api().await;
    for _ in 0..=60 {
        api.engine.tick().await.unwrap();
        api.clock.advance(std::time::Duration::from_secs(5));
    }
    let json = api.get("/v1/reports/reservations").await;
    assert_eq!(json.status, StatusCode::OK, "{:?}", json.body);
    assert!(json.content_type.starts_with("application/json"));
    let families = json.body["families"].as_array().unwrap();
    let pools: std::collections::BTreeSet<&str> = families
        .iter()
        .map(|f| f["pool"].as_str().unwrap())
        .collect();
    assert_eq!(
        pools.into_iter().collect::<Vec<_>>(),
        ["llama-70b-interactive", "mistral-7b-batch"]
    );
    // The default range reaches back 90 days, but the history starts with the ledger.
    let hours = json.body["hours"].as_f64().unwrap();
    assert!(hours > 0.0 && hours < 1.0, "{hours}");
    for family in families {
        assert!(
            family["recommendations"].as_array().unwrap().is_empty()
                && family["why"].as_str().unwrap().contains("a week at least"),
            "{family}"
        );
    }
    let csv = api.get("/v1/reports/reservations?format=csv").await;
    assert!(csv.content_type.starts_with("text/csv"));
    let text = csv.body.as_str().unwrap();
    for family in families {
        assert!(
            text.contains(family["instance_type"].as_str().unwrap()),
            "{text}"
        );
    }
    let html = api.get("/v1/reports/reservations?format=html").await;
    assert!(html.content_type.starts_with("text/html"));
    assert!(html.body.as_str().unwrap().contains("heat-map"));
    for (query, detail) in [
        ("format=pdf", "format"),
        (
            "from=2026-12-01T00:00:00Z&to=2026-11-30T00:00:00Z",
            "before to",
        ),
        ("group_by=pool", "unknown query parameter"),
    ] {
        assert_problem(
            &api.get(&format!("/v1/reports/reservations?{query}")).await,
            StatusCode::BAD_REQUEST,
            detail,
        );
    }
}

/// One figure of spend, at the engine's instant, whoever asks: the budget endpoint, `/metrics`,
/// the report and the ledger's summary, on a clock far from the wall clock.
#[tokio::test]
async fn spend_is_one_figure_in_budgets_metrics_reports_and_the_summary() {
    let api = api().await;
    api.clock
        .advance(std::time::Duration::from_secs(3 * 86_400 * 365));
    for _ in 0..=60 {
        api.engine.tick().await.unwrap();
        api.clock.advance(std::time::Duration::from_secs(5));
    }
    let now = headroom_cloud::Clock::now(api.clock.as_ref());
    let metrics = api.get("/metrics").await;
    let metrics = metrics.body.as_str().unwrap();
    let budgets = api.get("/v1/budgets").await;
    let (day, _) = headroom_core::BudgetPeriod::Day.bounds(now);
    let range = format!(
        "from={}&to={}",
        day.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        (day + chrono::Duration::days(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    let report = api
        .get(&format!(
            "/v1/reports/budget?{range}&group_by=account&format=json"
        ))
        .await;
    assert_eq!(report.status, StatusCode::OK, "{:?}", report.body);
    let mut total = headroom_core::Money::ZERO;
    for budget in budgets.body["budgets"].as_array().unwrap() {
        let account = budget["account"].as_str().unwrap();
        let spent = budget["spent"].as_str().unwrap();
        let row = report.body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["group"] == account)
            .unwrap_or_else(|| panic!("no report row for {account}"));
        assert_eq!(row["spend"].as_str().unwrap(), spent, "{account}: report");
        let gauge = metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    r#"headroom_budget_spent_dollars{{account="{account}","#
                ))
            })
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap();
        let spent: headroom_core::Money = spent.parse().unwrap();
        assert!(
            (gauge - spent.micros() as f64 / 1e6).abs() < 1e-6,
            "{account}: /metrics says {gauge}, the budget {spent}"
        );
        total += spent;
    }
    assert_ne!(total, headroom_core::Money::ZERO);
    let summary = api.ledger.summary(now).await.unwrap();
    assert_eq!(summary.spend, total, "the ledger's summary");
    assert_eq!(summary.as_of, now);
}

#[tokio::test]
async fn metrics_show_pools_decisions_refusals_calls_and_budgets() {
    let api = api().await;
    api.post(
        "/v1/capacity-requests",
        None,
        json!({"pool": "mistral-7b-batch", "replicas": 2}),
    )
    .await;
    for _ in 0..=60 {
        api.engine.tick().await.unwrap();
        api.clock.advance(std::time::Duration::from_secs(5));
    }
    // Prometheus asks for OpenMetrics and gets it; a scraper that does not ask (curl, older
    // agents) gets the text format 0.0.4.
    let openmetrics = api
        .send(
            Request::get("/metrics")
                .header(
                    header::ACCEPT,
                    "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
                )
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert!(
        openmetrics
            .content_type
            .starts_with("application/openmetrics-text"),
        "{}",
        openmetrics.content_type
    );
    assert!(
        openmetrics
            .body
            .as_str()
            .unwrap()
            .trim_end()
            .ends_with("# EOF")
    );
    let reply = api.get("/metrics").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.content_type,
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = reply.body.as_str().unwrap();
    assert!(
        !text.contains("# EOF"),
        "no OpenMetrics terminator in 0.0.4"
    );
    assert!(
        text.contains("# TYPE headroom_decisions_total counter"),
        "a counter's TYPE names its sample"
    );
    // The process's own families, as every client library exports them.
    for family in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_start_time_seconds ",
        "process_open_fds ",
        "process_max_fds ",
    ] {
        assert!(text.contains(family), "{family} missing");
    }
    // Counters whose labels are known start at 0, so increase() sees their first event.
    assert!(
        text.contains(
            r#"headroom_fallbacks_total{pool="mistral-7b-batch",account="research",kind="smaller_model"} 0"#
        ),
        "fallbacks start at 0"
    );
    assert!(
        text.contains(r#"headroom_alert_deliveries_total{outcome="dropped"} 0"#),
        "alert outcomes start at 0"
    );
    // Prometheus's own checker reads it, lints included (Debian's prometheus package, which
    // the test command installs).
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus; scripts/test installs it)");
    {
        use std::io::Write;
        promtool
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let value = |series: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("{series} missing from:\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    // Two requested, two for min_replicas and one warm: five nodes in some state (a seeded spot
    // interruption may have one replacement still starting).
    let nodes: f64 = ["requested", "starting", "ready", "warm"]
        .iter()
        .map(|state| {
            value(&format!(
                r#"headroom_pool_replicas{{pool="mistral-7b-batch",account="research",state="{state}"}}"#
            ))
        })
        .sum();
    assert_eq!(nodes, 5.0);
    let ready = value(
        r#"headroom_pool_replicas{pool="mistral-7b-batch",account="research",state="ready"}"#,
    );
    assert!(ready >= 3.0);
    assert!(
        value(
            r#"headroom_decisions_total{pool="mistral-7b-batch",account="research",rule="hold"}"#
        ) >= 1.0
    );
    // Every per-pool series names the pool's account, so a dashboard can sum by team.
    for line in text.lines().filter(|l| l.contains("pool=\"")) {
        let account = if line.contains(r#"pool="mistral-7b-batch""#) {
            r#"account="research""#
        } else {
            r#"account="ml-platform""#
        };
        assert!(line.contains(account), "no {account} on {line}");
    }
    // Requested against delivered, in GPUs (a g6 node has one): what the pool wants ready and
    // what serves it.
    let desired =
        value(r#"headroom_pool_desired_replicas{pool="mistral-7b-batch",account="research"}"#);
    assert!(desired >= 2.0);
    assert_eq!(
        value(r#"headroom_capacity_requested_gpus{pool="mistral-7b-batch",account="research"}"#),
        desired
    );
    assert_eq!(
        value(r#"headroom_capacity_delivered_gpus{pool="mistral-7b-batch",account="research"}"#),
        ready
    );
    // use2-g6-spot holds three nodes: every launch past them went to the other region — the
    // fourth replica, the warm refill and the replacement for the seeded interruption.
    assert_eq!(
        value(
            r#"headroom_fallbacks_total{pool="mistral-7b-batch",account="research",kind="region"}"#
        ),
        3.0
    );
    assert_eq!(
        value(
            r#"headroom_refusals_total{pool="mistral-7b-batch",account="research",reason="cloud_capacity",provider="sim",offering="use2-g6-spot"}"#
        ),
        1.0
    );
    assert!(
        value(r#"headroom_provider_call_duration_seconds_count{provider="sim",method="launch"}"#)
            >= 5.0
    );
    // Budget gauges name the period their ceiling applies to.
    assert_eq!(
        value(r#"headroom_budget_ceiling_dollars{account="research",period="day"}"#),
        500.0
    );
    let spent = value(r#"headroom_budget_spent_dollars{account="research",period="day"}"#);
    assert!(spent > 0.0);
    // The spend counter starts at this process's first scrape (the one above) and rises with
    // the ledger's spend: a minute later, by exactly what the period's gauge rose.
    let counted = value(r#"headroom_spend_dollars_total{account="research"}"#);
    // The loop's own health: the version running, ticks timed and counted, the last good one,
    // and the alert outbox (no webhook configured: nothing queued).
    assert_eq!(
        value(&format!(
            r#"headroom_build_info{{version="{}"}}"#,
            env!("CARGO_PKG_VERSION")
        )),
        1.0
    );
    assert_eq!(value(r#"headroom_ticks_total{outcome="ok"}"#), 61.0);
    assert_eq!(value("headroom_tick_duration_seconds_count"), 61.0);
    let last = headroom_cloud::Clock::now(api.clock.as_ref()) - chrono::Duration::seconds(5);
    assert_eq!(
        value("headroom_last_successful_tick_timestamp_seconds"),
        last.timestamp() as f64
    );
    assert_eq!(value("headroom_alert_outbox_depth"), 0.0);
    // Requests by route template, not raw path: the capacity request above was a 201.
    assert_eq!(
        value(
            r#"headroom_http_requests_total{method="POST",route="/v1/capacity-requests",status="201"}"#
        ),
        1.0
    );
    api.get("/v1/pools/mistral-7b-batch").await;
    api.get("/no/such/thing").await;
    let text = api.get("/metrics").await.body.as_str().unwrap().to_string();
    assert!(
        text.contains(
            r#"headroom_http_requests_total{method="GET",route="/v1/pools/{name}",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(text.contains(
        r#"headroom_http_requests_total{method="GET",route="unmatched",status="404"} 1"#
    ));
    assert!(text.contains(
        r#"headroom_http_request_duration_seconds_count{method="GET",route="/v1/pools/{name}"} 1"#
    ));
    for _ in 0..12 {
        api.engine.tick().await.unwrap();
        api.clock.advance(std::time::Duration::from_secs(5));
    }
    let later = api.get("/metrics").await.body.as_str().unwrap().to_string();
    let value = |series: &str| -> f64 {
        later
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("{series} missing from:\n{later}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let spent_later = value(r#"headroom_budget_spent_dollars{account="research",period="day"}"#);
    let counted_later = value(r#"headroom_spend_dollars_total{account="research"}"#);
    assert!(spent_later > spent, "{spent} then {spent_later}");
    assert!(
        ((counted_later - counted) - (spent_later - spent)).abs() < 1e-6,
        "the counter rose {} while the gauge rose {}",
        counted_later - counted,
        spent_later - spent
    );
}

/// An API that requires tokens, with the ledger to mint them.
async fn secured() -> (Api, axum::Router) {
    let api = api().await;
    let router = app(AppState::new(
        api.engine.clone(),
        true,
        headroom_api::Limits::default(),
    ));
    (api, router)
}

async fn mint(api: &Api, accounts: &[&str], scopes: &[Scope]) -> String {
    let accounts: Vec<String> = accounts.iter().map(|a| a.to_string()).collect();
    let (text, record) = headroom_api::auth::new_token(&accounts, scopes, api.clock_now());
    api.ledger.create_token(&record).await.unwrap();
    text
}

async fn send_as(
    router: &axum::Router,
    token: Option<&str>,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> Reply {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = match body {
        Some(v) => {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    let response = router
        .clone()
        .oneshot(builder.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    Reply {
        status,
        content_type,
        location: None,
        etag: None,
        body,
    }
}

#[tokio::test]
async fn tokens_are_required_and_bound_to_accounts_and_scopes() {
    let (api, router) = secured().await;
    let research = mint(&api, &["research"], &[Scope::Capacity, Scope::Reports]).await;
    let platform_reader = mint(&api, &["ml-platform"], &[Scope::Reports]).await;
    let admin = mint(&api, &["*"], &[Scope::Admin]).await;
    let body = json!({"pool": "mistral-7b-batch", "replicas": 1});

    // No token, a malformed one, a forged one: 401 with WWW-Authenticate, nothing written.
    for token in [None, Some("nonsense"), Some("hr_0123456789ab_forged")] {
        let r = send_as(
            &router,
            token,
            "POST",
            "/v1/capacity-requests",
            Some(body.clone()),
        )
        .await;
        assert_problem(&r, StatusCode::UNAUTHORIZED, "token");
    }
    assert_eq!(api.ledger_rows().await.0, 0);
    // Probes stay open.
    assert_eq!(
        send_as(&router, None, "GET", "/healthz", None).await.status,
        StatusCode::OK
    );

    // research may request capacity for its own pool...
    let created = send_as(
        &router,
        Some(&research),
        "POST",
        "/v1/capacity-requests",
        Some(body.clone()),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    // ...but not charge ml-platform: its pool does not exist for research.
    let other = json!({"pool": "llama-70b-interactive", "replicas": 1});
    let r = send_as(
        &router,
        Some(&research),
        "POST",
        "/v1/capacity-requests",
        Some(other),
    )
    .await;
    assert_problem(
        &r,
        StatusCode::BAD_REQUEST,
        "no pool named llama-70b-interactive",
    );
    // A reader of ml-platform cannot see research's request, budget or pools: they do not exist for it.
    let r = send_as(
        &router,
        Some(&platform_reader),
        "GET",
        &format!("/v1/capacity-requests/{id}"),
        None,
    )
    .await;
    assert_problem(&r, StatusCode::NOT_FOUND, "no capacity request");
    let r = send_as(
        &router,
        Some(&platform_reader),
        "GET",
        "/v1/pools/mistral-7b-batch",
        None,
    )
    .await;
    assert_problem(&r, StatusCode::NOT_FOUND, "no pool");
    let pools = send_as(&router, Some(&platform_reader), "GET", "/v1/pools", None).await;
    let names: Vec<&str> = pools.body["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["llama-70b-interactive"]);
    // Scopes: a reader cannot request capacity, research cannot set budgets or read metrics.
    let r = send_as(
        &router,
        Some(&platform_reader),
        "POST",
        "/v1/capacity-requests",
        Some(json!({"pool": "llama-70b-interactive", "replicas": 1})),
    )
    .await;
    assert_problem(&r, StatusCode::FORBIDDEN, "capacity scope");
    let r = send_as(
        &router,
        Some(&research),
        "PUT",
        "/v1/budgets/research",
        Some(json!({"period": "day", "ceiling_usd": "1"})),
    )
    .await;
    assert_problem(&r, StatusCode::FORBIDDEN, "budgets scope");
    assert_problem(
        &send_as(&router, Some(&research), "GET", "/metrics", None).await,
        StatusCode::FORBIDDEN,
        "metrics scope",
    );
    // Reports are cut to the token's accounts.
    let report = send_as(
        &router,
        Some(&research),
        "GET",
        "/v1/reports/budget?format=json&group_by=account",
        None,
    )
    .await;
    assert_eq!(report.status, StatusCode::OK, "{:?}", report.body);
    assert!(
        report.body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["group"] == "research")
    );
    let advice = send_as(
        &router,
        Some(&research),
        "GET",
        "/v1/reports/reservations",
        None,
    )
    .await;
    assert_eq!(advice.status, StatusCode::OK, "{:?}", advice.body);
    assert!(
        advice.body["families"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["pool"] == "mistral-7b-batch"),
        "advice reads only the token's pools: {}",
        advice.body
    );
    // The admin sees everything.
    let read = send_as(
        &router,
        Some(&admin),
        "GET",
        &format!("/v1/capacity-requests/{id}"),
        None,
    )
    .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(
        send_as(&router, Some(&admin), "GET", "/metrics", None)
            .await
            .status,
        StatusCode::OK
    );

    // Revoked: refused once the cached verification is older than the recheck interval.
    let token_id = research.split('_').nth(1).unwrap();
    assert!(
        api.ledger
            .revoke_token(token_id, api.clock_now())
            .await
            .unwrap()
    );
    api.clock
        .advance(headroom_api::Limits::default().token_recheck_interval);
    let r = send_as(
        &router,
        Some(&research),
        "GET",
        &format!("/v1/capacity-requests/{id}"),
        None,
    )
    .await;
    assert_problem(&r, StatusCode::UNAUTHORIZED, "revoked");
}

/// The `detail` of a problem+json answer.
async fn problem_detail(response: axum::response::Response) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let problem: Value = serde_json::from_slice(&bytes).unwrap();
    problem["detail"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_token_past_its_rate_gets_429_with_retry_after() {
    let api = api().await;
    let limits = headroom_api::Limits {
        requests_per_second: 1,
        burst: 2,
        ..headroom_api::Limits::default()
    };
    let router = app(AppState::new(api.engine.clone(), true, limits));
    let token = mint(&api, &["*"], &[Scope::Admin]).await;
    let mut statuses = vec![];
    let mut retry_after = None;
    let mut detail = String::new();
    for _ in 0..4 {
        let request =
            Request::get("/v1/pools").header(header::AUTHORIZATION, format!("Bearer {token}"));
        let response = router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        statuses.push(response.status());
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            retry_after = response
                .headers()
                .get(header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap().to_string());
            detail = problem_detail(response).await;
        }
    }
    assert!(detail.starts_with("this token's request rate"), "{detail}");
    assert_eq!(statuses[..2], [StatusCode::OK, StatusCode::OK]);
    assert!(
        statuses[2..].contains(&StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    assert!(retry_after.unwrap().parse::<u64>().unwrap() >= 1);
    // Probes are not rate limited.
    for _ in 0..5 {
        let r = router
            .clone()
            .oneshot(Request::get("/healthz").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
}

/// `GET /v1/pools` with `token`, as the peer `client` sends it.
fn pools_from(client: &str, token: &str) -> Request<Body> {
    let mut request = Request::get("/v1/pools")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let addr: std::net::SocketAddr = format!("{client}:40000").parse().unwrap();
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(addr));
    request
}

/// The limiters refill on the engine's clock, not the wall clock: a token and a client address
/// past their allowances are let in again exactly when the (manual) clock has moved on by the
/// refill interval, and not a moment before, with no real wait. On `governor`'s own clock the
/// manual clock's moves would refill nothing and the refused requests would stay refused.
#[tokio::test]
async fn a_limiter_refills_when_the_engines_clock_moves_on_by_its_interval() {
    use std::time::Duration;
    let api = api().await;
    let limits = headroom_api::Limits {
        // A token: one request a second (one refilled each second), two at once.
        requests_per_second: 1,
        burst: 2,
        // A client address: four a second (one refilled each 250 ms), one at once.
        client_requests_per_second: 4,
        client_burst: 1,
        ..headroom_api::Limits::default()
    };
    let router = app(AppState::new(api.engine.clone(), true, limits));
    let token = mint(&api, &["*"], &[Scope::Admin]).await;
    let send = |client: &str, token: &str| {
        let request = pools_from(client, token);
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await.unwrap();
            let retry_after = response
                .headers()
                .get(header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap().to_string());
            (response.status(), retry_after)
        }
    };
    const OK: StatusCode = StatusCode::OK;
    const LIMITED: StatusCode = StatusCode::TOO_MANY_REQUESTS;

    // The token's allowance, from clients of their own (each sends once per step: the client
    // limiter, one at once and refilled in 250 ms, lets each through).
    let mut clients = (1..).map(|i| format!("198.51.100.{i}"));
    let mut token_step = async |expected: &[StatusCode]| {
        let mut got = Vec::new();
        for _ in expected {
            got.push(send(&clients.next().unwrap(), &token).await);
        }
        let statuses: Vec<StatusCode> = got.iter().map(|(s, _)| *s).collect();
        assert_eq!(statuses, expected, "{got:?}");
        got
    };
    let first = token_step(&[OK, OK, LIMITED]).await;
    assert_eq!(first[2].1.as_deref(), Some("1"), "{first:?}");
    api.clock.advance(Duration::from_millis(999));
    token_step(&[LIMITED]).await;
    api.clock.advance(Duration::from_millis(1));
    token_step(&[OK, LIMITED]).await;
    // Refilled to its burst, and no further, however long the clock runs on.
    api.clock.advance(Duration::from_secs(3600));
    token_step(&[OK, OK, LIMITED]).await;

    // A client address's allowance, before any token is looked up: forged tokens are refused
    // (401) while it lasts, and limited (429) past it.
    let forged = format!("hr_{:012x}_{}", 7, "f".repeat(64));
    let flooder = "203.0.113.7";
    assert_eq!(send(flooder, &forged).await.0, StatusCode::UNAUTHORIZED);
    let (status, retry_after) = send(flooder, &forged).await;
    assert_eq!((status, retry_after.as_deref()), (LIMITED, Some("1")));
    api.clock.advance(Duration::from_millis(249));
    assert_eq!(send(flooder, &forged).await.0, LIMITED);
    api.clock.advance(Duration::from_millis(1));
    assert_eq!(send(flooder, &forged).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(send(flooder, &forged).await.0, LIMITED);
}

mod hostile {
    //! Property tests: hostile input to every endpoint gets a 4xx problem (or, for reads, an
    //! answer), never a 5xx, and never changes the ledger.

    use proptest::prelude::*;

    use super::*;

    /// Arbitrary JSON, nested up to a depth, with hostile strings and numbers.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            Just(json!(1e308)),
            Just(json!(-0.0)),
            hostile_string().prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        hostile_string(),
                        Just("pool".to_string()),
                        Just("replicas".to_string()),
                        Just("priority".to_string()),
                        Just("queue_depth".to_string()),
                        Just("period".to_string()),
                        Just("ceiling_usd".to_string()),
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn hostile_string() -> impl Strategy<Value = String> {
        prop_oneof![
            ".{0,40}",
            Just("'; DROP TABLE node_events; --".to_string()),
            Just("../../etc/passwd".to_string()),
            Just("%2e%2e%2f".to_string()),
            Just("\u{0}\u{202e}\u{1F600}".to_string()),
            Just("llama-70b-interactive".to_string()),
            Just("mistral-7b-batch".to_string()),
            Just("a".repeat(10_000)),
        ]
    }

    fn path_segment() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9._~-]{0,70}",
            Just("..%2F..%2Fetc".to_string()),
            Just("%00".to_string()),
            Just("%F0%9F%98%80".to_string()),
            Just("cr-%27%3B".to_string()),
        ]
    }

    fn endpoint() -> impl Strategy<Value = (&'static str, String)> {
        path_segment().prop_flat_map(|seg| {
            prop_oneof![
                Just(("POST", "/v1/capacity-requests".to_string())),
                Just(("GET", format!("/v1/capacity-requests/{seg}"))),
                Just(("DELETE", format!("/v1/capacity-requests/{seg}"))),
                Just(("GET", format!("/v1/pools/{seg}"))),
                Just(("POST", format!("/v1/pools/{seg}/signals"))),
                Just(("POST", "/v1/pools/mistral-7b-batch/signals".to_string())),
                Just(("GET", format!("/v1/pools/{seg}/ledger?from={seg}"))),
                Just(("GET", format!("/v1/pools/{seg}/decisions"))),
                Just(("GET", format!("/v1/budgets/{seg}"))),
                Just(("PUT", format!("/v1/budgets/{seg}"))),
                Just(("GET", format!("/v1/reports/budget?format={seg}&from={seg}"))),
                Just(("PATCH", format!("/v1/{seg}"))),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

        #[test]
        fn hostile_requests_get_problems_and_change_nothing(
            (method, uri) in endpoint(),
            body in json_value(),
            content_type in prop_oneof![Just("application/json"), Just("text/plain"), Just("application/problem+json")],
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let api = api().await;
                let before = api.ledger_rows().await;
                let budgets_before = api.ledger.budgets().await.unwrap();
                let Ok(request) = Request::builder()
                    .method(method)
                    .uri(&uri)
                    .header(header::CONTENT_TYPE, content_type)
                    .body(Body::from(body.to_string()))
                else {
                    return; // not even a valid HTTP request line: nothing reaches the server
                };
                let reply = api.send(request).await;
                assert!(reply.status.as_u16() < 500, "{method} {uri} with {body} gave {}: {:?}", reply.status, reply.body);
                if reply.status.is_client_error() {
                    assert_eq!(reply.content_type, "application/problem+json", "{method} {uri}");
                    assert_eq!(api.ledger_rows().await, before, "{method} {uri} changed the ledger");
                    assert_eq!(api.ledger.budgets().await.unwrap(), budgets_before);
                }
            });
        }
    }
}

/// The committed document is what the code generates; regenerate with
/// `cargo run -- openapi > openapi.json`.
#[tokio::test]
async fn the_committed_openapi_document_matches_the_code() {
    let committed = include_str!("../../../openapi.json");
    let generated = headroom_api::openapi();
    assert!(
        committed == generated,
        "openapi.json drifted from the code: run `cargo run -- openapi > openapi.json`"
    );
    let api = api().await;
    let served = api.get("/openapi.json").await;
    assert_eq!(served.status, StatusCode::OK);
    let doc: Value = serde_json::from_str(&generated).unwrap();
    for path in [
        "/v1/capacity-requests",
        "/v1/capacity-requests/{id}",
        "/v1/pools/{name}/signals",
        "/v1/reports/budget",
        "/metrics",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} is not documented");
    }
    assert_eq!(served.body, doc);

    // Bearer tokens, declared: the scheme, required by default, waived only where auth is.
    let scheme = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(
        (scheme["type"].as_str(), scheme["scheme"].as_str()),
        (Some("http"), Some("bearer"))
    );
    assert_eq!(doc["security"], json!([{"bearer": []}]));
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let public = ["/healthz", "/readyz", "/openapi.json"].contains(&path.as_str());
            if public {
                assert_eq!(op["security"], json!([{}]), "{method} {path} is public");
            } else {
                assert!(
                    op.get("security").is_none(),
                    "{method} {path} keeps the bearer default"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_request_beyond_the_pool_s_room_says_so_and_admission_is_per_tier() {
    let api = api().await;
    api.engine.tick().await.unwrap();
    // mistral-7b-batch keeps min_replicas 2 of max 12: room for 10.
    let created = api
        .post(
            "/v1/capacity-requests",
            None,
            json!({"pool": "mistral-7b-batch", "replicas": 12}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    let warnings = created.body["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("room for 10")),
        "{warnings:?}"
    );

    let admission = api.get("/v1/pools/mistral-7b-batch/admission").await;
    assert_eq!(admission.status, StatusCode::OK);
    let tiers: Vec<&str> = admission.body["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["priority"].as_str().unwrap())
        .collect();
    assert_eq!(tiers, ["low", "normal", "high", "critical"]);
    // No signal yet: the pool holds and sheds nothing.
    assert_eq!(admission.body["shedding"], false);
    assert_problem(
        &api.get("/v1/pools/nope/admission").await,
        StatusCode::NOT_FOUND,
        "nope",
    );
}

/// The router and the document are built from the same attributes: every documented operation
/// reaches a handler (not the 404 fallback or a 405), and the shared problem answers are
/// references to components that exist, so each is described once.
#[tokio::test]
async fn every_documented_operation_is_routed_and_shares_its_problem_answers() {
    let api = api().await;
    let doc: Value = serde_json::from_str(&headroom_api::openapi()).unwrap();
    let components = doc["components"]["responses"].as_object().unwrap();
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let uri = path
            .replace("{name}", "nope")
            .replace("{id}", "nope")
            .replace("{account}", "nope");
        for (method, operation) in item.as_object().unwrap() {
            operations += 1;
            let request = Request::builder()
                .method(method.to_uppercase().as_str())
                .uri(&uri)
                .body(Body::empty())
                .unwrap();
            let reply = api.send(request).await;
            assert_ne!(
                reply.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            let detail = reply.body["detail"].as_str().unwrap_or("");
            assert!(
                !detail.contains("no such endpoint"),
                "{method} {path} is documented but not routed"
            );
            for (status, response) in operation["responses"].as_object().unwrap() {
                let Some(reference) = response["$ref"].as_str() else {
                    // Only answers one endpoint alone gives are written inline.
                    // The Kubernetes API group answers its mistakes as Kubernetes `Status`es.
                    let kubernetes = path.starts_with("/apis/");
                    assert!(
                        status.starts_with('2')
                            || (method == "post" && status == "409")
                            || kubernetes,
                        "{method} {path} {status} repeats a shared answer inline"
                    );
                    continue;
                };
                let name = reference.strip_prefix("#/components/responses/").unwrap();
                assert!(components.contains_key(name), "{reference} is missing");
            }
            let public = ["/healthz", "/readyz", "/openapi.json"].contains(&path.as_str());
            assert_eq!(
                operation["responses"]["401"].is_object(),
                !public,
                "{method} {path}: only endpoints behind the token check answer 401"
            );
        }
    }
    assert_eq!(operations, 27);
    let limited = &components["RateLimited"];
    assert!(limited["headers"]["Retry-After"].is_object(), "{limited}");
}

/// Every endpoint that names a pool, a budget or a request, with `{pool}`, `{account}` and
/// `{id}` to fill in.
const NAMED_ENDPOINTS: &[(&str, &str, Option<&str>)] = &[
    (
        "POST",
        "/v1/capacity-requests",
        Some(r#"{"pool":"{pool}","replicas":1}"#),
    ),
    ("GET", "/v1/capacity-requests/{id}", None),
    ("DELETE", "/v1/capacity-requests/{id}", None),
    ("GET", "/v1/pools/{pool}", None),
    ("GET", "/v1/pools/{pool}/admission", None),
    (
        "POST",
        "/v1/pools/{pool}/signals",
        Some(r#"{"queue_depth":3}"#),
    ),
    ("GET", "/v1/pools/{pool}/decisions", None),
    ("GET", "/v1/pools/{pool}/ledger", None),
    ("GET", "/v1/pools/{pool}/shadow-report", None),
    ("GET", "/v1/pools/{pool}/schedules", None),
    (
        "POST",
        "/v1/pools/{pool}/schedules",
        Some(r#"{"name":"x","min_replicas":1,"start":"09:00","end":"10:00"}"#),
    ),
    ("DELETE", "/v1/pools/{pool}/schedules/w-none", None),
    ("GET", "/v1/budgets/{account}", None),
    (
        "PUT",
        "/v1/budgets/{account}",
        Some(r#"{"period":"day","ceiling_usd":"1"}"#),
    ),
];

struct Named<'a> {
    pool: &'a str,
    account: &'a str,
    id: &'a str,
}

impl Named<'_> {
    fn fill(&self, text: &str) -> String {
        text.replace("{pool}", self.pool)
            .replace("{account}", self.account)
            .replace("{id}", self.id)
    }

    /// A reply's body with this resource's names replaced by `other`'s, to compare the two.
    fn as_other(&self, reply: &Reply, other: &Named) -> (StatusCode, String) {
        let body = reply
            .body
            .to_string()
            .replace(self.pool, other.pool)
            .replace(self.account, other.account)
            .replace(self.id, other.id);
        (reply.status, body)
    }
}

#[tokio::test]
async fn another_account_s_resources_answer_exactly_as_absent_ones() {
    let (api, router) = secured().await;
    // ml-platform's pool has a request and a budget; research's tokens must not tell them
    // from a pool, a budget and a request that never existed.
    let foreign_request = headroom_testkit::request(
        api.ledger.as_ref(),
        api.clock.as_ref(),
        "llama-70b-interactive",
        1,
    )
    .await;
    let budget = headroom_core::Budget {
        account: "ml-platform".parse().unwrap(),
        period: headroom_core::BudgetPeriod::Day,
        ceiling: "900".parse().unwrap(),
        soft_threshold_percent: 80,
        hard_action: headroom_core::HardAction::Refuse,
    };
    api.ledger
        .put_budget(&budget, api.clock_now())
        .await
        .unwrap();
    api.engine.tick().await.unwrap();
    let foreign = Named {
        pool: "llama-70b-interactive",
        account: "ml-platform",
        id: &foreign_request.0,
    };
    let absent = Named {
        pool: "no-such-pool-at-all",
        account: "no-such-account",
        id: "cr-00000000000000000000000000000000",
    };
    let rows_before = api.ledger_rows().await;
    let scope_sets: Vec<Vec<Scope>> = Scope::ALL
        .into_iter()
        .filter(|s| *s != Scope::Admin)
        .map(|s| vec![s])
        .chain([vec![
            Scope::Capacity,
            Scope::Reports,
            Scope::Budgets,
            Scope::Signals,
            Scope::Metrics,
        ]])
        .collect();
    for scopes in &scope_sets {
        let token = mint(&api, &["research"], scopes).await;
        for (method, path, body) in NAMED_ENDPOINTS {
            let mut replies = Vec::new();
            for named in [&foreign, &absent] {
                let body = body.map(|b| serde_json::from_str(&named.fill(b)).unwrap());
                let reply = send_as(&router, Some(&token), method, &named.fill(path), body).await;
                assert!(
                    reply.status.is_client_error(),
                    "{scopes:?} {method} {path}: {} {:?}",
                    reply.status,
                    reply.body
                );
                replies.push(reply);
            }
            assert_eq!(
                foreign.as_other(&replies[0], &absent),
                (replies[1].status, replies[1].body.to_string()),
                "{scopes:?} {method} {path}: another account's resource must read as an absent one"
            );
        }
        // Lists and exports name nothing of ml-platform's.
        for path in [
            "/v1/pools",
            "/v1/budgets",
            "/v1/alerts",
            "/v1/offerings",
            "/v1/reports/budget?format=csv&group_by=pool",
            "/metrics",
        ] {
            let reply = send_as(&router, Some(&token), "GET", path, None).await;
            let text = reply.body.to_string();
            for secret in ["llama-70b-interactive", "ml-platform", "p4d", "p5"] {
                assert!(
                    !text.contains(secret),
                    "{scopes:?} GET {path} shows {secret}: {text}"
                );
            }
        }
    }
    assert_eq!(api.ledger_rows().await, rows_before, "nothing was written");
    assert_eq!(
        api.ledger
            .budget(&"no-such-account".parse().unwrap())
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn metrics_show_a_token_only_its_own_accounts() {
    let (api, router) = secured().await;
    for pool in ["llama-70b-interactive", "mistral-7b-batch"] {
        headroom_testkit::request(api.ledger.as_ref(), api.clock.as_ref(), pool, 1).await;
    }
    api.engine.tick().await.unwrap();
    let research = mint(&api, &["research"], &[Scope::Metrics, Scope::Reports]).await;
    let admin = mint(&api, &["*"], &[Scope::Metrics]).await;
    let text = |reply: Reply| reply.body.as_str().unwrap_or_default().to_string();
    let theirs = text(send_as(&router, Some(&research), "GET", "/metrics", None).await);
    let everything = text(send_as(&router, Some(&admin), "GET", "/metrics", None).await);
    assert!(everything.contains(r#"pool="llama-70b-interactive""#));
    assert!(everything.contains(r#"pool="mistral-7b-batch""#));
    assert!(theirs.contains(r#"pool="mistral-7b-batch""#), "{theirs}");
    assert!(!theirs.contains("llama-70b-interactive"), "{theirs}");
    assert!(!theirs.contains(r#"account="ml-platform""#), "{theirs}");
    assert!(
        theirs.contains("# TYPE ") && !theirs.contains("# EOF"),
        "still a whole exposition in the text format"
    );
    // Every sample a tenant sees is one the admin sees too.
    for line in theirs.lines().filter(|l| !l.starts_with('#')) {
        let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
        assert!(everything.contains(series), "{line}");
    }
    // The offerings are cut to those research's pools may launch.
    let offerings = send_as(&router, Some(&research), "GET", "/v1/offerings", None).await;
    let ids: Vec<&str> = offerings.body["offerings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["offering"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(ids.iter().all(|id| id.contains("g6")), "{ids:?}");
}

#[tokio::test]
async fn idempotency_keys_belong_to_the_account_that_is_charged() {
    let (api, router) = secured().await;
    let research = mint(&api, &["research"], &[Scope::Capacity]).await;
    let platform = mint(&api, &["ml-platform"], &[Scope::Capacity]).await;
    let post = |token: String, pool: &'static str| {
        let router = router.clone();
        async move {
            let request = Request::post("/v1/capacity-requests")
                .header(header::AUTHORIZATION, format!("Bearer {token}"))
                .header(header::CONTENT_TYPE, "application/json")
                .header("idempotency-key", "deploy-42")
                .body(Body::from(json!({"pool": pool, "replicas": 1}).to_string()))
                .unwrap();
            let response = router.oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap())
        }
    };
    let (status, first) = post(research.clone(), "mistral-7b-batch").await;
    assert_eq!(status, StatusCode::CREATED, "{first:?}");
    // The same key from another account is that account's own first use.
    let (status, theirs) = post(platform.clone(), "llama-70b-interactive").await;
    assert_eq!(status, StatusCode::CREATED, "{theirs:?}");
    assert_ne!(theirs["id"], first["id"]);
    assert!(!theirs.to_string().contains(first["id"].as_str().unwrap()));
    // Each account's retry replays its own request.
    let (status, again) = post(research, "mistral-7b-batch").await;
    assert_eq!((status, &again["id"]), (StatusCode::OK, &first["id"]));
    let (status, again) = post(platform, "llama-70b-interactive").await;
    assert_eq!((status, &again["id"]), (StatusCode::OK, &theirs["id"]));
    assert_eq!(again["idempotency_key"], "deploy-42");
}

#[tokio::test]
async fn a_flood_of_bad_tokens_is_limited_per_client_before_any_lookup() {
    let api = api().await;
    let limits = headroom_api::Limits {
        client_requests_per_second: 1,
        client_burst: 5,
        ..headroom_api::Limits::default()
    };
    let router = app(AppState::new(api.engine.clone(), true, limits));
    let good = mint(&api, &["*"], &[Scope::Reports]).await;
    let from = pools_from;
    let mut statuses = Vec::new();
    for i in 0..20 {
        let forged = format!("hr_{i:012x}_{}", "f".repeat(64));
        let response = router
            .clone()
            .oneshot(from("203.0.113.7", &forged))
            .await
            .unwrap();
        statuses.push(response.status());
    }
    let unauthorized = statuses
        .iter()
        .filter(|s| **s == StatusCode::UNAUTHORIZED)
        .count();
    let limited = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((unauthorized, limited), (5, 15), "{statuses:?}");
    // The flooding client is limited even with a good token; another client is not.
    let flooded = router
        .clone()
        .oneshot(from("203.0.113.7", &good))
        .await
        .unwrap();
    assert_eq!(flooded.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(flooded.headers().contains_key(header::RETRY_AFTER));
    // The answer names the allowance used up: the client address's, not a token's.
    let detail = problem_detail(flooded).await;
    assert!(
        detail.starts_with("this client address's request rate"),
        "{detail}"
    );
    let other = router
        .clone()
        .oneshot(from("198.51.100.2", &good))
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
}

#[tokio::test]
async fn behind_a_trusted_balancer_each_client_has_its_own_limit() {
    let api = api().await;
    let limits = headroom_api::Limits {
        client_requests_per_second: 1,
        client_burst: 3,
        trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()],
        ..headroom_api::Limits::default()
    };
    let router = app(AppState::new(api.engine.clone(), true, limits));
    let good = mint(&api, &["*"], &[Scope::Reports]).await;
    let via = |peer: &str, forwarded: &str| {
        let mut request = Request::get("/v1/pools")
            .header(header::AUTHORIZATION, format!("Bearer {good}"))
            .header("x-forwarded-for", forwarded)
            .body(Body::empty())
            .unwrap();
        let addr: std::net::SocketAddr = format!("{peer}:40000").parse().unwrap();
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(addr));
        request
    };
    let status = |request: Request<Body>| {
        let router = router.clone();
        async move { router.oneshot(request).await.unwrap().status() }
    };
    // One client floods through the balancer and is limited...
    for _ in 0..3 {
        assert_eq!(
            status(via("10.0.0.5", "198.51.100.1")).await,
            StatusCode::OK
        );
    }
    assert_eq!(
        status(via("10.0.0.5", "198.51.100.1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // ...another client through the same balancer is not.
    assert_eq!(
        status(via("10.0.0.5", "198.51.100.2")).await,
        StatusCode::OK
    );
    // A peer that is not the balancer cannot borrow a fresh address by saying one.
    for i in 0..3 {
        let forged = format!("192.0.2.{i}");
        assert_eq!(status(via("203.0.113.7", &forged)).await, StatusCode::OK);
    }
    assert_eq!(
        status(via("203.0.113.7", "192.0.2.99")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_verified_token_is_rechecked_within_the_stated_bound() {
    let (api, router) = secured().await;
    let token = mint(&api, &["research"], &[Scope::Reports]).await;
    let read = || send_as(&router, Some(&token), "GET", "/v1/pools", None);
    assert_eq!(read().await.status, StatusCode::OK);
    let id = token.split('_').nth(1).unwrap();
    api.ledger.revoke_token(id, api.clock_now()).await.unwrap();
    let bound = headroom_api::Limits::default().token_recheck_interval;
    api.clock.advance(bound - std::time::Duration::from_secs(1));
    assert_eq!(
        read().await.status,
        StatusCode::OK,
        "within the recheck interval the cached verification stands"
    );
    api.clock.advance(std::time::Duration::from_secs(1));
    assert_problem(&read().await, StatusCode::UNAUTHORIZED, "revoked");
}

#[tokio::test]
async fn a_revoked_token_writes_nothing_even_while_its_verification_is_cached() {
    let (api, router) = secured().await;
    let token = mint(&api, &["research"], &[Scope::Capacity]).await;
    let create = || {
        send_as(
            &router,
            Some(&token),
            "POST",
            "/v1/capacity-requests",
            Some(json!({"pool": "mistral-7b-batch", "replicas": 1})),
        )
    };
    assert_eq!(create().await.status, StatusCode::CREATED);
    let before = api.ledger_rows().await.0;
    // Revoked through the ledger, as `headroom token revoke` does, with no time passing: the
    // cached verification is fresh, but a write reads the token again.
    let id = token.split('_').nth(1).unwrap();
    assert!(api.ledger.revoke_token(id, api.clock_now()).await.unwrap());
    assert_problem(&create().await, StatusCode::UNAUTHORIZED, "revoked");
    let cancel = send_as(
        &router,
        Some(&token),
        "DELETE",
        &format!("/v1/capacity-requests/{}", "0".repeat(32)),
        None,
    )
    .await;
    assert_problem(&cancel, StatusCode::UNAUTHORIZED, "revoked");
    assert_eq!(
        api.ledger_rows().await.0,
        before,
        "nothing written after the revocation"
    );
}

/// The endpoints anyone may call are the ones the document marks public, and the README names
/// each of them where it says what needs a token.
#[tokio::test]
async fn the_public_endpoints_are_the_documented_ones_and_the_readme_names_them() {
    let (_api, router) = secured().await;
    let doc: Value = serde_json::from_str(&headroom_api::openapi()).unwrap();
    let readme = include_str!("../../../README.md");
    let sentence = readme
        .split("\n\n")
        .find(|p| p.contains("requires `Authorization: Bearer <token>` on every endpoint but"))
        .expect("the README says which endpoints need a token")
        .replace('\n', " ");
    let mut public = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if item["get"]["security"] == json!([{}]) {
            public.push(path.clone());
        }
    }
    assert_eq!(public.len(), 3, "{public:?}");
    for path in &public {
        let reply = send_as(&router, None, "GET", path, None).await;
        assert_ne!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "{path} wants a token"
        );
        assert!(
            sentence.contains(&format!("`{path}`")),
            "the README does not name {path} as public: {sentence}"
        );
    }
    let reply = send_as(&router, None, "GET", "/v1/pools", None).await;
    assert_problem(&reply, StatusCode::UNAUTHORIZED, "Bearer");
}

/// A TCP proxy in front of PostgreSQL that can turn into a blackhole: connections stay open and
/// what is sent is swallowed, as a network partition without resets looks.
struct Blackhole {
    port: u16,
    dark: Arc<std::sync::atomic::AtomicBool>,
}

impl Blackhole {
    async fn start(target: String) -> Blackhole {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let dark = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let dark2 = dark.clone();
        tokio::spawn(async move {
            // Bounded: a test opens far fewer connections than this.
            for _ in 0..200 {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                for (mut from, mut to) in [(cr, sw), (sr, cw)].map(|(r, w)| (r, w)) {
                    let dark = dark2.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        while let Ok(n) = from.read(&mut buf).await {
                            if n == 0 {
                                return;
                            }
                            if !dark.load(Ordering::SeqCst)
                                && to.write_all(&buf[..n]).await.is_err()
                            {
                                return;
                            }
                        }
                    });
                }
            }
        });
        Blackhole { port, dark }
    }
}

#[tokio::test]
async fn readyz_answers_503_within_its_bound_when_the_database_is_a_blackhole() {
    let direct = headroom_testkit::fresh_postgres_database("readyz").await;
    let (head, db_name) = direct.rsplit_once('/').unwrap();
    let (user_host, target_port) = head.rsplit_once(':').unwrap();
    let host = user_host
        .rsplit_once('@')
        .map_or(user_host, |(_, h)| h)
        .trim_start_matches("postgres://");
    let proxy = Blackhole::start(format!("{host}:{target_port}")).await;
    let proxied = format!("{user_host}:{}/{db_name}", proxy.port);
    let ledger = Arc::new(
        headroom_ledger::PostgresLedger::connect(&proxied)
            .await
            .unwrap(),
    );
    let rig = Rig::new(&config()).await;
    let engine = Engine::new(
        rig.config.clone(),
        ledger,
        rig.sim_cloud(),
        rig.clock.clone(),
    );
    engine.tick().await.unwrap();
    let router = app(AppState::new(
        engine,
        false,
        headroom_api::Limits::default(),
    ));
    let readyz = || {
        router
            .clone()
            .oneshot(Request::get("/readyz").body(Body::empty()).unwrap())
    };
    assert_eq!(readyz().await.unwrap().status(), StatusCode::OK);
    proxy.dark.store(true, std::sync::atomic::Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let response = tokio::time::timeout(std::time::Duration::from_secs(10), readyz())
        .await
        .expect("/readyz still unanswered after 10 s")
        .unwrap();
    let took = started.elapsed();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/problem+json"
    );
    assert!(
        took < std::time::Duration::from_millis(2500),
        "/readyz took {took:?}"
    );
}

/// Not a pass/fail test of timing (machines vary): prints how long a lookup of another
/// account's request and of an unknown id take, which must be the same work. Run with
/// `cargo test -p headroom-api --test api tenancy_lookup_timing -- --nocapture`.
#[tokio::test]
async fn tenancy_lookup_timing_of_known_and_unknown_ids() {
    let api = api().await;
    // Timed, not rate limited.
    let router = app(AppState::new(
        api.engine.clone(),
        true,
        headroom_api::Limits {
            requests_per_second: 1_000_000,
            burst: 1_000_000,
            ..headroom_api::Limits::default()
        },
    ));
    api.engine.tick().await.unwrap();
    let research = mint(&api, &["research"], &[Scope::Capacity]).await;
    let other = mint(&api, &["ml-platform"], &[Scope::Capacity]).await;
    let created = send_as(
        &router,
        Some(&research),
        "POST",
        "/v1/capacity-requests",
        Some(json!({"pool": "mistral-7b-batch", "replicas": 2})),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    api.engine.tick().await.unwrap();
    let known = created.body["id"].as_str().unwrap().to_string();
    // The same shape, one character off: an id no request has.
    let last = if known.ends_with('0') { "1" } else { "0" };
    let unknown = format!("{}{last}", &known[..known.len() - 1]);
    let time = |id: String| {
        let router = router.clone();
        let other = other.clone();
        async move {
            let started = tokio::time::Instant::now();
            let reply = send_as(
                &router,
                Some(&other),
                "GET",
                &format!("/v1/capacity-requests/{id}"),
                None,
            )
            .await;
            assert_eq!(reply.status, StatusCode::NOT_FOUND);
            started.elapsed()
        }
    };
    let (mut known_times, mut unknown_times) = (Vec::new(), Vec::new());
    for _ in 0..300 {
        known_times.push(time(known.clone()).await);
        unknown_times.push(time(unknown.clone()).await);
    }
    known_times.sort();
    unknown_times.sort();
    println!(
        "another account's id: median {:?}; unknown id: median {:?} (300 each, interleaved)",
        known_times[150], unknown_times[150]
    );
}
