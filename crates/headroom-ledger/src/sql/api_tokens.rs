//! The [`ApiTokens`] role: the API's bearer tokens made, read and revoked.

use async_trait::async_trait;
use headroom_core::Timestamp;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Type};

use super::{DbRow, SqlLedger};
use crate::dialect::Dialect;
use crate::{ApiToken, ApiTokens, LedgerError};

#[async_trait]
impl<D: Dialect> ApiTokens for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn create_token(&self, t: &ApiToken) -> Result<(), LedgerError> {
        Self::query(
            "INSERT INTO api_tokens (id, secret_sha256, accounts, scopes, {created}) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(t.id.as_str())
        .bind(t.secret_sha256.as_str())
        .bind(t.accounts.join(",").as_str())
        .bind(t.scopes.join(",").as_str())
        .bind(D::time(t.created_at))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn token(&self, id: &str) -> Result<Option<ApiToken>, LedgerError> {
        Ok(self.tokens_where(Some(id)).await?.into_iter().next())
    }

    async fn tokens(&self) -> Result<Vec<ApiToken>, LedgerError> {
        self.tokens_where(None).await
    }

    async fn revoke_token(&self, id: &str, now: Timestamp) -> Result<bool, LedgerError> {
        if self.token(id).await?.is_none() {
            return Ok(false);
        }
        Self::query(
            "INSERT INTO api_token_revocations (token_id, {at}) VALUES (?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(D::time(now))
        .execute(&self.pool)
        .await?;
        Ok(true)
    }
}
