//! What the engine knows of its offerings beyond the configuration: which a cloud refused
//! recently (skipped for a cooldown, ranked lower for a while) and, for spot, the price the
//! cloud quotes (AWS's spot price history, refreshed every `engine.price_refresh`).
//!
//! The planner ranks offerings and holds budgets at the price in force; the configured price of
//! a spot offering stays the most a launch will pay, so a spot market that climbs above it takes
//! the offering out of plans instead of earning a refusal.

use std::collections::{HashMap, VecDeque};

use headroom_cloud::CloudError;
use headroom_core::planner::OfferingChoice;
use headroom_core::{
    Money, Offering, OfferingId, PoolName, PoolSpec, Timestamp, TransientFailures,
    TransientVerdict, chrono_or,
};
use headroom_ledger::NodeEvent;
use serde::Serialize;

use super::{Engine, lock};
use crate::views::ProviderTrouble;

/// Live prices older than this many refresh periods (the cloud stopped answering) are dropped:
/// the configured prices apply again.
const STALE_PRICE_PERIODS: i32 = 3;

/// How far back refusals count against an offering in the planner's ranking.
pub(super) const RECENT_REFUSALS: chrono::Duration = chrono::Duration::minutes(15);

#[derive(Debug, Default)]
pub(super) struct OfferingBook {
    /// Offerings a cloud refused recently, skipped until the instant given.
    pub unavailable_until: HashMap<OfferingId, Timestamp>,
    /// When each offering was refused recently, for the planner's price-capacity ranking.
    pub refusal_log: HashMap<OfferingId, VecDeque<Timestamp>>,
    /// Prices the cloud quoted (spot), from the last refresh that answered.
    live_prices: HashMap<OfferingId, Money>,
    /// When prices were last asked for, and when an answer last came.
    pub prices_asked_at: Option<Timestamp>,
    prices_quoted_at: Option<Timestamp>,
    /// Transient launch failures (5xx, timeouts) per offering since its last success or
    /// refusal, within `engine.transient_failure_window`.
    transient: TransientFailures,
    /// Pools whose launches fail with provider errors and have not succeeded since.
    pub provider_trouble: HashMap<PoolName, ProviderTrouble>,
    /// When each offering last accepted a launch: a refusal before it is over.
    launched_at: HashMap<OfferingId, Timestamp>,
}

impl OfferingBook {
    /// Refusals of `offering` within [`RECENT_REFUSALS`] of `now`, forgetting older ones.
    fn recent_refusals(&mut self, offering: &OfferingId, now: Timestamp) -> u32 {
        let log = self.refusal_log.entry(offering.clone()).or_default();
        while log.front().is_some_and(|t| *t < now - RECENT_REFUSALS) {
            log.pop_front();
        }
        log.len() as u32
    }

    fn available(&self, offering: &OfferingId, now: Timestamp) -> bool {
        self.unavailable_until
            .get(offering)
            .is_none_or(|until| *until <= now)
    }
}

/// One offering's price as the planner sees it, for `GET /v1/offerings` and on-call.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OfferingPrice {
    pub offering: OfferingId,
    pub market: headroom_core::Market,
    /// The catalog's price: for spot, the most a launch pays.
    pub configured_usd_per_hour: Money,
    /// The cloud's quote, when it gave one in the last refreshes.
    pub live_usd_per_hour: Option<Money>,
    /// What plans and budget holds use.
    pub effective_usd_per_hour: Money,
    /// The live price is above the most a launch pays: plans leave the offering out.
    pub above_max_price: bool,
    /// Skipped after a refusal until this instant.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub cooling_down_until: Option<Timestamp>,
    /// Refusals in the last 15 minutes, which rank the offering as dearer than its price.
    pub recent_refusals: u32,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub quoted_at: Option<Timestamp>,
    /// Each cloud quota a launch of this offering counts against, with what it has left, as
    /// last read (empty when the cloud's quotas are unknown or none covers it).
    pub quotas: Vec<super::OfferingQuota>,
}

impl Engine {
    /// The planner's view of `pool`'s offerings at `now`: each at the price in force, whether
    /// it may be tried, its recent refusals, and for a reservation the nodes it can still take
    /// (a reservation is shared by every pool that lists it).
    pub(super) fn offering_choices(
        &self,
        pool: &PoolSpec,
        live: &[NodeEvent],
        now: Timestamp,
    ) -> Vec<OfferingChoice> {
        let mut book = lock(&self.offerings);
        pool.offerings
            .iter()
            .filter_map(|id| self.config.offerings.iter().find(|o| &o.offering.id == id))
            .map(|o| {
                let id = &o.offering.id;
                let recent_refusals = book.recent_refusals(id, now);
                // A spot market above the most a launch pays would only earn a refusal.
                let (offering, above_max_price) = in_force(&o.offering, &book.live_prices);
                OfferingChoice {
                    offering,
                    available: !above_max_price && book.available(id, now),
                    recent_refusals,
                    reservation_free: o.reservation.map(|r| {
                        let used = live.iter().filter(|e| &e.offering == id).count() as u32;
                        r.nodes.saturating_sub(used)
                    }),
                }
            })
            .collect()
    }

    /// Whether `pool` could get no new node now: each offering it lists is cooling down after a
    /// refusal, or was refused within [`RECENT_REFUSALS`] and has accepted no launch since. Scale-in
    /// keeps what such a pool has (`ReplicaCounts::supply_refused`).
    pub(super) fn supply_refused(&self, pool: &PoolSpec, now: Timestamp) -> bool {
        let mut book = lock(&self.offerings);
        !pool.offerings.is_empty()
            && pool.offerings.iter().all(|id| {
                let refused_since_launch = book.recent_refusals(id, now) > 0
                    && book.refusal_log.get(id).and_then(|log| log.back())
                        > book.launched_at.get(id);
                refused_since_launch || !book.available(id, now)
            })
    }

    /// Remembers that `offering` accepted a launch at `now`.
    pub(super) fn note_launched(&self, offering: &OfferingId, now: Timestamp) {
        lock(&self.offerings)
            .launched_at
            .insert(offering.clone(), now);
    }

    /// Skips `offering` in plans for the configured cooldown, and remembers the refusal for
    /// the ranking after that.
    pub(super) fn mark_unavailable(&self, offering: &OfferingId) {
        let now = self.clock.now();
        let until = now
            + chrono_or(
                self.config.engine.offering_cooldown,
                chrono::Duration::minutes(3),
            );
        let mut book = lock(&self.offerings);
        book.unavailable_until.insert(offering.clone(), until);
        book.refusal_log
            .entry(offering.clone())
            .or_default()
            .push_back(now);
    }

    /// Counts a transient launch failure of `offering` for `pool` against
    /// `engine.transient_failure_limit` within `engine.transient_failure_window`: whether the
    /// next tick repeats the launch or the offering is refused.
    pub(super) fn note_transient(
        &self,
        pool: &PoolName,
        offering: &OfferingId,
        err: &CloudError,
        now: Timestamp,
    ) -> TransientVerdict {
        let window = chrono_or(
            self.config.engine.transient_failure_window,
            chrono::Duration::minutes(5),
        );
        let limit = self.config.engine.transient_failure_limit;
        let mut book = lock(&self.offerings);
        let verdict = book.transient.note(offering, now, window, limit);
        let trouble = book
            .provider_trouble
            .entry(pool.clone())
            .or_insert_with(|| ProviderTrouble {
                pool: pool.clone(),
                since: now,
                last_at: now,
                failures: 0,
                last_error: String::new(),
            });
        trouble.last_at = now;
        trouble.failures += 1;
        trouble.last_error = format!("{} on {offering}", err.code());
        verdict
    }

    /// Forgets `offering`'s transient failures and `pool`'s provider trouble: it launched.
    pub(super) fn clear_transient(&self, pool: &PoolName, offering: &OfferingId) {
        let mut book = lock(&self.offerings);
        book.transient.forget(offering);
        book.provider_trouble.remove(pool);
    }

    /// Counts a spot interruption notice against its offering, once per wave (several notices
    /// in one tick are one signal, or a single wave would rank the offering out of plans), and
    /// asks for prices again: the market may have moved past what the pool pays.
    pub(super) fn note_interruption(&self, offering: &OfferingId, now: Timestamp) {
        let mut book = lock(&self.offerings);
        let log = book.refusal_log.entry(offering.clone()).or_default();
        if log.back() != Some(&now) {
            log.push_back(now);
        }
        book.prices_asked_at = None;
    }

    /// When the soonest of `offerings` may be tried again, if any is cooling down.
    pub(super) fn soonest_retry(
        &self,
        offerings: &[OfferingId],
        now: Timestamp,
    ) -> Option<Timestamp> {
        let book = lock(&self.offerings);
        offerings
            .iter()
            .filter_map(|o| book.unavailable_until.get(o))
            .filter(|until| **until > now)
            .min()
            .copied()
    }

    /// Asks the cloud for live prices when a refresh is due. A failure keeps the last quotes
    /// until they are stale; it never fails the tick, since configured prices are a safe default.
    pub(super) async fn refresh_prices(&self) {
        if self.price_refresh_due() {
            let offerings: Vec<Offering> = self
                .config
                .offerings
                .iter()
                .map(|o| o.offering.clone())
                .collect();
            let answer = self.cloud.current_prices(&offerings).await;
            self.take_quotes(answer);
        }
        self.export_prices();
    }

    fn price_refresh_due(&self) -> bool {
        if self.config.engine.price_refresh.is_zero() {
            return false;
        }
        let now = self.clock.now();
        let mut book = lock(&self.offerings);
        if book
            .prices_asked_at
            .is_some_and(|at| now - at < self.price_period())
        {
            return false;
        }
        book.prices_asked_at = Some(now);
        true
    }

    fn price_period(&self) -> chrono::Duration {
        chrono_or(
            self.config.engine.price_refresh,
            chrono::Duration::minutes(5),
        )
    }

    fn take_quotes(&self, answer: Result<Vec<(OfferingId, Money)>, CloudError>) {
        let now = self.clock.now();
        let stale_after = self.price_period() * STALE_PRICE_PERIODS;
        let mut book = lock(&self.offerings);
        match answer {
            Ok(quotes) => {
                book.live_prices = quotes.into_iter().collect();
                book.prices_quoted_at = Some(now);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot refresh live prices; keeping the last quotes");
                if book
                    .prices_quoted_at
                    .is_some_and(|at| now - at > stale_after)
                {
                    tracing::warn!("live prices are stale; planning with the configured prices");
                    book.live_prices.clear();
                    book.prices_quoted_at = None;
                }
            }
        }
    }

    /// `headroom_offering_price_dollars_per_hour`, one series per offering labelled with where
    /// its price comes from.
    fn export_prices(&self) {
        for price in self.offering_prices() {
            let live = price.live_usd_per_hour.is_some();
            for (source, current) in [("live", live), ("configured", !live)] {
                let labels = crate::metrics::OfferingPriceLabels {
                    offering: price.offering.to_string(),
                    market: price.market.as_str().to_string(),
                    source: source.to_string(),
                };
                if current {
                    self.metrics
                        .offering_price_dollars
                        .get_or_create(&labels)
                        .set(price.effective_usd_per_hour.as_f64_lossy());
                } else {
                    self.metrics.offering_price_dollars.remove(&labels);
                }
            }
        }
    }

    /// `offering` at the price in force: the live quote where there is one.
    pub(super) fn priced(&self, offering: &Offering) -> Offering {
        in_force(offering, &lock(&self.offerings).live_prices).0
    }

    /// Every configured offering's price as the planner sees it now.
    pub fn offering_prices(&self) -> Vec<OfferingPrice> {
        let now = self.clock.now();
        let book = lock(&self.offerings);
        self.config
            .offerings
            .iter()
            .map(|o| {
                let offering = &o.offering;
                let live = book.live_prices.get(&offering.id).copied();
                let (priced, above_max_price) = in_force(offering, &book.live_prices);
                OfferingPrice {
                    offering: offering.id.clone(),
                    market: offering.market,
                    configured_usd_per_hour: offering.price_usd_per_hour,
                    live_usd_per_hour: live,
                    effective_usd_per_hour: priced.price_usd_per_hour,
                    above_max_price,
                    cooling_down_until: book
                        .unavailable_until
                        .get(&offering.id)
                        .copied()
                        .filter(|until| *until > now),
                    recent_refusals: book.refusal_log.get(&offering.id).map_or(0, |log| {
                        log.iter().filter(|t| **t >= now - RECENT_REFUSALS).count() as u32
                    }),
                    quoted_at: live.and(book.prices_quoted_at),
                    quotas: self.offering_quotas(&offering.id),
                }
            })
            .collect()
    }
}

/// `offering` at the price in force (the live quote where there is one), and whether that quote
/// is above the offering's configured price — for spot, the most a launch pays, so plans leave
/// the offering out.
fn in_force(offering: &Offering, live: &HashMap<OfferingId, Money>) -> (Offering, bool) {
    let mut priced = offering.clone();
    let Some(quote) = live.get(&offering.id) else {
        return (priced, false);
    };
    priced.price_usd_per_hour = *quote;
    (priced, *quote > offering.price_usd_per_hour)
}
