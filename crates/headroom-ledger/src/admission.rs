//! Budget admissions in batches ([`crate::batch`]): concurrent [`crate::NodeEvents::place_hold`]
//! calls of different accounts are decided together, without a lock, in two round trips. One
//! statement reads the accounts' budgets with the histories the decisions need; every event is
//! decided as its account would decide it alone; one statement (one commit) writes the
//! admitted events with their accounts' next checkpoints, so that all land or none (on SQLite,
//! in-process, two statements in one transaction).
//!
//! What makes that safe without a lock is the checkpoint chain: each checkpoint names the one
//! it follows, and an account's checkpoint has one successor at most (a unique index). Two
//! admissions of one account that read the same checkpoint cannot both land; the one that
//! loses writes nothing and is decided again on what the winner wrote. So an account's
//! admissions are serialised exactly as under a lock, across every process on the database,
//! and the budget is checked in the statement (or transaction) that records the intent. The
//! same chain lets a process start from the head it wrote last ([`Heads`]) instead of reading
//! it: a head that moved on is found by the write, which then lands nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use backon::{ExponentialBuilder, Retryable};
use headroom_core::{AccountName, Budget, NodeId, Timestamp};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use crate::batch::{Answer, BYTES_PER_VALUE, Batched, WriteBatch};
use crate::dialect::{self, Dialect};
use crate::sql::{DbRow, IN_LIST_CHUNK, SqlLedger, admitted_increment};
use crate::standing::{CheckpointRow, Histories, Latest, Standing};
use crate::{HoldOutcome, LedgerError, NodeEvent, checkpoint};

/// Times a batch is decided again after losing a race to another admission of one of its
/// accounts (another process's: one process never runs two batches of an account at once),
/// before its callers get [`LedgerError::AdmissionContended`]. Each lost race is another
/// admission's win, so the ledger as a whole always moves on.
const ADMISSION_RACES: usize = 8;

/// A node event to write, as a batch sees it: appended as it is
/// ([`crate::NodeEvents::append_node_event`]) or admitted against its account's budget
/// ([`crate::NodeEvents::place_hold`]). Both kinds share batches, so the events a tick writes
/// (outcomes, state changes, intents) share commits.
#[derive(Debug, Clone)]
pub(crate) enum EventWrite {
    Append(NodeEvent),
    Admit(NodeEvent),
}

/// What a write of a batch holds: its node (so a node's events land in the order they were
/// written) and, for an admission, its account (decided once per batch).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum EventKey {
    Node(NodeId),
    Account(AccountName),
}

impl Batched for EventWrite {
    type Key = EventKey;
    /// An append's answer is `Placed`.
    type Answer = HoldOutcome;
    fn batch_keys(&self) -> impl IntoIterator<Item = EventKey> {
        match self {
            EventWrite::Append(e) => vec![EventKey::Node(e.node.clone())],
            EventWrite::Admit(e) => vec![
                EventKey::Node(e.node.clone()),
                EventKey::Account(e.account.clone()),
            ],
        }
    }
    fn bytes(&self) -> usize {
        match self {
            EventWrite::Append(e) => event_bytes(e),
            // And the account's next checkpoint: its account and period, four numbers and its
            // open nodes (three, as `node:seq`, is a guess: the batch does not know them yet).
            EventWrite::Admit(e) => {
                event_bytes(e) + 7 * BYTES_PER_VALUE + e.account.as_str().len() + 5 + 4 * 8 + 3 * 48
            }
        }
    }
}

/// How many bytes `e`'s twenty-one values take in an insert's Bind message: its texts, its key
/// (node, state, reason and a millisecond time), five numbers, and each value's overhead.
fn event_bytes(e: &NodeEvent) -> usize {
    let text = [
        e.node.0.as_str(),
        e.pool.as_str(),
        e.account.as_str(),
        e.offering.as_str(),
        e.provider.as_str(),
        e.region.as_str(),
        e.zone.as_str(),
        e.instance_type.as_str(),
        e.market.as_str(),
        e.request.as_ref().map_or("", |r| r.0.as_str()),
        e.destination.as_str(),
        e.state.as_str(),
        e.instance.as_deref().unwrap_or(""),
        e.client_token.as_str(),
        e.reason.as_deref().unwrap_or(""),
    ]
    .iter()
    .map(|t| t.len())
    .sum::<usize>();
    let key =
        e.node.0.len() + e.state.as_str().len() + e.reason.as_deref().map_or(0, str::len) + 16;
    text + key + 4 * 8 + 4 + 21 * BYTES_PER_VALUE
}

#[async_trait]
impl<D: Dialect> WriteBatch<EventWrite> for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    /// Appends alone are one insert, each skipped when recorded before (a batch written again
    /// is harmless). With admissions, the appends are written in the admissions' statement.
    async fn write_batch(
        &self,
        writes: &[&EventWrite],
    ) -> Result<Vec<Answer<EventWrite>>, LedgerError> {
        let (mut admits, mut appends) = (Vec::new(), Vec::new());
        for w in writes {
            match w {
                EventWrite::Admit(e) => admits.push(e),
                EventWrite::Append(e) => appends.push(e),
            }
        }
        if admits.is_empty() {
            let mut conn = self.pool().acquire().await?;
            Self::insert_events(&mut conn, &appends).await?;
        } else {
            let outcomes = (|| async {
                let decided = self.admit_batch(&admits, &appends).await;
                if decided.is_err() {
                    // Whatever the error, the next try reads the heads again.
                    self.heads().forget(&admits);
                }
                decided
            })
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(1))
                    .with_max_delay(Duration::from_millis(50))
                    .with_max_times(ADMISSION_RACES)
                    .with_jitter(),
            )
            // On the real timer: the race is lost to another process's commit, which takes
            // real time whatever clock the caller keeps. One process alone (the simulator's)
            // never loses one, so never waits here.
            .sleep(tokio::time::sleep)
            .when(|e| matches!(e, LedgerError::AdmissionContended))
            .await?;
            let mut outcomes = outcomes.into_iter();
            return Ok(writes
                .iter()
                .map(|w| match w {
                    EventWrite::Admit(_) => outcomes.next().ok_or_else(|| {
                        LedgerError::Corrupt("an admission lost its outcome".into())
                    }),
                    EventWrite::Append(_) => Ok(HoldOutcome::Placed),
                })
                .collect());
        }
        Ok(writes.iter().map(|_| Ok(HoldOutcome::Placed)).collect())
    }
}

/// Accounts whose chain heads this process keeps at most; past it, it starts again from none.
const KNOWN_HEADS: usize = 10_000;

/// The head of each account's checkpoint chain as this process last wrote it: its sequence
/// number and content. Never trusted for more than a guess: a write that follows a head that
/// has moved on (another process admitted) meets the chain's unique index and lands nothing,
/// and the admission is decided again on what the database holds.
#[derive(Debug, Default)]
pub(crate) struct Heads(Mutex<HashMap<String, (i64, checkpoint::Checkpoint)>>);

impl Heads {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (i64, checkpoint::Checkpoint)>> {
        // Each change below is one insert, removal or clear: a panic elsewhere leaves it whole.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn of(&self, accounts: &[&str]) -> Latest {
        let heads = self.lock();
        accounts
            .iter()
            .filter_map(|a| Some((a.to_string(), heads.get(*a)?.clone())))
            .collect()
    }

    fn remember(&self, account: &str, seq: i64, checkpoint: &checkpoint::Checkpoint) {
        let mut heads = self.lock();
        if heads.len() >= KNOWN_HEADS && !heads.contains_key(account) {
            heads.clear();
        }
        heads.insert(account.to_string(), (seq, checkpoint.clone()));
    }

    fn forget(&self, accounts: &[&NodeEvent]) {
        let mut heads = self.lock();
        for e in accounts {
            heads.remove(e.account.as_str());
        }
    }
}

/// What an admission batch reads.
#[derive(Default)]
struct BatchRead {
    /// The budget in force of each account that has one.
    budgets: BTreeMap<String, Budget>,
    latest: Latest,
    histories: Histories,
}

/// What a batch decided for one event.
enum Decision<'a> {
    /// Recorded before (a write repeated after a lost acknowledgement): placed, as it was.
    Recorded,
    /// To be written, with its account's next checkpoint when the account has a budget.
    Admitted(Option<CheckpointRow<'a>>),
    OverBudget(headroom_core::budget::BudgetStanding),
}

impl<D: Dialect> SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    /// [`crate::NodeEvents::place_hold`], in a batch. Run alone again when the caller running its
    /// batch went away: an event already recorded is `Placed` again, never admitted twice.
    pub(crate) async fn admit(&self, event: &NodeEvent) -> Answer<EventWrite> {
        self.event_writes()
            .write(EventWrite::Admit(event.clone()), self)
            .await
    }

    /// [`crate::NodeEvents::append_node_event`], in a batch.
    pub(crate) async fn append(&self, event: &NodeEvent) -> Result<(), LedgerError> {
        self.event_writes()
            .write(EventWrite::Append(event.clone()), self)
            .await
            .map(drop)
    }

    /// Admits `events` (of different accounts): each is recorded, with its hold, only if its
    /// account's budget in force can carry it; `appended` are written with them. The outcomes,
    /// in `events`' order; or [`LedgerError::AdmissionContended`], with nothing written, when
    /// another admission of one of the accounts landed since the batch read it.
    async fn admit_batch(
        &self,
        events: &[&NodeEvent],
        appended: &[&NodeEvent],
    ) -> Result<Vec<HoldOutcome>, LedgerError> {
        debug_assert!(
            {
                let mut accounts: Vec<&str> = events.iter().map(|e| e.account.as_str()).collect();
                accounts.sort_unstable();
                accounts.dedup();
                accounts.len() == events.len()
            },
            "one event per account"
        );
        let mut conn = self.pool().acquire().await?;
        let BatchRead {
            budgets,
            latest,
            histories,
        } = self.read_batch(&mut conn, events).await?;
        let checked: Vec<(&NodeEvent, &Budget)> = events
            .iter()
            .filter_map(|e| Some((*e, budgets.get(e.account.as_str())?)))
            .collect();
        let at: Vec<(&Budget, Timestamp)> = checked.iter().map(|(e, b)| (*b, e.at)).collect();
        let standings = Self::standings(&mut conn, &at, &latest, &histories).await?;
        let standings: BTreeMap<&str, Standing> = checked
            .iter()
            .map(|(e, _)| e.account.as_str())
            .zip(standings)
            .collect();

        let mut decisions = Vec::with_capacity(events.len());
        for event in events {
            let history = histories
                .get(&event.node)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let key = event.key();
            if history.iter().any(|(_, e)| e.key() == key) {
                decisions.push(Decision::Recorded);
                continue;
            }
            let Some(Standing {
                standing,
                next,
                head,
            }) = standings.get(event.account.as_str()).cloned()
            else {
                decisions.push(Decision::Admitted(None));
                continue;
            };
            let node_history: Vec<&NodeEvent> = history.iter().map(|(_, e)| e).collect();
            let increment = admitted_increment(&node_history, event);
            if !standing.admits(increment) {
                decisions.push(Decision::OverBudget(standing));
                continue;
            }
            // The node's run begins with this event: after every event of its history so far
            // (a woken warm node's), and every later event of it gets a higher number.
            let run_starts = history.last().map_or(0, |(seq, _)| seq + 1);
            let next = checkpoint::admit(next, event, run_starts);
            decisions.push(Decision::Admitted(Some(CheckpointRow::new(
                event.account.as_str(),
                next,
                event.at,
                head,
            ))));
        }

        let mut written: Vec<&NodeEvent> = appended.to_vec();
        let mut checkpoints: Vec<CheckpointRow> = Vec::new();
        for (event, decision) in events.iter().zip(&decisions) {
            if let Decision::Admitted(checkpoint) = decision {
                written.push(event);
                checkpoints.extend(checkpoint.clone());
            }
        }
        for (account, seq) in self.write_admitted(conn, &written, &checkpoints).await? {
            if let Some(row) = checkpoints.iter().find(|c| c.account == account) {
                self.heads().remember(&account, seq, &row.checkpoint);
            }
        }
        if cfg!(debug_assertions) && !checkpoints.is_empty() {
            let mut conn = self.pool().acquire().await?;
            for ((_, budget), (_, now)) in checked.iter().zip(&at) {
                Self::check_against_history(&mut conn, budget, *now).await?;
            }
        }
        Ok(decisions
            .into_iter()
            .map(|d| match d {
                Decision::Recorded | Decision::Admitted(_) => HoldOutcome::Placed,
                Decision::OverBudget(standing) => HoldOutcome::OverBudget(standing),
            })
            .collect())
    }

    /// What a batch decides on. One statement reads each event's account's budget in force
    /// beside the histories it needs: each event's node (a replay shows there, a renewal
    /// replaces its node's hold, a woken node's new run starts after it) and each node open in
    /// the account's checkpoint at the head of its chain, as this process last wrote it
    /// ([`Heads`]). Only for an account whose head this process does not know are its latest
    /// checkpoint and open nodes read apart. A head that moved since (another process
    /// admitted) is found when the write meets the chain.
    async fn read_batch(
        &self,
        conn: &mut <D::Db as Database>::Connection,
        events: &[&NodeEvent],
    ) -> Result<BatchRead, LedgerError> {
        let accounts: Vec<&str> = events.iter().map(|e| e.account.as_str()).collect();
        let mut read = BatchRead {
            latest: self.heads().of(&accounts),
            ..BatchRead::default()
        };
        let mut nodes: BTreeMap<&NodeId, &str> = events
            .iter()
            .map(|e| (&e.node, e.account.as_str()))
            .collect();
        for (account, (_, checkpoint)) in &read.latest {
            nodes.extend(checkpoint.open.iter().map(|(n, _)| (n, account.as_str())));
        }
        let nodes: Vec<(&NodeId, &str)> = nodes.into_iter().take(IN_LIST_CHUNK).collect();
        for chunk in accounts.chunks(IN_LIST_CHUNK) {
            let probes =
                vec!["(SELECT MAX(seq) FROM budget_versions WHERE account = ?)"; chunk.len()];
            let mut query = Self::query(&format!(
                "SELECT b.account AS budget_account, b.period AS budget_period,
                        b.ceiling_micros AS budget_ceiling_micros,
                        b.soft_threshold_percent AS budget_soft_threshold_percent,
                        b.hard_action AS budget_hard_action, e.*
                 FROM budget_versions b
                 LEFT JOIN node_events e ON e.account = b.account AND e.node_id IN ({})
                 WHERE b.seq IN ({})",
                // An empty IN list is not SQL: NULL matches nothing.
                if nodes.is_empty() {
                    "NULL".to_string()
                } else {
                    dialect::params(nodes.len())
                },
                probes.join(", ")
            ));
            for (node, _) in &nodes {
                query = query.bind(node.0.as_str());
            }
            for account in chunk {
                query = query.bind(*account);
            }
            for row in query.fetch_all(&mut *conn).await? {
                let account: String = row.try_get("budget_account")?;
                if !read.budgets.contains_key(&account) {
                    let budget = Self::budget_of(&row, &account, "budget_")?;
                    read.budgets.insert(account.clone(), budget);
                }
                if let Some(seq) = row.try_get::<Option<i64>, _>("seq")? {
                    let event = Self::event_from_row(&row)?;
                    read.histories
                        .entry(event.node.clone())
                        .or_default()
                        .push((seq, event));
                }
            }
        }
        // Every node of an account with a budget was read, events or none.
        for (node, account) in &nodes {
            if read.budgets.contains_key(*account) {
                read.histories.entry((*node).clone()).or_default();
            }
        }
        // Heads this process does not know, of the accounts that have a budget.
        let unknown: Vec<&str> = read
            .budgets
            .keys()
            .map(String::as_str)
            .filter(|a| !read.latest.contains_key(*a))
            .collect();
        for chunk in unknown.chunks(IN_LIST_CHUNK) {
            let mut query = Self::query(&dialect::latest_per_account(
                "standing_checkpoints",
                chunk.len(),
            ));
            for account in chunk {
                query = query.bind(*account);
            }
            for row in query.fetch_all(&mut *conn).await? {
                read.latest.insert(
                    row.try_get("account")?,
                    (row.try_get("seq")?, Self::checkpoint_from_row(&row, "")?),
                );
            }
        }
        read.latest
            .retain(|account, _| read.budgets.contains_key(account));
        let budgeted: Vec<NodeId> = events
            .iter()
            .filter(|e| read.budgets.contains_key(e.account.as_str()))
            .map(|e| e.node.clone())
            .collect();
        // Usually nothing left: open nodes of the heads just read, or past the statement's list.
        Self::read_histories(conn, &read.latest, &budgeted, &mut read.histories).await?;
        Ok(read)
    }

    /// Writes admitted `events` and their accounts' next `checkpoints` so that all land or
    /// none: one statement where the database takes inserts in a `WITH` clause, else one
    /// transaction. Returns each checkpoint's account and sequence number, or
    /// [`LedgerError::AdmissionContended`] when a checkpoint's predecessor has a successor
    /// already.
    async fn write_admitted(
        &self,
        mut conn: sqlx::pool::PoolConnection<D::Db>,
        events: &[&NodeEvent],
        checkpoints: &[CheckpointRow<'_>],
    ) -> Result<Vec<(String, i64)>, LedgerError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = events.iter().map(|e| e.key()).collect();
        let events_insert = Self::events_insert(events.len());
        let checkpoints_insert = format!(
            "{} RETURNING account, seq",
            Self::checkpoints_insert(checkpoints.len())
        );
        let written = if checkpoints.is_empty() {
            Self::bind_events(Self::query(&events_insert), events, &keys)
                .execute(&mut *conn)
                .await
                .map(|_| Vec::new())
        } else if D::INSERTS_IN_WITH {
            let both = format!("WITH admitted AS ({events_insert}) {checkpoints_insert}");
            let query = Self::bind_events(Self::query(&both), events, &keys);
            Self::bind_checkpoints(query, checkpoints)
                .fetch_all(&mut *conn)
                .await
        } else {
            // The pool's connections are few (SQLite's): the transaction takes its own.
            drop(conn);
            let mut tx = dialect::begin_serialised::<D>(self.pool(), &[], 0).await?;
            let inserted = async {
                Self::bind_events(Self::query(&events_insert), events, &keys)
                    .execute(&mut *tx)
                    .await?;
                Self::bind_checkpoints(Self::query(&checkpoints_insert), checkpoints)
                    .fetch_all(&mut *tx)
                    .await
            }
            .await;
            match inserted {
                Ok(rows) => tx.commit().await.map(|()| rows),
                Err(e) => Err(e),
            }
        };
        match written {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                // Events are inserted with ON CONFLICT DO NOTHING: only the chain can collide.
                Err(LedgerError::AdmissionContended)
            }
            Err(e) => Err(e.into()),
            Ok(rows) => rows
                .iter()
                .map(|row| Ok((row.try_get("account")?, row.try_get("seq")?)))
                .collect(),
        }
    }
}
