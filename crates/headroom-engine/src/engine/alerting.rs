//! The alert phase: a snapshot of the tick for the pure rules ([`crate::alerts::rules`]), the
//! alert book's answer queued in the ledger's outbox for every webhook. Delivery runs beside
//! the loop ([`crate::alerts::AlertDelivery`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use headroom_config::OrphanPolicy;
use headroom_core::{OfferingId, PoolName, ProviderKind, Timestamp, chrono_or};
use headroom_ledger::RefusalRecord;

use super::input::TickInput;
use super::{Engine, EngineError, lock, read_cache};
use crate::alerts::rules::{self, AlertSnapshot, ReservationUse, UnreadableCloud};
use crate::alerts::{ActiveAlert, AlertBook};

/// What the alert phase remembers between ticks.
#[derive(Debug, Default)]
pub(super) struct AlertMemory {
    pub book: AlertBook,
    /// What this process last wrote to the ledger (or read back) of each scope's alerts.
    pub written: HashMap<String, super::alert_book::Written>,
    /// Reservations with no node on them, since when.
    reservation_idle_since: HashMap<OfferingId, Timestamp>,
    /// Clouds whose inventory the latest tick could not read, since when (a read clears it).
    unreadable_clouds: BTreeMap<ProviderKind, UnreadableCloud>,
}

impl Engine {
    /// The alerts firing now.
    pub fn active_alerts(&self) -> Vec<ActiveAlert> {
        lock(&self.alerting).book.active()
    }

    /// Delivers queued alert notifications until `shutdown` resolves. Runs beside the control
    /// loop, never in it.
    pub async fn run_alert_delivery(
        self: Arc<Self>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        self.delivery.run(shutdown).await
    }

    /// One delivery round: at most 50 attempts, each notification retried on its own.
    pub async fn deliver_alerts(&self) -> Result<(), EngineError> {
        Ok(self.delivery.round().await?)
    }

    /// Remembers which clouds this tick's inventory read did not reach (with their errors);
    /// every other cloud answered, which ends its spell.
    pub(super) fn note_inventory_reads(
        &self,
        unread: &BTreeMap<ProviderKind, String>,
        now: Timestamp,
    ) {
        let mut memory = lock(&self.alerting);
        memory
            .unreadable_clouds
            .retain(|kind, _| unread.contains_key(kind));
        for (kind, error) in unread {
            let entry = memory
                .unreadable_clouds
                .entry(*kind)
                .or_insert_with(|| UnreadableCloud {
                    provider: *kind,
                    since: now,
                    last_error: String::new(),
                });
            entry.last_error.clone_from(error);
        }
    }

    /// Evaluates alert conditions for the pools this process owns (and deployment-wide ones, by
    /// the owner of the first pool) and queues notifications in the ledger's outbox.
    pub(super) async fn evaluate_alerts(&self, input: &mut TickInput) -> Result<(), EngineError> {
        let now = self.clock.now();
        let owns_first = self
            .config
            .pools
            .first()
            .is_some_and(|p| input.owned.contains(&p.name));
        let snapshot = self.alert_snapshot(input, owns_first, now).await?;
        let holding = rules::conditions(&snapshot);
        let owned = &input.owned;
        let settings = &self.config.alerts;
        let notifications = lock(&self.alerting).book.update(
            holding,
            |a| match a.labels.get("pool") {
                Some(pool) => pool.parse::<PoolName>().is_ok_and(|p| owned.contains(&p)),
                None => owns_first,
            },
            now,
            settings.repeat_interval,
            settings.resend_interval,
        );
        let scopes: Vec<&str> = self
            .config
            .pools
            .iter()
            .filter(|p| owned.contains(&p.name))
            .map(|p| p.name.as_str())
            .chain(owns_first.then_some(""))
            .collect();
        self.persist_alert_book(&scopes, now).await?;
        // A keep-alive is worth sending only promptly: none is queued behind undelivered
        // notifications (the webhook is down or slow), so keep-alives never push a firing or a
        // resolve out of the bounded outbox.
        let backlogged: BTreeSet<String> = if notifications.iter().any(|n| n.keep_alive) {
            self.ledger
                .pending_alerts(headroom_ledger::ALERT_OUTBOX_BOUND)
                .await?
                .into_iter()
                .map(|p| p.webhook)
                .collect()
        } else {
            BTreeSet::new()
        };
        for n in &notifications {
            if !n.keep_alive && n.alert.name != crate::alerts::WATCHDOG {
                tracing::warn!(alert = %n.alert.name, status = ?n.status, summary = %n.alert.summary, "alert");
            }
            for webhook in settings
                .webhooks
                .iter()
                .filter(|w| n.is_for(w.format))
                .filter(|w| !(n.keep_alive && backlogged.contains(&w.url)))
            {
                let context = crate::alerts::RenderContext {
                    cluster_id: &self.config.cluster_id,
                    settings,
                };
                let body = crate::alerts::render(webhook.format, n, &context);
                let pushed_out = self.ledger.enqueue_alert(&webhook.url, &body, now).await?;
                self.metrics
                    .service
                    .alert_deliveries
                    .get_or_create(&crate::metrics::OutcomeLabels {
                        outcome: "overflowed".to_string(),
                    })
                    .inc_by(pushed_out);
            }
        }
        Ok(())
    }

    /// Appends a refusal, noted in the tick's input so that its alert rules read refusals again.
    pub(super) async fn append_refusal(
        &self,
        input: &mut TickInput,
        refusal: &RefusalRecord,
    ) -> Result<(), EngineError> {
        input.wrote_refusal = true;
        Ok(self.ledger.append_refusal(refusal).await?)
    }

    /// The refusals recorded in `[from, to)`. Kept from an earlier tick while none was recorded
    /// since: by another process the revision read after the observe phase would say (and only
    /// the lease holder records the refusals of its pools), by this one the tick's input says.
    async fn recent_refusals(
        &self,
        input: &TickInput,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<RefusalRecord>, EngineError> {
        let revision = input.requests_revision.filter(|_| !input.wrote_refusal);
        let within = |rows: &[RefusalRecord]| -> Vec<RefusalRecord> {
            rows.iter()
                .filter(|r| r.at >= from && r.at < to)
                .cloned()
                .collect()
        };
        if let Some(revision) = revision {
            let reads = lock(&self.reads);
            if let Some(kept) = reads
                .refusals
                .as_ref()
                .filter(|k| k.revision == revision && k.value.0 <= from)
            {
                return Ok(within(&kept.value.1));
            }
        }
        let Some(revision) = revision else {
            return Ok(self.ledger.refusals_between(from, to).await?);
        };
        // Every refusal from `from` on, so that later windows are cut from the same rows.
        let rows = self
            .ledger
            .refusals_between(from, Timestamp::MAX_UTC)
            .await?;
        let now = within(&rows);
        lock(&self.reads).refusals = Some(read_cache::Kept {
            revision,
            value: (from, rows),
        });
        Ok(now)
    }

    async fn alert_snapshot(
        &self,
        input: &mut TickInput,
        owns_first: bool,
        now: Timestamp,
    ) -> Result<AlertSnapshot<'_>, EngineError> {
        let window = chrono_or(
            self.config.alerts.refusal_window,
            chrono::Duration::minutes(10),
        );
        let refusals = self
            .recent_refusals(input, now - window, now + chrono::Duration::milliseconds(1))
            .await?
            .into_iter()
            .filter(|r| input.owned.contains(&r.pool))
            .collect();
        let reported_orphans = match self.config.engine.orphan_policy {
            OrphanPolicy::Report => input.orphans.clone(),
            OrphanPolicy::Terminate => BTreeMap::new(),
        };
        let (reservations, budgets) = if owns_first {
            (
                self.reservation_uses(input, now),
                self.budget_standings(input, now).await?,
            )
        } else {
            (Vec::new(), Vec::new())
        };
        Ok(AlertSnapshot {
            now,
            cluster_id: &self.config.cluster_id,
            pools: self
                .pool_statuses()
                .into_iter()
                .filter(|s| input.owned.contains(&s.name))
                .collect(),
            refusals,
            reported_orphans,
            provider_trouble: lock(&self.offerings)
                .provider_trouble
                .values()
                .filter(|t| input.owned.contains(&t.pool))
                .cloned()
                .collect(),
            provider_errors_after: chrono_or(
                self.config.engine.provider_errors_alert_after,
                chrono::Duration::minutes(5),
            ),
            reservations,
            budgets,
            quota_room: self.quota_room(input),
            unreadable_clouds: if owns_first {
                lock(&self.alerting)
                    .unreadable_clouds
                    .values()
                    .cloned()
                    .collect()
            } else {
                Vec::new()
            },
            watchdog: owns_first && self.config.alerts.watchdog,
        })
    }

    /// Every configured reservation, how many nodes are on it, and since when none is.
    fn reservation_uses(&self, input: &TickInput, now: Timestamp) -> Vec<ReservationUse> {
        let mut memory = lock(&self.alerting);
        self.config
            .offerings
            .iter()
            .filter_map(|o| Some((o, o.reservation?)))
            .map(|(o, reservation)| {
                let id = &o.offering.id;
                let used = input.live.iter().filter(|e| &e.offering == id).count() as u32;
                let idle_since = if used > 0 {
                    memory.reservation_idle_since.remove(id);
                    None
                } else {
                    Some(
                        *memory
                            .reservation_idle_since
                            .entry(id.clone())
                            .or_insert(now),
                    )
                };
                ReservationUse {
                    offering: id.clone(),
                    nodes: reservation.nodes,
                    used,
                    price_usd_per_hour: o.offering.price_usd_per_hour,
                    idle_since,
                    ends_at: reservation.ends_at,
                }
            })
            .collect()
    }

    async fn budget_standings(
        &self,
        input: &mut TickInput,
        now: Timestamp,
    ) -> Result<Vec<(headroom_core::Budget, headroom_core::budget::BudgetStanding)>, EngineError>
    {
        let mut budgets: Vec<headroom_core::Budget> = input.budgets.values().cloned().collect();
        budgets.sort_by(|a, b| a.account.cmp(&b.account));
        let mut out = Vec::with_capacity(budgets.len());
        for budget in budgets {
            if let Some(s) = input
                .standing(self.ledger.as_ref(), &budget.account, now)
                .await?
            {
                out.push((budget, s));
            }
        }
        Ok(out)
    }
}
