//! The ledger: Headroom's system of record, append-only.
//!
//! Rows are only ever inserted. Node states, request outcomes, spend and holds are derived from
//! them (see [`derive`]), so what finance audits can never drift from what happened. The
//! [`Ledger`] trait is what the engine and the API use. One SQL implementation serves both
//! backends, [`SqliteLedger`] (embedded, the default) and [`PostgresLedger`] (production); what
//! the two databases do differently is the dialect seam in `dialect.rs`.

mod admission;
mod batch;
mod checkpoint;
pub mod database_url;
pub mod derive;
mod dialect;
mod pg_schema;
mod postgres;
mod requests;
mod rows;
mod sql;
mod sqlite;
mod standing;

use std::collections::BTreeMap;
use std::fmt::Debug;

use async_trait::async_trait;
use headroom_core::budget::BudgetStanding;
pub use headroom_core::planner::Destination;
use headroom_core::{
    AccountName, Budget, CapacityRequest, Market, Money, NodeId, NodeState, OfferingId, PoolName,
    Priority, ProviderKind, RefusalReason, RequestId, RequestState, Timestamp,
};
use serde::Serialize;
use thiserror::Error;

pub use pg_schema::{RuntimeRole, scram_sha256};
pub use postgres::{PostgresLedger, STATEMENT_TIMEOUT};
pub use sqlite::SqliteLedger;

#[derive(Debug, Error)]
pub enum LedgerError {
    /// The idempotency key was used before for a different request.
    #[error("idempotency key {key:?} was already used for a different request ({existing})")]
    IdempotencyConflict { key: String, existing: RequestId },
    #[error("capacity request {0} does not exist")]
    UnknownRequest(RequestId),
    #[error("the ledger holds a value this version cannot read: {0}")]
    Corrupt(String),
    #[error("cannot open the ledger at {url}")]
    Open {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    /// A database URL the ledger cannot use as given (the message shows it redacted).
    #[error("database URL {0}")]
    BadUrl(String),
    #[error("ledger migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The schema is behind this build and the connected role may not migrate it (`serve` as
    /// the runtime role): the owner must run `headroom migrate`.
    #[error("the ledger schema is not current: {0}")]
    NotMigrated(String),
    /// `headroom migrate --runtime-role` refused the role it was given.
    #[error("--runtime-role {role}: {why}")]
    RuntimeRole { role: String, why: String },
    #[error("ledger query failed")]
    Database(#[source] sqlx::Error),
    /// Budget admissions of one account kept landing in another process while this one
    /// decided (see `admission.rs`): nothing was written; the caller may try again.
    #[error("budget admissions of the same account kept racing from other processes")]
    AdmissionContended,
    /// As many writes of one kind wait for a batch as the ledger queues
    /// ([`batch::MAX_WAITING`]): this one was refused unwritten; the caller may try again.
    #[error("{0} ledger writes are already waiting; try again shortly")]
    Overloaded(usize),
}

impl From<sqlx::Error> for LedgerError {
    fn from(error: sqlx::Error) -> Self {
        dialect::note_if_connection_lost(&error);
        LedgerError::Database(error)
    }
}

/// A capacity request as a client submits it, before the ledger assigns an id.
/// A scheduled window as the ledger keeps it (`Ledger::schedule_windows`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWindow {
    pub id: String,
    pub pool: PoolName,
    pub at: Timestamp,
    /// The window as it was declared (JSON).
    pub spec: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCapacityRequest {
    pub pool: PoolName,
    pub replicas: u32,
    pub priority: Priority,
    pub idempotency_key: Option<IdempotencyKey>,
    pub at: Timestamp,
}

/// A client's `Idempotency-Key`, scoped to the account the request charges, as payment APIs
/// scope theirs: one account's keys never meet another's, so a key cannot reveal or block
/// another tenant's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    pub account: AccountName,
    pub key: String,
}

/// Separates the account from the client's key in the stored column: account names cannot
/// hold it and keys are visible ASCII, so the stored form is unambiguous.
const KEY_SEPARATOR: char = '\u{1f}';

impl IdempotencyKey {
    /// The form the ledger's UNIQUE column holds.
    pub(crate) fn stored(&self) -> String {
        format!("{}{KEY_SEPARATOR}{}", self.account, self.key)
    }

    /// The client's key back from the stored form (rows written before keys were scoped hold
    /// the bare key).
    pub(crate) fn client_key(stored: String) -> String {
        match stored.split_once(KEY_SEPARATOR) {
            Some((_, key)) => key.to_string(),
            None => stored,
        }
    }
}

/// A capacity request with its outcome so far, derived from the ledger.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestOutcome {
    #[serde(flatten)]
    pub request: CapacityRequest,
    pub delivered: u32,
    pub state: RequestState,
    pub refusals: Vec<RefusalRecord>,
}

/// Which capacity requests [`Ledger::capacity_request_page`] reads: those of `pools` (the
/// caller's), optionally in one state and created at or after `since`, newest first by
/// `(created_at, id)`, starting after `before` (the last request of the previous page), at most
/// `limit`.
#[derive(Debug, Clone)]
pub struct RequestPageQuery<'a> {
    pub pools: &'a [PoolName],
    pub state: Option<RequestState>,
    pub since: Option<Timestamp>,
    /// The `(created_at, id)` of the previous page's last request: only those after it in the
    /// order (created earlier, or at the same instant with a smaller id).
    pub before: Option<(Timestamp, RequestId)>,
    pub limit: u32,
}

/// A row read with its sequence number, the key its list is paged by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sequenced<T> {
    pub seq: i64,
    pub row: T,
}

/// One node state change: the ledger's main row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeEvent {
    pub node: NodeId,
    pub pool: PoolName,
    pub account: AccountName,
    pub offering: OfferingId,
    pub provider: ProviderKind,
    pub region: String,
    pub zone: String,
    pub instance_type: String,
    pub market: Market,
    pub request: Option<RequestId>,
    pub destination: Destination,
    pub state: NodeState,
    pub instance: Option<String>,
    /// The idempotency token sent with the cloud call (AWS ClientToken, GCP requestId).
    pub client_token: String,
    /// What the node's compute costs per hour: billed in the states that bill compute
    /// ([`NodeState::is_billable`]).
    pub price_usd_per_hour: Money,
    /// What the node costs per hour parked warm and stopped ([`NodeState::Warm`]): its volumes,
    /// from its offering (`Offering::warm_usd_per_hour`). Events written before the ledger
    /// recorded it read back zero: a node parked then was not billed for it when the event was
    /// written, and stays so (its later events copy the zero; a new launch records the price).
    pub parked_usd_per_hour: Money,
    /// Accelerators on the node, for GPU-hours.
    pub gpus: u32,
    /// Money held against the budget from this event on, replacing what the node held before
    /// (a launch, a wake, a park, a renewal); zero on events that keep the hold they follow.
    pub hold: Money,
    /// Why the node changed state (`launch`, `wake`, `ready`, `release`, a cloud error code, …).
    pub reason: Option<String>,
    pub at: Timestamp,
}

impl NodeEvent {
    /// The intent that starts a launch: written before the cloud call, carrying the client token
    /// (`hr-<node>`) the call will use and the budget hold it places.
    pub fn launch_intent(
        pool: &headroom_core::PoolSpec,
        offering: &headroom_core::Offering,
        node: NodeId,
        request: Option<RequestId>,
        destination: Destination,
        hold: Money,
        at: Timestamp,
    ) -> NodeEvent {
        NodeEvent {
            client_token: format!("hr-{}", node.0),
            node,
            pool: pool.name.clone(),
            account: pool.account.clone(),
            offering: offering.id.clone(),
            provider: offering.provider,
            region: offering.region.clone(),
            zone: offering.zone.clone(),
            instance_type: offering.instance_type.clone(),
            market: offering.market,
            request,
            destination,
            state: NodeState::Requested,
            instance: None,
            price_usd_per_hour: offering.price_usd_per_hour,
            parked_usd_per_hour: offering.warm_usd_per_hour,
            gpus: offering.gpus_per_node,
            hold,
            reason: Some(LAUNCH.to_string()),
            at,
        }
    }

    /// Identifies this write. Writing the same event again (a retry after a lost
    /// acknowledgement) finds the key taken and counts once.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.node,
            self.state,
            self.reason.as_deref().unwrap_or(""),
            self.at.timestamp_millis()
        )
    }

    /// What the node costs per hour in this event's state: compute while billable, volumes
    /// while parked warm, nothing otherwise. A hold placed by this event is spent down at it.
    pub fn hourly_rate(&self) -> Money {
        headroom_core::cost::hourly_rate(
            self.state,
            self.price_usd_per_hour,
            self.parked_usd_per_hour,
        )
    }

    /// What a hold placed in this event's state is sized by: the parked price when parked warm,
    /// else the compute price (a launch intent holds for the compute it is about to run).
    pub fn hold_rate(&self) -> Money {
        if self.state == NodeState::Warm {
            self.parked_usd_per_hour
        } else {
            self.price_usd_per_hour
        }
    }

    /// Whether this event begins an activation: a launch intent or a wake.
    pub fn begins_activation(&self) -> bool {
        self.reason
            .as_deref()
            .is_some_and(|r| ACTIVATION_REASONS.contains(&r))
    }

    /// A running or parked node's hold renewed: the same state again, holding `hold` afresh
    /// from `at`. What it still held is replaced, so the ledger admits only the difference.
    pub fn hold_renewal(last: &NodeEvent, hold: Money, at: Timestamp) -> NodeEvent {
        NodeEvent {
            hold,
            ..last.next(last.state, HOLD_RENEWAL, at)
        }
    }

    /// Whether this event renews a running or parked node's hold (rather than beginning an
    /// activation).
    pub fn is_hold_renewal(&self) -> bool {
        self.reason.as_deref() == Some(HOLD_RENEWAL)
    }

    /// The next event of this node's history: same node, new state, no new hold.
    pub fn next(&self, state: NodeState, reason: &str, at: Timestamp) -> NodeEvent {
        NodeEvent {
            state,
            hold: Money::ZERO,
            reason: Some(reason.to_string()),
            at,
            ..self.clone()
        }
    }
}

/// The reason of a launch intent's event.
pub const LAUNCH: &str = "launch";

/// The reason of the event that wakes a warm node toward serving.
pub const WAKE: &str = "wake";

/// The reason of the event that renews a running or parked node's hold before it lapses.
pub const HOLD_RENEWAL: &str = "hold_renewal";

/// The reasons of the events that begin an activation toward serving or warm: a launch, a wake.
pub const ACTIVATION_REASONS: [&str; 2] = [LAUNCH, WAKE];

/// Every "no", with its reason.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusalRecord {
    pub pool: PoolName,
    pub request: Option<RequestId>,
    pub node: Option<NodeId>,
    pub offering: Option<OfferingId>,
    pub replicas: u32,
    pub reason: RefusalReason,
    pub detail: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
}

impl RefusalRecord {
    /// Identifies this write, as [`NodeEvent::key`] does.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}/{}/{}",
            self.pool,
            self.request.as_ref().map_or("", |r| r.0.as_str()),
            self.node.as_ref().map_or("", |n| n.0.as_str()),
            self.offering.as_ref().map_or("", |o| o.as_str()),
            self.reason,
            self.replicas,
            self.at.timestamp_millis()
        )
    }
}

/// An API token as stored: the secret only as its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub id: String,
    pub secret_sha256: String,
    /// Accounts the token acts for; `*` is every account.
    pub accounts: Vec<String>,
    pub scopes: Vec<String>,
    pub created_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

/// An alert notification waiting in the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAlert {
    pub seq: i64,
    pub webhook: String,
    pub body: String,
}

/// Pending notifications kept per outbox; past this the oldest are dropped (and recorded so).
pub const ALERT_OUTBOX_BOUND: i64 = 1000;

/// Totals over the whole ledger, for the demo summary and dashboards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerSummary {
    pub capacity_requests: u64,
    /// Replicas asked for: node launches and wakes toward serving.
    pub capacity_requested: u64,
    /// Of those, how many reached serving.
    pub capacity_delivered: u64,
    pub refusals: u64,
    pub refusals_by_reason: BTreeMap<String, u64>,
    /// Every node's spend up to `as_of`.
    pub spend: Money,
    /// The instant `spend` is computed to ([`derive::as_of`]).
    pub as_of: Timestamp,
}

/// The answer to "may this node event place its hold?" (the governor's budget check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldOutcome {
    /// The event (and its hold) was recorded.
    Placed,
    /// Recording the hold would take the account over its ceiling; nothing was written.
    OverBudget(BudgetStanding),
}

/// The system of record. Every method is one transaction.
#[async_trait]
pub trait Ledger: Send + Sync + Debug {
    /// Records a request. A repeated idempotency key with the same body returns the first
    /// request and `false`; with a different body it is an `IdempotencyConflict`.
    async fn record_capacity_request(
        &self,
        new: &NewCapacityRequest,
    ) -> Result<(CapacityRequest, bool), LedgerError>;

    /// Marks a request cancelled (once; later calls return the same outcome).
    async fn cancel_capacity_request(
        &self,
        id: &RequestId,
        at: Timestamp,
    ) -> Result<RequestOutcome, LedgerError>;

    async fn capacity_request(&self, id: &RequestId)
    -> Result<Option<RequestOutcome>, LedgerError>;

    /// The request `id` when it belongs to one of `pools`, else `None` after the same work an
    /// unknown id costs (one lookup by id): how long the answer takes does not tell another
    /// tenant's request from a missing one.
    async fn capacity_request_in(
        &self,
        id: &RequestId,
        pools: &[PoolName],
    ) -> Result<Option<RequestOutcome>, LedgerError>;

    /// Which of `ids` were cancelled.
    async fn cancelled_requests(
        &self,
        ids: &[RequestId],
    ) -> Result<std::collections::HashSet<RequestId>, LedgerError> {
        let mut cancelled = std::collections::HashSet::new();
        for id in ids {
            if let Some(outcome) = self.capacity_request(id).await?
                && outcome.state == RequestState::Cancelled
            {
                cancelled.insert(id.clone());
            }
        }
        Ok(cancelled)
    }

    /// The requests of `pool` created in `[from, to)`, with their outcomes.
    async fn capacity_requests_between(
        &self,
        pool: &PoolName,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<RequestOutcome>, LedgerError>;

    /// Every refusal recorded in `[from, to)`, in order.
    async fn refusals_between(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<RefusalRecord>, LedgerError>;

    /// One page of capacity requests with their outcomes (see [`RequestPageQuery`]): the
    /// filters, the order and the limit are the query's, so a page costs its own rows, not the
    /// ledger's. The state is derived in the query exactly as [`RequestState::derive`] does.
    async fn capacity_request_page(
        &self,
        query: &RequestPageQuery<'_>,
    ) -> Result<Vec<RequestOutcome>, LedgerError>;

    /// Every node event that carries request `id`, in order: what its fill is derived from.
    async fn request_events(&self, id: &RequestId) -> Result<Vec<NodeEvent>, LedgerError>;

    /// Every node event of `pool`, in order.
    async fn pool_events(&self, pool: &PoolName) -> Result<Vec<NodeEvent>, LedgerError>;

    /// The node events of `pool` at `[from, to)` recorded after sequence number `after`, in
    /// ledger order, at most `limit`: one page of the pool's ledger.
    async fn pool_event_page(
        &self,
        pool: &PoolName,
        from: Timestamp,
        to: Timestamp,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Sequenced<NodeEvent>>, LedgerError>;

    /// Requests still being worked on: neither cancelled nor closed by a refusal.
    async fn open_capacity_requests(&self) -> Result<Vec<CapacityRequest>, LedgerError>;

    /// Appends a node event. Idempotent: the same event written twice is recorded once, and a
    /// node's second terminal event (terminated or refused) is ignored.
    async fn append_node_event(&self, event: &NodeEvent) -> Result<(), LedgerError>;

    /// Records an event that places a hold (a launch intent, a wake, a park, a renewal) only if
    /// the account's budget in force can carry it: the check and the write are one transaction,
    /// serialised per account, so concurrent launches can never overspend a ceiling. Accounts
    /// without a budget are admitted. An event already recorded is `Placed` again without a
    /// second hold. A hold replaces what its node still holds (a renewal's
    /// [`NodeEvent::hold_renewal`], a park's, a parked node's wake), so only the difference is
    /// admitted.
    async fn place_hold(&self, event: &NodeEvent) -> Result<HoldOutcome, LedgerError>;

    /// The latest event that placed a hold (a launch, a wake, a renewal) of each of `nodes`
    /// that has one, in ledger order.
    async fn latest_holds(&self, nodes: &[NodeId]) -> Result<Vec<NodeEvent>, LedgerError>;

    /// Appends a refusal; idempotent like [`Ledger::append_node_event`].
    async fn append_refusal(&self, refusal: &RefusalRecord) -> Result<(), LedgerError>;

    /// Records a new version of an account's budget; the latest version is in force.
    async fn put_budget(&self, budget: &Budget, at: Timestamp) -> Result<(), LedgerError>;

    /// The budget in force for every account that has one, by account name.
    async fn budgets(&self) -> Result<Vec<Budget>, LedgerError>;

    async fn budget(&self, account: &AccountName) -> Result<Option<Budget>, LedgerError> {
        Ok(self
            .budgets()
            .await?
            .into_iter()
            .find(|b| &b.account == account))
    }

    /// Every node event charged to `account`, in order.
    async fn account_events(&self, account: &AccountName) -> Result<Vec<NodeEvent>, LedgerError>;

    /// Spend and open holds of `budget`'s account in the period containing `now`.
    async fn budget_standing(
        &self,
        budget: &Budget,
        now: Timestamp,
    ) -> Result<BudgetStanding, LedgerError> {
        let events = self.account_events(&budget.account).await?;
        Ok(derive::standing(&events, budget, now))
    }

    /// The latest event of every node that is not final (terminated or refused).
    async fn live_nodes(&self) -> Result<Vec<NodeEvent>, LedgerError>;

    /// Every node event, in order. Reports and cost derivations read this.
    async fn node_events(&self) -> Result<Vec<NodeEvent>, LedgerError>;

    async fn summary(&self, now: Timestamp) -> Result<LedgerSummary, LedgerError>;

    /// Takes what it can of the leases on `pools` for this process and returns the pools it
    /// owns now. Several processes sharing one database split the pools this way; a lease ends
    /// when its process ends. A single-process backend owns every pool.
    async fn pool_leases(
        &self,
        pools: &[PoolName],
    ) -> Result<std::collections::BTreeSet<PoolName>, LedgerError> {
        Ok(pools.iter().cloned().collect())
    }

    /// Queues an alert notification for `webhook`. The outbox is bounded: beyond
    /// [`ALERT_OUTBOX_BOUND`] pending notifications the oldest are closed as dropped; returns
    /// how many were.
    async fn enqueue_alert(
        &self,
        webhook: &str,
        body: &str,
        at: Timestamp,
    ) -> Result<u64, LedgerError>;

    /// The oldest pending notifications, at most `limit`.
    async fn pending_alerts(&self, limit: i64) -> Result<Vec<PendingAlert>, LedgerError>;

    /// How many queued notifications no webhook has taken yet: the outbox's depth.
    async fn pending_alert_count(&self) -> Result<u64, LedgerError>;

    /// Closes a notification as delivered (idempotent).
    async fn alert_delivered(&self, seq: i64, at: Timestamp) -> Result<(), LedgerError>;

    /// Closes a notification as dropped: its retries are spent (idempotent; a notification
    /// already closed keeps its first outcome).
    async fn alert_dropped(&self, seq: i64, at: Timestamp) -> Result<(), LedgerError>;

    /// Records one controller decision (a JSON document) for `pool`.
    async fn append_decision(
        &self,
        pool: &PoolName,
        at: Timestamp,
        record: &str,
    ) -> Result<(), LedgerError>;

    /// The pool's recorded decisions, newest first, at most `limit`.
    async fn decisions(&self, pool: &PoolName, limit: i64) -> Result<Vec<String>, LedgerError>;

    /// The pool's recorded decisions with a sequence number below `before` (all, without it),
    /// newest first, at most `limit`: one page of its decision log.
    async fn decision_page(
        &self,
        pool: &PoolName,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Sequenced<String>>, LedgerError>;

    /// Records `pool`'s demand for each (Unix minute, replicas); a minute already recorded
    /// keeps its first value (idempotent across a lost answer or a lease move).
    async fn record_demand_minutes(
        &self,
        pool: &PoolName,
        minutes: &[(i64, u32)],
    ) -> Result<(), LedgerError>;

    /// `pool`'s recorded demand from Unix minute `since` on, oldest first.
    async fn demand_minutes(
        &self,
        pool: &PoolName,
        since: i64,
    ) -> Result<Vec<(i64, u32)>, LedgerError>;

    /// Records `pool`'s scaling-controller memory (`body`, its JSON) as of `at`; an instant
    /// already recorded for the pool keeps its first body (a retried write).
    async fn record_controller_memory(
        &self,
        pool: &PoolName,
        at: Timestamp,
        body: &str,
    ) -> Result<(), LedgerError>;

    /// `pool`'s latest recorded controller memory with its instant, if any.
    async fn controller_memory(
        &self,
        pool: &PoolName,
    ) -> Result<Option<(Timestamp, String)>, LedgerError>;

    /// Records the alerts firing in `scope` (a pool's name, or "" for deployment-wide alerts;
    /// `body`, their JSON) as of `at`; an instant already recorded for the scope keeps its first
    /// body (a retried write).
    async fn record_alert_book(
        &self,
        scope: &str,
        at: Timestamp,
        body: &str,
    ) -> Result<(), LedgerError>;

    /// `scope`'s latest recorded alert book with its instant, if any.
    async fn alert_book(&self, scope: &str) -> Result<Option<(Timestamp, String)>, LedgerError>;

    /// Records a scheduled window declared through the API (`spec` is its JSON); an `id`
    /// already recorded keeps its first window (a retried request).
    async fn add_schedule_window(
        &self,
        id: &str,
        pool: &PoolName,
        at: Timestamp,
        spec: &str,
    ) -> Result<(), LedgerError>;

    /// Cancels `pool`'s window `id`; `false` when the pool has no such window still in force.
    async fn cancel_schedule_window(
        &self,
        pool: &PoolName,
        id: &str,
        at: Timestamp,
    ) -> Result<bool, LedgerError>;

    /// Every window declared through the API and not cancelled, oldest first.
    async fn schedule_windows(&self) -> Result<Vec<StoredWindow>, LedgerError>;

    async fn create_token(&self, token: &ApiToken) -> Result<(), LedgerError>;

    async fn token(&self, id: &str) -> Result<Option<ApiToken>, LedgerError>;

    async fn tokens(&self) -> Result<Vec<ApiToken>, LedgerError>;

    /// Revokes a token; `false` when no such token exists.
    async fn revoke_token(&self, id: &str, at: Timestamp) -> Result<bool, LedgerError>;

    /// Cheap round trip for readiness checks.
    async fn ping(&self) -> Result<(), LedgerError>;

    /// Tells every process sharing this ledger about a pool signal one of them received (a
    /// PostgreSQL `NOTIFY`; nothing is stored), so the process that holds the pool's lease sees
    /// pushes sent to any replica. A backend only one process opens has nobody to tell.
    async fn share_signal(&self, payload: &str) -> Result<(), LedgerError> {
        let _ = payload;
        Ok(())
    }

    /// The signals other processes share, as they arrive; `None` for a single-process backend.
    async fn shared_signals(&self) -> Result<Option<SignalFeed>, LedgerError> {
        Ok(None)
    }
}

/// The channel processes share pool signals on.
pub const SIGNAL_CHANNEL: &str = "headroom_signals";

/// The most a shared signal may take: PostgreSQL refuses `NOTIFY` payloads of 8000 bytes.
pub const MAX_SIGNAL_PAYLOAD: usize = 7_900;

/// Pool signals shared by other processes (a `LISTEN` on [`SIGNAL_CHANNEL`]).
pub struct SignalFeed {
    listener: sqlx::postgres::PgListener,
}

impl std::fmt::Debug for SignalFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SignalFeed")
    }
}

impl SignalFeed {
    pub(crate) fn new(listener: sqlx::postgres::PgListener) -> SignalFeed {
        SignalFeed { listener }
    }

    /// The next shared payload. A lost connection is reopened on the next call; what was sent
    /// meanwhile is lost, which a signal (superseded within seconds) can afford.
    pub async fn next(&mut self) -> Result<String, LedgerError> {
        loop {
            if let Some(notification) = self.listener.try_recv().await? {
                return Ok(notification.payload().to_string());
            }
        }
    }
}

pub fn new_request_id() -> RequestId {
    RequestId(format!("cr-{}", uuid::Uuid::new_v4().simple()))
}
