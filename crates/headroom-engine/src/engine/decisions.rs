//! Each pool's decision log: what the controller saw, what it answered and why. The current
//! entry is in memory (folding identical answers into one with a count); an entry is written to
//! the ledger when a different answer supersedes it, so the log survives restarts.

use super::*;
use headroom_core::controller::{Decision, ReplicaCounts, Signals};

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
