//! Each pool's decision log: what the controller saw, what it answered and why. The current
//! entry is in memory (folding identical answers into one with a count); an entry is written to
//! the ledger when a different answer supersedes it, so the log survives restarts. The ledger
//! keeps a pool's log for `DECISION_RETENTION` (30 days) before the newest row it records, by
//! each row's last instant (an entry's last activation, an event's time), and deletes older
//! rows as it records one: a page walk, a shadow report or the rung stamps read back reach no
//! further.

use std::collections::HashMap;

use headroom_core::controller::{Decision, ReplicaCounts, Signals};
use headroom_core::promotion::{CapacityEstimate, CapacityModel, Promotion};
use headroom_core::{PoolName, PoolSpec, Timestamp};
use serde::Serialize;

use super::{Engine, EngineError, lock};

/// Log entries a shadow report reads at most.
pub const SHADOW_REPORT_ENTRIES: i64 = 10_000;

/// The shadow report's fluid model walks time in steps of at most this.
const SHADOW_MODEL_STEP: chrono::Duration = chrono::Duration::seconds(15);

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
    /// What the signals of the activations folded into this entry said, summed over time: a
    /// shadow report reads their means, not only the signal the entry opened with.
    #[serde(default)]
    pub folded: FoldedSignals,
}

/// Signals summed over the activations folded into one log entry, each standing from the
/// activation before it: seconds covered (those with an arrival rate), request-seconds waited
/// and requests arrived.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct FoldedSignals {
    pub seconds: f64,
    pub queue_request_seconds: f64,
    pub requests_arrived: f64,
}

impl FoldedSignals {
    /// Adds `signal` standing for `seconds`; a signal without an arrival rate adds nothing.
    fn add(&mut self, signal: Option<&Signals>, seconds: f64) {
        if let Some((s, rate)) = signal.and_then(|s| Some((s, s.arrival_rate_rps?))) {
            self.seconds += seconds;
            self.queue_request_seconds += s.queue_depth as f64 * seconds;
            self.requests_arrived += rate * seconds;
        }
    }

    /// The mean queue depth and arrival rate, when anything was folded.
    fn means(&self) -> Option<(u64, f64)> {
        (self.seconds > 0.0).then(|| {
            (
                (self.queue_request_seconds / self.seconds).round() as u64,
                self.requests_arrived / self.seconds,
            )
        })
    }
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
                let since = (now - open.last_at).num_milliseconds().max(0) as f64 / 1000.0;
                open.folded.add(signal.as_ref(), since);
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
                folded: FoldedSignals::default(),
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
    /// notes' report for a shadow-mode pool; any pool has one), and what the decisions' targets
    /// would have run and served by the fluid model ([`CapacityModel`]): from the replicas ready
    /// when the range opens, each entry's target followed (launches landing a cold start later)
    /// against the arrivals and queue its signals recorded (the means over the activations folded
    /// into it, or the signal it opened with when it folded none). Reads at
    /// most the last [`SHADOW_REPORT_ENTRIES`] entries of the log: that is weeks of a calm pool
    /// and less of a busy one, and never more than the ledger keeps
    /// ([`headroom_ledger::DECISION_RETENTION`]): a range reaching further back covers less.
    pub async fn shadow_report(
        &self,
        pool: &PoolSpec,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<(Promotion, CapacityEstimate), EngineError> {
        /// What the report reads of a log entry (node events have no `target`).
        #[derive(serde::Deserialize)]
        struct Entry {
            at: Timestamp,
            target: u32,
            hold: Option<serde_json::Value>,
            signal: Option<Signals>,
            #[serde(default)]
            replicas: ReplicaCounts,
            #[serde(default)]
            folded: FoldedSignals,
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
        let in_range: Vec<(&Entry, Timestamp, Timestamp)> = entries
            .iter()
            .zip(ends)
            .filter(|(e, until)| *until > from && e.at < to)
            .map(|(e, until)| (e, e.at.max(from), until.min(to)))
            .collect();
        let promotion = headroom_core::promotion::tally(
            &pool.scaling,
            in_range
                .iter()
                .map(|(e, at, until)| headroom_core::promotion::DecisionSpan {
                    at: *at,
                    until: *until,
                    target: e.target,
                    held: e.hold.as_ref().is_some_and(|h| !h.is_null()),
                    signal: e.signal.as_ref(),
                }),
        );
        let gpus = self.config.first_offering_gpus(pool).unwrap_or(1);
        let ready = in_range.first().map_or(0, |(e, _, _)| e.replicas.ready);
        let mut model = CapacityModel::new(pool, gpus, ready);
        for (e, at, until) in &in_range {
            model.follow(e.target, *at);
            // A stale signal says nothing of the arrivals: the estimate stops, as the tally's
            // age check does.
            let fresh = e
                .signal
                .as_ref()
                .filter(|s| s.is_fresh(e.at, pool.scaling.signal_max_age));
            let opened = fresh.and_then(|s| Some((s.queue_depth, s.arrival_rate_rps?)));
            let (queue, arrivals) = match e.folded.means().or(opened) {
                Some((queue, rate)) => (Some(queue), Some(rate)),
                None => (fresh.map(|s| s.queue_depth), None),
            };
            // Launches land within the span: walk it in steps of at most SHADOW_MODEL_STEP.
            let mut t = *at;
            while t < *until {
                model.land(t);
                let next = (t + SHADOW_MODEL_STEP).min(*until);
                let span_s = (next - t).num_milliseconds() as f64 / 1000.0;
                model.account(span_s, queue, arrivals);
                t = next;
            }
        }
        Ok((promotion, model.estimate()))
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

#[cfg(test)]
mod tests {
    use headroom_core::Timestamp;
    use headroom_core::controller::Signals;

    use super::FoldedSignals;

    /// Each folded activation's signal stands for the time since the one before; a signal
    /// without an arrival rate adds nothing, so the means are over the seconds that had one.
    #[test]
    fn folded_signals_average_over_the_time_each_stood() {
        let at: Timestamp = "2026-12-01T09:00:00Z".parse().unwrap();
        let mut folded = FoldedSignals::default();
        assert_eq!(folded.means(), None);
        folded.add(Some(&Signals::queue(400, 30.0, at)), 10.0);
        folded.add(Some(&Signals::queue(0, 10.0, at)), 30.0);
        let no_rate = Signals {
            arrival_rate_rps: None,
            ..Signals::queue(9_999, 0.0, at)
        };
        folded.add(Some(&no_rate), 60.0);
        folded.add(None, 60.0);
        assert_eq!(folded.seconds, 40.0);
        assert_eq!(folded.means(), Some((100, 15.0)));
    }
}
