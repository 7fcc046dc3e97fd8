//! Each pool's demand by minute ([`DemandRecord`]): noted from the controller's measured
//! demand every activation, written to the ledger once its minute has ended, read back when this
//! process takes the pool (so a restart or a lease move keeps the forecast and the warm pool's
//! size), and asked for the forecast the controller launches ahead of. Past forecasts are scored
//! against what came, for `GET /v1/pools/{name}` and `/metrics`.

use std::collections::{BTreeMap, VecDeque};

use headroom_core::controller::{Decision, Rule};
use headroom_core::forecast::{self, DemandRecord, Forecast};
use headroom_core::{PoolName, PoolSpec, Timestamp};

use super::{Engine, EngineError, lock};
use crate::views::ForecastStatus;

/// Scored forecasts kept per pool: a day of minutes.
const MAX_SCORES: usize = 24 * 60;

/// One pool's history and the scoring of its forecasts.
#[derive(Debug, Default)]
pub(super) struct PoolHistory {
    pub record: DemandRecord,
    /// Minutes before this one are in the ledger (or came from it).
    persisted_before: Option<i64>,
    /// The first forecast made for each minute still to end, in replicas.
    expected: BTreeMap<i64, u32>,
    /// Absolute errors of forecasts whose minute ended, newest last.
    errors: VecDeque<u32>,
    pub last: Option<Forecast>,
}

impl PoolHistory {
    /// A history read back from the ledger's minutes.
    pub fn restored(minutes: &[(i64, u32)]) -> PoolHistory {
        let mut history = PoolHistory::default();
        for (minute, replicas) in minutes {
            history
                .record
                .note(forecast::minute_start(*minute), *replicas);
        }
        history.persisted_before = minutes.last().map(|(m, _)| m + 1);
        history
    }

    /// Notes the measured demand at `now` and the forecast in force, and scores forecasts
    /// whose minute has ended.
    pub fn note(&mut self, now: Timestamp, measured: u32, forecast: Option<&Forecast>) {
        self.record.note(now, measured);
        if let Some(f) = forecast {
            self.expected
                .entry(forecast::minute_of(f.expected_at))
                .or_insert(f.replicas);
        }
        self.last = forecast.cloned();
        let current = forecast::minute_of(now);
        while let Some(entry) = self.expected.first_entry() {
            if *entry.key() >= current {
                break;
            }
            let (minute, replicas) = entry.remove_entry();
            if let Some(actual) = self.record.at_minute(minute) {
                self.errors.push_back(replicas.abs_diff(actual));
                if self.errors.len() > MAX_SCORES {
                    self.errors.pop_front();
                }
            }
        }
    }

    /// Ended minutes not yet in the ledger (a range lookup: this runs every tick).
    pub fn unpersisted(&self, now: Timestamp) -> Vec<(i64, u32)> {
        let current = forecast::minute_of(now);
        let from = self.persisted_before.unwrap_or(i64::MIN);
        if from >= current {
            return Vec::new();
        }
        self.record.minutes_in(from..current).collect()
    }

    /// Marks minutes before `before` as in the ledger.
    pub fn persisted(&mut self, before: i64) {
        self.persisted_before = Some(self.persisted_before.map_or(before, |p| p.max(before)));
    }

    pub fn status(&self, lead: std::time::Duration) -> ForecastStatus {
        let scored = self.errors.len() as u64;
        ForecastStatus {
            expected: self.last.clone(),
            lead_s: lead.as_secs(),
            history_minutes: self.record.len() as u64,
            scored,
            mean_abs_error_replicas: (scored > 0)
                .then(|| self.errors.iter().map(|e| f64::from(*e)).sum::<f64>() / scored as f64),
        }
    }
}

/// How far ahead a pool's forecast looks: a cold start, the breach windows a scale-up waits,
/// and a minute for the minute granularity of the history.
pub(super) fn forecast_lead(pool: &PoolSpec) -> std::time::Duration {
    let s = &pool.scaling;
    pool.ladder.cold_total()
        + s.breach_window * s.scale_up_breaches
        + std::time::Duration::from_secs(60)
}

/// The demand the controller measured: its rules' largest answer but the floor (not demand)
/// and the forecast (which must not learn from itself).
pub(super) fn measured_demand(decision: &Decision) -> u32 {
    decision
        .proposals
        .iter()
        .filter(|p| !matches!(p.rule, Rule::Floor | Rule::Scheduled | Rule::Forecast))
        .map(|p| p.replicas)
        .max()
        .unwrap_or(0)
}

impl Engine {
    /// Writes `pool`'s ended minutes to the ledger.
    pub(super) async fn persist_demand(
        &self,
        pool: &PoolName,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        let minutes = lock(&self.control)
            .history
            .get(pool)
            .map(|h| h.unpersisted(now))
            .unwrap_or_default();
        let Some((last, _)) = minutes.last().copied() else {
            return Ok(());
        };
        self.ledger.record_demand_minutes(pool, &minutes).await?;
        if let Some(h) = lock(&self.control).history.get_mut(pool) {
            h.persisted(last + 1);
        }
        Ok(())
    }

    /// Reads `pool`'s demand history back from the ledger when this process takes it: the
    /// forecaster's record and the warm pool's recent demand. What this process saw itself is
    /// kept.
    pub(super) async fn restore_demand(
        &self,
        pool: &PoolSpec,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        if lock(&self.control).history.contains_key(&pool.name) {
            return Ok(());
        }
        let since = forecast::minute_of(now) - forecast::KEEP_MINUTES;
        let minutes = self.ledger.demand_minutes(&pool.name, since).await?;
        if minutes.is_empty() {
            return Ok(());
        }
        let mut control = lock(&self.control);
        if !control.demand.contains_key(&pool.name) {
            for (minute, replicas) in &minutes {
                let at = forecast::minute_start(*minute);
                super::warm_pool::note_demand(
                    &mut control.demand,
                    pool,
                    (*replicas).max(pool.min_replicas),
                    at,
                );
            }
        }
        control
            .history
            .entry(pool.name.clone())
            .or_insert_with(|| PoolHistory::restored(&minutes));
        Ok(())
    }
}
