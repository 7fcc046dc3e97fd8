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
        let current = lock(&self.control).log.open(pool);
        let mut out: Vec<serde_json::Value> = current
            .iter()
            .filter_map(|d| serde_json::to_value(d).ok())
            .collect();
        for record in self.ledger.decisions(pool, DECISION_LOG_LEN as i64).await? {
            if out.len() >= DECISION_LOG_LEN {
                break;
            }
            if let Ok(value) = serde_json::from_str(&record) {
                out.push(value);
            }
        }
        Ok(out)
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
