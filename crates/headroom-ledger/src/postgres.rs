//! The production ledger: PostgreSQL through sqlx.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use headroom_core::planner::Destination;
use headroom_core::{
    AccountName, Budget, BudgetPeriod, CapacityRequest, HardAction, Market, Money, NodeId,
    NodeState, PoolName, Priority, ProviderKind, RefusalReason, RequestId, RequestState, Timestamp,
};
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::{Postgres, Row};

use crate::{
    Admission, Ledger, LedgerError, LedgerSummary, NewCapacityRequest, NodeEvent, RefusalRecord,
    RequestOutcome, derive, new_request_id,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

/// The PostgreSQL ledger. Several Headroom processes may share one database.
#[derive(Debug)]
pub struct PostgresLedger {
    pool: PgPool,
    url: String,
    leases: tokio::sync::Mutex<Leases>,
}

/// Pool leases are session advisory locks held on one dedicated connection: if the process
/// dies, the server drops the connection and the locks with it, and another replica takes the
/// pools on its next tick.
#[derive(Debug, Default)]
struct Leases {
    connection: Option<sqlx::PgConnection>,
    owned: BTreeSet<PoolName>,
}

fn parse<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<T, LedgerError> {
    r.map_err(|e| LedgerError::Corrupt(e.to_string()))
}

fn corrupt(what: &str, value: &str) -> LedgerError {
    LedgerError::Corrupt(format!("{what} {value:?}"))
}

fn request_from_row(row: &PgRow) -> Result<CapacityRequest, LedgerError> {
    Ok(CapacityRequest {
        id: RequestId(row.try_get("id")?),
        pool: parse(row.try_get::<String, _>("pool")?.parse())?,
        replicas: row.try_get::<i32, _>("replicas")? as u32,
        priority: parse(Priority::parse(&row.try_get::<String, _>("priority")?))?,
        idempotency_key: row.try_get("idempotency_key")?,
        created_at: row.try_get("created_at")?,
    })
}

fn event_from_row(row: &PgRow) -> Result<NodeEvent, LedgerError> {
    let provider: String = row.try_get("provider")?;
    let market: String = row.try_get("market")?;
    let destination: String = row.try_get("destination")?;
    Ok(NodeEvent {
        node: NodeId(row.try_get("node_id")?),
        pool: parse(row.try_get::<String, _>("pool")?.parse())?,
        account: parse(row.try_get::<String, _>("account")?.parse())?,
        offering: parse(row.try_get::<String, _>("offering_id")?.parse())?,
        provider: match provider.as_str() {
            "sim" => ProviderKind::Sim,
            "aws" => ProviderKind::Aws,
            "gcp" => ProviderKind::Gcp,
            other => return Err(corrupt("provider", other)),
        },
        region: row.try_get("region")?,
        zone: row.try_get("zone")?,
        instance_type: row.try_get("instance_type")?,
        market: Market::parse(&market).ok_or_else(|| corrupt("market", &market))?,
        request: row
            .try_get::<Option<String>, _>("request_id")?
            .map(RequestId),
        destination: Destination::parse(&destination)
            .ok_or_else(|| corrupt("destination", &destination))?,
        state: parse(NodeState::parse(&row.try_get::<String, _>("state")?))?,
        instance: row.try_get("instance_id")?,
        client_token: row.try_get("client_token")?,
        price_usd_per_hour: Money::from_micros(row.try_get("price_micros")?),
        gpus: row.try_get::<i32, _>("gpus")? as u32,
        hold: Money::from_micros(row.try_get("hold_micros")?),
        reason: row.try_get("reason")?,
        at: row.try_get("at")?,
    })
}

fn refusal_from_row(row: &PgRow) -> Result<RefusalRecord, LedgerError> {
    let reason: String = row.try_get("reason")?;
    Ok(RefusalRecord {
        pool: parse(row.try_get::<String, _>("pool")?.parse())?,
        request: row
            .try_get::<Option<String>, _>("request_id")?
            .map(RequestId),
        node: row.try_get::<Option<String>, _>("node_id")?.map(NodeId),
        offering: row
            .try_get::<Option<String>, _>("offering_id")?
            .map(|o| parse(o.parse()))
            .transpose()?,
        replicas: row.try_get::<i32, _>("replicas")? as u32,
        reason: RefusalReason::parse(&reason).ok_or_else(|| corrupt("refusal reason", &reason))?,
        detail: row.try_get("detail")?,
        at: row.try_get("at")?,
    })
}

fn budget_from_row(row: &PgRow) -> Result<Budget, LedgerError> {
    let period: String = row.try_get("period")?;
    let hard: String = row.try_get("hard_action")?;
    Ok(Budget {
        account: parse(row.try_get::<String, _>("account")?.parse())?,
        period: BudgetPeriod::parse(&period).ok_or_else(|| corrupt("budget period", &period))?,
        ceiling: Money::from_micros(row.try_get("ceiling_micros")?),
        soft_threshold_percent: row.try_get::<i32, _>("soft_threshold_percent")? as u8,
        hard_action: HardAction::parse(&hard).ok_or_else(|| corrupt("hard action", &hard))?,
    })
}

async fn insert_event<'c, E>(executor: E, e: &NodeEvent) -> Result<(), LedgerError>
where
    E: sqlx::Executor<'c, Database = Postgres>,
{
    sqlx::query(
        "INSERT INTO node_events (node_id, pool, account, offering_id, provider, region, zone,
            instance_type, market, request_id, destination, state, instance_id, client_token,
            price_micros, gpus, hold_micros, reason, at, event_key)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
         ON CONFLICT DO NOTHING",
    )
    .bind(&e.node.0)
    .bind(e.pool.as_str())
    .bind(e.account.as_str())
    .bind(e.offering.as_str())
    .bind(e.provider.as_str())
    .bind(&e.region)
    .bind(&e.zone)
    .bind(&e.instance_type)
    .bind(e.market.as_str())
    .bind(e.request.as_ref().map(|r| r.0.as_str()))
    .bind(e.destination.as_str())
    .bind(e.state.as_str())
    .bind(&e.instance)
    .bind(&e.client_token)
    .bind(e.price_usd_per_hour.micros())
    .bind(e.gpus as i32)
    .bind(e.hold.micros())
    .bind(&e.reason)
    .bind(e.at)
    .bind(e.key())
    .execute(executor)
    .await?;
    Ok(())
}

impl PostgresLedger {
    /// Connects to `url` (`postgres://…`) and applies migrations.
    pub async fn connect(url: &str) -> Result<PostgresLedger, LedgerError> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|source| LedgerError::Open {
                url: redact(url),
                source,
            })?;
        MIGRATOR.run(&pool).await?;
        Ok(PostgresLedger {
            pool,
            url: url.to_string(),
            leases: tokio::sync::Mutex::new(Leases::default()),
        })
    }

    async fn tokens_where(&self, id: Option<&str>) -> Result<Vec<crate::ApiToken>, LedgerError> {
        let rows = sqlx::query(
            "SELECT t.*, r.at AS revoked FROM api_tokens t
             LEFT JOIN api_token_revocations r ON r.token_id = t.id
             WHERE $1::TEXT IS NULL OR t.id = $2
             ORDER BY t.created, t.id",
        )
        .bind(id)
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        let split = |s: String| -> Vec<String> {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect()
        };
        rows.iter()
            .map(|row| {
                Ok(crate::ApiToken {
                    id: row.try_get("id")?,
                    secret_sha256: row.try_get("secret_sha256")?,
                    accounts: split(row.try_get("accounts")?),
                    scopes: split(row.try_get("scopes")?),
                    created_at: row.try_get("created")?,
                    revoked_at: row.try_get::<Option<Timestamp>, _>("revoked")?,
                })
            })
            .collect()
    }

    async fn outcome(&self, request: CapacityRequest) -> Result<RequestOutcome, LedgerError> {
        let delivered: i64 = sqlx::query_scalar(
            "SELECT COUNT(DISTINCT node_id) FROM node_events WHERE request_id = $1 AND state = 'serving'",
        )
        .bind(&request.id.0)
        .fetch_one(&self.pool)
        .await?;
        let cancelled: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM request_cancellations WHERE request_id = $1")
                .bind(&request.id.0)
                .fetch_one(&self.pool)
                .await?;
        let refusals = sqlx::query("SELECT * FROM refusals WHERE request_id = $1 ORDER BY seq")
            .bind(&request.id.0)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(refusal_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let closed = refusals.iter().any(|r| r.reason.closes_request());
        let delivered = (delivered as u32).min(request.replicas);
        Ok(RequestOutcome {
            state: RequestState::derive(request.replicas, delivered, closed, cancelled > 0),
            delivered,
            refusals,
            request,
        })
    }
}

/// A database URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

#[async_trait]
impl Ledger for PostgresLedger {
    async fn record_capacity_request(
        &self,
        new: &NewCapacityRequest,
    ) -> Result<(CapacityRequest, bool), LedgerError> {
        let request = CapacityRequest {
            id: new_request_id(),
            pool: new.pool.clone(),
            replicas: new.replicas,
            priority: new.priority,
            idempotency_key: new.idempotency_key.clone(),
            created_at: new.at,
        };
        // ON CONFLICT makes two concurrent requests with one key resolve to one row.
        let inserted = sqlx::query(
            "INSERT INTO capacity_requests (id, pool, replicas, priority, idempotency_key, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (idempotency_key) DO NOTHING",
        )
        .bind(&request.id.0)
        .bind(request.pool.as_str())
        .bind(request.replicas as i32)
        .bind(request.priority.as_str())
        .bind(&request.idempotency_key)
        .bind(request.created_at)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if inserted == 1 {
            return Ok((request, true));
        }
        let key = new.idempotency_key.clone().unwrap_or_default();
        let row = sqlx::query("SELECT * FROM capacity_requests WHERE idempotency_key = $1")
            .bind(&key)
            .fetch_one(&self.pool)
            .await?;
        let existing = request_from_row(&row)?;
        let same = existing.pool == new.pool
            && existing.replicas == new.replicas
            && existing.priority == new.priority;
        if same {
            Ok((existing, false))
        } else {
            Err(LedgerError::IdempotencyConflict {
                key,
                existing: existing.id,
            })
        }
    }

    async fn cancel_capacity_request(
        &self,
        id: &RequestId,
        at: Timestamp,
    ) -> Result<RequestOutcome, LedgerError> {
        let row = sqlx::query("SELECT * FROM capacity_requests WHERE id = $1")
            .bind(&id.0)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| LedgerError::UnknownRequest(id.clone()))?;
        sqlx::query(
            "INSERT INTO request_cancellations (request_id, at) VALUES ($1, $2)
             ON CONFLICT (request_id) DO NOTHING",
        )
        .bind(&id.0)
        .bind(at)
        .execute(&self.pool)
        .await?;
        self.outcome(request_from_row(&row)?).await
    }

    async fn capacity_request(
        &self,
        id: &RequestId,
    ) -> Result<Option<RequestOutcome>, LedgerError> {
        let row = sqlx::query("SELECT * FROM capacity_requests WHERE id = $1")
            .bind(&id.0)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(row) => Ok(Some(self.outcome(request_from_row(&row)?).await?)),
            None => Ok(None),
        }
    }

    async fn capacity_requests_between(
        &self,
        pool: &PoolName,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<RequestOutcome>, LedgerError> {
        let rows = sqlx::query(
            "SELECT * FROM capacity_requests WHERE pool = $1 AND created_at >= $2 AND created_at < $3 ORDER BY created_at, id",
        )
        .bind(pool.as_str())
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        let mut outcomes = Vec::with_capacity(rows.len());
        for row in &rows {
            outcomes.push(self.outcome(request_from_row(row)?).await?);
        }
        Ok(outcomes)
    }

    async fn refusals_between(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<RefusalRecord>, LedgerError> {
        sqlx::query("SELECT * FROM refusals WHERE at >= $1 AND at < $2 ORDER BY seq")
            .bind(from)
            .bind(to)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(refusal_from_row)
            .collect()
    }

    async fn pool_events(&self, pool: &PoolName) -> Result<Vec<NodeEvent>, LedgerError> {
        sqlx::query("SELECT * FROM node_events WHERE pool = $1 ORDER BY seq")
            .bind(pool.as_str())
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn open_capacity_requests(&self) -> Result<Vec<CapacityRequest>, LedgerError> {
        // The closing reasons come from the core, so a reason added there closes here too.
        let closing = RefusalReason::closing_codes();
        let marks: Vec<String> = (0..closing.len()).map(|i| format!("${}", i + 1)).collect();
        let sql = format!(
            "SELECT * FROM capacity_requests r
             WHERE NOT EXISTS (SELECT 1 FROM request_cancellations c WHERE c.request_id = r.id)
               AND NOT EXISTS (SELECT 1 FROM refusals f WHERE f.request_id = r.id
                               AND f.reason IN ({}))
             ORDER BY created_at, id",
            marks.join(", ")
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for code in &closing {
            query = query.bind(code);
        }
        query
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(request_from_row)
            .collect()
    }

    async fn append_node_event(&self, e: &NodeEvent) -> Result<(), LedgerError> {
        insert_event(&self.pool, e).await
    }

    async fn admit_node_event(&self, event: &NodeEvent) -> Result<Admission, LedgerError> {
        let mut tx = self.pool.begin().await?;
        // One admission per account at a time, across every process sharing the database. The
        // lock ends with the transaction. Under READ COMMITTED each statement below then sees
        // every admission committed before this one.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 7))")
            .bind(event.account.as_str())
            .execute(&mut *tx)
            .await?;
        let recorded: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM node_events WHERE event_key = $1")
                .bind(event.key())
                .fetch_one(&mut *tx)
                .await?;
        if recorded > 0 {
            return Ok(Admission::Admitted);
        }
        let budget = sqlx::query(
            "SELECT * FROM budget_versions WHERE account = $1 ORDER BY seq DESC LIMIT 1",
        )
        .bind(event.account.as_str())
        .fetch_optional(&mut *tx)
        .await?
        .map(|row| budget_from_row(&row))
        .transpose()?;
        if let Some(budget) = budget {
            let events = sqlx::query("SELECT * FROM node_events WHERE account = $1 ORDER BY seq")
                .bind(event.account.as_str())
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(event_from_row)
                .collect::<Result<Vec<_>, _>>()?;
            let standing = derive::standing(&events, &budget, event.at);
            if !standing.admits(event.hold) {
                return Ok(Admission::OverBudget(standing));
            }
        }
        insert_event(&mut *tx, event).await?;
        tx.commit().await?;
        Ok(Admission::Admitted)
    }

    async fn append_refusal(&self, r: &RefusalRecord) -> Result<(), LedgerError> {
        sqlx::query(
            "INSERT INTO refusals (pool, request_id, node_id, offering_id, replicas, reason, detail, at, refusal_key)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             ON CONFLICT DO NOTHING",
        )
        .bind(r.pool.as_str())
        .bind(r.request.as_ref().map(|x| x.0.as_str()))
        .bind(r.node.as_ref().map(|x| x.0.as_str()))
        .bind(r.offering.as_ref().map(|x| x.as_str()))
        .bind(r.replicas as i32)
        .bind(r.reason.code())
        .bind(&r.detail)
        .bind(r.at)
        .bind(r.key())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn put_budget(&self, b: &Budget, at: Timestamp) -> Result<(), LedgerError> {
        sqlx::query(
            "INSERT INTO budget_versions (account, period, ceiling_micros, soft_threshold_percent, hard_action, at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(b.account.as_str())
        .bind(b.period.as_str())
        .bind(b.ceiling.micros())
        .bind(b.soft_threshold_percent as i32)
        .bind(b.hard_action.as_str())
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn budgets(&self) -> Result<Vec<Budget>, LedgerError> {
        sqlx::query(
            "SELECT DISTINCT ON (account) * FROM budget_versions ORDER BY account, seq DESC",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(budget_from_row)
        .collect()
    }

    async fn account_events(&self, account: &AccountName) -> Result<Vec<NodeEvent>, LedgerError> {
        sqlx::query("SELECT * FROM node_events WHERE account = $1 ORDER BY seq")
            .bind(account.as_str())
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn live_nodes(&self) -> Result<Vec<NodeEvent>, LedgerError> {
        sqlx::query(
            "SELECT * FROM (SELECT DISTINCT ON (node_id) * FROM node_events ORDER BY node_id, seq DESC) last
             WHERE state NOT IN ('terminated', 'refused')
             ORDER BY seq",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(event_from_row)
        .collect()
    }

    async fn node_events(&self) -> Result<Vec<NodeEvent>, LedgerError> {
        sqlx::query("SELECT * FROM node_events ORDER BY seq")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn summary(&self, now: Timestamp) -> Result<LedgerSummary, LedgerError> {
        let capacity_requests: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM capacity_requests")
            .fetch_one(&self.pool)
            .await?;
        let capacity_requested: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM node_events WHERE destination = 'serve' AND reason IN ('launch', 'wake')",
        )
        .fetch_one(&self.pool)
        .await?;
        let capacity_delivered: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM node_events WHERE state = 'serving'")
                .fetch_one(&self.pool)
                .await?;
        let mut refusals_by_reason = BTreeMap::new();
        for row in
            sqlx::query("SELECT reason, SUM(replicas)::BIGINT AS n FROM refusals GROUP BY reason")
                .fetch_all(&self.pool)
                .await?
        {
            refusals_by_reason.insert(row.try_get("reason")?, row.try_get::<i64, _>("n")? as u64);
        }
        let events = self.node_events().await?;
        Ok(LedgerSummary {
            capacity_requests: capacity_requests as u64,
            capacity_requested: capacity_requested as u64,
            capacity_delivered: capacity_delivered as u64,
            refusals: refusals_by_reason.values().sum(),
            refusals_by_reason,
            spend: derive::spend(&events, None, None, now),
        })
    }

    async fn enqueue_alert(
        &self,
        webhook: &str,
        body: &str,
        at: Timestamp,
    ) -> Result<(), LedgerError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('headroom-alert-outbox', 0))")
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO alert_outbox (webhook, body, created) VALUES ($1, $2, $3)")
            .bind(webhook)
            .bind(body)
            .bind(at)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO alert_deliveries (outbox_seq, outcome, at)
             SELECT seq, 'dropped', $1 FROM alert_outbox o
             WHERE NOT EXISTS (SELECT 1 FROM alert_deliveries d WHERE d.outbox_seq = o.seq)
             ORDER BY seq DESC OFFSET $2",
        )
        .bind(at)
        .bind(crate::ALERT_OUTBOX_BOUND)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn pending_alerts(&self, limit: i64) -> Result<Vec<crate::PendingAlert>, LedgerError> {
        let rows = sqlx::query(
            "SELECT seq, webhook, body FROM alert_outbox o
             WHERE NOT EXISTS (SELECT 1 FROM alert_deliveries d WHERE d.outbox_seq = o.seq)
             ORDER BY seq LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(crate::PendingAlert {
                    seq: r.try_get("seq")?,
                    webhook: r.try_get("webhook")?,
                    body: r.try_get("body")?,
                })
            })
            .collect()
    }

    async fn alert_delivered(&self, seq: i64, at: Timestamp) -> Result<(), LedgerError> {
        sqlx::query(
            "INSERT INTO alert_deliveries (outbox_seq, outcome, at) VALUES ($1, 'delivered', $2)
             ON CONFLICT DO NOTHING",
        )
        .bind(seq)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn append_decision(
        &self,
        pool: &PoolName,
        at: Timestamp,
        record: &str,
    ) -> Result<(), LedgerError> {
        sqlx::query("INSERT INTO decisions (pool, at, record) VALUES ($1, $2, $3::JSONB)")
            .bind(pool.as_str())
            .bind(at)
            .bind(record)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn decisions(&self, pool: &PoolName, limit: i64) -> Result<Vec<String>, LedgerError> {
        Ok(sqlx::query_scalar(
            "SELECT record::TEXT FROM decisions WHERE pool = $1 ORDER BY seq DESC LIMIT $2",
        )
        .bind(pool.as_str())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn create_token(&self, t: &crate::ApiToken) -> Result<(), LedgerError> {
        sqlx::query(
            "INSERT INTO api_tokens (id, secret_sha256, accounts, scopes, created) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&t.id)
        .bind(&t.secret_sha256)
        .bind(t.accounts.join(","))
        .bind(t.scopes.join(","))
        .bind(t.created_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn token(&self, id: &str) -> Result<Option<crate::ApiToken>, LedgerError> {
        Ok(self.tokens_where(Some(id)).await?.into_iter().next())
    }

    async fn tokens(&self) -> Result<Vec<crate::ApiToken>, LedgerError> {
        self.tokens_where(None).await
    }

    async fn revoke_token(&self, id: &str, now: Timestamp) -> Result<bool, LedgerError> {
        if self.token(id).await?.is_none() {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO api_token_revocations (token_id, at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(true)
    }

    async fn ping(&self) -> Result<(), LedgerError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn pool_leases(&self, pools: &[PoolName]) -> Result<BTreeSet<PoolName>, LedgerError> {
        use sqlx::Connection;
        let mut leases = self.leases.lock().await;
        let leases = &mut *leases;
        // A lease connection that died took its locks with it: start again from nothing.
        if let Some(connection) = &mut leases.connection
            && connection.ping().await.is_err()
        {
            leases.connection = None;
            leases.owned.clear();
        }
        if leases.connection.is_none() {
            leases.owned.clear();
            leases.connection = Some(sqlx::PgConnection::connect(&self.url).await.map_err(
                |source| LedgerError::Open {
                    url: redact(&self.url),
                    source,
                },
            )?);
        }
        let Some(connection) = leases.connection.as_mut() else {
            return Ok(BTreeSet::new());
        };
        let wanted: Vec<&PoolName> = pools
            .iter()
            .filter(|p| !leases.owned.contains(*p))
            .collect();
        for pool in wanted {
            let got: bool = sqlx::query_scalar(
                "SELECT pg_try_advisory_lock(hashtextextended('headroom-pool:' || $1, 0))",
            )
            .bind(pool.as_str())
            .fetch_one(&mut *connection)
            .await?;
            if got {
                leases.owned.insert(pool.clone());
            }
        }
        Ok(leases.owned.clone())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords() {
        assert_eq!(
            super::redact("postgres://u:secret@h:5/db"),
            "postgres://u:***@h:5/db"
        );
        assert_eq!(super::redact("postgres://h/db"), "postgres://h/db");
    }
}
