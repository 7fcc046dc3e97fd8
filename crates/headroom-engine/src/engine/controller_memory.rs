//! Each pool's controller memory (breach windows, stabilisation, cooldowns, the recent levels
//! and arrivals) kept in the ledger (`controller_memory`), so a process that takes a pool, after
//! a restart or a lease move, decides as its last owner would have instead of starting afresh.
//!
//! The ledger keeps a pool's newest row plus an hour's (`CONTROLLER_MEMORY_RETENTION`, deleting
//! older rows as it records one), and a memory's series hold an entry an
//! activation within the stabilisation window (a 300 s window at 1 s activations: up to 64 KB of
//! JSON, which the core's round-trip test checks), so it is not written every activation: a row
//! when the memory's state changes (a window counted, a cooldown begun, a stabilisation started
//! or ended, a rise, a new target), and otherwise at most every [`REFRESH`] while its series
//! change; a memory that does not change at all (a pool
//! holding for its signal) is not written again. The state a new owner reads back is exact; its
//! recent series are at most [`REFRESH`] old.

use headroom_core::controller::{ControllerMemory, SeriesMark};
use headroom_core::{PoolName, Timestamp};

use super::{Engine, EngineError, lock};

/// A memory whose state has not changed is written again at most this often, for its series.
const REFRESH: chrono::Duration = chrono::Duration::seconds(60);

/// What this process last wrote (or read back) of a pool's memory.
#[derive(Debug)]
pub(super) struct Written {
    at: Timestamp,
    state: ControllerMemory,
    series: SeriesMark,
}

impl Written {
    fn of(memory: &ControllerMemory, at: Timestamp) -> Written {
        Written {
            at,
            state: memory.state(),
            series: memory.series_mark(),
        }
    }
}

/// The memory's JSON when it is due to be written at `now`, with what to remember once it is.
pub(super) fn due(
    memory: &ControllerMemory,
    written: Option<&Written>,
    now: Timestamp,
) -> Option<(String, Written)> {
    let next = Written::of(memory, now);
    let due = written.is_none_or(|w| {
        w.state != next.state || (w.series != next.series && now - w.at >= REFRESH)
    });
    if !due {
        return None;
    }
    serde_json::to_string(memory).ok().map(|body| (body, next))
}

impl Engine {
    /// Writes `pool`'s controller memory to the ledger when it is due.
    pub(super) async fn persist_controller_memory(
        &self,
        pool: &PoolName,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        let due = {
            let control = lock(&self.control);
            control
                .memory
                .get(pool)
                .and_then(|m| due(m, control.memory_written.get(pool), now))
        };
        let Some((body, written)) = due else {
            return Ok(());
        };
        self.ledger
            .record_controller_memory(pool, now, &body)
            .await?;
        lock(&self.control)
            .memory_written
            .insert(pool.clone(), written);
        Ok(())
    }

    /// Reads `pool`'s controller memory back from the ledger when this process takes it. The
    /// ledger's replaces what this process holds only when it is newer than what this process
    /// last wrote (another owner decided meanwhile). A memory that does not read back is logged
    /// and left: the controller then starts from the replicas that exist, as without one.
    pub(super) async fn restore_controller_memory(
        &self,
        pool: &PoolName,
    ) -> Result<(), EngineError> {
        let Some((at, body)) = self.ledger.controller_memory(pool).await? else {
            return Ok(());
        };
        let memory: ControllerMemory = match serde_json::from_str(&body) {
            Ok(memory) => memory,
            Err(e) => {
                tracing::warn!(pool = %pool, written_at = %at, error = %e, "the controller memory in the ledger does not read back; the controller starts afresh");
                return Ok(());
            }
        };
        let mut control = lock(&self.control);
        let newer = control.memory_written.get(pool).is_none_or(|w| at > w.at);
        if control.memory.contains_key(pool) && !newer {
            return Ok(());
        }
        control
            .memory_written
            .insert(pool.clone(), Written::of(&memory, at));
        control.memory.insert(pool.clone(), memory);
        tracing::info!(pool = %pool, written_at = %at, "controller memory read back from the ledger");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::Timestamp;
    use headroom_core::controller::ControllerMemory;

    use super::due;

    fn at(s: i64) -> Timestamp {
        "2026-11-30T09:00:00Z".parse::<Timestamp>().unwrap() + chrono::Duration::seconds(s)
    }

    /// A row when nothing was written, when the state changes, and for a series-only change
    /// once the last row is a minute old; never for a memory that did not change.
    #[test]
    fn a_memory_is_written_on_a_change_of_state_and_a_minute_apart_for_its_series() {
        let mut memory = ControllerMemory {
            target: 2,
            ..ControllerMemory::default()
        };
        let (body, mut written) = due(&memory, None, at(0)).expect("nothing written yet");
        assert_eq!(
            serde_json::from_str::<ControllerMemory>(&body).unwrap(),
            memory
        );
        assert!(due(&memory, Some(&written), at(600)).is_none(), "unchanged");
        memory.levels.push_back((at(1), 1));
        assert!(due(&memory, Some(&written), at(1)).is_none(), "series only");
        memory.low_since = Some(at(2));
        (_, written) = due(&memory, Some(&written), at(2)).expect("a stabilisation began");
        memory.levels.push_back((at(3), 1));
        assert!(due(&memory, Some(&written), at(61)).is_none());
        assert!(
            due(&memory, Some(&written), at(62)).is_some(),
            "a minute on"
        );
    }
}
