//! What the finance reports read, cut to the accounts a reader acts for (all, when `None`). The
//! reports are pure functions of these rows (`headroom-report`); the API's report routes and
//! `headroom report` read them here and hand them on.

use std::collections::BTreeSet;

use headroom_core::Timestamp;
use headroom_records::ReportRows;

use crate::{History, Ledger, LedgerError, NodeEvent, RefusalRecord};

/// Every node event of the accounts a reader acts for (all, when `None`).
pub async fn visible_events(
    ledger: &dyn History,
    accounts: Option<&BTreeSet<String>>,
) -> Result<Vec<NodeEvent>, LedgerError> {
    Ok(ledger
        .node_events()
        .await?
        .into_iter()
        .filter(|e| accounts.is_none_or(|a| a.contains(e.account.as_str())))
        .collect())
}

/// The refusals in `[from, to)` a reader sees: a refusal names its pool, and is shown when the
/// pool's nodes are (`events`, already cut to the reader's accounts), or to a reader of all.
pub async fn visible_refusals(
    ledger: &dyn History,
    events: &[NodeEvent],
    from: Timestamp,
    to: Timestamp,
    accounts: Option<&BTreeSet<String>>,
) -> Result<Vec<RefusalRecord>, LedgerError> {
    let pools: BTreeSet<&str> = events.iter().map(|e| e.pool.as_str()).collect();
    Ok(ledger
        .refusals_between(from, to)
        .await?
        .into_iter()
        .filter(|r| accounts.is_none() || pools.contains(r.pool.as_str()))
        .collect())
}

/// What a budget report over `[from, to)` reads (`headroom_report::from_rows`).
pub async fn budget(
    ledger: &dyn Ledger,
    from: Timestamp,
    to: Timestamp,
    accounts: Option<&BTreeSet<String>>,
) -> Result<ReportRows, LedgerError> {
    let events = visible_events(ledger, accounts).await?;
    let refusals = visible_refusals(ledger, &events, from, to, accounts).await?;
    let budgets = ledger
        .budgets()
        .await?
        .into_iter()
        .filter(|b| accounts.is_none_or(|a| a.contains(b.account.as_str())))
        .collect();
    Ok(ReportRows {
        events,
        refusals,
        budgets,
    })
}

/// What reservation advice reads first: the history's events, and whether it is finished (no
/// node of the reader's accounts runs), which decides where a history with no end given ends
/// (`headroom_report::reservations::history_range`); its refusals are read after, for the range
/// ([`visible_refusals`]).
pub async fn history(
    ledger: &dyn History,
    accounts: Option<&BTreeSet<String>>,
) -> Result<(Vec<NodeEvent>, bool), LedgerError> {
    let events = visible_events(ledger, accounts).await?;
    let finished = !ledger
        .live_nodes()
        .await?
        .iter()
        .any(|e| accounts.is_none_or(|a| a.contains(e.account.as_str())));
    Ok((events, finished))
}
