//! A node's lifecycle.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::CoreError;

/// Identifies one node for its whole life, across providers and restarts. Minted by the executor
/// before the cloud call, so the ledger intent exists before the instance does.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub String);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a node is in its life.
///
/// ```text
/// requested → launching → booting → warm ⇄ serving → draining → terminated
///          ↘ refused    ↘ failed    ↘ standby ⇄ serving
///                                   ↘ interrupted (spot) → terminated
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// The ledger holds an intent; no cloud call has returned yet.
    Requested,
    /// The cloud accepted the launch; the instance is being acquired.
    Launching,
    /// Climbing the cold-start ladder (see [`LadderRung`]).
    Booting,
    /// Past the ladder, stopped: a warm node that costs only its disk.
    Warm,
    /// Past the ladder, running without traffic: a warm node that serves the moment it is woken.
    Standby,
    /// Ready: the only state that counts as capacity.
    Serving,
    /// Being taken out of service.
    Draining,
    Terminated,
    /// The cloud or the governor said no before an instance existed.
    Refused,
    /// Launched but never became ready, or broke.
    Failed,
    /// Reclaimed by the cloud (spot interruption).
    Interrupted,
}

impl NodeState {
    pub const ALL: [NodeState; 11] = [
        NodeState::Requested,
        NodeState::Launching,
        NodeState::Booting,
        NodeState::Warm,
        NodeState::Standby,
        NodeState::Serving,
        NodeState::Draining,
        NodeState::Terminated,
        NodeState::Refused,
        NodeState::Failed,
        NodeState::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Requested => "requested",
            NodeState::Launching => "launching",
            NodeState::Booting => "booting",
            NodeState::Warm => "warm",
            NodeState::Standby => "standby",
            NodeState::Serving => "serving",
            NodeState::Draining => "draining",
            NodeState::Terminated => "terminated",
            NodeState::Refused => "refused",
            NodeState::Failed => "failed",
            NodeState::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Result<NodeState, CoreError> {
        NodeState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| CoreError::UnknownVariant {
                kind: "node state",
                value: s.to_string(),
                expected: "requested, launching, booting, warm, standby, serving, draining, terminated, refused, failed, interrupted",
            })
    }

    /// No instance exists any more (or never did): nothing to pay for, nothing to clean up.
    pub fn is_final(self) -> bool {
        matches!(self, NodeState::Terminated | NodeState::Refused)
    }

    /// On its way to capacity: counted as "starting", not as ready.
    pub fn is_starting(self) -> bool {
        matches!(
            self,
            NodeState::Requested | NodeState::Launching | NodeState::Booting
        )
    }

    /// Compute is billed in this state: what GPU-hours, reservation use and running nodes' hold
    /// renewals count. A node parked warm and stopped ([`NodeState::Warm`]) pays for its volumes
    /// only, at its offering's parked price (`Offering::warm_usd_per_hour`; see
    /// [`crate::cost::accrued`]); a running one (standby) pays for its compute.
    pub fn is_billable(self) -> bool {
        matches!(
            self,
            NodeState::Booting | NodeState::Standby | NodeState::Serving | NodeState::Draining
        )
    }

    /// Parked past the ladder, stopped or running: a warm node the planner can wake.
    pub fn is_warm(self) -> bool {
        matches!(self, NodeState::Warm | NodeState::Standby)
    }

    /// Whether the lifecycle allows going from `self` to `next`.
    pub fn can_become(self, next: NodeState) -> bool {
        use NodeState::*;
        matches!(
            (self, next),
            (Requested, Launching | Refused | Failed)
                | (Launching, Booting | Failed | Interrupted | Terminated)
                | (
                    Booting,
                    Warm | Standby | Serving | Failed | Interrupted | Terminated
                )
                | (Warm, Booting | Serving | Interrupted | Terminated | Failed)
                | (
                    Standby,
                    Serving | Draining | Interrupted | Terminated | Failed
                )
                | (Serving, Draining | Interrupted | Failed | Terminated)
                | (Draining, Warm | Standby | Terminated | Interrupted | Failed)
                | (Failed | Interrupted, Terminated)
        )
    }

    /// Checked transition, for code that applies events.
    pub fn transition(self, next: NodeState) -> Result<NodeState, CoreError> {
        if self.can_become(next) {
            Ok(next)
        } else {
            Err(CoreError::InvalidTransition {
                from: self,
                to: next,
            })
        }
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The cold-start ladder: each rung has its own fix, so each is measured on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LadderRung {
    NodeAcquisition,
    ImagePull,
    WeightLoad,
    Compile,
    Warmup,
}

impl LadderRung {
    pub const ALL: [LadderRung; 5] = [
        LadderRung::NodeAcquisition,
        LadderRung::ImagePull,
        LadderRung::WeightLoad,
        LadderRung::Compile,
        LadderRung::Warmup,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LadderRung::NodeAcquisition => "node_acquisition",
            LadderRung::ImagePull => "image_pull",
            LadderRung::WeightLoad => "weight_load",
            LadderRung::Compile => "compile",
            LadderRung::Warmup => "warmup",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_happy_path_is_allowed() {
        let path = [
            NodeState::Requested,
            NodeState::Launching,
            NodeState::Booting,
            NodeState::Warm,
            NodeState::Booting,
            NodeState::Serving,
            NodeState::Draining,
            NodeState::Terminated,
        ];
        for pair in path.windows(2) {
            assert!(pair[0].can_become(pair[1]), "{} -> {}", pair[0], pair[1]);
        }
    }

    #[test]
    fn final_states_go_nowhere() {
        for next in NodeState::ALL {
            assert!(!NodeState::Terminated.can_become(next));
            assert!(!NodeState::Refused.can_become(next));
        }
        assert_eq!(
            NodeState::Serving.transition(NodeState::Launching),
            Err(CoreError::InvalidTransition {
                from: NodeState::Serving,
                to: NodeState::Launching
            })
        );
    }

    #[test]
    fn names_round_trip() {
        for state in NodeState::ALL {
            assert_eq!(NodeState::parse(state.as_str()), Ok(state));
        }
        assert!(NodeState::parse("ready").is_err());
    }
}
