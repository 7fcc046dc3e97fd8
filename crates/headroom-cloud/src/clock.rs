//! Clocks. The core never reads one; adapters are handed one.

use std::fmt::Debug;
use std::sync::Mutex;

use headroom_core::Timestamp;

/// A source of "now". Real time for `serve`, scaled time for `demo`, manual time for tests and
/// the simulator.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> Timestamp;
}

/// The one place that reads the system clocks. It reads the wall clock once, at creation, and
/// moves on with the monotonic clock from there: timestamps never go backwards when NTP or an
/// operator steps the wall clock, so a signal's age and a ledger's order stay true.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    wall_origin: Timestamp,
    monotonic_origin: std::time::Instant,
}

impl SystemClock {
    #[allow(clippy::disallowed_methods)]
    pub fn new() -> Self {
        SystemClock {
            wall_origin: chrono::Utc::now(),
            monotonic_origin: std::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let elapsed = self.monotonic_origin.elapsed();
        self.wall_origin + chrono::Duration::from_std(elapsed).unwrap_or(chrono::Duration::MAX)
    }
}

/// Time that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: Mutex::new(start),
        }
    }

    pub fn advance(&self, by: std::time::Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += chrono::Duration::from_std(by).unwrap_or(chrono::Duration::MAX);
    }

    pub fn set(&self, to: Timestamp) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Real time sped up by a factor from a fixed origin, which can also jump ahead: `demo` plays
/// minutes in seconds and skips the initial fill of its pools.
#[derive(Debug)]
pub struct ScaledClock<C: Clock> {
    inner: C,
    origin: Timestamp,
    speedup: u32,
    skipped: Mutex<chrono::Duration>,
}

impl<C: Clock> ScaledClock<C> {
    pub fn new(inner: C, speedup: u32) -> Self {
        let origin = inner.now();
        ScaledClock {
            inner,
            origin,
            speedup: speedup.max(1),
            skipped: Mutex::new(chrono::Duration::zero()),
        }
    }

    /// Jumps ahead by `by` (time never goes back).
    pub fn skip(&self, by: std::time::Duration) {
        let mut skipped = self.skipped.lock().unwrap_or_else(|e| e.into_inner());
        *skipped += chrono::Duration::from_std(by).unwrap_or(chrono::Duration::zero());
    }
}

impl<C: Clock> Clock for ScaledClock<C> {
    fn now(&self) -> Timestamp {
        let elapsed = self.inner.now() - self.origin;
        let skipped = *self.skipped.lock().unwrap_or_else(|e| e.into_inner());
        self.origin + elapsed * self.speedup as i32 + skipped
    }
}
