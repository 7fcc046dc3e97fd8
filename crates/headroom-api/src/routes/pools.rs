//! Pools and their sub-resources: `/v1/pools`, one pool's status, its admission per priority
//! tier, the signals it is pushed, its decision log and its requested-versus-delivered ledger.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use headroom_core::{Money, PoolName, Timestamp};
use headroom_engine::{PoolStatus, SignalInput};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input::{QueryParams, RawBody, RawPath, json_body, pool_from_path, range};
use super::page::{self, PageParams};
use super::responses::{Authenticated, Forbidden, InvalidInput, JsonBody, NotFound};
use crate::AppState;
use crate::auth::{Principal, Scope};
use crate::problem::ApiError;

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(list_pools))
        .routes(routes!(get_pool))
        .routes(routes!(pool_admission))
        .routes(routes!(push_signal))
        .routes(routes!(pool_decisions))
        .routes(routes!(pool_shadow_report))
        .routes(routes!(pool_ledger))
}

// `list_pools`, `get_pool` and `pool_admission` check no scope (any token may read the pools it
// acts for), so they list no 403.

/// One page of the pools the token acts for, by name.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct PoolList {
    pools: Vec<PoolStatus>,
    /// The next page's cursor (pass it as `cursor`); null on the last page.
    next_cursor: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/pools",
    params(PageParams),
    responses(
        (status = 200, description = "The pools the token acts for, by name", body = PoolList,
            headers(("Link" = String, description = "`<URL>; rel=\"next\"`: the next page, when there is one"))),
        (status = 400, response = InvalidInput),
        Authenticated,
    )
)]
async fn list_pools(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    uri: axum::http::Uri,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let params = page::query(query, &["limit", "cursor"])?;
    let request = page::read::<String>(&params, "pools")?;
    let visible = state
        .engine
        .pool_statuses()
        .into_iter()
        .filter(|p| p.account.parse().is_ok_and(|a| principal.acts_for(&a)))
        .collect();
    let (pools, next) = page::of(visible, |p| p.name.to_string(), &request);
    let next_cursor = next.map(|name| page::cursor("pools", &name));
    Ok(page::answer(
        PoolList {
            pools,
            next_cursor: next_cursor.clone(),
        },
        &uri,
        &params,
        next_cursor.as_deref(),
    ))
}

#[utoipa::path(
    get,
    path = "/v1/pools/{name}",
    params(("name" = String, Path)),
    responses(
        (status = 200, description = "Counts, desired, hold and limit conditions", body = PoolStatus),
        (status = 400, response = InvalidInput),
        (status = 404, response = NotFound),
        Authenticated,
    )
)]
async fn get_pool(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: RawPath,
) -> Result<Json<PoolStatus>, ApiError> {
    let name = pool_from_path(&state, &principal, path)?;
    state
        .engine
        .pool_status(&name)
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no pool named {name}")))
}

/// What the serving layer should admit for one pool, per priority tier.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct AdmissionView {
    pool: PoolName,
    /// True while any tier is shed.
    shedding: bool,
    ready: u32,
    /// Ready replicas measured demand calls for.
    demand: u32,
    /// Lowest tier first: `{priority, admit, retry_after_s}`.
    tiers: Vec<headroom_core::shedding::TierAdmission>,
}

#[utoipa::path(
    get,
    path = "/v1/pools/{name}/admission",
    params(("name" = String, Path)),
    responses(
        (
            status = 200,
            description = "Admit or shed, per priority tier, with retry_after_s for shed tiers",
            body = AdmissionView
        ),
        (status = 400, response = InvalidInput),
        (status = 404, response = NotFound),
        Authenticated,
    )
)]
async fn pool_admission(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: RawPath,
) -> Result<Json<AdmissionView>, ApiError> {
    let name = pool_from_path(&state, &principal, path)?;
    let status = state
        .engine
        .pool_status(&name)
        .ok_or_else(|| ApiError::NotFound(format!("no pool named {name}")))?;
    Ok(Json(AdmissionView {
        pool: name,
        shedding: status.admission.iter().any(|t| t.sheds()),
        ready: status.ready,
        demand: status.demand,
        tiers: status.admission,
    }))
}

/// The most replicas one signal may report queues for.
const MAX_REPLICAS_REPORTED: usize = 4096;

/// A pool's signals at one instant; only `queue_depth` is required.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SignalBody {
    queue_depth: i64,
    oldest_age_s: Option<f64>,
    #[serde(default)]
    oldest_age_by_class_s: std::collections::BTreeMap<String, f64>,
    arrival_rate_rps: Option<f64>,
    departure_rate_rps: Option<f64>,
    error_rate_rps: Option<f64>,
    batch_occupancy: Option<f64>,
    gpu_utilization: Option<f64>,
    /// Requests waiting per priority tier (`low`, `normal`, `high`, `critical`): with the pool's
    /// `shed_deadlines`, shedding caps each tier's queue at what can start within its deadline.
    #[serde(default)]
    queue_depth_by_priority: std::collections::BTreeMap<String, u64>,
    /// Arrivals per second per priority tier.
    #[serde(default)]
    arrival_rate_by_priority_rps: std::collections::BTreeMap<String, f64>,
    /// Tokens waiting (prompt plus estimated output): with the pool's `replica_throughput_tps`
    /// and `token_arrival_rate_tps`, the pool is sized in tokens, not requests.
    queued_tokens: Option<f64>,
    /// Tokens arriving per second.
    token_arrival_rate_tps: Option<f64>,
    /// Each ready replica's own queue (at most 4,096), when the serving layer knows them: the
    /// pool's status and `ReplicaImbalance` show one replica holding most of the queue.
    #[serde(default)]
    replica_queue_depths: Vec<u64>,
}

/// A map keyed by priority tier, each key checked and each value by `value`.
fn by_priority<T, U>(
    field: &str,
    raw: std::collections::BTreeMap<String, T>,
    value: impl Fn(T) -> Result<U, ApiError>,
) -> Result<std::collections::BTreeMap<headroom_core::Priority, U>, ApiError> {
    raw.into_iter()
        .map(|(tier, v)| {
            let priority = headroom_core::Priority::parse(&tier).map_err(|_| {
                ApiError::bad(
                    "invalid-signal",
                    format!("{field}: {tier:?} is not a priority tier; use low, normal, high or critical"),
                )
            })?;
            Ok((priority, value(v)?))
        })
        .collect()
}

/// A non-negative finite number, or a one-line problem naming the field.
fn non_negative(field: &str, value: Option<f64>, max: f64) -> Result<Option<f64>, ApiError> {
    match value {
        Some(v) if !(v.is_finite() && (0.0..=max).contains(&v)) => Err(ApiError::bad(
            "invalid-signal",
            format!("{field}: must be a number from 0 to {max}"),
        )),
        other => Ok(other),
    }
}

#[utoipa::path(
    post,
    path = "/v1/pools/{name}/signals",
    params(("name" = String, Path)),
    request_body = SignalBody,
    responses(
        (status = 202, description = "Accepted"),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        JsonBody,
        Authenticated,
    )
)]
async fn push_signal(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: RawPath,
    headers: HeaderMap,
    body: RawBody,
) -> Result<StatusCode, ApiError> {
    // The scope before the lookup (here and below): a token lacking it gets the same 403 for
    // every pool, its own, another account's or none.
    principal.require(Scope::Signals)?;
    let name = pool_from_path(&state, &principal, path)?;
    let input: SignalBody = json_body(&headers, body)?;
    if input.queue_depth < 0 {
        return Err(ApiError::bad(
            "invalid-signal",
            "queue_depth: must be zero or more",
        ));
    }
    const LARGE: f64 = 1e12;
    let signal = SignalInput {
        queue_depth: input.queue_depth as u64,
        oldest_age_s: non_negative("oldest_age_s", input.oldest_age_s, LARGE)?,
        arrival_rate_rps: non_negative("arrival_rate_rps", input.arrival_rate_rps, LARGE)?,
        departure_rate_rps: non_negative("departure_rate_rps", input.departure_rate_rps, LARGE)?,
        error_rate_rps: non_negative("error_rate_rps", input.error_rate_rps, LARGE)?,
        batch_occupancy: non_negative("batch_occupancy", input.batch_occupancy, 1.0)?,
        gpu_utilization: non_negative("gpu_utilization", input.gpu_utilization, 1.0)?,
        queued_tokens: non_negative("queued_tokens", input.queued_tokens, LARGE)?,
        token_arrival_rate_tps: non_negative(
            "token_arrival_rate_tps",
            input.token_arrival_rate_tps,
            LARGE,
        )?,
        oldest_age_by_class_s: input
            .oldest_age_by_class_s
            .into_iter()
            .take(64)
            .map(|(class, age)| {
                non_negative("oldest_age_by_class_s", Some(age), LARGE)
                    .map(|a| (class.chars().take(63).collect(), a.unwrap_or(0.0)))
            })
            .collect::<Result<_, _>>()?,
        queue_depth_by_priority: by_priority(
            "queue_depth_by_priority",
            input.queue_depth_by_priority,
            Ok,
        )?,
        arrival_rate_by_priority_rps: by_priority(
            "arrival_rate_by_priority_rps",
            input.arrival_rate_by_priority_rps,
            |r| {
                non_negative("arrival_rate_by_priority_rps", Some(r), LARGE)
                    .map(|r| r.unwrap_or(0.0))
            },
        )?,
        replica_queue_depths: {
            if input.replica_queue_depths.len() > MAX_REPLICAS_REPORTED {
                return Err(ApiError::bad(
                    "invalid-signal",
                    format!("replica_queue_depths: at most {MAX_REPLICAS_REPORTED} replicas"),
                ));
            }
            input.replica_queue_depths
        },
    };
    state
        .engine
        .receive_signal(&name, signal)
        .await
        .map_err(|e| match e {
            headroom_engine::EngineError::Ledger(l) => ApiError::from(l),
            other => ApiError::Ledger(headroom_ledger::LedgerError::Corrupt(other.to_string())),
        })?;
    Ok(StatusCode::ACCEPTED)
}

/// One page of a pool's decision log.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct DecisionLog {
    pool: PoolName,
    shadow: bool,
    /// Newest first; consecutive identical decisions are folded (`repeated`). Events of a
    /// node's life (an interruption notice, an orphan, a drain) are entries of the same log.
    #[schema(value_type = Vec<DecisionLogEntry>)]
    decisions: Vec<serde_json::Value>,
    /// The next (older) page's cursor; null on the last page.
    next_cursor: Option<String>,
}

/// One entry of a decision log: a decision of the controller, or an event of a node's life.
/// A type for the document only; the log is kept as the JSON the engine wrote.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[expect(dead_code, reason = "a schema for the document, never built")]
enum DecisionLogEntry {
    #[schema(title = "Decision")]
    Decision(Box<headroom_engine::DecisionRecord>),
    #[schema(title = "NodeEvent")]
    NodeEvent(NodeLogEvent),
}

/// An event of a node's life written to its pool's decision log; fields beyond `event`, `at` and
/// `reason` depend on the event.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct NodeLogEvent {
    /// `interruption_notice`, `orphan`, `unschedulable_pods`, `cluster_rung`, `drained` or
    /// `drain_timeout`.
    event: String,
    #[schema(value_type = String, format = DateTime)]
    at: headroom_core::Timestamp,
    reason: Option<String>,
    node: Option<String>,
    offering: Option<String>,
    /// The event's own fields (`reclaim_at`, `instance`, `policy`, `pods`, `rung`, …).
    #[serde(flatten)]
    details: std::collections::BTreeMap<String, serde_json::Value>,
}

#[utoipa::path(
    get,
    path = "/v1/pools/{name}/decisions",
    params(("name" = String, Path), PageParams),
    responses(
        (status = 200, description = "Decisions, newest first: the current one, then the ledger's by sequence number", body = DecisionLog,
            headers(("Link" = String, description = "`<URL>; rel=\"next\"`: the next page, when there is one"))),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        Authenticated,
    )
)]
async fn pool_decisions(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    uri: axum::http::Uri,
    path: RawPath,
    query: QueryParams,
) -> Result<Response, ApiError> {
    principal.require(Scope::Reports)?;
    let pool = pool_from_path(&state, &principal, path)?;
    let params = page::query(query, &["limit", "cursor"])?;
    let list = format!("decisions:{pool}");
    // The key is the ledger sequence number the next page reads below.
    let request = page::read::<i64>(&params, &list)?;
    let shadow = state
        .engine
        .config()
        .pool(&pool)
        .is_some_and(|p| p.scaling.shadow);
    let page = state
        .engine
        .decision_page(&pool, request.after, request.limit)
        .await
        .map_err(|e| match e {
            headroom_engine::EngineError::Ledger(l) => ApiError::from(l),
            other => ApiError::Ledger(headroom_ledger::LedgerError::Corrupt(other.to_string())),
        })?;
    let next_cursor = page.next_before.map(|seq| page::cursor(&list, &seq));
    Ok(page::answer(
        DecisionLog {
            decisions: page.entries,
            shadow,
            pool,
            next_cursor: next_cursor.clone(),
        },
        &uri,
        &params,
        next_cursor.as_deref(),
    ))
}

/// A reports-scoped pool endpoint's pool and `?from=…&to=…` range (default the last day), and
/// the instant it was read at.
fn pool_and_range(
    state: &AppState,
    principal: &Principal,
    path: RawPath,
    query: QueryParams,
) -> Result<(PoolName, Timestamp, Timestamp, Timestamp), ApiError> {
    principal.require(Scope::Reports)?;
    let pool = pool_from_path(state, principal, path)?;
    let axum::extract::Query(params) = query.map_err(|_| {
        ApiError::bad(
            "invalid-range",
            "the query string is malformed; use ?from=…&to=… with RFC 3339 instants",
        )
    })?;
    let now = state.engine.clock().now();
    let (from, to) = range(
        &params,
        &["from", "to"],
        "invalid-range",
        chrono::Duration::days(1),
        now,
    )?;
    Ok((pool, from, to, now))
}

/// The background notes' promotion report for one pool over a time range: what its controller
/// decided (executed or, in shadow mode, only recorded) tallied against the promotion rules, and
/// the idle capacity and queueing its targets would have given by the fluid model.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct ShadowReport {
    pool: PoolName,
    /// Whether the pool runs in shadow mode (decisions recorded, not executed).
    shadow: bool,
    #[schema(value_type = String, format = DateTime)]
    from: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    to: Timestamp,
    #[serde(flatten)]
    promotion: headroom_core::promotion::Promotion,
    /// What the decisions' targets would have run and served (the fluid model).
    #[serde(flatten)]
    capacity: headroom_core::promotion::CapacityEstimate,
}

#[utoipa::path(
    get,
    path = "/v1/pools/{name}/shadow-report",
    params(
        ("name" = String, Path),
        ("from" = Option<String>, Query),
        ("to" = Option<String>, Query)
    ),
    responses(
        (status = 200, description = "The promotion rules over the pool's decisions in the range, and what their targets would have run and served", body = ShadowReport),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        Authenticated,
    )
)]
async fn pool_shadow_report(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    path: RawPath,
    query: QueryParams,
) -> Result<Json<ShadowReport>, ApiError> {
    let (pool, from, to, _) = pool_and_range(&state, &principal, path, query)?;
    // pool_from_path found it in this configuration, which does not change while serving.
    let spec = state
        .engine
        .config()
        .pool(&pool)
        .cloned()
        .ok_or_else(|| ApiError::NotFound(format!("no pool named {pool}")))?;
    let (promotion, capacity) = state
        .engine
        .shadow_report(&spec, from, to)
        .await
        .map_err(|e| match e {
            headroom_engine::EngineError::Ledger(l) => ApiError::from(l),
            other => ApiError::Ledger(headroom_ledger::LedgerError::Corrupt(other.to_string())),
        })?;
    Ok(Json(ShadowReport {
        pool,
        shadow: spec.scaling.shadow,
        from,
        to,
        promotion,
        capacity,
    }))
}

/// Requested versus delivered for one pool over a time range, and one page of the ledger rows
/// of its nodes in that range. The figures cover the whole range on every page.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct PoolLedger {
    pool: PoolName,
    #[schema(value_type = String, format = DateTime)]
    from: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    to: Timestamp,
    /// Capacity requests created in the range.
    capacity_requests: headroom_ledger::derive::Fill,
    /// Replicas the controller launched or woke on its own in the range.
    organic: headroom_ledger::derive::OrganicFill,
    /// Spend of the pool's nodes within the range.
    spend: Money,
    /// The pool's node events in the range, in ledger order (by `seq`): one page of them.
    entries: Vec<LedgerEntry>,
    /// The next page's cursor (it keeps this page's range); null on the last page.
    next_cursor: Option<String>,
}

/// One row of a pool's ledger: a node's change of state, as recorded.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct LedgerEntry {
    /// The ledger's sequence number: the order rows were recorded in, and the page key.
    seq: i64,
    #[schema(value_type = String, format = DateTime)]
    at: Timestamp,
    node: String,
    /// `requested`, `launching`, `booting`, `warm`, `serving`, `draining`, `terminated`,
    /// `refused`, …
    state: String,
    /// Why (`launch`, `wake`, `ready`, `release`, a cloud's error code, …).
    reason: Option<String>,
    /// The capacity request the node serves; null for the controller's own capacity.
    request: Option<String>,
    /// `serve` or `warm`: where the activation was headed.
    destination: String,
    offering: String,
    provider: String,
    region: String,
    zone: String,
    instance_type: String,
    market: String,
    /// The cloud's instance id, once it has one.
    instance: Option<String>,
    /// What the node's compute costs per hour (billed booting, standby, serving, draining).
    price_usd_per_hour: Money,
    /// What the node costs per hour parked warm and stopped: its volumes. Zero on rows recorded
    /// before the ledger kept it.
    parked_usd_per_hour: Money,
    gpus: u32,
    /// Money held against the budget from this row on, replacing what the node held (a launch,
    /// a wake, a park, a renewal); zero on rows that keep the hold before them.
    hold: Money,
}

impl LedgerEntry {
    fn new(seq: i64, e: headroom_ledger::NodeEvent) -> LedgerEntry {
        LedgerEntry {
            seq,
            at: e.at,
            node: e.node.0,
            state: e.state.as_str().to_string(),
            reason: e.reason,
            request: e.request.map(|r| r.0),
            destination: e.destination.as_str().to_string(),
            offering: e.offering.as_str().to_string(),
            provider: e.provider.as_str().to_string(),
            region: e.region,
            zone: e.zone,
            instance_type: e.instance_type,
            market: e.market.as_str().to_string(),
            instance: e.instance,
            price_usd_per_hour: e.price_usd_per_hour,
            parked_usd_per_hour: e.parked_usd_per_hour,
            gpus: e.gpus,
            hold: e.hold,
        }
    }
}

/// Where a page of a pool's ledger starts: the range the walk reads (fixed by its first page,
/// whose `to` defaults to that moment's now) and the last sequence number returned.
#[derive(serde::Serialize, serde::Deserialize)]
struct LedgerKey {
    from: Timestamp,
    to: Timestamp,
    after: i64,
}

#[utoipa::path(
    get,
    path = "/v1/pools/{name}/ledger",
    params(
        ("name" = String, Path),
        ("from" = Option<String>, Query, description = "RFC 3339; default a day before `to`"),
        ("to" = Option<String>, Query, description = "RFC 3339; default now"),
        PageParams
    ),
    responses(
        (status = 200, description = "Requested versus delivered over the range, and a page of the pool's ledger rows in it", body = PoolLedger,
            headers(("Link" = String, description = "`<URL>; rel=\"next\"`: the next page, when there is one"))),
        (status = 400, response = InvalidInput),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        Authenticated,
    )
)]
async fn pool_ledger(
    State(state): State<AppState>,
    axum::Extension(principal): axum::Extension<Principal>,
    uri: axum::http::Uri,
    path: RawPath,
    query: QueryParams,
) -> Result<Response, ApiError> {
    principal.require(Scope::Reports)?;
    let pool = pool_from_path(&state, &principal, path)?;
    let known = ["from", "to", "limit", "cursor"];
    let params = page::query(query, &known)?;
    let list = format!("ledger:{pool}");
    let request = page::read::<LedgerKey>(&params, &list)?;
    let now = state.engine.clock().now();
    let (from, to) = range(
        &params,
        &known,
        "invalid-range",
        chrono::Duration::days(1),
        now,
    )?;
    // A walk reads one range: its cursor keeps it, and a range given beside it must be it.
    let (from, to, after) = match request.after {
        None => (from, to, None),
        Some(key) => {
            let given = |name| params.contains_key(name);
            if (given("from") && from != key.from) || (given("to") && to != key.to) {
                return Err(ApiError::bad(
                    "invalid-cursor",
                    "cursor: made for another range; send the same from and to as the first page, or leave them out",
                ));
            }
            (key.from, key.to, Some(key.after))
        }
    };
    let ledger = state.engine.ledger();
    let outcomes = ledger.capacity_requests_between(&pool, from, to).await?;
    let events = ledger.pool_events(&pool).await?;
    let mut rows = ledger
        .pool_event_page(&pool, from, to, after, request.limit + 1)
        .await?;
    let more = rows.len() > request.limit as usize;
    rows.truncate(request.limit as usize);
    let next_cursor = match (more, rows.last()) {
        (true, Some(last)) => Some(page::cursor(
            &list,
            &LedgerKey {
                from,
                to,
                after: last.seq,
            },
        )),
        _ => None,
    };
    let body = PoolLedger {
        capacity_requests: headroom_ledger::derive::fill(&outcomes, &events),
        organic: headroom_ledger::derive::organic_fill(&events, from, to),
        spend: headroom_ledger::derive::spend(&events, None, Some(from), to.min(now)),
        entries: rows
            .into_iter()
            .map(|r| LedgerEntry::new(r.seq, r.row))
            .collect(),
        next_cursor: next_cursor.clone(),
        pool,
        from,
        to,
    };
    Ok(page::answer(body, &uri, &params, next_cursor.as_deref()))
}
