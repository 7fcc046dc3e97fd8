//! The ledger: Headroom's system of record, append-only.
//!
//! Rows are only ever inserted. Node states, request outcomes, spend and holds are derived from
//! them (see [`derive`]), so what finance audits can never drift from what happened. The
//! [`Ledger`] trait is what the engine and the API use: the sum of role traits ([`Requests`],
//! [`Budgets`], [`NodeEvents`], [`History`], [`Schedules`], [`EngineMemory`], [`AlertOutbox`],
//! [`ApiTokens`], [`Coordination`]), each of which a caller may take alone. One SQL
//! implementation serves both backends, [`SqliteLedger`] (embedded, the default) and
//! [`PostgresLedger`] (production); what the two databases do differently is the dialect seam in
//! `dialect.rs`.

mod admission;
mod batch;
pub mod database_url;
mod dialect;
mod ids;
mod pg_schema;
mod postgres;
pub mod report_rows;
mod requests;
mod rows;
mod sql;
mod sqlite;
mod standing;

use std::fmt::Debug;

use async_trait::async_trait;
use headroom_core::budget::BudgetStanding;
use headroom_core::{
    AccountName, Budget, CapacityRequest, NodeId, PoolName, RequestId, RequestState, Timestamp,
};
use headroom_records::checkpoint;
// The rows and their derivations are pure and live in `headroom-records`; they are the ledger's
// vocabulary, so its callers keep naming them here.
pub use headroom_records::{
    ACTIVATION_REASONS, ApiToken, Destination, HOLD_RENEWAL, HoldOutcome, IdempotencyKey, LAUNCH,
    LedgerSummary, NewCapacityRequest, NodeEvent, PendingAlert, RefusalRecord, RequestOutcome,
    RequestPageQuery, Sequenced, StoredWindow, WAKE, derive,
};
use thiserror::Error;

pub use ids::IdSource;
pub use pg_schema::{RuntimeRole, scram_sha256};
pub use postgres::{PostgresLedger, STATEMENT_TIMEOUT};
pub use sqlite::SqliteLedger;

/// The ledger and its roles, for `use headroom_ledger::prelude::*` where a module calls many
/// roles' methods on a concrete ledger (a [`SqliteLedger`]): a role's methods are called with the
/// role in scope, except on a `dyn Ledger`, which has every role's.
pub mod prelude {
    pub use crate::{
        AlertOutbox, ApiTokens, Budgets, Coordination, EngineMemory, History, Ledger, NodeEvents,
        Requests, Schedules,
    };
}

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

/// Where some tables stand (see [`Coordination::revision`]). Each field is a number that changes
/// whenever a row its reads return is committed, by any process: those tables are append-only
/// (the tables pruned to a retention are the engine's memory, none of these), so SQLite's
/// largest row id (one writer at a time, ids never reused) or PostgreSQL's row count of a table
/// only grows then, and a sum of them moves when any of them does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Revision {
    /// Budget versions: [`Budgets::budgets`].
    pub budgets: Option<i64>,
    /// Scheduled windows and their cancellations: [`Schedules::schedule_windows`].
    pub windows: Option<i64>,
    /// Capacity requests, their cancellations and refusals: [`Requests::open_capacity_requests`]
    /// and [`Requests::cancelled_requests`]. `None` on PostgreSQL, where counting the refusals
    /// would cost as much as the read.
    pub requests: Option<i64>,
}

/// Pending notifications kept per outbox; past this the oldest are dropped (and recorded so).
pub const ALERT_OUTBOX_BOUND: i64 = 1000;

/// How long a pool's superseded controller memories are kept: each pool keeps its newest row of
/// `controller_memory` plus its rows less than this older than the row just recorded; older
/// ones are deleted in the transaction that records a row ([`EngineMemory::record_controller_memory`]).
/// Only the newest row is ever read back (when a process takes the pool), so the rest is an
/// hour of context for whoever looks at the database. The engine writes a pool's memory at most
/// once a tick, so a pool holds at most `1 + CONTROLLER_MEMORY_RETENTION / engine.tick` rows
/// (3,601 at 1 s ticks; a busy pool of the `week-reservable` scenario holds about 430).
pub const CONTROLLER_MEMORY_RETENTION: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// How long a pool's decision log reaches back: each pool keeps its rows of `decisions` less than
/// this older than the row just recorded; older ones are deleted in the transaction that records
/// a row ([`EngineMemory::append_decision`]). The log is an audit record that
/// `GET /v1/pools/{name}/decisions` pages through and shadow reports read, so it is kept for
/// weeks, not an hour; a row's instant is the last it speaks for (a decision's last activation),
/// so a decision that stood for longer than this is kept while it is recent. The migrations'
/// trigger refuses to delete a row inside it (PostgreSQL 0015, SQLite 0016, which spell the
/// same 30 days).
pub const DECISION_RETENTION: chrono::TimeDelta = chrono::TimeDelta::days(30);

/// How long a scope's superseded alert books are kept: each scope keeps its newest row of
/// `alert_book` plus its rows less than this older than the row just recorded; older ones are
/// deleted in the transaction that records a row ([`EngineMemory::record_alert_book`]). Only the
/// newest row is ever read back (when a process takes the pool), as with
/// [`CONTROLLER_MEMORY_RETENTION`]. The migrations' trigger refuses to delete a row inside it.
pub const ALERT_BOOK_RETENTION: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// The system of record: every role below, each a trait of its own. The engine and the API
/// hold one (`Arc<dyn Ledger>`, which has every role's methods); a caller that needs only a role
/// or two takes those (a `dyn Ledger` upcasts to any of them). Every method is one transaction.
/// Any type that implements every role is a `Ledger`; on one, a role's methods are called with
/// the role in scope (or [`prelude`]).
pub trait Ledger:
    Requests
    + Budgets
    + NodeEvents
    + History
    + Schedules
    + EngineMemory
    + AlertOutbox
    + ApiTokens
    + Coordination
{
}

impl<L> Ledger for L where
    L: Requests
        + Budgets
        + NodeEvents
        + History
        + Schedules
        + EngineMemory
        + AlertOutbox
        + ApiTokens
        + Coordination
{
}

/// Capacity requests and their outcomes: recorded, cancelled, and read back one at a time, by
/// pool, by page, or as the open ones a tick works on (the API's `/v1/capacity-requests` and the
/// tick's input).
#[async_trait]
pub trait Requests: Send + Sync + Debug {
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

    /// One page of capacity requests with their outcomes (see [`RequestPageQuery`]): the
    /// filters, the order and the limit are the query's, so a page costs its own rows, not the
    /// ledger's. The state is derived in the query exactly as [`RequestState::derive`] does.
    async fn capacity_request_page(
        &self,
        query: &RequestPageQuery<'_>,
    ) -> Result<Vec<RequestOutcome>, LedgerError>;

    /// Every node event that carries request `id`, in order: what its fill is derived from.
    async fn request_events(&self, id: &RequestId) -> Result<Vec<NodeEvent>, LedgerError>;

    /// Requests still being worked on: neither cancelled nor closed by a refusal.
    async fn open_capacity_requests(&self) -> Result<Vec<CapacityRequest>, LedgerError>;
}

/// Budgets: an account's versions (the latest in force) and its standing (spend and open
/// holds in the period), derived from the events charged to it. The admission that checks a
/// hold against the budget is [`NodeEvents::place_hold`].
#[async_trait]
pub trait Budgets: Send + Sync + Debug {
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
}

/// What the engine writes about nodes: their events, appended or admitted against the account's
/// budget (a hold), the holds renewals extend, and refusals.
#[async_trait]
pub trait NodeEvents: Send + Sync + Debug {
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

    /// Appends a refusal; idempotent like [`NodeEvents::append_node_event`].
    async fn append_refusal(&self, refusal: &RefusalRecord) -> Result<(), LedgerError>;
}

/// The node record read back: the live nodes a tick starts from (and the events after them), and
/// the history the API's pool views, the alert rules, a pool's restore and the finance reports
/// read.
#[async_trait]
pub trait History: Send + Sync + Debug {
    /// The latest event of every node that is not final (terminated or refused).
    async fn live_nodes(&self) -> Result<Vec<NodeEvent>, LedgerError>;

    /// [`History::live_nodes`] with their sequence numbers, and a sequence number every event
    /// at or below which they include: the start of a [`History::node_events_after`] chain.
    /// `None` where events may commit out of sequence order (see [`Revision::node_events`]).
    async fn live_nodes_through(
        &self,
    ) -> Result<Option<(i64, Vec<Sequenced<NodeEvent>>)>, LedgerError> {
        Ok(None)
    }

    /// The node events after `seq`, in order, at most `limit` of them. Complete only where
    /// [`History::live_nodes_through`] answers: only there does no event commit later with a
    /// smaller sequence number.
    async fn node_events_after(
        &self,
        seq: i64,
        limit: u32,
    ) -> Result<Vec<Sequenced<NodeEvent>>, LedgerError>;

    /// Every node event, in order. Reports and cost derivations read this.
    async fn node_events(&self) -> Result<Vec<NodeEvent>, LedgerError>;

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

    /// Every refusal recorded in `[from, to)`, in order.
    async fn refusals_between(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<RefusalRecord>, LedgerError>;

    async fn summary(&self, now: Timestamp) -> Result<LedgerSummary, LedgerError>;
}

/// Scheduled windows declared through the API: added, cancelled, and read with the tick's
/// input.
#[async_trait]
pub trait Schedules: Send + Sync + Debug {
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
}

/// The engine's memory on the record, per pool: its decision log, measured demand, the scaling
/// controller's memory and the alert book, read back when a process takes the pool.
#[async_trait]
pub trait EngineMemory: Send + Sync + Debug {
    /// Records one entry of `pool`'s decision log (a JSON document) as of `at`, the last instant
    /// it speaks for. In the same transaction, deletes the pool's rows older than `at` less
    /// [`DECISION_RETENTION`] (never one inside it: the database refuses that).
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
    /// already recorded for the pool keeps its first body (a retried write). In the same
    /// transaction, deletes the pool's rows older than `at` less
    /// [`CONTROLLER_MEMORY_RETENTION`] (never its newest: the database refuses that).
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
    /// body (a retried write). In the same transaction, deletes the scope's rows older than `at`
    /// less [`ALERT_BOOK_RETENTION`] (never its newest: the database refuses that).
    async fn record_alert_book(
        &self,
        scope: &str,
        at: Timestamp,
        body: &str,
    ) -> Result<(), LedgerError>;

    /// `scope`'s latest recorded alert book with its instant, if any.
    async fn alert_book(&self, scope: &str) -> Result<Option<(Timestamp, String)>, LedgerError>;
}

/// The alert notifications outbox: queued by the alert rules, taken and closed by the delivery
/// loop.
#[async_trait]
pub trait AlertOutbox: Send + Sync + Debug {
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
}

/// The API's bearer tokens (the secret's SHA-256, never the secret): made and revoked by
/// `headroom token`, read by the API's authentication.
#[async_trait]
pub trait ApiTokens: Send + Sync + Debug {
    async fn create_token(&self, token: &ApiToken) -> Result<(), LedgerError>;

    async fn token(&self, id: &str) -> Result<Option<ApiToken>, LedgerError>;

    async fn tokens(&self) -> Result<Vec<ApiToken>, LedgerError>;

    /// Revokes a token; `false` when no such token exists.
    async fn revoke_token(&self, id: &str, at: Timestamp) -> Result<bool, LedgerError>;
}

/// What processes sharing one ledger coordinate through: pool leases, shared pool signals, the
/// [`Revision`] a reader's cache keys on (any writer moves it), and the readiness ping.
#[async_trait]
pub trait Coordination: Send + Sync + Debug {
    /// Takes what it can of the leases on `pools` for this process and returns the pools it
    /// owns now. Several processes sharing one database split the pools this way; a lease ends
    /// when its process ends. A single-process backend owns every pool.
    async fn pool_leases(
        &self,
        pools: &[PoolName],
    ) -> Result<std::collections::BTreeSet<PoolName>, LedgerError> {
        Ok(pools.iter().cloned().collect())
    }

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

    /// Where the tables a tick reads stand now, so a reader keeps what it read until they
    /// move; a field the backend cannot give cheaply is `None` (read again every time). Read
    /// it before what it guards.
    async fn revision(&self) -> Result<Revision, LedgerError> {
        Ok(Revision::default())
    }

    /// Cheap round trip for readiness checks.
    async fn ping(&self) -> Result<(), LedgerError>;
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
