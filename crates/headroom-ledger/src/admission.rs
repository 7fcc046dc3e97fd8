//! Budget admissions in batches ([`crate::batch`]): concurrent [`crate::Ledger::place_hold`]
//! calls of different accounts share one transaction, which holds the admission locks of all
//! its accounts, reads their budgets, checkpoints and open nodes' histories in one statement
//! each, and writes the admitted events and their checkpoints in one statement each. One event
//! per account per batch, so every decision is the one the account would get alone, in the
//! order the events arrived.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use headroom_core::{AccountName, Budget};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use crate::batch::{Answer, Batched, WriteBatch};
use crate::dialect::{self, Dialect};
use crate::sql::{DbRow, IN_LIST_CHUNK, SqlLedger, admitted_increment};
use crate::{HoldOutcome, LedgerError, NodeEvent, checkpoint};

/// The advisory-lock seed of budget admissions (the outbox's is 0).
const ADMISSION_LOCK_SEED: i64 = 7;

impl Batched for NodeEvent {
    type Key = AccountName;
    type Answer = HoldOutcome;
    fn batch_key(&self) -> AccountName {
        self.account.clone()
    }
}

#[async_trait]
impl<D: Dialect> WriteBatch<NodeEvent> for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn write_batch(
        &self,
        events: &[&NodeEvent],
    ) -> Result<Vec<Answer<NodeEvent>>, LedgerError> {
        let outcomes = self.admit_batch(events).await?;
        Ok(outcomes.into_iter().map(Ok).collect())
    }
}

impl<D: Dialect> SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    /// [`crate::Ledger::place_hold`], in a batch. Run alone again when the caller running its
    /// batch went away: an event already recorded is `Placed` again, never admitted twice.
    pub(crate) async fn admit(&self, event: &NodeEvent) -> Answer<NodeEvent> {
        self.admissions().write(event.clone(), self).await
    }

    /// Admits `events` (of different accounts) in one transaction holding their accounts'
    /// admission locks: each is recorded, with its hold, only if its account's budget in force
    /// can carry it. The outcomes, in `events`' order.
    async fn admit_batch(&self, events: &[&NodeEvent]) -> Result<Vec<HoldOutcome>, LedgerError> {
        let mut accounts: Vec<&str> = events.iter().map(|e| e.account.as_str()).collect();
        accounts.sort_unstable();
        accounts.dedup();
        debug_assert_eq!(accounts.len(), events.len(), "one event per account");
        // Every statement below sees every admission of these accounts committed before.
        let mut tx =
            dialect::begin_serialised::<D>(self.pool(), &accounts, ADMISSION_LOCK_SEED).await?;
        let budgets = Self::budgets_of(&mut tx, &accounts).await?;
        let checked: Vec<(&NodeEvent, &Budget)> = events
            .iter()
            .filter_map(|e| Some((*e, budgets.get(e.account.as_str())?)))
            .collect();
        let renewed: Vec<&str> = checked
            .iter()
            .filter(|(e, _)| e.is_hold_renewal())
            .map(|(e, _)| e.node.0.as_str())
            .collect();
        let at: Vec<(&Budget, headroom_core::Timestamp)> =
            checked.iter().map(|(e, b)| (*b, e.at)).collect();
        let (standings, histories) =
            Self::checkpointed_standings(&mut tx, &at, &renewed, true).await?;
        let mut decided: BTreeMap<&str, (HoldOutcome, Option<checkpoint::Checkpoint>)> =
            BTreeMap::new();
        for ((event, _), (standing, next)) in checked.iter().zip(standings) {
            let increment = if event.is_hold_renewal() {
                let history: Vec<NodeEvent> = histories
                    .get(&event.node)
                    .into_iter()
                    .flatten()
                    .map(|(_, e)| e.clone())
                    .collect();
                admitted_increment(&history, event)
            } else {
                event.hold
            };
            let outcome = if standing.admits(increment) {
                (HoldOutcome::Placed, Some(next))
            } else {
                (HoldOutcome::OverBudget(standing), None)
            };
            decided.insert(event.account.as_str(), outcome);
        }
        // An event refused may be one recorded before (a write repeated after a lost
        // acknowledgement, its hold already counted): that one is placed, as it was. Only the
        // refused are looked up; the rest are written with ON CONFLICT DO NOTHING.
        let refused: Vec<&NodeEvent> = events
            .iter()
            .filter(|e| {
                decided
                    .get(e.account.as_str())
                    .is_some_and(|(o, _)| matches!(o, HoldOutcome::OverBudget(_)))
            })
            .copied()
            .collect();
        for key in Self::recorded_keys(&mut tx, &refused).await? {
            if let Some(e) = refused.iter().find(|e| e.key() == key) {
                decided.insert(e.account.as_str(), (HoldOutcome::Placed, None));
            }
        }
        // Written now: events of accounts without a budget, and those the budget admits.
        let admitted: Vec<&NodeEvent> = events
            .iter()
            .filter(|e| match decided.get(e.account.as_str()) {
                None => true,
                Some((HoldOutcome::Placed, next)) => next.is_some(),
                Some((HoldOutcome::OverBudget(_), _)) => false,
            })
            .copied()
            .collect();
        let seqs = Self::insert_events(&mut tx, &admitted).await?;
        let checkpoints: Vec<(&str, checkpoint::Checkpoint, headroom_core::Timestamp)> = admitted
            .iter()
            .filter_map(|e| {
                let seq = seqs.get(e.key().as_str())?;
                let (_, next) = decided.get(e.account.as_str())?;
                let next = checkpoint::admit(next.clone()?, e, *seq);
                Some((e.account.as_str(), next, e.at))
            })
            .collect();
        Self::append_checkpoints(&mut tx, &checkpoints).await?;
        tx.commit().await?;
        Ok(events
            .iter()
            .map(|e| match decided.remove(e.account.as_str()) {
                Some((outcome, _)) => outcome,
                None => HoldOutcome::Placed,
            })
            .collect())
    }

    /// Which of `events`' keys the ledger holds already.
    async fn recorded_keys(
        conn: &mut <D::Db as Database>::Connection,
        events: &[&NodeEvent],
    ) -> Result<BTreeSet<String>, LedgerError> {
        let keys: Vec<String> = events.iter().map(|e| e.key()).collect();
        let mut recorded = BTreeSet::new();
        for chunk in keys.chunks(IN_LIST_CHUNK) {
            let mut query = Self::query(&format!(
                "SELECT event_key FROM node_events WHERE event_key IN ({})",
                dialect::params(chunk.len())
            ));
            for key in chunk {
                query = query.bind(key.as_str());
            }
            for row in query.fetch_all(&mut *conn).await? {
                recorded.insert(row.try_get("event_key")?);
            }
        }
        Ok(recorded)
    }

    /// The budget in force of each of `accounts` that has one.
    async fn budgets_of(
        conn: &mut <D::Db as Database>::Connection,
        accounts: &[&str],
    ) -> Result<BTreeMap<String, Budget>, LedgerError> {
        let mut budgets = BTreeMap::new();
        for chunk in accounts.chunks(IN_LIST_CHUNK) {
            let mut query =
                Self::query(&dialect::latest_per_account("budget_versions", chunk.len()));
            for account in chunk {
                query = query.bind(*account);
            }
            for row in query.fetch_all(&mut *conn).await? {
                let budget = Self::budget_from_row(&row)?;
                budgets.insert(budget.account.as_str().to_string(), budget);
            }
        }
        Ok(budgets)
    }
}
