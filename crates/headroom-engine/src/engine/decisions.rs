//! Each pool's decision log: what the controller saw, what it answered and why. The current
//! entry is in memory (folding identical answers into one with a count); an entry is written to
//! the ledger when a different answer supersedes it, so the log survives restarts.

use super::*;
use headroom_core::controller::{Decision, ReplicaCounts, Signals};

/// Log entries a shadow report reads at most.
pub const SHADOW_REPORT_ENTRIES: i64 = 10_000;

/// Decisions kept per pool for `GET /v1/pools/{name}/decisions`.
pub const DECISION_LOG_LEN: usize = 256;

/// One entry of a pool's decision log: what the controller saw, what it answered and why.
/// Consecutive identical answers are folded into one entry with a count.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRecord {
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
    /// The last activation folded into this entry.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub last_at: Timestamp,
    pub repeated: u32,
    #[serde(flatten)]
    pub decision: Decision,
    pub signal: Option<Signals>,
    pub replicas: ReplicaCounts,
    /// Shadow mode: recorded, not executed.
    pub shadow: bool,
}

/// One page of a pool's decision log ([`Engine::decision_page`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionPage {
    /// Newest first.
    pub entries: Vec<serde_json::Value>,
    /// Where the next page starts (`before` for the next call), when there is one.
    pub next_before: Option<i64>,
}

/// The open entry of every pool.
#[derive(Debug, Default)]
pub(super) struct DecisionLog(HashMap<PoolName, DecisionRecord>);

impl DecisionLog {
    /// Folds a decision into the pool's open entry when nothing but the time changed; otherwise
    /// opens a new entry and returns the closed one, for the caller to write to the ledger.
    pub fn record(
        &mut self,
        pool: &PoolSpec,
        decision: &Decision,
        signal: Option<Signals>,
        replicas: ReplicaCounts,
        now: Timestamp,
    ) -> Option<DecisionRecord> {
        if let Some(open) = self.0.get_mut(&pool.name) {
            let d = &open.decision;
            if (d.target, d.rule, d.scaling_hold, d.limited)
                == (
                    decision.target,
                    decision.rule,
                    decision.scaling_hold,
                    decision.limited,
                )
            {
                open.last_at = now;
                open.repeated = open.repeated.saturating_add(1);
                return None;
            }
        }
        self.0.insert(
            pool.name.clone(),
            DecisionRecord {
                at: now,
                last_at: now,
                repeated: 1,
                decision: decision.clone(),
                signal,
                replicas,
                shadow: pool.scaling.shadow,
            },
        )
    }

    fn open(&self, pool: &PoolName) -> Option<DecisionRecord> {
        self.0.get(pool).cloned()
    }
}

impl Engine {
    /// The pool's decisions, newest first: the current one, then the ledger's record (which
    /// survives restarts), at most [`DECISION_LOG_LEN`] in all.
    pub async fn decisions(&self, pool: &PoolName) -> Result<Vec<serde_json::Value>, EngineError> {
        Ok(self
            .decision_page(pool, None, DECISION_LOG_LEN as u32)
            .await?
            .entries)
    }

    /// One page of the pool's decision log, newest first, at most `limit` entries (at least
    /// one is read). The first page (`before` absent) opens with the current entry, which is
    /// only in memory; the rest come from the ledger, keyed by sequence number, so a page is
    /// read by the ledger's index and no entry is seen twice: the current entry, once
    /// superseded and written, has a sequence number above any the walk had already passed.
    pub async fn decision_page(
        &self,
        pool: &PoolName,
        before: Option<i64>,
        limit: u32,
    ) -> Result<DecisionPage, EngineError> {
        let limit = limit.max(1);
        let mut entries: Vec<serde_json::Value> = Vec::new();
        if before.is_none() {
            let current = lock(&self.control).log.open(pool);
            entries.extend(current.iter().filter_map(|d| serde_json::to_value(d).ok()));
        }
        let room = limit - entries.len() as u32;
        // One row past the page says whether another follows.
        let rows = self.ledger.decision_page(pool, before, room + 1).await?;
        let more = rows.len() > room as usize;
        let page = &rows[..rows.len().min(room as usize)];
        entries.extend(
            page.iter()
                .filter_map(|r| serde_json::from_str(&r.row).ok()),
        );
        let next_before = match (more, page.last()) {
            (false, _) => None,
            (true, Some(last)) => Some(last.seq),
            // The current entry alone filled the page: the next starts at the newest row.
            (true, None) => rows.first().map(|r| r.seq.saturating_add(1)),
        };
        Ok(DecisionPage {
            entries,
            next_before,
        })
    }

    /// The promotion rules' tally over `pool`'s decisions from `from` to `to` (the background
    /// notes' report for a shadow-mode pool; any pool has one). Reads at most the last
    /// [`SHADOW_REPORT_ENTRIES`] entries of the log: consecutive identical decisions are one
    /// entry, so that is weeks of a calm pool and less of a busy one.
    pub async fn shadow_report(
        &self,
        pool: &PoolSpec,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<headroom_core::promotion::Promotion, EngineError> {
        /// What the tally reads of a log entry (node events have no `target`).
        #[derive(serde::Deserialize)]
        struct Entry {
            at: Timestamp,
            target: u32,
            hold: Option<serde_json::Value>,
            signal: Option<Signals>,
        }
        let now = self.clock.now();
        let open = lock(&self.control).log.open(&pool.name);
        let mut entries: Vec<Entry> = open
            .iter()
            .filter_map(|d| serde_json::to_value(d).ok())
            .chain(
                self.ledger
                    .decisions(&pool.name, SHADOW_REPORT_ENTRIES)
                    .await?
                    .iter()
                    .filter_map(|r| serde_json::from_str(r).ok()),
            )
            .filter_map(|v: serde_json::Value| serde_json::from_value(v).ok())
            .collect();
        entries.sort_by_key(|e| e.at);
        entries.dedup_by_key(|e| e.at);
        // Each entry is in force until the next one (the newest until now), clipped to the range.
        let ends: Vec<Timestamp> = entries
            .iter()
            .skip(1)
            .map(|e| e.at)
            .chain(std::iter::once(now))
            .collect();
        let spans = entries
            .iter()
            .zip(ends)
            .filter(|(e, until)| *until > from && e.at < to)
            .map(|(e, until)| headroom_core::promotion::DecisionSpan {
                at: e.at.max(from),
                until: until.min(to),
                target: e.target,
                held: e.hold.as_ref().is_some_and(|h| !h.is_null()),
                signal: e.signal.as_ref(),
            });
        Ok(headroom_core::promotion::tally(&pool.scaling, spans))
    }

    /// Writes an event of a node's life (an interruption notice, an orphan, a cluster rung) to
    /// its pool's decision log, stamped `at`.
    pub(super) async fn log_event(
        &self,
        pool: &PoolName,
        mut entry: serde_json::Value,
        at: Timestamp,
    ) -> Result<(), EngineError> {
        entry["at"] = serde_json::json!(at);
        self.ledger
            .append_decision(pool, at, &entry.to_string())
            .await?;
        Ok(())
    }
}
