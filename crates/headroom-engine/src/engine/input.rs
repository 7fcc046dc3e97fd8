//! The tick's input: what the ledger and the cloud say, read once at the start of the tick.
//!
//! Every node event the tick writes is applied here as well (see [`Engine::record`]), so the
//! controller, the planner, its fallback rounds, the status and the alert rules all read one
//! consistent picture without asking the ledger again. The one exception is an account's
//! budget standing after a node of it ended, parked or renewed its hold within the tick: its released hold is
//! derived from the node's history, so the standing is read again when next needed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use headroom_cloud::{Instance, InstanceId, InstancePhase};
use headroom_config::Config;
use headroom_core::budget::BudgetStanding;
use headroom_core::{
    AccountName, Budget, CapacityRequest, Money, NodeId, NodeState, PoolName, RequestId, Timestamp,
};
use headroom_ledger::{Ledger, NodeEvent};

use super::EngineError;
use super::read_cache::{Kept, LiveNodes, ReadCache};

#[derive(Debug)]
pub(super) struct TickInput {
    /// The pools this process holds the lease of.
    pub owned: BTreeSet<PoolName>,
    /// The latest event of every node that is not final, every pool's, in ledger order (a node
    /// whose latest event is newer comes later), as `Ledger::live_nodes` returns them.
    pub live: Vec<NodeEvent>,
    /// Client tokens of instances under an interruption notice in this tick's inventory.
    pub reclaiming: HashSet<String>,
    /// Orphans in this tick's inventory, by the pool they are counted under.
    pub orphans: BTreeMap<PoolName, Vec<InstanceId>>,
    /// Requests still being worked on (read by [`TickInput::read_demand`]).
    pub open: Vec<CapacityRequest>,
    /// Requests of live nodes that were cancelled: their nodes are organic demand again.
    pub cancelled: HashSet<RequestId>,
    /// The budget in force per account (read by [`TickInput::read_demand`]).
    pub budgets: HashMap<AccountName, Budget>,
    /// Scheduled windows declared through the API, per pool, with their ids (the
    /// configuration's are in `Config::schedules`).
    pub windows: HashMap<PoolName, Vec<(String, headroom_config::schedule::ScheduleWindow)>>,
    /// Standings read so far this tick, kept up to date with the holds the tick places.
    standings: HashMap<AccountName, BudgetStanding>,
    /// The revision of requests, cancellations and refusals read after the observe phase.
    pub requests_revision: Option<i64>,
    /// Whether the tick recorded a refusal ([`Engine::append_refusal`]).
    pub wrote_refusal: bool,
}

/// A window declared through the API, checked against its pool as configured now.
pub(super) fn api_window(
    stored: &headroom_ledger::StoredWindow,
    config: &Config,
) -> Result<headroom_config::schedule::ScheduleWindow, String> {
    let pool = config
        .pool(&stored.pool)
        .ok_or_else(|| format!("pool {} is not in the configuration", stored.pool))?;
    let spec: headroom_config::schedule::WindowSpec = serde_json::from_str(&stored.spec)
        .map_err(|e| format!("the stored window does not parse: {e}"))?;
    spec.parse(pool.max_replicas)
        .map_err(|e| format!("{}: {}", e.field, e.what))
}

/// What `read` returns, or a fresh read where `revision` is not the one it was kept under (or
/// the backend gives none); a fresh read is kept under `revision`.
async fn kept<T: Clone>(
    slot: &mut Option<Kept<T>>,
    revision: Option<i64>,
    read: impl std::future::Future<Output = Result<T, headroom_ledger::LedgerError>>,
) -> Result<T, EngineError> {
    if let Some(value) = Kept::at(slot, revision) {
        return Ok(value);
    }
    let value = read.await?;
    *slot = revision.map(|revision| Kept {
        revision,
        value: value.clone(),
    });
    Ok(value)
}

/// Node events read after the kept live nodes per round, and the rounds a tick reads so before
/// it reads the live nodes afresh instead (a backlog of writes from elsewhere).
const EVENTS_PAGE: u32 = 4096;
const EVENT_PAGES: usize = 8;

/// `Ledger::live_nodes`, kept up to date from the events committed since the last tick where
/// the ledger commits them in order; read whole every tick where it does not.
async fn live_nodes(
    ledger: &dyn Ledger,
    reads: &mut ReadCache,
) -> Result<Vec<NodeEvent>, EngineError> {
    // Taken out: a read that fails leaves nothing kept, and the next tick starts afresh.
    if let Some(mut live) = reads.live.take() {
        for _ in 0..EVENT_PAGES {
            let events = ledger.node_events_after(live.through, EVENTS_PAGE).await?;
            let last_page = events.len() < EVENTS_PAGE as usize;
            live.apply(events);
            if last_page {
                let events = live.events();
                reads.live = Some(live);
                return Ok(events);
            }
        }
    }
    match ledger.live_nodes_through().await? {
        Some((through, heads)) => {
            let live = LiveNodes::new(through, heads);
            let events = live.events();
            reads.live = Some(live);
            Ok(events)
        }
        None => Ok(ledger.live_nodes().await?),
    }
}

impl TickInput {
    /// The live nodes and what the inventory says about them.
    pub async fn read(
        ledger: &dyn Ledger,
        owned: BTreeSet<PoolName>,
        inventory: &[Instance],
        reads: &mut ReadCache,
    ) -> Result<TickInput, EngineError> {
        let live = live_nodes(ledger, reads).await?;
        let reclaiming = inventory
            .iter()
            .filter(|i| i.interruption_notice.is_some() && i.phase != InstancePhase::Interrupted)
            .map(|i| i.client_token.clone())
            .collect();
        Ok(TickInput {
            owned,
            live,
            reclaiming,
            orphans: BTreeMap::new(),
            open: Vec::new(),
            cancelled: HashSet::new(),
            budgets: HashMap::new(),
            windows: HashMap::new(),
            standings: HashMap::new(),
            requests_revision: None,
            wrote_refusal: false,
        })
    }

    /// Demand and money, after the observe phase settled the nodes: open requests, which live
    /// nodes' requests were cancelled, and the budgets in force.
    pub async fn read_demand(
        &mut self,
        ledger: &dyn Ledger,
        config: &Config,
        reads: &mut ReadCache,
    ) -> Result<(), EngineError> {
        // After the observe phase: what it wrote moves the revision.
        let revision = ledger.revision().await?;
        self.requests_revision = revision.requests;
        self.open = kept(
            &mut reads.open,
            revision.requests,
            ledger.open_capacity_requests(),
        )
        .await?;
        let with_nodes: BTreeSet<RequestId> =
            self.live.iter().filter_map(|e| e.request.clone()).collect();
        let with_nodes: Vec<RequestId> = with_nodes.into_iter().collect();
        self.cancelled = match reads
            .cancelled
            .as_ref()
            .filter(|k| Some(k.revision) == revision.requests && k.value.0 == with_nodes)
        {
            Some(k) => k.value.1.clone(),
            None => {
                let cancelled = ledger.cancelled_requests(&with_nodes).await?;
                reads.cancelled = revision.requests.map(|revision| Kept {
                    revision,
                    value: (with_nodes, cancelled.clone()),
                });
                cancelled
            }
        };
        self.budgets = kept(&mut reads.budgets, revision.budgets, ledger.budgets())
            .await?
            .into_iter()
            .map(|b| (b.account.clone(), b))
            .collect();
        self.windows = HashMap::new();
        let windows = kept(
            &mut reads.windows,
            revision.windows,
            ledger.schedule_windows(),
        )
        .await?;
        for stored in windows {
            match api_window(&stored, config) {
                Ok(window) => self
                    .windows
                    .entry(stored.pool.clone())
                    .or_default()
                    .push((stored.id.clone(), window)),
                // Checked when it was declared; a window the configuration no longer admits
                // (its pool gone or shrunk) is skipped, said once a tick.
                Err(why) => {
                    tracing::warn!(pool = %stored.pool, window = %stored.id, %why, "a scheduled window is skipped")
                }
            }
        }
        Ok(())
    }

    /// `account`'s standing at `now`, read once and then kept by [`TickInput::apply`].
    pub async fn standing(
        &mut self,
        ledger: &dyn Ledger,
        account: &AccountName,
        now: Timestamp,
    ) -> Result<Option<BudgetStanding>, EngineError> {
        let Some(budget) = self.budgets.get(account) else {
            return Ok(None);
        };
        if let Some(s) = self.standings.get(account) {
            return Ok(Some(*s));
        }
        let s = ledger.budget_standing(budget, now).await?;
        self.standings.insert(account.clone(), s);
        Ok(Some(s))
    }

    /// Applies an event the tick has written.
    pub fn apply(&mut self, event: &NodeEvent) {
        if let Some(at) = self.live.iter().position(|e| e.node == event.node) {
            self.live.remove(at);
        }
        if !event.state.is_final() {
            self.live.push(event.clone());
        }
        if event.hold > Money::ZERO && event.reason.as_deref() == Some(headroom_ledger::LAUNCH) {
            // A launch's hold is the node's first: it adds to what the account holds.
            if let Some(s) = self.standings.get_mut(&event.account) {
                s.held += event.hold;
            }
        } else if event.hold > Money::ZERO
            || event.state.is_final()
            || event.state == NodeState::Warm
        {
            // Any other hold (a renewal, a wake, a park) replaces what its node still held, and
            // a final node releases it: what is left depends on the node's history, so the
            // standing is read again when next needed.
            self.standings.remove(&event.account);
        }
    }

    /// The latest event of `pool`'s live nodes.
    pub fn pool_nodes<'a>(&'a self, pool: &'a PoolName) -> impl Iterator<Item = &'a NodeEvent> {
        self.live.iter().filter(move |e| &e.pool == pool)
    }

    pub fn node(&self, node: &NodeId) -> Option<&NodeEvent> {
        self.live.iter().find(|e| &e.node == node)
    }

    /// Marks a request closed by a refusal, so later rounds and the status no longer count it.
    pub fn close_request(&mut self, request: &RequestId) {
        self.open.retain(|r| &r.id != request);
    }
}
