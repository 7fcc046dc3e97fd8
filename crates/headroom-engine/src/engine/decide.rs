//! The decide phase, per owned pool: the pure controller sizes the pool's organic replicas from
//! its signal, the pure planner turns that and the open capacity requests into a plan against
//! the tick's input, and the executor applies it. A cloud refusal that falls back re-plans at
//! once on the same input, updated by what the executor wrote — never by reading the ledger.

use std::collections::{BTreeMap, HashMap, VecDeque};

use headroom_config::Config;
use headroom_core::controller::{
    self, ControllerMemory, Decision, ReplicaCounts, ScalingHold, ScheduledFloor,
};
use headroom_core::planner::{self, Destination, FallbackKind, NodeView, OpenRequest, PlanInput};
use headroom_core::{
    HardAction, NodeState, OfferingId, PoolName, PoolSpec, RefusalReason, Timestamp, chrono_or,
};

use super::input::TickInput;
use super::{Engine, EngineError, decisions, lock};

/// Upper bound on plan-execute rounds in one tick: each cloud refusal removes one offering, so a
/// pool can need one round per offering plus one.
const MAX_FALLBACK_ROUNDS: usize = 16;

/// What the decide phase remembers between ticks.
#[derive(Debug, Default)]
pub(super) struct ControlMemory {
    /// The controller's own memory per pool (breach windows, stabilisation, cooldowns).
    pub memory: HashMap<PoolName, ControllerMemory>,
    /// What this process last wrote to the ledger (or read back) of each pool's memory.
    pub memory_written: HashMap<PoolName, super::controller_memory::Written>,
    /// The controller's last answer per pool, for status.
    pub decisions: HashMap<PoolName, Decision>,
    pub log: decisions::DecisionLog,
    /// Launch intents per pool in the current launch period (the governor's per-period limit).
    pub launch_log: HashMap<PoolName, VecDeque<Timestamp>>,
    /// Replicas handed to a fallback pool: fallback pool → (pool that fell back → replicas).
    pub borrowed: HashMap<PoolName, BTreeMap<PoolName, u32>>,
    /// The last pool-level refusal written, so a standing refusal is not re-recorded every tick.
    pub last_pool_refusal: HashMap<PoolName, (RefusalReason, u32)>,
    /// Unschedulable model-server pods last seen per pool (logged when the count changes).
    pub pending_pods: HashMap<PoolName, u32>,
    /// Each pool's recent demand, which sizes its warm pool.
    pub demand: HashMap<PoolName, headroom_core::DemandHistory>,
    /// Each pool's demand by minute, which its forecast reads.
    pub history: HashMap<PoolName, super::forecasting::PoolHistory>,
    /// The offerings each pool's last plans passed over for quota, so the decision log records
    /// a change, not every tick.
    pub quota_skips: HashMap<PoolName, Vec<OfferingId>>,
}

impl ControlMemory {
    /// Replicas other pools handed to `pool` (it is their smaller model).
    pub fn serving_for_others(&self, pool: &PoolName) -> u32 {
        self.borrowed
            .get(pool)
            .map_or(0, |from| from.values().sum())
    }

    /// Replicas `pool` handed to its fallback pool.
    pub fn handed_to_fallback(&self, pool: &PoolSpec) -> u32 {
        pool.supply
            .fallback_pool
            .as_ref()
            .and_then(|f| self.borrowed.get(f))
            .and_then(|from| from.get(&pool.name))
            .copied()
            .unwrap_or(0)
    }
}

impl Engine {
    pub(super) async fn reconcile_pool(
        &self,
        input: &mut TickInput,
        pool: &PoolSpec,
    ) -> Result<(), EngineError> {
        let now = self.clock.now();
        let warm = self.warm_size(pool);
        let mut counts = organic_counts(input, &pool.name);
        let warm_have = warm_count(input, &pool.name);
        counts.parkable = warm.size.saturating_sub(warm_have);
        counts.warm = input
            .pool_nodes(&pool.name)
            .filter(|e| e.state.is_warm() && !input.reclaiming.contains(&e.client_token))
            .count() as u32;
        counts.supply_refused = self.supply_refused(pool, now);
        let scheduled = scheduled_floor(&self.config, input, pool, now);
        let target = self
            .control_step(pool, counts, scheduled.as_ref(), now)
            .await?;
        let target = self
            .floor_for_pending_pods(pool, counts, target, now)
            .await?;
        if let Some(why) = lock(&self.halted).get(&pool.name) {
            tracing::debug!(pool = %pool.name, %why, "pool halted; not planning");
            return Ok(());
        }
        let mut unserved = 0;
        let mut skipped: Vec<planner::SkippedOffering> = Vec::new();
        for _round in 0..MAX_FALLBACK_ROUNDS {
            let plan = self.plan(input, pool, target, warm.size, now).await?;
            unserved = plan.unserved;
            for skip in &plan.skipped {
                if !skipped.iter().any(|s| s.offering == skip.offering) {
                    skipped.push(skip.clone());
                }
            }
            let previous = lock(&self.control)
                .last_pool_refusal
                .get(&pool.name)
                .copied();
            let applied = self.apply(input, pool, &plan.actions, previous).await?;
            {
                let mut control = lock(&self.control);
                control
                    .launch_log
                    .entry(pool.name.clone())
                    .or_default()
                    .extend(applied.launched_at);
                match applied.pool_refusal {
                    Some(r) => control.last_pool_refusal.insert(pool.name.clone(), r),
                    None => control.last_pool_refusal.remove(&pool.name),
                };
            }
            if !applied.replan {
                break;
            }
        }
        self.hand_to_fallback(pool, unserved);
        self.log_quota_skips(pool, skipped, now).await
    }

    /// Writes the offerings the pool's plans passed over for quota to its decision log when
    /// they change ("skipped: quota", with the quota and what it had left).
    async fn log_quota_skips(
        &self,
        pool: &PoolSpec,
        skipped: Vec<planner::SkippedOffering>,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        let ids: Vec<OfferingId> = skipped.iter().map(|s| s.offering.clone()).collect();
        let changed = {
            let mut control = lock(&self.control);
            let before = control.quota_skips.insert(pool.name.clone(), ids.clone());
            before.unwrap_or_default() != ids
        };
        if !changed || skipped.is_empty() {
            return Ok(());
        }
        for skip in &skipped {
            tracing::info!(pool = %pool.name, offering = %skip.offering, quota = %skip.quota, remaining = skip.remaining, per_node = skip.per_node, "skipped: quota");
        }
        let entry = serde_json::json!({
            "event": "skipped",
            "reason": "quota",
            "skipped": skipped,
        });
        self.log_event(&pool.name, entry, now).await
    }

    /// Asks the controller for the pool's organic target and records its answer. Returns the
    /// target to plan for: in shadow mode, what the pool has.
    async fn control_step(
        &self,
        pool: &PoolSpec,
        counts: ReplicaCounts,
        scheduled: Option<&ScheduledFloor>,
        now: Timestamp,
    ) -> Result<u32, EngineError> {
        let signal = self.signal(&pool.name);
        let (target, closed) = {
            let mut control = lock(&self.control);
            // The memory is read back from the ledger when this process takes the pool
            // (`controller_memory.rs`). Without one (a pool never decided, or a memory that does
            // not read back) the controller starts from the replicas that exist, so a pool with
            // no signal yet holds where it is instead of draining to zero.
            // Taken out and put back: the memory holds the controller's recent series, so it
            // is moved, not copied, every activation.
            let memory = control
                .memory
                .remove(&pool.name)
                .unwrap_or(ControllerMemory {
                    target: counts.provisioned(),
                    ..ControllerMemory::default()
                });
            let lead = super::forecasting::forecast_lead(pool);
            let forecast = control
                .history
                .get(&pool.name)
                .filter(|_| pool.scaling.forecast)
                .and_then(|h| h.record.forecast(now, lead));
            let mut decision = controller::decide_ahead(
                pool,
                signal.as_ref(),
                counts,
                memory,
                forecast.as_ref(),
                scheduled,
                now,
            );
            if matches!(
                decision.scaling_hold,
                Some(ScalingHold::SignalMissing | ScalingHold::SignalStale)
            ) && let Some(why) = self.signal_source_error(&pool.name)
            {
                decision.reason = format!("{}; the signal source failed: {why}", decision.reason);
            }
            let previous_hold = control
                .decisions
                .get(&pool.name)
                .and_then(|d| d.scaling_hold);
            if decision.scaling_hold.is_some() && decision.scaling_hold != previous_hold {
                tracing::warn!(pool = %pool.name, hold = ?decision.scaling_hold, reason = %decision.reason, "pool is holding");
            }
            control
                .memory
                .insert(pool.name.clone(), std::mem::take(&mut decision.memory));
            if decision.scaling_hold.is_none() {
                // Measured demand only: a forecast neither sizes the warm pool nor teaches
                // itself.
                let measured = super::forecasting::measured_demand(&decision);
                let demand = measured.max(pool.min_replicas);
                super::warm_pool::note_demand(&mut control.demand, pool, demand, now);
                control.history.entry(pool.name.clone()).or_default().note(
                    now,
                    measured,
                    forecast.as_ref(),
                );
            }
            self.count_decision(pool, &decision);
            let closed = control.log.record(pool, &decision, signal, counts, now);
            let target = if pool.scaling.shadow {
                // Shadow mode: the decision is on record; the pool keeps what it has.
                counts.provisioned()
            } else {
                decision.target
            };
            control.decisions.insert(pool.name.clone(), decision);
            (target, closed)
        };
        // Stamped with the entry's last activation, not its first: the ledger keeps a pool's log
        // for DECISION_RETENTION by these instants, so an answer that stood for longer is kept
        // while it is recent.
        if let Some(closed) = closed
            && let Ok(json) = serde_json::to_string(&closed)
        {
            self.ledger
                .append_decision(&pool.name, closed.last_at, &json)
                .await?;
        }
        self.persist_controller_memory(&pool.name, now).await?;
        self.persist_demand(&pool.name, now).await?;
        Ok(target)
    }

    fn count_decision(&self, pool: &PoolSpec, decision: &Decision) {
        let rule = serde_json::to_value(decision.rule)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        self.metrics
            .decisions
            .get_or_create(&crate::metrics::RuleLabels {
                pool: pool.name.to_string(),
                account: pool.account.to_string(),
                rule,
            })
            .inc();
    }

    /// One plan for `pool` from the tick's input: the pure planner and governor.
    async fn plan(
        &self,
        input: &mut TickInput,
        pool: &PoolSpec,
        controller_target: u32,
        warm_target: u32,
        now: Timestamp,
    ) -> Result<planner::Plan, EngineError> {
        let nodes = node_views(input, &pool.name);
        let offerings = self.offering_choices(pool, &input.live, now);
        let quotas = self.quotas_for(pool);
        let requests: Vec<OpenRequest> = input
            .open
            .iter()
            .filter(|r| r.pool == pool.name)
            .map(|r| OpenRequest {
                id: r.id.clone(),
                replicas: r.replicas,
                priority: r.priority,
                created_at: r.created_at,
            })
            .collect();
        let (launches_in_period, borrowed) = {
            let mut control = lock(&self.control);
            let period = chrono_or(pool.supply.launch_period, chrono::Duration::minutes(1));
            let log = control.launch_log.entry(pool.name.clone()).or_default();
            while log.front().is_some_and(|t| *t <= now - period) {
                log.pop_front();
            }
            (log.len() as u32, control.serving_for_others(&pool.name))
        };
        let global_room = self
            .config
            .engine
            .global_max_nodes
            .map(|max| max.saturating_sub(input.live.len() as u32));
        let budget_action = input
            .budgets
            .get(&pool.account)
            .map_or(HardAction::Clamp, |b| b.hard_action);
        let budget = input
            .standing(self.ledger.as_ref(), &pool.account, now)
            .await?;
        let plan_input = PlanInput {
            pool,
            offerings: &offerings,
            nodes: &nodes,
            controller_target,
            borrowed,
            requests: &requests,
            budget,
            budget_action,
            hold_horizon: self.config.engine.hold_horizon,
            launches_in_period,
            global_room,
            warm_target: Some(warm_target),
            quotas: &quotas,
        };
        let plan = planner::plan(&plan_input);
        // Checked in release builds too: a plan that breaks a money or instance invariant is a
        // planner bug, and applying it could spend or buy what nobody allowed. Nothing of it is
        // applied, and the pool stops until someone looks.
        if let Err(violation) = planner::guard::check(&plan_input, &plan) {
            self.refuse_violation(pool, "a plan", &violation);
            return Ok(planner::Plan::default());
        }
        Ok(plan)
    }

    /// Hands the organic replicas no offering of `pool` could supply to its fallback pool (a
    /// smaller model), or takes them back once the pool can supply them again.
    fn hand_to_fallback(&self, pool: &PoolSpec, unserved: u32) {
        let Some(fallback) = &pool.supply.fallback_pool else {
            return;
        };
        let before = {
            let mut control = lock(&self.control);
            let from = control.borrowed.entry(fallback.clone()).or_default();
            let before = from.get(&pool.name).copied().unwrap_or(0);
            if unserved == 0 {
                from.remove(&pool.name);
            } else {
                from.insert(pool.name.clone(), unserved);
            }
            before
        };
        if unserved > before {
            tracing::warn!(pool = %pool.name, fallback = %fallback, replicas = unserved, "no offering left; the fallback pool serves the traffic");
            self.count_fallback(pool, FallbackKind::SmallerModel, (unserved - before) as u64);
        }
    }
}

/// The pool's organic serving replicas (no capacity request, not warming), as the controller
/// counts them.
/// The floor `pool`'s declared windows (its configuration's and the API's) set at `now`, one
/// cold start ahead of each window's start so that its capacity is ready when it opens.
fn scheduled_floor(
    config: &Config,
    input: &TickInput,
    pool: &PoolSpec,
    now: Timestamp,
) -> Option<ScheduledFloor> {
    let configured = config.schedules.get(&pool.name).into_iter().flatten();
    let declared = input
        .windows
        .get(&pool.name)
        .into_iter()
        .flatten()
        .map(|(_, w)| w);
    // Read in place: this runs for every pool every tick.
    headroom_config::schedule::floor_at(configured.chain(declared), now, pool.ladder.cold_total())
}

fn organic_counts(input: &TickInput, pool: &PoolName) -> ReplicaCounts {
    let mut counts = ReplicaCounts::default();
    for e in input
        .pool_nodes(pool)
        .filter(|e| e.request.is_none() && e.destination == Destination::Serve)
    {
        match e.state {
            NodeState::Requested | NodeState::Launching => counts.requested += 1,
            NodeState::Booting => counts.starting += 1,
            NodeState::Serving => counts.ready += 1,
            NodeState::Draining => counts.draining += 1,
            _ => {}
        }
    }
    counts
}

/// The pool's warm nodes, parked or climbing to park.
pub(super) fn warm_count(input: &TickInput, pool: &PoolName) -> u32 {
    input
        .pool_nodes(pool)
        .filter(|e| {
            e.state.is_warm() || (e.state.is_starting() && e.destination == Destination::Warm)
        })
        .count() as u32
}

/// The planner's view of the pool's live nodes. Nodes of a cancelled request go back to organic
/// demand (and scale-in); nodes of a request closed by a refusal stay with it, since what was
/// delivered is still wanted.
fn node_views(input: &TickInput, pool: &PoolName) -> Vec<NodeView> {
    input
        .pool_nodes(pool)
        .map(|e| NodeView {
            id: e.node.clone(),
            state: e.state,
            offering: e.offering.clone(),
            market: e.market,
            request: e.request.clone().filter(|r| !input.cancelled.contains(r)),
            destination: e.destination,
            price_usd_per_hour: e.price_usd_per_hour,
            reclaiming: input.reclaiming.contains(&e.client_token),
        })
        .collect()
}
