//! The [`Budgets`] role: an account's budget versions and its standing.

use async_trait::async_trait;
use headroom_core::budget::BudgetStanding;
use headroom_core::{AccountName, Budget, Timestamp};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Type};

use super::{DbRow, SqlLedger};
use crate::dialect::Dialect;
use crate::{Budgets, LedgerError, NodeEvent};

#[async_trait]
impl<D: Dialect> Budgets for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn put_budget(&self, b: &Budget, at: Timestamp) -> Result<(), LedgerError> {
        Self::query(
            "INSERT INTO budget_versions (account, period, ceiling_micros, soft_threshold_percent, hard_action, {at})
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(b.account.as_str())
        .bind(b.period.as_str())
        .bind(b.ceiling.micros())
        .bind(D::int(u32::from(b.soft_threshold_percent)))
        .bind(b.hard_action.as_str())
        .bind(D::time(at))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn budgets(&self) -> Result<Vec<Budget>, LedgerError> {
        Self::query(
            "SELECT b.* FROM budget_versions b
             JOIN (SELECT account, MAX(seq) AS seq FROM budget_versions GROUP BY account) last
               ON b.seq = last.seq
             ORDER BY b.account",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(Self::budget_from_row)
        .collect()
    }

    async fn account_events(&self, account: &AccountName) -> Result<Vec<NodeEvent>, LedgerError> {
        self.events(
            Self::query("SELECT * FROM node_events WHERE account = ? ORDER BY seq")
                .bind(account.as_str()),
        )
        .await
    }

    async fn budget_standing(
        &self,
        budget: &Budget,
        now: Timestamp,
    ) -> Result<BudgetStanding, LedgerError> {
        let mut conn = self.pool.acquire().await?;
        Self::checkpointed_standings(&mut conn, &[(budget, now)])
            .await?
            .into_iter()
            .next()
            .map(|s| s.standing)
            .ok_or_else(|| LedgerError::Corrupt(format!("no standing for {}", budget.account)))
    }
}
