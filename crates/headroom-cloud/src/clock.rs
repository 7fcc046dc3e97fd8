//! Clocks. The core never reads one; adapters are handed one.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use headroom_core::Timestamp;

/// A wait on a [`Clock`], to await (as `backon`'s sleeper, for one).
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of "now". Real time for `serve`, scaled time for `demo`, manual time for tests and
/// the simulator.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> Timestamp;

    /// Waits `d` of this clock's time: a retry's backoff waits here, so a run on a manual clock
    /// never waits on the wall clock.
    fn sleep(&self, d: Duration) -> Sleep;
}

/// `clock`'s [`Clock::sleep`] as a function, the form `backon`'s `Retryable::sleep` takes.
pub fn sleeper(clock: std::sync::Arc<dyn Clock>) -> impl Fn(Duration) -> Sleep + Send + Sync {
    move |d| clock.sleep(d)
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

    /// The one real timer behind a clock: tokio's.
    fn sleep(&self, d: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(d))
    }
}

/// Time that moves only when told to. Whoever holds it says when time passes, so a sleep on it
/// ends at once and moves nothing: code run on it (an engine's tick in the simulator) takes no
/// time, its retries included. Waiting for the holder to advance it would wait forever when the
/// holder is the one awaiting (the simulator awaits the tick), and advancing it from inside
/// would move the engine's time away from the time of the world the holder keeps.
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

    fn sleep(&self, _d: Duration) -> Sleep {
        Box::pin(std::future::ready(()))
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

    /// `d` of scaled time: `speedup` times less of the inner clock's.
    fn sleep(&self, d: Duration) -> Sleep {
        self.inner.sleep(d / self.speedup)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use super::{Clock, ManualClock, ScaledClock, Sleep, sleeper};

    const START: &str = "2026-01-01T00:00:00Z";

    /// A clock that remembers the sleeps it is asked for.
    #[derive(Debug, Default)]
    struct Asked(Mutex<Vec<Duration>>);

    impl Clock for Arc<Asked> {
        fn now(&self) -> headroom_core::Timestamp {
            START.parse().unwrap()
        }

        fn sleep(&self, d: Duration) -> Sleep {
            self.0.lock().unwrap().push(d);
            Box::pin(std::future::ready(()))
        }
    }

    #[test]
    fn a_sleep_on_a_manual_clock_ends_at_once_and_moves_nothing() {
        let clock = Arc::new(ManualClock::new(START.parse().unwrap()));
        let before = clock.now();
        let sleep = sleeper(clock.clone());
        let mut wait = sleep(Duration::from_secs(3600));
        let polled = wait.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        assert_eq!(polled, Poll::Ready(()));
        assert_eq!(clock.now(), before);
    }

    #[test]
    fn a_sleep_on_a_scaled_clock_waits_that_much_less_of_the_inner_clock() {
        let asked = Arc::new(Asked::default());
        let scaled = ScaledClock::new(asked.clone(), 60);
        let mut wait = scaled.sleep(Duration::from_secs(120));
        let polled = wait.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        assert_eq!(polled, Poll::Ready(()));
        assert_eq!(*asked.0.lock().unwrap(), [Duration::from_secs(2)]);
    }
}
