//! Budget standings read through standing checkpoints ([`crate::checkpoint`]): the latest
//! checkpoint row of the account and the histories of its open nodes, never the account's whole
//! history (but once, to seed an account's first checkpoint or a changed period's).

use std::collections::{BTreeMap, BTreeSet};

use headroom_core::budget::BudgetStanding;
use headroom_core::{Budget, NodeId, Timestamp};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use crate::checkpoint::{self, Checkpoint};
use crate::dialect::{self, Dialect};
use crate::sql::{DbRow, IN_LIST_CHUNK, SqlLedger};
use crate::{LedgerError, NodeEvent, derive};

type Connection<D> = <<D as Dialect>::Db as Database>::Connection;

/// Node histories with their sequence numbers, in ledger order, by node.
pub(crate) type Histories = BTreeMap<NodeId, Vec<(i64, NodeEvent)>>;

impl<D: Dialect> SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    /// Rows of `node_events` with their sequence numbers, in ledger order.
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

    /// Each `budget`'s standing at its `now` and the checkpoint that holds after it: from the
    /// account's latest checkpoint and its open nodes' histories, or seeded from the account's
    /// whole history when it has no checkpoint for its budget's period yet. Also returns the
    /// histories read, with those of `more_nodes` (renewed nodes, whose holds an admission
    /// replaces). One statement for every account's checkpoint and one for every open node's
    /// history, however many budgets. `serialised` when `conn` holds the accounts' admission
    /// locks (no other admission can interleave: debug builds then check each result against
    /// the whole history).
    pub(crate) async fn checkpointed_standings(
        conn: &mut Connection<D>,
        budgets: &[(&Budget, Timestamp)],
        more_nodes: &[&str],
        serialised: bool,
    ) -> Result<(Vec<(BudgetStanding, Checkpoint)>, Histories), LedgerError> {
        let accounts: Vec<&str> = budgets.iter().map(|(b, _)| b.account.as_str()).collect();
        let mut latest: BTreeMap<String, Checkpoint> = BTreeMap::new();
        for chunk in accounts.chunks(IN_LIST_CHUNK) {
            let mut query = Self::query(&dialect::latest_per_account(
                "standing_checkpoints",
                chunk.len(),
            ));
            for account in chunk {
                query = query.bind(*account);
            }
            for row in query.fetch_all(&mut *conn).await? {
                latest.insert(row.try_get("account")?, Self::checkpoint_from_row(&row)?);
            }
        }
        let nodes: BTreeSet<&str> = latest
            .values()
            .flat_map(|c| c.open.iter().map(|(n, _)| n.0.as_str()))
            .chain(more_nodes.iter().copied())
            .collect();
        let nodes: Vec<&str> = nodes.into_iter().collect();
        let mut histories = Histories::new();
        for chunk in nodes.chunks(IN_LIST_CHUNK) {
            let template = format!(
                "SELECT * FROM node_events WHERE node_id IN ({}) ORDER BY seq",
                dialect::params(chunk.len())
            );
            for (seq, e) in Self::sequenced(conn, &template, chunk).await? {
                histories.entry(e.node.clone()).or_default().push((seq, e));
            }
        }
        let mut standings = Vec::with_capacity(budgets.len());
        for (budget, now) in budgets {
            let advanced = latest.get(budget.account.as_str()).and_then(|latest| {
                checkpoint::advance(latest, budget, &histories, *now).map(|a| (latest, a))
            });
            if let Some((latest, advanced)) = advanced {
                if serialised {
                    Self::check_against_history(conn, budget, *now, latest).await?;
                }
                standings.push(advanced);
                continue;
            }
            let events = Self::sequenced(
                conn,
                "SELECT * FROM node_events WHERE account = ? ORDER BY seq",
                &[budget.account.as_str()],
            )
            .await?;
            standings.push(checkpoint::seed(&events, budget, *now));
        }
        Ok((standings, histories))
    }

    /// In debug builds: `checkpoint` advanced over the account's whole history (read in one
    /// statement, so other processes' writes cannot skew the comparison) gives the standing
    /// derived from that history, to the micro-dollar.
    async fn check_against_history(
        conn: &mut Connection<D>,
        budget: &Budget,
        now: Timestamp,
        checkpoint: &Checkpoint,
    ) -> Result<(), LedgerError> {
        if !cfg!(debug_assertions) {
            return Ok(());
        }
        let events = Self::sequenced(
            conn,
            "SELECT * FROM node_events WHERE account = ? ORDER BY seq",
            &[budget.account.as_str()],
        )
        .await?;
        let mut histories = Histories::new();
        for (seq, e) in &events {
            if checkpoint.open.iter().any(|(n, _)| n == &e.node) {
                histories
                    .entry(e.node.clone())
                    .or_default()
                    .push((*seq, e.clone()));
            }
        }
        let plain: Vec<NodeEvent> = events.into_iter().map(|(_, e)| e).collect();
        let derived = derive::standing(&plain, budget, now);
        if let Some((standing, _)) = checkpoint::advance(checkpoint, budget, &histories, now) {
            debug_assert_eq!(
                (standing.spent, standing.held),
                (derived.spent, derived.held),
                "checkpointed standing of {} drifted from its history",
                budget.account
            );
        }
        Ok(())
    }

    /// Appends the checkpoints that hold after admissions (account, checkpoint, time), in one
    /// statement.
    pub(crate) async fn append_checkpoints(
        conn: &mut Connection<D>,
        rows: &[(&str, Checkpoint, Timestamp)],
    ) -> Result<(), LedgerError> {
        const COLUMNS: usize = 6;
        for chunk in rows.chunks(IN_LIST_CHUNK / COLUMNS) {
            let mut query = Self::query(&format!(
                "INSERT INTO standing_checkpoints (account, period, {{period_start}}, settled_micros, open_nodes, {{at}})
                 VALUES {}",
                dialect::rows(chunk.len(), COLUMNS)
            ));
            let opens: Vec<String> = chunk
                .iter()
                .map(|(_, checkpoint, _)| checkpoint::encode_open(&checkpoint.open))
                .collect();
            for ((account, checkpoint, at), open) in chunk.iter().zip(&opens) {
                query = query
                    .bind(*account)
                    .bind(checkpoint.period.as_str())
                    .bind(D::time(checkpoint.period_start))
                    .bind(checkpoint.settled.micros())
                    .bind(open.as_str())
                    .bind(D::time(*at));
            }
            query.execute(&mut *conn).await?;
        }
        Ok(())
    }
}
