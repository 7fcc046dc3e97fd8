//! How the loop is doing, for `/metrics` and `/readyz`: each tick's duration and outcome, and
//! whether a tick has succeeded recently enough for this replica to be ready.

use headroom_core::Timestamp;

use super::{Engine, lock};

impl Engine {
    pub(super) fn record_tick(&self, started: Timestamp, took: std::time::Duration, ok: bool) {
        let m = &self.metrics.service;
        m.tick_seconds.observe(took.as_secs_f64());
        let outcome = if ok { "ok" } else { "error" };
        m.ticks
            .get_or_create(&crate::metrics::OutcomeLabels {
                outcome: outcome.to_string(),
            })
            .inc();
        if ok {
            *lock(&self.last_good_tick) = Some(started);
            m.last_good_tick_seconds
                .set(started.timestamp_millis() as f64 / 1000.0);
        }
    }

    /// How long after the last good tick this replica stops being ready: three tick intervals
    /// plus the provider timeout (a tick may wait that long on the cloud), at least 30 s.
    pub fn readiness_window(&self) -> std::time::Duration {
        let e = &self.config.engine;
        (e.tick * 3 + e.provider_timeout).max(std::time::Duration::from_secs(30))
    }

    /// Ready when a tick succeeded within [`Engine::readiness_window`]; otherwise the sentence
    /// that says why not.
    pub fn readiness(&self) -> Result<(), String> {
        let now = self.clock.now();
        let window = self.readiness_window();
        match *lock(&self.last_good_tick) {
            None => Err("the reconcile loop has not completed a tick yet".to_string()),
            Some(at) => {
                let age = (now - at).to_std().unwrap_or_default();
                if age > window {
                    Err(format!(
                        "the reconcile loop's last good tick was {}s ago (more than {}s); see its errors in the log",
                        age.as_secs(),
                        window.as_secs()
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }
}
