//! Capacity requests recorded in batches ([`crate::batch`]): concurrent
//! [`crate::Requests::record_capacity_request`] calls share one `INSERT` (one commit), and those
//! that meet a row already there share one lookup. One request per idempotency key per batch, so
//! a second request with a key always finds the first committed.

use std::collections::BTreeSet;

use async_trait::async_trait;
use headroom_core::{CapacityRequest, RequestId};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Row, Type};

use crate::batch::{Answer, BYTES_PER_VALUE, Batched, WriteBatch};
use crate::dialect::{self, Dialect};
use crate::sql::{DbRow, SqlLedger};
use crate::{IdempotencyKey, LedgerError, NewCapacityRequest};

/// A capacity request about to be recorded: its id is chosen before the write, so a write done
/// again after a lost answer finds its own row instead of adding a second.
#[derive(Debug, Clone)]
pub(crate) struct RequestWrite {
    new: NewCapacityRequest,
    request: CapacityRequest,
    stored_key: Option<String>,
}

impl RequestWrite {
    fn new(new: &NewCapacityRequest, id: RequestId) -> Self {
        RequestWrite {
            new: new.clone(),
            request: CapacityRequest {
                id,
                pool: new.pool.clone(),
                replicas: new.replicas,
                priority: new.priority,
                idempotency_key: new.idempotency_key.as_ref().map(|k| k.key.clone()),
                created_at: new.at,
            },
            stored_key: new.idempotency_key.as_ref().map(IdempotencyKey::stored),
        }
    }
}

impl Batched for RequestWrite {
    /// The stored idempotency key; a request without one shares a batch with anything.
    type Key = String;
    type Answer = (CapacityRequest, bool);
    fn batch_keys(&self) -> impl IntoIterator<Item = String> {
        [self
            .stored_key
            .clone()
            .unwrap_or_else(|| format!("\u{0}{}", self.request.id.0))]
    }
    fn bytes(&self) -> usize {
        // Six values: the id, names and key, three numbers.
        let text = self.request.id.0.len()
            + self.request.pool.as_str().len()
            + self.request.priority.as_str().len()
            + self.stored_key.as_ref().map_or(0, String::len);
        text + 6 * BYTES_PER_VALUE + 3 * 8
    }
}

#[async_trait]
impl<D: Dialect> WriteBatch<RequestWrite> for SqlLedger<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a> &'a str: ColumnIndex<DbRow<D>> + Encode<'a, D::Db> + Type<D::Db>,
    for<'a> Option<&'a str>: Encode<'a, D::Db>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'q> Encode<'q, D::Db> + for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn write_batch(
        &self,
        writes: &[&RequestWrite],
    ) -> Result<Vec<Answer<RequestWrite>>, LedgerError> {
        self.record_requests(writes).await
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
    /// [`crate::Requests::record_capacity_request`], in a batch.
    pub(crate) async fn record_request(&self, new: &NewCapacityRequest) -> Answer<RequestWrite> {
        self.request_writes()
            .write(RequestWrite::new(new, self.ids().request_id()), self)
            .await
    }

    /// Inserts `writes` in one statement; each answer is its request and whether it was
    /// created, or the request that holds its idempotency key (the same one again), or a
    /// conflict when that request differs.
    async fn record_requests(
        &self,
        writes: &[&RequestWrite],
    ) -> Result<Vec<Answer<RequestWrite>>, LedgerError> {
        const COLUMNS: usize = 6;

        // ON CONFLICT makes two concurrent requests with one key resolve to one row.
        let mut insert = Self::query(&format!(
            "INSERT INTO capacity_requests (id, pool, replicas, priority, idempotency_key, {{created_at}})
             VALUES {}
             ON CONFLICT DO NOTHING
             RETURNING id",
            dialect::rows(writes.len(), COLUMNS)
        ));
        for w in writes {
            insert = insert
                .bind(w.request.id.0.as_str())
                .bind(w.request.pool.as_str())
                .bind(D::int(w.request.replicas))
                .bind(w.request.priority.as_str())
                .bind(w.stored_key.as_deref())
                .bind(D::time(w.request.created_at));
        }
        let mut inserted = BTreeSet::new();
        for row in insert.fetch_all(self.pool()).await? {
            inserted.insert(row.try_get::<String, _>("id")?);
        }
        let missed: Vec<&&RequestWrite> = writes
            .iter()
            .filter(|w| !inserted.contains(&w.request.id.0))
            .collect();
        // Rows already there: this write's own (written before its answer was lost), or the
        // request that holds its key.
        let mut existing = Vec::new();
        if !missed.is_empty() {
            let keys: Vec<&str> = missed
                .iter()
                .filter_map(|w| w.stored_key.as_deref())
                .collect();
            let mut lookup = Self::query(&format!(
                "SELECT * FROM capacity_requests WHERE id IN ({}) OR idempotency_key IN ({})",
                dialect::params(missed.len()),
                // An empty IN list is not SQL: NULL matches nothing.
                if keys.is_empty() {
                    "NULL".to_string()
                } else {
                    dialect::params(keys.len())
                }
            ));
            for w in &missed {
                lookup = lookup.bind(w.request.id.0.as_str());
            }
            for key in &keys {
                lookup = lookup.bind(*key);
            }
            for row in lookup.fetch_all(self.pool()).await? {
                let stored: Option<String> = row.try_get("idempotency_key")?;
                existing.push((stored, Self::request_from_row(&row)?));
            }
        }
        Ok(writes
            .iter()
            .map(|w| {
                if inserted.contains(&w.request.id.0) {
                    return Ok((w.request.clone(), true));
                }
                if let Some((_, own)) = existing.iter().find(|(_, r)| r.id == w.request.id) {
                    return Ok((own.clone(), true));
                }
                let holder = existing
                    .iter()
                    .find(|(stored, _)| stored.is_some() && *stored == w.stored_key)
                    .map(|(_, r)| r.clone())
                    .ok_or_else(|| {
                        LedgerError::Corrupt(format!(
                            "capacity request {} was neither written nor found",
                            w.request.id.0
                        ))
                    })?;
                let same = holder.pool == w.new.pool
                    && holder.replicas == w.new.replicas
                    && holder.priority == w.new.priority;
                if same {
                    Ok((holder, false))
                } else {
                    Err(LedgerError::IdempotencyConflict {
                        key: holder.idempotency_key.unwrap_or_default(),
                        existing: holder.id,
                    })
                }
            })
            .collect())
    }
}
