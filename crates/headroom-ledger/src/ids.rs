//! Where the ids Headroom mints come from: nodes (`n-…`), capacity requests (`cr-…`) and
//! scheduled windows (`w-…`). Random in production; drawn from a seed in the simulator and in
//! tests, so a seed replays a whole run, ids included.
//!
//! It lives in the ledger because the ledger is the lowest layer that mints an id (a capacity
//! request's, chosen before its write) and both the engine and the API sit above it; the core
//! and the records stay free of randomness.

use std::sync::{Arc, Mutex};

use headroom_core::{NodeId, RequestId};
use uuid::Uuid;

/// A source of fresh ids. Cloning shares the source: clones of a seeded one draw one sequence.
#[derive(Debug, Clone, Default)]
pub struct IdSource(Source);

#[derive(Debug, Clone, Default)]
enum Source {
    /// Version 4 uuids from the operating system's randomness.
    #[default]
    Random,
    /// Version 4 uuids drawn from a seeded generator.
    Seeded(Arc<Mutex<fastrand::Rng>>),
}

impl IdSource {
    /// Random ids: what a deployment uses (ids from two processes never collide).
    pub fn random() -> Self {
        IdSource(Source::Random)
    }

    /// Ids drawn from `seed`: the same seed gives the same sequence.
    pub fn seeded(seed: u64) -> Self {
        IdSource(Source::Seeded(Arc::new(Mutex::new(
            fastrand::Rng::with_seed(seed),
        ))))
    }

    /// A fresh version 4 uuid.
    #[allow(clippy::disallowed_methods)] // the one place ids read the system's randomness
    pub fn uuid(&self) -> Uuid {
        match &self.0 {
            Source::Random => Uuid::new_v4(),
            Source::Seeded(rng) => {
                let mut rng = rng.lock().unwrap_or_else(|e| e.into_inner());
                let bytes = rng.u128(..).to_le_bytes();
                uuid::Builder::from_random_bytes(bytes).into_uuid()
            }
        }
    }

    /// A node's id, minted before its launch: `n-<32 hex>`.
    pub fn node_id(&self) -> NodeId {
        NodeId(format!("n-{}", self.uuid().simple()))
    }

    /// A capacity request's id: `cr-<32 hex>`.
    pub fn request_id(&self) -> RequestId {
        RequestId(format!("cr-{}", self.uuid().simple()))
    }

    /// A scheduled window's id: `w-<32 hex>`.
    pub fn window_id(&self) -> String {
        format!("w-{}", self.uuid().simple())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_sequence_of_well_formed_ids_and_another_seed_another() {
        let (a, b) = (IdSource::seeded(7), IdSource::seeded(7));
        let first: Vec<NodeId> = (0..3).map(|_| a.node_id()).collect();
        assert_eq!(first, (0..3).map(|_| b.node_id()).collect::<Vec<_>>());
        assert_ne!(first[0], first[1]);
        assert_ne!(first[0], IdSource::seeded(8).node_id());
        let id = &first[0].0;
        assert!(id.starts_with("n-") && id.len() == 34, "{id}");
        assert_eq!(Uuid::parse_str(&id[2..]).unwrap().get_version_num(), 4);
        // Clones share the sequence.
        let c = a.clone();
        assert_ne!(a.request_id(), c.request_id());
        assert!(IdSource::random().window_id().starts_with("w-"));
    }
}
