//! The simulator's models. This first version has what `headroom demo` needs: a burst traffic
//! profile like the background notes' 09:00 batch job, and a fluid queue that replicas drain.
//! Traces, token-dependent service times, priority tiers and baseline policies build on these.

pub mod traffic;

pub use traffic::{BurstProfile, QueueModel};
