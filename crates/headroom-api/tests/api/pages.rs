//! Every list pages by cursor (`?limit`, `?cursor`, `next_cursor` and `Link: rel="next"`), the
//! capacity-request list with its filters and tenancy, and the 405 and 415 problems the
//! document lists, on SQLite and on PostgreSQL.

use std::collections::BTreeSet;

use axum::http::{HeaderMap, Method};
use headroom_core::RequestId;
use headroom_ledger::NewCapacityRequest;

use super::*;

/// Limits no test here comes near: these tests walk many pages with one token.
fn roomy() -> headroom_api::Limits {
    headroom_api::Limits {
        requests_per_second: 1_000_000,
        burst: 1_000_000,
        client_requests_per_second: 1_000_000,
        client_burst: 1_000_000,
        ..headroom_api::Limits::default()
    }
}

/// The example configuration with `n` more pools, alternately of the accounts `research` and
/// `ml-platform` (copies of the batch pool under other names).
fn with_bulk_pools(n: usize) -> String {
    let mut text = config();
    for i in 0..n {
        let account = if i % 2 == 0 {
            "research"
        } else {
            "ml-platform"
        };
        text.push_str(&format!(
            "\n[[pools]]\nname = \"bulk-{i:03}\"\naccount = \"{account}\"\nofferings = [\"use1-g6-od\"]\nmin_replicas = 0\nmax_replicas = 2\n[pools.ladder]\nnode_acquisition = \"60s\"\nimage_pull = \"45s\"\nweight_load = \"90s\"\ncompile = \"30s\"\nwarmup = \"15s\"\n[pools.scaling]\nreplica_throughput_rps = 5.0\n"
        ));
    }
    text
}

/// A router on `ledger` (SQLite or PostgreSQL) with the rig's configuration, clock and cloud.
struct Served {
    rig: Rig,
    engine: Arc<Engine>,
    ledger: Arc<dyn Ledger>,
    open: axum::Router,
    secured: axum::Router,
}

async fn served(config_text: &str, postgres: bool) -> Served {
    let rig = Rig::new(config_text).await;
    let ledger: Arc<dyn Ledger> = if postgres {
        let url = headroom_testkit::fresh_postgres_database("api_pages").await;
        Arc::new(
            headroom_ledger::PostgresLedger::connect(&url)
                .await
                .unwrap(),
        )
    } else {
        rig.ledger.clone()
    };
    let engine = Engine::new(
        rig.config.clone(),
        ledger.clone(),
        rig.sim_cloud(),
        rig.clock.clone(),
    );
    Served {
        open: app(AppState::new(engine.clone(), false, roomy())),
        secured: app(AppState::new(engine.clone(), true, roomy())),
        engine,
        ledger,
        rig,
    }
}

impl Served {
    async fn token(&self, accounts: &[&str], scopes: &[Scope]) -> String {
        use headroom_cloud::Clock;
        let accounts: Vec<String> = accounts.iter().map(|a| a.to_string()).collect();
        let (text, record) = headroom_api::auth::new_token(&accounts, scopes, self.rig.clock.now());
        self.ledger.create_token(&record).await.unwrap();
        text
    }

    fn now(&self) -> headroom_core::Timestamp {
        use headroom_cloud::Clock;
        self.rig.clock.now()
    }

    /// A request recorded straight in the ledger, created at `at`.
    async fn request_at(&self, pool: &str, at: headroom_core::Timestamp) -> RequestId {
        let new = NewCapacityRequest {
            pool: pool.parse().unwrap(),
            replicas: 1,
            priority: headroom_core::Priority::Normal,
            idempotency_key: None,
            at,
        };
        self.ledger
            .record_capacity_request(&new)
            .await
            .unwrap()
            .0
            .id
    }
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn assert_problem(&self, status: StatusCode, detail_contains: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(self.body["status"], status.as_u16());
        let detail = self.body["detail"].as_str().unwrap();
        assert!(
            detail.contains(detail_contains),
            "detail {detail:?} lacks {detail_contains:?}"
        );
    }
}

async fn call(
    router: &axum::Router,
    token: Option<&str>,
    method: Method,
    uri: &str,
    body: Option<(&str, &str)>,
) -> Answer {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = match body {
        Some((content_type, text)) => {
            builder = builder.header(header::CONTENT_TYPE, content_type);
            Body::from(text.to_string())
        }
        None => Body::empty(),
    };
    let response = router
        .clone()
        .oneshot(builder.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    Answer {
        status,
        headers,
        body,
    }
}

async fn get(router: &axum::Router, token: Option<&str>, uri: &str) -> Answer {
    call(router, token, Method::GET, uri, None).await
}

/// The URL a `Link` header's `rel="next"` names, checked to carry the body's `next_cursor`.
fn next_link(answer: &Answer) -> Option<String> {
    let cursor = answer.body["next_cursor"].as_str();
    let Some(link) = answer.header("link") else {
        assert!(cursor.is_none(), "a next_cursor without a Link header");
        return None;
    };
    let url = link
        .strip_prefix('<')
        .and_then(|l| l.strip_suffix(">; rel=\"next\""))
        .unwrap_or_else(|| panic!("Link {link:?} is not one rel=\"next\" URL"));
    let cursor = cursor.expect("a Link header without a next_cursor");
    assert!(
        url.contains(&format!("cursor={cursor}")),
        "{url} does not carry {cursor}"
    );
    Some(url.to_string())
}

/// Every page of a list from `first`, following `Link` as a client does: the items under
/// `key`, page after page, each page at most `limit` long.
async fn walk(
    router: &axum::Router,
    token: Option<&str>,
    first: &str,
    key: &str,
    limit: usize,
) -> Vec<Value> {
    let mut items = Vec::new();
    let mut url = Some(first.to_string());
    let mut pages = 0;
    while let Some(u) = url {
        pages += 1;
        assert!(pages < 1000, "a walk that does not end");
        let page = get(router, token, &u).await;
        assert_eq!(page.status, StatusCode::OK, "{u}: {}", page.body);
        let got = page.body[key].as_array().unwrap();
        assert!(got.len() <= limit, "{u} gave {} items", got.len());
        url = next_link(&page);
        if url.is_some() {
            assert_eq!(got.len(), limit, "{u}: only the last page is short");
        }
        items.extend(got.iter().cloned());
    }
    items
}

fn names(items: &[Value], field: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| i[field].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn pages_of_300_pools_return_each_pool_once_and_only_the_token_s() {
    let s = served(&with_bulk_pools(298), false).await;
    let all = walk(&s.open, None, "/v1/pools?limit=7", "pools", 7).await;
    let all = names(&all, "name");
    assert_eq!(all.len(), 300);
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, all, "by name, each once");

    // A token of one account walks its own pools only: 149 bulk ones and the batch pool.
    let research = s.token(&["research"], &[Scope::Reports]).await;
    let own = walk(
        &s.secured,
        Some(&research),
        "/v1/pools?limit=50",
        "pools",
        50,
    )
    .await;
    assert_eq!(own.len(), 150);
    assert!(own.iter().all(|p| p["account"] == "research"));

    // The default page and the largest.
    let first = get(&s.open, None, "/v1/pools").await;
    assert_eq!(first.body["pools"].as_array().unwrap().len(), 100);
    let largest = get(&s.open, None, "/v1/pools?limit=500").await;
    assert_eq!(largest.body["pools"].as_array().unwrap().len(), 300);
    assert_eq!(largest.body["next_cursor"], Value::Null);
    assert!(largest.header("link").is_none());
}

/// 300 capacity requests walked newest first while more arrive: each of the 300 once, none of
/// the newcomers (they are newer than the walk's start), in order.
async fn capacity_request_walk(postgres: bool) {
    let s = served(&config(), postgres).await;
    let epoch: headroom_core::Timestamp = headroom_testkit::EPOCH.parse().unwrap();
    let mut made = BTreeSet::new();
    for i in 0..300 {
        // Three to an instant: ties are broken by id.
        let at = epoch + chrono::Duration::seconds(i / 3);
        made.insert(s.request_at("mistral-7b-batch", at).await.0);
    }
    let mut seen = Vec::new();
    let mut url = Some("/v1/capacity-requests?limit=7".to_string());
    let mut newcomers = 0;
    while let Some(u) = url {
        let page = get(&s.open, None, &u).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let got = page.body["capacity_requests"].as_array().unwrap().clone();
        assert!(got.len() <= 7);
        seen.extend(got);
        url = next_link(&page);
        // Two more arrive between pages, created after every request walked so far.
        for _ in 0..2 {
            newcomers += 1;
            let at = epoch + chrono::Duration::seconds(1000 + newcomers);
            s.request_at("mistral-7b-batch", at).await;
        }
    }
    let ids = names(&seen, "id");
    let unique: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(unique.len(), ids.len(), "a request walked twice");
    assert_eq!(unique, made, "each of the 300, and only those");
    let keys: Vec<(String, String)> = seen
        .iter()
        .map(|r| {
            let at: headroom_core::Timestamp = r["created_at"].as_str().unwrap().parse().unwrap();
            (at.to_rfc3339(), r["id"].as_str().unwrap().to_string())
        })
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] > w[1]),
        "newest first by created_at, then id"
    );
    assert_eq!(seen[0]["state"], "pending");
}

#[tokio::test]
async fn pages_of_300_capacity_requests_return_each_once_on_sqlite() {
    capacity_request_walk(false).await;
}

#[tokio::test]
async fn pages_of_300_capacity_requests_return_each_once_on_postgres() {
    capacity_request_walk(true).await;
}

/// Every list the API has, as a first page: its URL and the key its items are under.
const LISTS: &[(&str, &str)] = &[
    ("/v1/pools", "pools"),
    ("/v1/offerings", "offerings"),
    ("/v1/alerts", "alerts"),
    ("/v1/budgets", "budgets"),
    ("/v1/capacity-requests", "capacity_requests"),
    ("/v1/pools/mistral-7b-batch/decisions", "decisions"),
    ("/v1/pools/mistral-7b-batch/ledger", "entries"),
    ("/v1/pools/mistral-7b-batch/schedules", "windows"),
];

#[tokio::test]
async fn a_limit_out_of_bounds_is_a_problem_naming_it_on_every_list() {
    let s = served(&config(), false).await;
    for (list, key) in LISTS {
        for bad in ["0", "-1", "501", "ten", "2.5", "", "4294967296"] {
            let sep = if list.contains('?') { '&' } else { '?' };
            get(&s.open, None, &format!("{list}{sep}limit={bad}"))
                .await
                .assert_problem(
                    StatusCode::BAD_REQUEST,
                    "limit: must be a whole number from 1 to 500",
                );
        }
        // A misspelt parameter is refused, not ignored.
        get(&s.open, None, &format!("{list}?limt=5"))
            .await
            .assert_problem(StatusCode::BAD_REQUEST, "unknown query parameter \"limt\"");
        for good in ["1", "500"] {
            let page = get(&s.open, None, &format!("{list}?limit={good}")).await;
            assert_eq!(page.status, StatusCode::OK, "{list}: {}", page.body);
            assert!(page.body[key].is_array(), "{list}: {}", page.body);
            assert!(
                page.body.get("next_cursor").is_some(),
                "{list} has no next_cursor field"
            );
        }
    }
    // What the document says is what is refused.
    let doc: Value = serde_json::from_str(&headroom_api::openapi()).unwrap();
    for (list, _) in LISTS {
        let path = list.replace("mistral-7b-batch", "{name}");
        let params = doc["paths"][&path]["get"]["parameters"].as_array().unwrap();
        let limit = params.iter().find(|p| p["name"] == "limit").unwrap();
        assert_eq!(
            (
                &limit["schema"]["minimum"],
                &limit["schema"]["maximum"],
                &limit["schema"]["default"]
            ),
            (&json!(1), &json!(500), &json!(100)),
            "{path}"
        );
        assert!(params.iter().any(|p| p["name"] == "cursor"), "{path}");
        let ok = &doc["paths"][&path]["get"]["responses"]["200"];
        assert!(ok["headers"]["Link"].is_object(), "{path}");
        assert!(
            doc["paths"][&path]["get"]["responses"]["400"].is_object(),
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_cursor_altered_cut_or_from_another_list_is_a_problem() {
    let s = served(&with_bulk_pools(4), false).await;
    for _ in 0..3 {
        s.request_at("mistral-7b-batch", s.now()).await;
    }
    let pools = get(&s.open, None, "/v1/pools?limit=2").await;
    let cursor = pools.body["next_cursor"].as_str().unwrap().to_string();
    // The cursor works where it was made.
    assert_eq!(
        get(&s.open, None, &format!("/v1/pools?limit=2&cursor={cursor}"))
            .await
            .status,
        StatusCode::OK
    );
    let mut altered = cursor.clone().into_bytes();
    let last = altered.len() - 1;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    let cut = &cursor[..cursor.len() - 3];
    for bad in [altered.as_str(), cut, "nonsense", "%20", "AAAA"] {
        get(&s.open, None, &format!("/v1/pools?cursor={bad}"))
            .await
            .assert_problem(StatusCode::BAD_REQUEST, "cursor:");
    }
    // Another list's cursor, another pool's, another query's.
    for (list, _) in LISTS.iter().filter(|(l, _)| *l != "/v1/pools") {
        get(&s.open, None, &format!("{list}?cursor={cursor}"))
            .await
            .assert_problem(StatusCode::BAD_REQUEST, "another list");
    }
    let requests = get(&s.open, None, "/v1/capacity-requests?limit=1&state=pending").await;
    let pending = requests.body["next_cursor"].as_str().unwrap();
    get(
        &s.open,
        None,
        &format!("/v1/capacity-requests?state=cancelled&cursor={pending}"),
    )
    .await
    .assert_problem(StatusCode::BAD_REQUEST, "another query");
    assert_eq!(
        get(
            &s.open,
            None,
            &format!("/v1/capacity-requests?state=pending&limit=1&cursor={pending}")
        )
        .await
        .status,
        StatusCode::OK
    );
    for _ in 0..3 {
        s.engine.tick().await.unwrap();
        s.rig.clock.advance(std::time::Duration::from_secs(5));
    }
    let ledger = get(&s.open, None, "/v1/pools/mistral-7b-batch/ledger?limit=1").await;
    let entries = ledger.body["next_cursor"].as_str().unwrap();
    get(
        &s.open,
        None,
        &format!("/v1/pools/llama-70b-interactive/ledger?cursor={entries}"),
    )
    .await
    .assert_problem(StatusCode::BAD_REQUEST, "another list");
    get(
        &s.open,
        None,
        &format!("/v1/pools/mistral-7b-batch/ledger?from=2026-11-29T00:00:00Z&cursor={entries}"),
    )
    .await
    .assert_problem(StatusCode::BAD_REQUEST, "another range");
}

#[tokio::test]
async fn capacity_requests_are_listed_with_filters_and_only_the_token_s() {
    let s = served(&config(), false).await;
    let epoch: headroom_core::Timestamp = headroom_testkit::EPOCH.parse().unwrap();
    let mut research_ids = Vec::new();
    for i in 0..5 {
        let at = epoch + chrono::Duration::minutes(i);
        research_ids.push(s.request_at("mistral-7b-batch", at).await);
    }
    let platform = s
        .request_at(
            "llama-70b-interactive",
            epoch + chrono::Duration::minutes(2),
        )
        .await;
    s.ledger
        .cancel_capacity_request(&research_ids[1], epoch)
        .await
        .unwrap();

    let research = s
        .token(&["research"], &[Scope::Capacity, Scope::Reports])
        .await;
    let reader = s.token(&["research"], &[Scope::Reports]).await;
    let everyone = s.token(&["*"], &[Scope::Admin]).await;
    let signals_only = s.token(&["research"], &[Scope::Signals]).await;
    let list = |token: String, query: &'static str| {
        let router = s.secured.clone();
        async move {
            get(
                &router,
                Some(&token),
                &format!("/v1/capacity-requests{query}"),
            )
            .await
        }
    };

    // A token for research never sees ml-platform's request, whatever it asks.
    let own = list(research.clone(), "").await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.body);
    let expected: Vec<String> = research_ids.iter().rev().map(|id| id.0.clone()).collect();
    assert_eq!(
        names(own.body["capacity_requests"].as_array().unwrap(), "id"),
        expected
    );
    assert_eq!(
        list(reader.clone(), "").await.body["capacity_requests"],
        own.body["capacity_requests"],
        "the reports scope reads them too"
    );
    let all = list(everyone.clone(), "").await;
    let ids = names(all.body["capacity_requests"].as_array().unwrap(), "id");
    assert_eq!(ids.len(), 6);
    assert!(ids.contains(&platform.0));
    // Another account's pool is refused in the words an unknown one is.
    let foreign = list(research.clone(), "?pool=llama-70b-interactive").await;
    let unknown = list(research.clone(), "?pool=llama-70b-interactiv").await;
    foreign.assert_problem(StatusCode::BAD_REQUEST, "pool: no pool named");
    assert_eq!(
        foreign.body["detail"]
            .as_str()
            .unwrap()
            .replace("llama-70b-interactive", "X"),
        unknown.body["detail"]
            .as_str()
            .unwrap()
            .replace("llama-70b-interactiv", "X")
    );
    list(signals_only, "")
        .await
        .assert_problem(StatusCode::FORBIDDEN, "");

    // Filters: pool, state, since, together.
    let by_pool = list(everyone.clone(), "?pool=llama-70b-interactive").await;
    assert_eq!(
        names(by_pool.body["capacity_requests"].as_array().unwrap(), "id"),
        std::slice::from_ref(&platform.0)
    );
    let cancelled = list(research.clone(), "?state=cancelled").await;
    assert_eq!(
        names(
            cancelled.body["capacity_requests"].as_array().unwrap(),
            "id"
        ),
        [research_ids[1].0.clone()]
    );
    assert_eq!(cancelled.body["capacity_requests"][0]["state"], "cancelled");
    let pending = list(research.clone(), "?state=pending").await;
    assert_eq!(
        pending.body["capacity_requests"].as_array().unwrap().len(),
        4
    );
    // 10:02 in Paris is 09:02 UTC: the three research requests from then on and ml-platform's.
    let since = list(
        everyone.clone(),
        "?since=2026-11-30T10:02:00%2B01:00&state=pending",
    )
    .await;
    let got = names(since.body["capacity_requests"].as_array().unwrap(), "id");
    assert_eq!(
        got[..2],
        [research_ids[4].0.clone(), research_ids[3].0.clone()]
    );
    let expected: BTreeSet<String> = [
        &research_ids[2],
        &research_ids[3],
        &research_ids[4],
        &platform,
    ]
    .iter()
    .map(|id| id.0.clone())
    .collect();
    assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), expected);
    // Bad filters say what is valid.
    list(research.clone(), "?state=done")
        .await
        .assert_problem(
            StatusCode::BAD_REQUEST,
            "state: \"done\" is not a request state; use one of pending, partially_delivered, delivered, refused, cancelled",
        );
    list(research.clone(), "?since=yesterday")
        .await
        .assert_problem(
            StatusCode::BAD_REQUEST,
            "since: \"yesterday\" is not an RFC 3339 instant",
        );
    // The Link of a filtered page keeps the filters.
    let first = list(research.clone(), "?state=pending&limit=3").await;
    let next = next_link(&first).unwrap();
    assert!(
        next.contains("state=pending") && next.contains("limit=3"),
        "{next}"
    );
    let rest = get(&s.secured, Some(&research), &next).await;
    assert_eq!(rest.body["capacity_requests"].as_array().unwrap().len(), 1);
    assert_eq!(rest.body["next_cursor"], Value::Null);
}

#[tokio::test]
async fn a_pool_s_ledger_and_decisions_are_walked_while_the_pool_runs() {
    let s = served(&config(), false).await;
    // A life: the floor launched, a request, signals that move the target.
    s.request_at("mistral-7b-batch", s.now()).await;
    for i in 0..40 {
        let depth = if i % 8 < 4 { 60 } else { 0 };
        let signal =
            json!({"queue_depth": depth, "arrival_rate_rps": depth as f64, "oldest_age_s": 1.0});
        let pushed = call(
            &s.open,
            None,
            Method::POST,
            "/v1/pools/mistral-7b-batch/signals",
            Some(("application/json", &signal.to_string())),
        )
        .await;
        assert_eq!(pushed.status, StatusCode::ACCEPTED);
        s.engine.tick().await.unwrap();
        s.rig.clock.advance(std::time::Duration::from_secs(15));
    }
    let pool: headroom_core::PoolName = "mistral-7b-batch".parse().unwrap();

    // The ledger: every event of the range once, in ledger order, while the pool goes on
    // (the walk's range is fixed by its first page: later events are not in it).
    let in_range = s.ledger.pool_events(&pool).await.unwrap().len();
    assert!(in_range > 10, "{in_range} events");
    let mut entries = Vec::new();
    let mut url = Some("/v1/pools/mistral-7b-batch/ledger?limit=4".to_string());
    while let Some(u) = url {
        let page = get(&s.open, None, &u).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body["capacity_requests"]["requested"].is_u64());
        entries.extend(page.body["entries"].as_array().unwrap().clone());
        url = next_link(&page);
        s.engine.tick().await.unwrap();
        s.rig.clock.advance(std::time::Duration::from_secs(15));
    }
    let seqs: Vec<i64> = entries.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs.len(), in_range);
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "in ledger order, each once"
    );

    // The decision log: newest first, the same entries as the log read whole, while new
    // decisions are made between pages.
    let whole = s.engine.decisions(&pool).await.unwrap();
    assert!(whole.len() > 6, "{} entries", whole.len());
    let mut walked = Vec::new();
    let mut url = Some("/v1/pools/mistral-7b-batch/decisions?limit=3".to_string());
    while let Some(u) = url {
        let page = get(&s.open, None, &u).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        walked.extend(page.body["decisions"].as_array().unwrap().clone());
        url = next_link(&page);
        let depth = if walked.len() % 2 == 0 { 90 } else { 0 };
        call(
            &s.open,
            None,
            Method::POST,
            "/v1/pools/mistral-7b-batch/signals",
            Some((
                "application/json",
                &json!({"queue_depth": depth}).to_string(),
            )),
        )
        .await;
        s.engine.tick().await.unwrap();
        s.rig.clock.advance(std::time::Duration::from_secs(15));
    }
    assert_eq!(walked.len(), whole.len());
    assert_eq!(walked[1..], whole[1..], "the ledger's entries, each once");
    assert_eq!(walked[0]["at"], whole[0]["at"], "the current entry first");
}

/// Each path's documented methods, as `Allow` should list them (`HEAD` with `GET`).
fn documented_methods(item: &Value) -> BTreeSet<String> {
    let mut methods: BTreeSet<String> = item
        .as_object()
        .unwrap()
        .keys()
        .map(|m| m.to_uppercase())
        .collect();
    if methods.contains("GET") {
        methods.insert("HEAD".into());
    }
    methods
}

#[tokio::test]
async fn wrong_methods_and_media_types_are_documented_and_answered_as_problems() {
    let s = served(&config(), false).await;
    let doc: Value = serde_json::from_str(&headroom_api::openapi()).unwrap();
    let components = &doc["components"]["responses"];
    assert!(components["MethodNotAllowed"]["headers"]["Allow"].is_object());
    assert!(components["UnsupportedMediaType"]["headers"]["Accept-Post"].is_object());
    for name in [
        "MethodNotAllowed",
        "UnsupportedMediaType",
        "PayloadTooLarge",
    ] {
        assert!(
            components[name]["content"]["application/problem+json"].is_object(),
            "{name}"
        );
    }
    let mut bodies = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let uri = path
            .replace("{name}", "mistral-7b-batch")
            .replace("{account}", "research")
            .replace("{id}", "nope")
            .replace("{namespace}", "default")
            .replace("{metric}", "headroom_desired_replicas");
        let allowed = documented_methods(item);
        for (method, operation) in item.as_object().unwrap() {
            // Documented: 405 on every operation (its path answers it for other methods),
            // 413 and 415 exactly where a body is read.
            let responses = &operation["responses"];
            assert_eq!(
                responses["405"]["$ref"], "#/components/responses/MethodNotAllowed",
                "{method} {path}"
            );
            let body = operation["requestBody"].is_object();
            assert_eq!(responses["415"].is_object(), body, "{method} {path} 415");
            assert_eq!(responses["413"].is_object(), body, "{method} {path} 413");
            if !body {
                continue;
            }
            bodies += 1;
            // Answered: a body that is not JSON is a 415 problem saying what to send.
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let answer = call(&s.open, None, m.clone(), &uri, Some(("text/plain", "x"))).await;
            answer.assert_problem(StatusCode::UNSUPPORTED_MEDIA_TYPE, "application/json");
            assert_eq!(
                answer.header("accept-post"),
                (m == Method::POST).then_some("application/json"),
                "{method} {path}"
            );
        }
        // Answered: every method the path does not take is a 405 problem with Allow.
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            if allowed.contains(method) {
                continue;
            }
            let m = Method::from_bytes(method.as_bytes()).unwrap();
            let answer = call(&s.open, None, m, &uri, None).await;
            answer.assert_problem(StatusCode::METHOD_NOT_ALLOWED, method);
            let allow: BTreeSet<String> = answer
                .header("allow")
                .unwrap_or_else(|| panic!("{method} {path}: 405 without Allow"))
                .split(',')
                .map(|m| m.trim().to_string())
                .collect();
            assert_eq!(allow, allowed, "{method} {path}");
        }
    }
    assert_eq!(
        bodies, 4,
        "POST capacity-requests, signals, schedules; PUT budgets"
    );
    // Behind the token check the answer is the same once the token is valid.
    let token = s.token(&["research"], &[Scope::Reports]).await;
    let answer = call(&s.secured, Some(&token), Method::DELETE, "/v1/pools", None).await;
    answer.assert_problem(StatusCode::METHOD_NOT_ALLOWED, "DELETE");
    assert_eq!(answer.header("allow"), Some("GET,HEAD"));
}
