//! Scheduled windows a pool's API declares (`POST /v1/pools/{name}/schedules`), beside those of
//! its configuration: checked, kept in the ledger, listed and cancelled. The decide phase reads
//! them with the tick's input ([`super::input::TickInput::windows`]).

use headroom_config::schedule::{MAX_WINDOWS_PER_POOL, ScheduleWindow, WindowSpec};
use headroom_core::{PoolSpec, Timestamp};
use headroom_ledger::LedgerError;

use super::{Engine, EngineError};

/// A window as the API lists it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeclaredWindow {
    /// `config:<name>` for the configuration's windows, the ledger's id for the API's.
    pub id: String,
    /// `configuration` or `api`; only the API's can be cancelled through it.
    pub source: &'static str,
    #[serde(flatten)]
    pub spec: WindowSpec,
    /// When it opens, for people: `mon-fri 09:00-09:30 Europe/Paris`.
    pub description: String,
    /// Whether its floor is in force now (it opens within one cold start, or is open).
    pub in_force: bool,
    /// When it was declared through the API; absent for the configuration's.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declared_at: Option<Timestamp>,
}

impl Engine {
    /// `pool`'s windows: the configuration's first, by name, then the API's oldest first (by
    /// declaration time, then id).
    pub async fn schedule_windows(
        &self,
        pool: &PoolSpec,
    ) -> Result<Vec<DeclaredWindow>, EngineError> {
        let now = self.clock.now();
        let lead = pool.ladder.cold_total();
        let listed = |id: String, source, window: &ScheduleWindow, declared_at| DeclaredWindow {
            id,
            source,
            spec: window.spec.clone(),
            description: window.describe(),
            in_force: window.occurrence(now, lead).is_some(),
            declared_at,
        };
        let mut out: Vec<DeclaredWindow> = self
            .config
            .schedules
            .get(&pool.name)
            .into_iter()
            .flatten()
            .map(|w| listed(format!("config:{}", w.name), "configuration", w, None))
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        let mut declared = Vec::new();
        for stored in self.ledger.schedule_windows().await? {
            if stored.pool != pool.name {
                continue;
            }
            if let Ok(window) = super::input::api_window(&stored, &self.config) {
                declared.push(listed(stored.id, "api", &window, Some(stored.at)));
            }
        }
        // The ledger reads them in this order; said here too, as the API pages by it.
        declared.sort_by(|a, b| (a.declared_at, &a.id).cmp(&(b.declared_at, &b.id)));
        out.extend(declared);
        Ok(out)
    }

    /// Checks `spec` against `pool` and its other windows, and keeps it in the ledger; the
    /// next tick applies it. Refused with [`EngineError::InvalidWindow`] or
    /// [`EngineError::WindowConflict`].
    pub async fn declare_window(
        &self,
        pool: &PoolSpec,
        spec: WindowSpec,
    ) -> Result<DeclaredWindow, EngineError> {
        let window = spec
            .parse(pool.max_replicas)
            .map_err(EngineError::InvalidWindow)?;
        let existing = self.schedule_windows(pool).await?;
        if existing.iter().any(|w| w.spec.name.trim() == window.name) {
            return Err(EngineError::WindowConflict(format!(
                "pool {} already has a window named {}; cancel it first or choose another name",
                pool.name, window.name
            )));
        }
        if existing.len() >= MAX_WINDOWS_PER_POOL {
            return Err(EngineError::WindowConflict(format!(
                "pool {} has {MAX_WINDOWS_PER_POOL} windows, the most it keeps; cancel one first",
                pool.name
            )));
        }
        let id = self.ids.window_id();
        let text = serde_json::to_string(&spec).map_err(|e| {
            LedgerError::Corrupt(format!("a scheduled window could not be encoded: {e}"))
        })?;
        let now = self.clock.now();
        self.ledger
            .add_schedule_window(&id, &pool.name, now, &text)
            .await?;
        tracing::info!(pool = %pool.name, window = %window.name, id = %id, "scheduled window declared");
        self.wake.notify_one();
        Ok(DeclaredWindow {
            id,
            source: "api",
            description: window.describe(),
            in_force: window.occurrence(now, pool.ladder.cold_total()).is_some(),
            declared_at: Some(now),
            spec,
        })
    }

    /// Cancels `pool`'s API window `id`; `false` when it has none such in force.
    pub async fn cancel_window(&self, pool: &PoolSpec, id: &str) -> Result<bool, EngineError> {
        let cancelled = self
            .ledger
            .cancel_schedule_window(&pool.name, id, self.clock.now())
            .await?;
        if cancelled {
            tracing::info!(pool = %pool.name, id = %id, "scheduled window cancelled");
            self.wake.notify_one();
        }
        Ok(cancelled)
    }
}
