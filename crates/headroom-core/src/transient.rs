//! Transient launch failures (HTTP 5xx, timeouts): a launch that fails so is repeated by the next
//! ticks with the same client token, at most `engine.transient_failure_limit` times an offering
//! within `engine.transient_failure_window`; the failure that reaches the limit refuses the
//! offering ([`RefusalReason::ProviderErrors`](crate::RefusalReason::ProviderErrors): cooled
//! down, ranked lower, and the planner falls back). A launch the offering accepts, or that
//! refusal, forgets its failures.

use std::collections::{HashMap, VecDeque};

use crate::{OfferingId, Timestamp};

/// Each offering's transient launch failures since its last launch or refusal.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TransientFailures {
    log: HashMap<OfferingId, VecDeque<Timestamp>>,
}

/// What a transient failure leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransientVerdict {
    /// Fewer than the limit within the window: the next tick repeats the launch.
    Retry {
        /// Failures of the offering within the window, this one included.
        failures: u32,
    },
    /// The limit reached within the window: the offering is refused, and its failures forgotten.
    Refuse {
        /// Failures of the offering within the window, this one included.
        failures: u32,
    },
}

impl TransientVerdict {
    /// Failures of the offering within the window, the one just noted included.
    pub fn failures(self) -> u32 {
        match self {
            TransientVerdict::Retry { failures } | TransientVerdict::Refuse { failures } => {
                failures
            }
        }
    }
}

impl TransientFailures {
    /// Counts a transient failure of `offering` at `now`: those at or before `now - window` no
    /// longer count. At `limit` (at least one) the offering is refused and its count starts
    /// afresh.
    pub fn note(
        &mut self,
        offering: &OfferingId,
        now: Timestamp,
        window: chrono::Duration,
        limit: u32,
    ) -> TransientVerdict {
        let log = self.log.entry(offering.clone()).or_default();
        while log.front().is_some_and(|t| *t <= now - window) {
            log.pop_front();
        }
        log.push_back(now);
        let failures = log.len() as u32;
        if failures < limit.max(1) {
            return TransientVerdict::Retry { failures };
        }
        self.forget(offering);
        TransientVerdict::Refuse { failures }
    }

    /// Forgets `offering`'s failures: it accepted a launch.
    pub fn forget(&mut self, offering: &OfferingId) {
        self.log.remove(offering);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn at(s: i64) -> Timestamp {
        "2026-11-30T09:00:00Z".parse::<Timestamp>().unwrap() + chrono::Duration::seconds(s)
    }

    fn offering(name: &str) -> OfferingId {
        name.parse().unwrap()
    }

    const WINDOW: chrono::Duration = chrono::Duration::minutes(5);

    #[test]
    fn failures_within_the_window_refuse_the_offering_at_the_limit() {
        use TransientVerdict::{Refuse, Retry};
        let (a, b) = (offering("a"), offering("b"));
        let mut f = TransientFailures::default();
        // (seconds, offering, verdict): the limit is 3 within five minutes.
        let table = [
            (0, &a, Retry { failures: 1 }),
            (10, &b, Retry { failures: 1 }),
            (60, &a, Retry { failures: 2 }),
            // Exactly a window after the first: it no longer counts.
            (300, &a, Retry { failures: 2 }),
            (310, &a, Refuse { failures: 3 }),
            // Refused: counted afresh.
            (320, &a, Retry { failures: 1 }),
            (330, &b, Retry { failures: 1 }),
        ];
        for (s, o, verdict) in table {
            assert_eq!(f.note(o, at(s), WINDOW, 3), verdict, "{o} at {s}s");
        }
        // A launch of `a` forgets its failures, not `b`'s.
        f.forget(&a);
        assert_eq!(f.note(&a, at(340), WINDOW, 3), Retry { failures: 1 });
        assert_eq!(f.note(&b, at(340), WINDOW, 3), Retry { failures: 2 });
    }

    #[test]
    fn a_limit_of_zero_is_one() {
        let mut f = TransientFailures::default();
        let verdict = f.note(&offering("a"), at(0), WINDOW, 0);
        assert_eq!(verdict, TransientVerdict::Refuse { failures: 1 });
        assert_eq!(verdict.failures(), 1);
    }

    proptest! {
        /// The count is the failures within the window since the last refusal, never those
        /// older than the window, and an offering is refused exactly when it reaches the limit.
        #[test]
        fn failures_older_than_the_window_are_not_counted(
            gaps in proptest::collection::vec(0..200i64, 1..40),
            window_s in 1..600i64,
            limit in 1..6u32,
        ) {
            let window = chrono::Duration::seconds(window_s);
            let o = offering("a");
            let mut f = TransientFailures::default();
            let mut since_refusal: Vec<i64> = Vec::new();
            let mut t = 0;
            for gap in gaps {
                t += gap;
                since_refusal.push(t);
                let expected = since_refusal.iter().filter(|s| **s > t - window_s).count() as u32;
                let verdict = f.note(&o, at(t), window, limit);
                prop_assert_eq!(verdict.failures(), expected);
                prop_assert!(expected <= limit);
                if expected == limit {
                    prop_assert_eq!(verdict, TransientVerdict::Refuse { failures: limit });
                    since_refusal.clear();
                } else {
                    prop_assert_eq!(verdict, TransientVerdict::Retry { failures: expected });
                }
            }
        }
    }
}
