//! The execute phase: a plan's actions, each one a ledger intent, a cloud call and a ledger
//! outcome, in that order (invariant 2). Nothing here decides; what to do is in the plan.

use headroom_cloud::{CloudError, InstanceId, LaunchSpec, OwnershipTags};
use headroom_core::budget::BudgetStanding;
use headroom_core::planner::{Action, Destination, FallbackKind, guard};
use headroom_core::{
    CapacityRequest, ErrorClass, Money, NodeId, NodeState, Offering, OfferingId, PoolSpec,
    RefusalReason, RequestId, Timestamp, TransientVerdict, WarmMode,
};
use headroom_ledger::{HoldOutcome, NodeEvent, RefusalRecord};
use tracing::Instrument;

use super::input::TickInput;
use super::{Engine, EngineError, lock};

/// Extra attempts at a throttled launch within one tick (100 ms .. 2 s apart, jittered).
const THROTTLE_RETRIES: usize = 3;

/// How one action went, for the rest of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Done (or nothing to do); go on with the next action.
    Next,
    /// A cloud refused and the rest of the plan assumed an offering that is gone: plan again.
    Replan,
    /// Stop this plan here (over budget, the pool's request is invalid, or a launch broke an
    /// invariant).
    Stop,
}

/// What one plan's execution leaves for the caller.
#[derive(Debug, Default)]
pub(super) struct Applied {
    /// A cloud refused a launch or wake that falls back: the caller plans again at once.
    pub replan: bool,
    /// The pool-level refusal (of organic demand) this plan stands on, if any.
    pub pool_refusal: Option<(RefusalReason, u32)>,
    /// When each launch intent was admitted (for the per-period launch limit).
    pub launched_at: Vec<Timestamp>,
    /// The pool-level refusal the previous plan stood on: the same one is not written again.
    previous_refusal: Option<(RefusalReason, u32)>,
}

impl Engine {
    /// Writes a node event and applies it to the tick's input. Every node event the tick writes
    /// goes through here (or [`Engine::place_hold`]), so the input stays what the ledger says.
    pub(super) async fn record(
        &self,
        input: &mut TickInput,
        event: NodeEvent,
    ) -> Result<(), EngineError> {
        self.ledger.append_node_event(&event).await?;
        input.apply(&event);
        Ok(())
    }

    /// Writes an event that places a hold if its budget can carry it (one transaction, the
    /// ledger's guard), and applies it to the input when admitted (a renewal's admission also
    /// drops the account's cached standing there) and notes when it lapses. Launches, wakes
    /// and renewals all come through here.
    pub(super) async fn place_hold(
        &self,
        input: &mut TickInput,
        event: &NodeEvent,
    ) -> Result<HoldOutcome, EngineError> {
        let outcome = self
            .ledger
            .place_hold(event)
            .instrument(tracing::info_span!("ledger.place_hold", node = %event.node))
            .await?;
        if outcome == HoldOutcome::Placed {
            input.apply(event);
            lock(&self.renewals).note(event);
        }
        Ok(outcome)
    }

    /// Applies a plan's actions in order. `previous_refusal` is the pool-level refusal the
    /// previous plan stood on, which is not recorded again while it stands.
    pub(super) async fn apply(
        &self,
        input: &mut TickInput,
        pool: &PoolSpec,
        actions: &[Action],
        previous_refusal: Option<(RefusalReason, u32)>,
    ) -> Result<Applied, EngineError> {
        let mut applied = Applied {
            previous_refusal,
            ..Applied::default()
        };
        for action in actions {
            let step = match action {
                Action::Launch {
                    offering,
                    request,
                    destination,
                    hold,
                    fallbacks,
                } => {
                    let launch = Launch {
                        offering,
                        request: request.as_ref(),
                        destination: *destination,
                        hold: *hold,
                        fallbacks,
                    };
                    self.launch(input, pool, launch, &mut applied).await?
                }
                Action::Wake {
                    node,
                    request,
                    hold,
                } => {
                    self.wake_node(input, pool, node, request.as_ref(), *hold, &mut applied)
                        .await?
                }
                Action::Release { node, to_warm } => {
                    self.release(input, node, *to_warm).await?;
                    Step::Next
                }
                Action::Refuse {
                    request,
                    count,
                    reason,
                } => {
                    let refusal = Refusal {
                        request: request.as_ref(),
                        count: *count,
                        reason: *reason,
                        detail: refusal_detail(
                            pool,
                            *reason,
                            *count,
                            request.as_ref(),
                            &input.open,
                        ),
                    };
                    self.refuse(input, pool, refusal, &mut applied).await?;
                    Step::Next
                }
            };
            match step {
                Step::Next => {}
                Step::Replan => {
                    applied.replan = true;
                    break;
                }
                Step::Stop => break,
            }
        }
        Ok(applied)
    }

    /// A launch: the intent with its hold, admitted against the budget in the transaction that
    /// records it, then the cloud call and its outcome.
    async fn launch(
        &self,
        input: &mut TickInput,
        pool: &PoolSpec,
        launch: Launch<'_>,
        applied: &mut Applied,
    ) -> Result<Step, EngineError> {
        let Some(offering) = self.config.offering(launch.offering).cloned() else {
            return Ok(Step::Next);
        };
        let now = self.clock.now();
        let node = self.ids.node_id();
        // The ledger records the price in force (what the node costs); the cloud is asked with
        // the configured one (for spot, the most we pay).
        let intent = NodeEvent::launch_intent(
            pool,
            &self.priced(&offering),
            node,
            launch.request.cloned(),
            launch.destination,
            launch.hold,
            now,
        );
        // Checked in every build: the token is the cloud's idempotency key, so a live node's
        // would buy nothing new and leave two ledger nodes claiming one instance.
        let live = input
            .live
            .iter()
            .map(|e| (&e.node, &e.pool, e.client_token.as_str()));
        if let Err(violation) =
            guard::fresh_client_token(&pool.name, &intent.node, &intent.client_token, live)
        {
            self.refuse_violation(pool, "a launch", &violation);
            return Ok(Step::Stop);
        }
        // Intent first, with its hold: if we die after the cloud call, the restart finds it.
        let span = self.action_span("launch", pool, launch.request, &intent.node);
        if !self
            .hold_or_refuse(input, pool, &intent, applied)
            .instrument(span.clone())
            .await?
        {
            return Ok(Step::Stop);
        }
        applied.launched_at.push(now);
        let refused = self
            .launch_for_intent(input, pool, &offering, &intent)
            .instrument(span)
            .await?;
        Ok(match refused {
            Some(reason) if reason.falls_back() => Step::Replan,
            Some(RefusalReason::Cloud(ErrorClass::InvalidRequest)) => Step::Stop,
            Some(_) => Step::Next,
            None => {
                for kind in launch.fallbacks {
                    self.count_fallback(pool, *kind, 1);
                }
                if launch.fallbacks.contains(&FallbackKind::Cloud) {
                    self.log_cloud_fallback(pool, &offering, launch.fallbacks, now)
                        .await?;
                }
                Step::Next
            }
        })
    }

    /// A launch on another cloud than the pool's first choice (made, or awaiting its retry) goes
    /// into the decision log (the ledger's record) with why: the nodes of one pool and one
    /// budget now run on two clouds.
    async fn log_cloud_fallback(
        &self,
        pool: &PoolSpec,
        offering: &headroom_core::Offering,
        kinds: &[FallbackKind],
        now: Timestamp,
    ) -> Result<(), EngineError> {
        let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
        let first = pool
            .offerings
            .iter()
            .filter_map(|id| self.config.offering(id))
            .find(|o| o.provider != offering.provider);
        let from = first.map_or_else(String::new, |o| format!(" from {} on {}", o.id, o.provider));
        let entry = serde_json::json!({
            "event": "fallback",
            "kinds": kinds,
            "offering": offering.id,
            "provider": offering.provider,
            "region": offering.region,
            "reason": format!(
                "fallback ({}){from} to {} on {} in {}, the best offering left by price and recent refusals",
                kinds.join(", "), offering.id, offering.provider, offering.region
            ),
        });
        self.log_event(&pool.name, entry, now).await
    }

    /// Wakes a warm node: a running one serves the moment traffic is routed to it (with a
    /// cluster: once it shows the model server Ready); a stopped one is started and climbs the
    /// rest of the ladder.
    async fn wake_node(
        &self,
        input: &mut TickInput,
        pool: &PoolSpec,
        node: &NodeId,
        request: Option<&RequestId>,
        hold: Money,
        applied: &mut Applied,
    ) -> Result<Step, EngineError> {
        let Some(last) = input.node(node).cloned() else {
            return Ok(Step::Next);
        };
        let Some(instance) = last.instance.clone().map(InstanceId) else {
            return Ok(Step::Next);
        };
        let now = self.clock.now();
        let running = last.state == NodeState::Standby;
        let serves_now = running
            && self
                .cluster
                .as_ref()
                .is_none_or(|c| self.standby_serves_now(c, &last));
        let next = if serves_now {
            NodeState::Serving
        } else {
            NodeState::Booting
        };
        let mut e = last.next(next, headroom_ledger::WAKE, now);
        e.request = request.cloned();
        e.destination = Destination::Serve;
        e.hold = hold;
        let span = self.action_span("wake", pool, request, node);
        if !self
            .hold_or_refuse(input, pool, &e, applied)
            .instrument(span.clone())
            .await?
        {
            return Ok(Step::Stop);
        }
        if running {
            if let Some(cluster) = &self.cluster
                && !serves_now
            {
                self.uncordon_standby(cluster, &last).await;
            }
            return Ok(Step::Next);
        }
        let Err(err) = self.cloud.start(&instance).instrument(span).await else {
            return Ok(Step::Next);
        };
        let back = NodeEvent {
            request: None,
            ..e.next(NodeState::Warm, err.code(), self.clock.now())
        };
        self.record(input, back).await?;
        self.append_refusal(
            input,
            &RefusalRecord {
                pool: pool.name.clone(),
                request: request.cloned(),
                node: Some(node.clone()),
                offering: Some(last.offering.clone()),
                replicas: 1,
                reason: RefusalReason::Cloud(err.class()),
                detail: format!("waking {node}: {err}"),
                at: now,
            },
        )
        .await?;
        if err.class().falls_back() {
            self.mark_unavailable(&last.offering);
            return Ok(Step::Replan);
        }
        Ok(Step::Next)
    }

    /// Releases a node: a warm one above the floor is simply ended; a serving one drains (with
    /// a cluster, across ticks) and is then parked warm or terminated.
    pub(super) async fn release(
        &self,
        input: &mut TickInput,
        node: &NodeId,
        to_warm: bool,
    ) -> Result<(), EngineError> {
        let Some(last) = input.node(node).cloned() else {
            return Ok(());
        };
        if last.state.is_warm() {
            // A warm node above the floor serves nobody: nothing to drain.
            return self.terminate_node(input, &last, "warm_surplus").await;
        }
        if last.state == NodeState::Launching {
            // Swapped for a wake before it was acquired (the planner's `wake_ahead`): nothing
            // runs on it yet.
            return self.terminate_node(input, &last, "swapped_for_wake").await;
        }
        let now = self.clock.now();
        let reason = if to_warm {
            "release_to_warm"
        } else {
            "release_terminate"
        };
        let draining = last.next(NodeState::Draining, reason, now);
        self.record(input, draining.clone()).await?;
        if let Some(cluster) = &self.cluster
            && self.drain(cluster, &draining, None, now).await?
        {
            return Ok(()); // still draining: the next ticks finish it
        }
        if to_warm {
            self.stop_to_warm(input, &draining, "released").await
        } else {
            self.terminate_node(input, &draining, "released").await
        }
    }

    /// Parks the node warm, detached from any request: running (standby) when its pool keeps
    /// warm nodes running, else stopped (it keeps its disk, and pays for it: see [`Self::park`]).
    pub(super) async fn stop_to_warm(
        &self,
        input: &mut TickInput,
        last: &NodeEvent,
        reason: &str,
    ) -> Result<(), EngineError> {
        let Some(id) = last.instance.clone().map(InstanceId) else {
            return self.terminate_node(input, last, reason).await;
        };
        if self
            .config
            .pool(&last.pool)
            .is_some_and(|p| p.supply.warm_mode == WarmMode::Running)
        {
            let mut e = last.next(NodeState::Standby, reason, self.clock.now());
            e.request = None;
            e.destination = Destination::Warm;
            return self.record(input, e).await;
        }
        match self.cloud.stop(&id).await {
            Ok(_) => {
                let mut e = last.next(NodeState::Warm, reason, self.clock.now());
                e.request = None;
                // The parked price in force: a node launched before the ledger recorded one
                // pays its volumes from its first park on.
                if let Some(offering) = self.config.offering(&last.offering) {
                    e.parked_usd_per_hour = offering.warm_usd_per_hour;
                }
                self.park(input, last, e).await?;
            }
            Err(e) => {
                tracing::warn!(node = %last.node, error = %e, "stop failed; next tick retries")
            }
        }
        Ok(())
    }

    /// Records a stopped node parked warm (`parked`, following `last`) with a hold of its parked
    /// price for the hold horizon, admitted against its budget like a launch: its volumes are
    /// billed while it is parked, and every state that costs money is covered by a hold. When
    /// the budget cannot carry that hold, the node is released instead, with a `budget` refusal
    /// naming it. A node without a parked price costs nothing parked and holds nothing.
    async fn park(
        &self,
        input: &mut TickInput,
        last: &NodeEvent,
        mut parked: NodeEvent,
    ) -> Result<(), EngineError> {
        let hold = parked
            .parked_usd_per_hour
            .per_hour_for(self.config.engine.hold_horizon);
        if hold <= Money::ZERO {
            return self.record(input, parked).await;
        }
        parked.hold = hold;
        let HoldOutcome::OverBudget(standing) = self.place_hold(input, &parked).await? else {
            return Ok(());
        };
        if let Some(pool) = self.config.pool(&last.pool) {
            let detail = park_refused_detail(last, hold, &standing);
            tracing::warn!(pool = %pool.name, node = %last.node, %detail, "park hold refused");
            // The node was leaving its request (if it had one) to park: the refusal is the
            // parked node's, and closes no request.
            let detached = NodeEvent {
                request: None,
                ..last.clone()
            };
            self.record_budget_refusal(input, pool, &detached, detail)
                .await?;
        }
        self.terminate_node(input, last, "budget").await
    }

    /// Terminates the node's instance, if it has one, and records the end of the node.
    pub(super) async fn terminate_node(
        &self,
        input: &mut TickInput,
        last: &NodeEvent,
        reason: &str,
    ) -> Result<(), EngineError> {
        if let Some(id) = last.instance.clone().map(InstanceId) {
            match self.cloud.terminate(&id).await {
                Ok(()) | Err(CloudError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(node = %last.node, error = %e, "terminate failed; next tick retries");
                    return Ok(());
                }
            }
        }
        let end = last.next(NodeState::Terminated, reason, self.clock.now());
        self.record(input, end).await
    }

    /// Sends the launch for an intent already in the ledger and records the outcome.
    /// Returns the reason the intent was refused, if it was, for the planner to fall back on.
    pub(super) async fn launch_for_intent(
        &self,
        input: &mut TickInput,
        pool: &PoolSpec,
        offering: &Offering,
        intent: &NodeEvent,
    ) -> Result<Option<RefusalReason>, EngineError> {
        let spec = self.launch_spec(pool, offering, intent);
        // Throttling is retried here, a few times with jittered backoff, within the tick; past
        // that the intent stays and the next tick repeats it with the same client token. The
        // backoff waits on the engine's clock: real time in `serve`, none in the simulator.
        let result = {
            use backon::{ExponentialBuilder, Retryable};
            (|| self.cloud.launch(&spec))
                .retry(
                    ExponentialBuilder::default()
                        .with_min_delay(std::time::Duration::from_millis(100))
                        .with_max_delay(std::time::Duration::from_secs(2))
                        .with_max_times(THROTTLE_RETRIES)
                        .with_jitter(),
                )
                .sleep(headroom_cloud::clock::sleeper(self.clock.clone()))
                .when(|e: &CloudError| e.class() == ErrorClass::Throttled)
                .await
        };
        let now = self.clock.now();
        match result {
            Ok(instance) => {
                let mut e = intent.next(NodeState::Launching, "accepted", now);
                e.instance = Some(instance.id.0);
                self.record(input, e).await?;
                self.clear_transient(&pool.name, &offering.id);
                self.note_launched(&offering.id, now);
                self.note_quota_draw(&offering.id);
                Ok(None)
            }
            Err(err) if err.class() == ErrorClass::Transient => {
                // 5xx or a timeout: repeated by the next ticks with the same client token, a
                // bounded number of times within the window; then the offering is refused.
                let failures = match self.note_transient(&pool.name, &offering.id, &err, now) {
                    TransientVerdict::Retry { failures } => {
                        tracing::warn!(node = %intent.node, error = %err, failures, "launch deferred to the next tick");
                        return Ok(None);
                    }
                    TransientVerdict::Refuse { failures } => failures,
                };
                let window = self.config.engine.transient_failure_window;
                let refusal = LaunchRefusal {
                    reason: RefusalReason::ProviderErrors,
                    code: "provider_errors".to_string(),
                    detail: format!(
                        "provider errors: {failures} transient failures of offering {} within {}; last: {err}",
                        offering.id,
                        humantime::format_duration(window)
                    ),
                };
                self.record_launch_refusal(input, pool, offering, intent, refusal, now)
                    .await?;
                Ok(Some(RefusalReason::ProviderErrors))
            }
            Err(err) if err.class().is_retryable() => {
                // Throttled past the retries within the tick: keep the intent; the next
                // activation repeats the call with the same client token.
                tracing::warn!(node = %intent.node, error = %err, "launch deferred to the next tick");
                Ok(None)
            }
            Err(err) => {
                let refusal = LaunchRefusal {
                    reason: RefusalReason::Cloud(err.class()),
                    code: err.code().to_string(),
                    detail: err.to_string(),
                };
                self.record_launch_refusal(input, pool, offering, intent, refusal, now)
                    .await?;
                Ok(Some(RefusalReason::Cloud(err.class())))
            }
        }
    }

    fn launch_spec(&self, pool: &PoolSpec, offering: &Offering, intent: &NodeEvent) -> LaunchSpec {
        LaunchSpec {
            offering: offering.clone(),
            client_token: intent.client_token.clone(),
            tags: OwnershipTags {
                cluster: self.config.cluster_id.clone(),
                pool: pool.name.to_string(),
                node: intent.node.0.clone(),
                request: intent.request.as_ref().map(|r| r.0.clone()),
            },
            user_data: self
                .cluster
                .as_ref()
                .and_then(|c| c.bootstrap(&pool.name, &intent.node, offering.provider)),
        }
    }

    /// A final "no" to a launch (the cloud's, or its errors past the bound): the node is
    /// refused, the refusal recorded and counted, and the offering cooled down (or the pool
    /// halted, for an invalid request).
    async fn record_launch_refusal(
        &self,
        input: &mut TickInput,
        pool: &PoolSpec,
        offering: &Offering,
        intent: &NodeEvent,
        refusal: LaunchRefusal,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        let LaunchRefusal {
            reason,
            code,
            detail,
        } = refusal;
        self.record(input, intent.next(NodeState::Refused, &code, now))
            .await?;
        self.append_refusal(
            input,
            &RefusalRecord {
                pool: pool.name.clone(),
                request: intent.request.clone(),
                node: Some(intent.node.clone()),
                offering: Some(offering.id.clone()),
                replicas: 1,
                reason,
                detail: detail.clone(),
                at: now,
            },
        )
        .await?;
        self.metrics
            .refusals
            .get_or_create(&crate::metrics::RefusalLabels {
                pool: pool.name.to_string(),
                account: pool.account.to_string(),
                reason: reason.code(),
                provider: offering.provider.to_string(),
                offering: offering.id.to_string(),
            })
            .inc();
        if reason == RefusalReason::Cloud(ErrorClass::Quota) {
            self.quota_refused(&offering.region);
        }
        if reason.falls_back() {
            tracing::warn!(pool = %pool.name, offering = %offering.id, %detail, "launch refused; falling back");
            self.mark_unavailable(&offering.id);
        } else if reason == RefusalReason::Cloud(ErrorClass::InvalidRequest) {
            // Our request is wrong or not permitted: every retry would fail the same way (and
            // may spam the cloud's audit log). Stop the pool and alert.
            self.halt_pool(
                &pool.name,
                format!(
                    "the cloud refused its request as invalid or not permitted ({code} on {}: {detail}); fix the configuration or permissions",
                    offering.id
                ),
            );
        } else {
            tracing::error!(pool = %pool.name, offering = %offering.id, %detail, "launch refused; not falling back for this class");
        }
        Ok(())
    }

    /// Writes an event that places a hold if its budget can carry it (one transaction), or
    /// records a budget refusal. Returns whether it was admitted.
    async fn hold_or_refuse(
        &self,
        input: &mut TickInput,
        pool: &PoolSpec,
        event: &NodeEvent,
        applied: &mut Applied,
    ) -> Result<bool, EngineError> {
        match self.place_hold(input, event).await? {
            HoldOutcome::Placed => Ok(true),
            HoldOutcome::OverBudget(standing) => {
                let refusal = Refusal {
                    request: event.request.as_ref(),
                    count: 1,
                    reason: RefusalReason::Budget,
                    detail: over_budget_detail(pool, event.request.as_ref(), event.hold, &standing),
                };
                self.refuse(input, pool, refusal, applied).await?;
                Ok(false)
            }
        }
    }

    /// Records a refusal. A standing refusal of organic demand (no request) is written once, not
    /// on every tick it persists.
    async fn refuse(
        &self,
        input: &mut TickInput,
        pool: &PoolSpec,
        refusal: Refusal<'_>,
        applied: &mut Applied,
    ) -> Result<(), EngineError> {
        let Refusal {
            request,
            count,
            reason,
            detail,
        } = refusal;
        if request.is_none() {
            applied.pool_refusal = Some((reason, count));
            if applied.previous_refusal == Some((reason, count)) {
                return Ok(());
            }
            tracing::warn!(pool = %pool.name, %detail, "demand refused");
        }
        self.metrics
            .refusals
            .get_or_create(&crate::metrics::RefusalLabels {
                pool: pool.name.to_string(),
                account: pool.account.to_string(),
                reason: reason.code(),
                provider: String::new(),
                offering: String::new(),
            })
            .inc_by(count as u64);
        self.append_refusal(
            input,
            &RefusalRecord {
                pool: pool.name.clone(),
                request: request.cloned(),
                node: None,
                offering: None,
                replicas: count,
                reason,
                detail,
                at: self.clock.now(),
            },
        )
        .await?;
        if let Some(request) = request
            && reason.closes_request()
        {
            input.close_request(request);
        }
        Ok(())
    }

    pub(super) fn count_fallback(&self, pool: &PoolSpec, kind: FallbackKind, n: u64) {
        self.metrics
            .fallbacks
            .get_or_create(&crate::metrics::FallbackLabels {
                pool: pool.name.to_string(),
                account: pool.account.to_string(),
                kind: kind.as_str().to_string(),
            })
            .inc_by(n);
    }
}

/// A refusal about to be recorded.
#[derive(Debug)]
struct Refusal<'a> {
    request: Option<&'a RequestId>,
    count: u32,
    reason: RefusalReason,
    detail: String,
}

/// A launch's intent about to be ended as refused: the ledger's reason, the node event's
/// reason (the cloud's code) and what the refusal says.
#[derive(Debug)]
struct LaunchRefusal {
    reason: RefusalReason,
    code: String,
    detail: String,
}

/// A launch action's fields.
#[derive(Debug, Clone, Copy)]
struct Launch<'a> {
    offering: &'a OfferingId,
    request: Option<&'a RequestId>,
    destination: Destination,
    hold: Money,
    fallbacks: &'a [FallbackKind],
}

fn refusal_detail(
    pool: &PoolSpec,
    reason: RefusalReason,
    count: u32,
    request: Option<&RequestId>,
    requests: &[CapacityRequest],
) -> String {
    let whose = match request.and_then(|id| requests.iter().find(|r| &r.id == id)) {
        Some(r) => format!("{count} of {} replicas for request {}", r.replicas, r.id),
        None => format!("{count} replicas of organic demand"),
    };
    match reason {
        RefusalReason::MaxReplicas => format!(
            "{whose} refused: pool {} is at max_replicas {}; raise max_replicas or lower demand",
            pool.name, pool.max_replicas
        ),
        RefusalReason::GlobalCeiling => format!(
            "{whose} refused: every pool together is at engine.global_max_nodes; raise it or release capacity elsewhere"
        ),
        RefusalReason::Budget => format!(
            "{whose} refused: account {} has no budget left for the hold; raise its ceiling or wait for the next period",
            pool.account
        ),
        RefusalReason::NoOffering => format!(
            "{whose} refused: every offering of pool {} was refused by its cloud recently; add offerings, zones or regions",
            pool.name
        ),
        RefusalReason::Cloud(class) => format!("{whose} refused by the cloud ({})", class.as_str()),
        RefusalReason::ProviderErrors => {
            format!("{whose} refused: the cloud keeps failing with transient errors")
        }
    }
}

fn park_refused_detail(last: &NodeEvent, hold: Money, standing: &BudgetStanding) -> String {
    super::renewals::node_refused_detail(
        last,
        "released instead of parked warm",
        &format!("holding ${hold} for its volumes"),
        standing,
    )
}

fn over_budget_detail(
    pool: &PoolSpec,
    request: Option<&RequestId>,
    hold: Money,
    standing: &BudgetStanding,
) -> String {
    let whose = match request {
        Some(id) => format!("a replica for request {id}"),
        None => "a replica of organic demand".to_string(),
    };
    format!(
        "{whose} refused: account {} would hold ${hold} more with ${} spent and ${} held of its ${} ceiling; raise the ceiling (PUT /v1/budgets/{}) or wait for the next period",
        pool.account, standing.spent, standing.held, standing.ceiling, pool.account
    )
}
