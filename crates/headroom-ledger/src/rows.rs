//! How a row of each table reads back into its type, for every [`Dialect`].

use headroom_core::planner::Destination;
use headroom_core::{
    Budget, BudgetPeriod, CapacityRequest, HardAction, Market, Money, NodeId, NodeState, Priority,
    ProviderKind, RefusalReason, RequestId, Timestamp,
};
use sqlx::{ColumnIndex, Decode, Row, Type};

use crate::dialect::{Dialect, time_column};
use crate::sql::{DbRow, SqlLedger};
use crate::{ApiToken, LedgerError, NodeEvent, RefusalRecord};

fn parse<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<T, LedgerError> {
    r.map_err(|e| LedgerError::Corrupt(e.to_string()))
}

fn corrupt(what: &str, value: &str) -> LedgerError {
    LedgerError::Corrupt(format!("{what} {value:?}"))
}

// What reading needs of the driver; a subset of the bounds on the queries in `sql/`.
impl<D: Dialect> SqlLedger<D>
where
    for<'a> &'a str: ColumnIndex<DbRow<D>>,
    String: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    fn time(row: &DbRow<D>, name: &str) -> Result<Timestamp, LedgerError> {
        D::timestamp(row.try_get(time_column::<D>(name).as_str())?)
    }

    fn uint(row: &DbRow<D>, column: &str) -> Result<u32, LedgerError> {
        Ok(D::uint(row.try_get(column)?))
    }

    pub(crate) fn request_from_row(row: &DbRow<D>) -> Result<CapacityRequest, LedgerError> {
        Ok(CapacityRequest {
            id: RequestId(row.try_get("id")?),
            pool: parse(row.try_get::<String, _>("pool")?.parse())?,
            replicas: Self::uint(row, "replicas")?,
            priority: parse(Priority::parse(&row.try_get::<String, _>("priority")?))?,
            idempotency_key: row
                .try_get::<Option<String>, _>("idempotency_key")?
                .map(crate::IdempotencyKey::client_key),
            created_at: Self::time(row, "created_at")?,
        })
    }

    pub(crate) fn event_from_row(row: &DbRow<D>) -> Result<NodeEvent, LedgerError> {
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
            parked_usd_per_hour: Money::from_micros(row.try_get("parked_price_micros")?),
            gpus: Self::uint(row, "gpus")?,
            hold: Money::from_micros(row.try_get("hold_micros")?),
            reason: row.try_get("reason")?,
            at: Self::time(row, "at")?,
        })
    }

    pub(crate) fn refusal_from_row(row: &DbRow<D>) -> Result<RefusalRecord, LedgerError> {
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
            replicas: Self::uint(row, "replicas")?,
            reason: RefusalReason::parse(&reason)
                .ok_or_else(|| corrupt("refusal reason", &reason))?,
            detail: row.try_get("detail")?,
            at: Self::time(row, "at")?,
        })
    }

    pub(crate) fn budget_from_row(row: &DbRow<D>) -> Result<Budget, LedgerError> {
        let account: String = row.try_get("account")?;
        Self::budget_of(row, &account, "")
    }

    /// `account`'s budget from its columns, named with `prefix` before each.
    pub(crate) fn budget_of(
        row: &DbRow<D>,
        account: &str,
        prefix: &str,
    ) -> Result<Budget, LedgerError> {
        let column = |name: &str| format!("{prefix}{name}");
        let period: String = row.try_get(column("period").as_str())?;
        let hard: String = row.try_get(column("hard_action").as_str())?;
        Ok(Budget {
            account: parse(account.parse())?,
            period: BudgetPeriod::parse(&period)
                .ok_or_else(|| corrupt("budget period", &period))?,
            ceiling: Money::from_micros(row.try_get(column("ceiling_micros").as_str())?),
            soft_threshold_percent: Self::uint(row, &column("soft_threshold_percent"))? as u8,
            hard_action: HardAction::parse(&hard).ok_or_else(|| corrupt("hard action", &hard))?,
        })
    }

    /// A checkpoint from its columns, named with `prefix` before each (a row that joins
    /// checkpoints with other tables names them apart).
    pub(crate) fn checkpoint_from_row(
        row: &DbRow<D>,
        prefix: &str,
    ) -> Result<crate::checkpoint::Checkpoint, LedgerError> {
        let period: String = row.try_get(format!("{prefix}period").as_str())?;
        let open: String = row.try_get(format!("{prefix}open_nodes").as_str())?;
        Ok(crate::checkpoint::Checkpoint {
            period: BudgetPeriod::parse(&period)
                .ok_or_else(|| corrupt("checkpoint period", &period))?,
            period_start: Self::time(row, &format!("{prefix}period_start"))?,
            settled: Money::from_micros(row.try_get(format!("{prefix}settled_micros").as_str())?),
            open: crate::checkpoint::decode_open(&open)
                .ok_or_else(|| corrupt("checkpoint open nodes", &open))?,
        })
    }

    pub(crate) fn token_from_row(row: &DbRow<D>) -> Result<ApiToken, LedgerError> {
        let split = |s: String| -> Vec<String> {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect()
        };
        let revoked: Option<D::Time> = row.try_get(time_column::<D>("revoked").as_str())?;
        Ok(ApiToken {
            id: row.try_get("id")?,
            secret_sha256: row.try_get("secret_sha256")?,
            accounts: split(row.try_get("accounts")?),
            scopes: split(row.try_get("scopes")?),
            created_at: Self::time(row, "created")?,
            revoked_at: revoked.map(D::timestamp).transpose()?,
        })
    }
}
