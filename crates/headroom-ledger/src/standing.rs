//! Budget standings read through standing checkpoints ([`crate::checkpoint`]): the latest
//! checkpoint row of the account and the histories of its open nodes, never the account's whole
//! history (but once, to seed an account's first checkpoint or a changed period's).

use std::collections::{BTreeMap, BTreeSet};

use headroom_core::budget::BudgetStanding;
use headroom_core::{Budget, NodeId, Timestamp};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use crate::checkpoint::{self, Checkpoint};
use crate::dialect::{self, Dialect};
use crate::sql::{DbRow, IN_LIST_CHUNK, SqlLedger, Statement};
use crate::{LedgerError, NodeEvent, derive};

type Connection<D> = <<D as Dialect>::Db as Database>::Connection;

/// Node histories with their sequence numbers, in ledger order, by node.
pub(crate) type Histories = BTreeMap<NodeId, Vec<(i64, NodeEvent)>>;

/// Each account's latest checkpoint, with its sequence number.
pub(crate) type Latest = BTreeMap<String, (i64, Checkpoint)>;

/// A checkpoint to append after an admission.
#[derive(Debug, Clone)]
pub(crate) struct CheckpointRow<'a> {
    pub(crate) account: &'a str,
    pub(crate) checkpoint: Checkpoint,
    /// `checkpoint.open` as stored.
    pub(crate) open: String,
    pub(crate) at: Timestamp,
    /// The checkpoint this one follows ([`Standing::head`]).
    pub(crate) prev: i64,
}

impl<'a> CheckpointRow<'a> {
    const COLUMNS: usize = 7;

    pub(crate) fn new(account: &'a str, checkpoint: Checkpoint, at: Timestamp, prev: i64) -> Self {
        let open = checkpoint::encode_open(&checkpoint.open);
        CheckpointRow {
            account,
            checkpoint,
            open,
            at,
            prev,
        }
    }
}

/// An account's budget standing as an admission reads it.
#[derive(Debug, Clone)]
pub(crate) struct Standing {
    pub(crate) standing: BudgetStanding,
    /// The checkpoint that holds after it, before anything is admitted.
    pub(crate) next: Checkpoint,
    /// The sequence number of the checkpoint it was read from (0: the account has none): the
    /// next checkpoint names it as the one it follows, so two admissions that read the same
    /// one cannot both land.
    pub(crate) head: i64,
}

impl<D: Dialect> SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    /// Rows of `node_events` with their sequence numbers, in the order `template` gives.
    async fn sequenced(
        conn: &mut Connection<D>,
        template: &str,
        binds: &[&str],
    ) -> Result<Vec<(i64, NodeEvent)>, LedgerError> {
        let mut query = Self::query(template);
        for b in binds {
            query = query.bind(*b);
        }
        query
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|row| Ok((row.try_get::<i64, _>("seq")?, Self::event_from_row(row)?)))
            .collect()
    }

    /// Each `budget`'s standing at its `now` (see [`Self::standings`]), read without an
    /// admission's shortcuts: one statement for every account's latest checkpoint and one for
    /// its open nodes' histories, however many budgets.
    pub(crate) async fn checkpointed_standings(
        conn: &mut Connection<D>,
        budgets: &[(&Budget, Timestamp)],
    ) -> Result<Vec<Standing>, LedgerError> {
        let accounts: Vec<&str> = budgets.iter().map(|(b, _)| b.account.as_str()).collect();
        let mut latest = Latest::new();
        for chunk in accounts.chunks(IN_LIST_CHUNK) {
            let mut query = Self::query(&dialect::latest_per_account(
                "standing_checkpoints",
                chunk.len(),
            ));
            for account in chunk {
                query = query.bind(*account);
            }
            for row in query.fetch_all(&mut *conn).await? {
                latest.insert(
                    row.try_get("account")?,
                    (row.try_get("seq")?, Self::checkpoint_from_row(&row, "")?),
                );
            }
        }
        let mut histories = Histories::new();
        Self::read_histories(conn, &latest, &[], &mut histories).await?;
        Self::standings(conn, budgets, &latest, &histories).await
    }

    /// Reads into `histories` the history of every node open in a checkpoint of `latest` and of
    /// each of `more_nodes` that it does not hold yet, in one statement.
    pub(crate) async fn read_histories(
        conn: &mut Connection<D>,
        latest: &Latest,
        more_nodes: &[NodeId],
        histories: &mut Histories,
    ) -> Result<(), LedgerError> {
        let missing: BTreeSet<&NodeId> = latest
            .values()
            .flat_map(|(_, c)| c.open.iter().map(|(n, _)| n))
            .chain(more_nodes)
            .filter(|n| !histories.contains_key(*n))
            .collect();
        let missing: Vec<&str> = missing.into_iter().map(|n| n.0.as_str()).collect();
        for chunk in missing.chunks(IN_LIST_CHUNK) {
            // No ORDER BY: sorted here, so no plan walks the whole table in `seq` order to
            // spare a sort of a few rows.
            let template = format!(
                "SELECT * FROM node_events WHERE node_id IN ({})",
                dialect::params(chunk.len())
            );
            for node in chunk {
                // Read, even when it has no events yet.
                histories.entry(NodeId(node.to_string())).or_default();
            }
            for (seq, e) in Self::sequenced(conn, &template, chunk).await? {
                histories.entry(e.node.clone()).or_default().push((seq, e));
            }
        }
        for history in histories.values_mut() {
            history.sort_by_key(|(seq, _)| *seq);
        }
        Ok(())
    }

    /// Each `budget`'s standing at its `now` from its account's latest checkpoint (if any) and
    /// `histories`, which hold every node open in it: advanced over the open runs, or seeded
    /// from the account's whole history (read here) when it has no checkpoint for its
    /// budget's period yet.
    pub(crate) async fn standings(
        conn: &mut Connection<D>,
        budgets: &[(&Budget, Timestamp)],
        latest: &Latest,
        histories: &Histories,
    ) -> Result<Vec<Standing>, LedgerError> {
        let mut standings = Vec::with_capacity(budgets.len());
        for (budget, now) in budgets {
            let latest = latest.get(budget.account.as_str());
            // The chain goes on across periods: a new period's first checkpoint follows the
            // last one of the period before.
            let head = latest.map_or(0, |(seq, _)| *seq);
            let advanced =
                latest.and_then(|(_, latest)| checkpoint::advance(latest, budget, histories, *now));
            let (standing, next) = match advanced {
                Some(advanced) => advanced,
                None => {
                    let events = Self::sequenced(
                        conn,
                        "SELECT * FROM node_events WHERE account = ? ORDER BY seq",
                        &[budget.account.as_str()],
                    )
                    .await?;
                    checkpoint::seed(&events, budget, *now)
                }
            };
            standings.push(Standing {
                standing,
                next,
                head,
            });
        }
        Ok(standings)
    }

    /// In debug builds: the account's latest checkpoint advanced over its history gives the
    /// standing derived from the whole history, to the micro-dollar. Both are read in one
    /// statement, so writes of other callers or processes cannot skew the comparison.
    pub(crate) async fn check_against_history(
        conn: &mut Connection<D>,
        budget: &Budget,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        if !cfg!(debug_assertions) {
            return Ok(());
        }
        // Every event of the account, each beside the latest checkpoint's columns (node_events
        // has none of those names).
        let rows = Self::query(
            "SELECT e.*, c.period, c.{period_start}, c.settled_micros, c.open_nodes
             FROM node_events e, standing_checkpoints c
             WHERE e.account = ?
               AND c.seq = (SELECT MAX(seq) FROM standing_checkpoints WHERE account = ?)
             ORDER BY e.seq",
        )
        .bind(budget.account.as_str())
        .bind(budget.account.as_str())
        .fetch_all(&mut *conn)
        .await?;
        let Some(first) = rows.first() else {
            return Ok(());
        };
        let checkpoint = Self::checkpoint_from_row(first, "")?;
        let mut events = Vec::with_capacity(rows.len());
        let mut histories = Histories::new();
        for row in &rows {
            let (seq, e) = (row.try_get::<i64, _>("seq")?, Self::event_from_row(row)?);
            if checkpoint.open.iter().any(|(n, _)| n == &e.node) {
                histories
                    .entry(e.node.clone())
                    .or_default()
                    .push((seq, e.clone()));
            }
            events.push(e);
        }
        let derived = derive::standing(&events, budget, now);
        if let Some((standing, _)) = checkpoint::advance(&checkpoint, budget, &histories, now) {
            debug_assert_eq!(
                (standing.spent, standing.held),
                (derived.spent, derived.held),
                "checkpointed standing of {} drifted from its history",
                budget.account
            );
        }
        Ok(())
    }

    /// The statement that appends `rows` checkpoints, for [`Self::bind_checkpoints`].
    pub(crate) fn checkpoints_insert(rows: usize) -> String {
        format!(
            "INSERT INTO standing_checkpoints
                 (account, period, {{period_start}}, settled_micros, open_nodes, {{at}}, prev_seq)
             VALUES {}",
            dialect::rows(rows, CheckpointRow::COLUMNS)
        )
    }

    /// `query` ([`Self::checkpoints_insert`]) bound with `rows`.
    pub(crate) fn bind_checkpoints<'q>(
        mut query: Statement<'q, D>,
        rows: &'q [CheckpointRow<'q>],
    ) -> Statement<'q, D> {
        for row in rows {
            query = query
                .bind(row.account)
                .bind(row.checkpoint.period.as_str())
                .bind(D::time(row.checkpoint.period_start))
                .bind(row.checkpoint.settled.micros())
                .bind(row.open.as_str())
                .bind(D::time(row.at))
                .bind(row.prev);
        }
        query
    }
}
