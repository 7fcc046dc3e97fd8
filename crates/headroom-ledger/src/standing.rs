//! Budget standings read through standing checkpoints ([`crate::checkpoint`]): the latest
//! checkpoint row of the account and the histories of its open nodes, never the account's whole
//! history (but once, to seed an account's first checkpoint or a changed period's).

use std::collections::BTreeMap;

use headroom_core::budget::BudgetStanding;
use headroom_core::{Budget, NodeId, Timestamp};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use crate::checkpoint::{self, Checkpoint};
use crate::dialect::{self, Dialect};
use crate::sql::{DbRow, IN_LIST_CHUNK, SqlLedger};
use crate::{LedgerError, NodeEvent, derive};

type Connection<D> = <<D as Dialect>::Db as Database>::Connection;

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

    /// `budget`'s standing at `now` and the checkpoint that holds after it: from the latest
    /// checkpoint and the open nodes' histories, or seeded from the whole history when the
    /// account has no checkpoint for its budget's period yet. `serialised` when `conn` holds the
    /// account's admission lock (no other admission can interleave: debug builds then check the
    /// result against the whole history).
    pub(crate) async fn checkpointed_standing(
        conn: &mut Connection<D>,
        budget: &Budget,
        now: Timestamp,
        serialised: bool,
    ) -> Result<(BudgetStanding, Checkpoint), LedgerError> {
        let account = budget.account.as_str();
        let latest = Self::query(
            "SELECT * FROM standing_checkpoints WHERE account = ? ORDER BY seq DESC LIMIT 1",
        )
        .bind(account)
        .fetch_optional(&mut *conn)
        .await?
        .map(|row| Self::checkpoint_from_row(&row))
        .transpose()?;
        if let Some(latest) = latest {
            let nodes: Vec<&str> = latest.open.iter().map(|(n, _)| n.0.as_str()).collect();
            let mut histories: BTreeMap<NodeId, Vec<(i64, NodeEvent)>> = BTreeMap::new();
            for chunk in nodes.chunks(IN_LIST_CHUNK) {
                let template = format!(
                    "SELECT * FROM node_events WHERE node_id IN ({}) ORDER BY seq",
                    dialect::params(chunk.len())
                );
                for (seq, e) in Self::sequenced(conn, &template, chunk).await? {
                    histories.entry(e.node.clone()).or_default().push((seq, e));
                }
            }
            if let Some(advanced) = checkpoint::advance(&latest, budget, &histories, now) {
                if serialised {
                    Self::check_against_history(conn, budget, now, &latest).await?;
                }
                return Ok(advanced);
            }
        }
        let events = Self::sequenced(
            conn,
            "SELECT * FROM node_events WHERE account = ? ORDER BY seq",
            &[account],
        )
        .await?;
        Ok(checkpoint::seed(&events, budget, now))
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
        let mut histories: BTreeMap<NodeId, Vec<(i64, NodeEvent)>> = BTreeMap::new();
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

    /// Appends the checkpoint that holds after an admission.
    pub(crate) async fn append_checkpoint(
        conn: &mut Connection<D>,
        account: &str,
        checkpoint: &Checkpoint,
        at: Timestamp,
    ) -> Result<(), LedgerError> {
        Self::query(
            "INSERT INTO standing_checkpoints (account, period, {period_start}, settled_micros, open_nodes, {at})
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(account)
        .bind(checkpoint.period.as_str())
        .bind(D::time(checkpoint.period_start))
        .bind(checkpoint.settled.micros())
        .bind(checkpoint::encode_open(&checkpoint.open).as_str())
        .bind(D::time(at))
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}
