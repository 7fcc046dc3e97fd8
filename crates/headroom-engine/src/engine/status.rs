//! The status phase: what `GET /v1/pools` shows for each pool (`crate::views::PoolStatus`),
//! computed from the tick's input and the decide phase's memory once the plans are applied, and
//! the pool gauges of `/metrics`.

use std::collections::{BTreeMap, HashMap};

use headroom_core::planner::Destination;
use headroom_core::shedding::{self, SheddingInput, TierLoad};
use headroom_core::{NodeState, PoolName, PoolSpec, Priority, Timestamp, chrono_or};
use headroom_ledger::NodeEvent;

use super::input::TickInput;
use super::{Engine, lock};
use crate::views::{Clamp, PoolStatus};

/// Nodes on their way to serving, read against the pool's drain objective.
#[derive(Debug, Default)]
struct Arriving {
    /// Starting nodes whose remaining ladder ends within the objective.
    in_time: u32,
    /// How long until the soonest of them serves.
    next_in: Option<chrono::Duration>,
    /// How long until each of them serves.
    etas: Vec<chrono::Duration>,
}

impl Engine {
    pub fn pool_statuses(&self) -> Vec<PoolStatus> {
        lock(&self.status).values().cloned().collect()
    }

    pub fn pool_status(&self, pool: &PoolName) -> Option<PoolStatus> {
        lock(&self.status).get(pool).cloned()
    }

    pub(super) fn publish_status(&self, input: &TickInput) {
        let now = self.clock.now();
        let statuses: BTreeMap<PoolName, PoolStatus> = self
            .config
            .pools
            .iter()
            .map(|pool| {
                let s = self.pool_status_now(input, pool, now);
                self.export_pool_metrics(&s);
                self.export_capacity_metrics(input, pool, &s);
                (pool.name.clone(), s)
            })
            .collect();
        *lock(&self.status) = statuses;
        let mut serving: HashMap<PoolName, Vec<(String, u32)>> = HashMap::new();
        for e in input.live.iter().filter(|e| e.state == NodeState::Serving) {
            if let Some(instance) = &e.instance {
                serving
                    .entry(e.pool.clone())
                    .or_default()
                    .push((instance.clone(), e.gpus));
            }
        }
        *lock(&self.serving) = serving;
    }

    /// The instances serving `pool` at the end of the last tick, with their GPUs: what the
    /// serving layer routes to.
    pub fn serving_instances(&self, pool: &PoolName) -> Vec<(String, u32)> {
        lock(&self.serving).get(pool).cloned().unwrap_or_default()
    }

    fn pool_status_now(&self, input: &TickInput, pool: &PoolSpec, now: Timestamp) -> PoolStatus {
        let mut s = PoolStatus::empty(pool);
        s.reconciled_here = input.owned.contains(&pool.name);
        let arriving = count_nodes(&mut s, input, pool, now);
        let requested_by_clients: u32 = input
            .open
            .iter()
            .filter(|r| r.pool == pool.name)
            .map(|r| r.replicas)
            .sum();
        s.warm_pool = Some(self.warm_size(pool));
        let control = lock(&self.control);
        let decision = control.decisions.get(&pool.name);
        if let Some(decision) = decision {
            s.desired = (decision.target + requested_by_clients).min(pool.max_replicas);
            s.unclamped_desired = decision.unclamped.max(pool.min_replicas) + requested_by_clients;
            s.scaling_hold = decision.scaling_hold;
            s.limited = decision.limited;
            s.rule = Some(decision.rule);
            s.reason = Some(decision.reason.clone());
            s.classification = decision.classification;
        }
        s.last_signal = self.signal(&pool.name);
        s.signal_source_error = self.signal_source_error(&pool.name);
        s.replica_queues = self.replica_queues(&pool.name);
        s.clamped = control
            .last_pool_refusal
            .get(&pool.name)
            .map(|(reason, n)| Clamp {
                reason: reason.code(),
                replicas: *n,
            });
        s.forecast = control
            .history
            .get(&pool.name)
            .map(|h| h.status(super::forecasting::forecast_lead(pool)));
        s.halted = lock(&self.halted).get(&pool.name).cloned();
        s.serving_for_others = control.serving_for_others(&pool.name);
        s.handed_to_fallback = control.handed_to_fallback(pool);
        // Shedding follows measured demand only: with no usable signal the pool holds and
        // admits everything (its own alert says the signal is missing). Neither the floor nor
        // a forecast is demand: a pool starting its `min_replicas`, or launching ahead of a
        // rise, with nothing queued sheds nothing.
        s.demand = decision
            .filter(|d| d.scaling_hold.is_none())
            .map_or(0, super::forecasting::measured_demand);
        drop(control);
        // A shed client should come back when capacity is due; with none on its way, when a
        // refused offering may be tried again, else after a cold start.
        let retry = arriving
            .next_in
            .or_else(|| {
                self.soonest_retry(&pool.offerings, now)
                    .map(|until| until - now)
            })
            .and_then(|d| d.to_std().ok())
            .unwrap_or(pool.ladder.cold_total());
        s.admission = shedding::tier_answers(&SheddingInput {
            wanted: s.demand.saturating_sub(s.handed_to_fallback),
            ready: s.ready,
            arriving_in_time: arriving.in_time,
            next_capacity_in: retry,
            // Planned at the utilisation the pool is sized for: a tier whose queue is capped at
            // exactly what full throughput starts in time would miss by noise.
            per_replica_rps: pool.scaling.replica_throughput_rps * pool.scaling.target_utilization,
            arriving: arriving
                .etas
                .iter()
                .filter_map(|d| d.to_std().ok())
                .collect(),
            tiers: self.tier_loads(pool),
        });
        s
    }

    /// Per-tier load for deadline-aware shedding: when the pool sets a deadline for some tier
    /// and the latest signal counts the tiers' queues; otherwise none (the coverage rule).
    fn tier_loads(&self, pool: &PoolSpec) -> Vec<TierLoad> {
        let deadlines = &pool.scaling.shed_deadlines;
        if deadlines.iter().all(Option::is_none) {
            return Vec::new();
        }
        let Some(tiers) = self.tier_signal(&pool.name) else {
            return Vec::new();
        };
        let mut loads: Vec<TierLoad> = [
            Priority::Critical,
            Priority::High,
            Priority::Normal,
            Priority::Low,
        ]
        .into_iter()
        .map(|priority| TierLoad {
            priority,
            queued: tiers.queued.get(&priority).copied().unwrap_or(0),
            arrival_rps: tiers.arrival_rps.get(&priority).copied().unwrap_or(0.0),
            deadline: pool.scaling.shed_deadline(priority),
        })
        .collect();
        loads.retain(|t| t.queued > 0 || t.arrival_rps > 0.0 || t.deadline.is_some());
        loads
    }

    /// Requested against delivered, in GPUs: the desired replicas at the GPUs of a node of the
    /// pool's first offering (what it asks for first), against the GPUs of the nodes serving
    /// it (counted as `ready` is: not being reclaimed), whatever offering they landed on.
    fn export_capacity_metrics(&self, input: &TickInput, pool: &PoolSpec, s: &PoolStatus) {
        let per_node = self.config.first_offering_gpus(pool).unwrap_or(0);
        let delivered: u64 = input
            .pool_nodes(&pool.name)
            .filter(|e| {
                e.state == NodeState::Serving && !input.reclaiming.contains(&e.client_token)
            })
            .map(|e| u64::from(e.gpus))
            .sum();
        let labels = crate::metrics::PoolLabels::of(pool);
        self.metrics
            .capacity_requested_gpus
            .get_or_create(&labels)
            .set(i64::from(s.desired) * i64::from(per_node));
        self.metrics
            .capacity_delivered_gpus
            .get_or_create(&labels)
            .set(i64::try_from(delivered).unwrap_or(i64::MAX));
    }

    fn export_pool_metrics(&self, s: &PoolStatus) {
        let label = |state: &str| crate::metrics::PoolStateLabels {
            pool: s.name.to_string(),
            account: s.account.clone(),
            state: state.to_string(),
        };
        for (state, n) in [
            ("requested", s.requested),
            ("starting", s.starting),
            ("ready", s.ready),
            ("warm", s.warm),
            ("warming", s.warming),
            ("draining", s.draining),
        ] {
            self.metrics
                .replicas
                .get_or_create(&label(state))
                .set(n as i64);
        }
        let pool_label = crate::metrics::PoolLabels {
            pool: s.name.to_string(),
            account: s.account.clone(),
        };
        self.metrics
            .desired
            .get_or_create(&pool_label)
            .set(s.desired as i64);
        if let Some(f) = &s.forecast {
            let expected = f.expected.as_ref().map_or(0, |e| e.replicas);
            self.metrics
                .forecast_replicas
                .get_or_create(&pool_label)
                .set(i64::from(expected));
            if let Some(error) = f.mean_abs_error_replicas {
                self.metrics
                    .forecast_error_replicas
                    .get_or_create(&pool_label)
                    .set(error);
            }
        }
        if let Some(signal) = &s.last_signal {
            self.metrics
                .queue_depth
                .get_or_create(&pool_label)
                .set(signal.queue_depth.min(i64::MAX as u64) as i64);
            if let Some(age) = signal.oldest_age_s {
                self.metrics
                    .oldest_age_seconds
                    .get_or_create(&pool_label)
                    .set(age);
            }
        }
        if let Some(spread) = &s.replica_queues {
            self.metrics
                .replica_queue_skew
                .get_or_create(&pool_label)
                .set(spread.skew);
        }
    }
}

/// Counts the pool's live nodes by state into `s`, and what of them arrives within the pool's
/// drain objective (capacity that lands in time counts against the shortfall).
fn count_nodes(s: &mut PoolStatus, input: &TickInput, pool: &PoolSpec, now: Timestamp) -> Arriving {
    let objective = chrono_or(pool.scaling.backlog_drain, chrono::Duration::minutes(1));
    let mut arriving = Arriving::default();
    for e in input.pool_nodes(&pool.name) {
        match e.state {
            _ if e.state.is_starting() && e.destination == Destination::Warm => s.warming += 1,
            NodeState::Requested | NodeState::Launching => s.requested += 1,
            NodeState::Booting => s.starting += 1,
            NodeState::Serving if !input.reclaiming.contains(&e.client_token) => s.ready += 1,
            NodeState::Serving => {}
            NodeState::Warm => s.warm += 1,
            NodeState::Standby => {
                s.warm += 1;
                s.warm_running += 1;
            }
            NodeState::Draining => s.draining += 1,
            _ => {}
        }
        if e.state.is_starting() && e.destination == Destination::Serve {
            let remaining = remaining_ladder(pool, e, now);
            if remaining <= objective {
                arriving.in_time += 1;
            }
            arriving.next_in = Some(arriving.next_in.map_or(remaining, |n| n.min(remaining)));
            arriving.etas.push(remaining);
        }
    }
    arriving
}

/// How long a starting node still has to climb, by the pool's ladder estimates: a launch climbs
/// the whole ladder, a woken stopped node only the rungs after its disk.
fn remaining_ladder(pool: &PoolSpec, e: &NodeEvent, now: Timestamp) -> chrono::Duration {
    if e.is_hold_renewal() {
        // A climbing node's hold is renewed only once it has overrun the ladder's estimates
        // (the horizon is at least twice the longest ladder): it is due now.
        return chrono::Duration::zero();
    }
    let total = match (e.state, e.reason.as_deref()) {
        (NodeState::Booting, Some(headroom_ledger::WAKE)) => pool.ladder.from_stopped_total(),
        (NodeState::Booting, _) => pool
            .ladder
            .cold_total()
            .saturating_sub(pool.ladder.node_acquisition),
        _ => pool.ladder.cold_total(),
    };
    let total = chrono::Duration::from_std(total).unwrap_or(chrono::Duration::zero());
    (total - (now - e.at)).max(chrono::Duration::zero())
}
