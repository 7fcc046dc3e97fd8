//! The ledger's rows and what is derived from them, pure: the types `headroom-ledger` writes and
//! reads back (node events, refusals, capacity requests, tokens, …), the values finance and
//! budgets derive from them ([`derive`]) and the standing checkpoints admissions keep
//! ([`checkpoint`]). No database and no runtime: `headroom-report` builds on these without
//! linking either (`tests/cli/purity.rs` at the workspace root checks it).

pub mod checkpoint;
pub mod derive;

use std::collections::BTreeMap;

pub use headroom_core::planner::Destination;
use headroom_core::{
    AccountName, Budget, CapacityRequest, Market, Money, NodeId, NodeState, OfferingId, PoolName,
    Priority, ProviderKind, RefusalReason, RequestId, RequestState, Timestamp,
    budget::BudgetStanding,
};
use serde::Serialize;

/// A scheduled window as the ledger keeps it (`Ledger::schedule_windows`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWindow {
    pub id: String,
    pub pool: PoolName,
    pub at: Timestamp,
    /// The window as it was declared (JSON).
    pub spec: String,
}

/// A capacity request as a client submits it, before the ledger assigns an id.
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
    pub fn stored(&self) -> String {
        format!("{}{KEY_SEPARATOR}{}", self.account, self.key)
    }

    /// The client's key back from the stored form (rows written before keys were scoped hold
    /// the bare key).
    pub fn client_key(stored: String) -> String {
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

/// Which capacity requests `Ledger::capacity_request_page` reads: those of `pools` (the
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

/// What a budget report reads from the ledger: every node event, the refusals of the report's
/// range and the budgets in force, each cut to the accounts its reader acts for.
#[derive(Debug, Clone, Default)]
pub struct ReportRows {
    pub events: Vec<NodeEvent>,
    pub refusals: Vec<RefusalRecord>,
    pub budgets: Vec<Budget>,
}
