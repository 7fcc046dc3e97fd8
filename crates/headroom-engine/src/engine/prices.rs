//! Live prices: the cloud's quote for spot offerings (AWS's spot price history), refreshed every
//! `engine.price_refresh`. The planner ranks offerings and holds budgets at the price in force;
//! the configured price of a spot offering stays the most a launch will pay, so a spot market
//! that climbs above it takes the offering out of plans instead of earning a refusal.

use super::*;

/// One offering's price as the planner sees it, for `GET /v1/offerings` and on-call.
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
    pub cooling_down_until: Option<Timestamp>,
    /// Refusals in the last 15 minutes, which rank the offering as dearer than its price.
    pub recent_refusals: u32,
    pub quoted_at: Option<Timestamp>,
}

impl Engine {
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
        let every = self.config.engine.price_refresh;
        if every.is_zero() {
            return false;
        }
        let now = self.clock.now();
        let mut st = self.state();
        if st
            .prices_asked_at
            .is_some_and(|at| now - at < self.price_period())
        {
            return false;
        }
        st.prices_asked_at = Some(now);
        true
    }

    fn price_period(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.config.engine.price_refresh)
            .unwrap_or(chrono::Duration::minutes(5))
    }

    fn take_quotes(&self, answer: Result<Vec<(OfferingId, Money)>, CloudError>) {
        let now = self.clock.now();
        let stale_after = self.price_period() * STALE_PRICE_PERIODS;
        let mut st = self.state();
        match answer {
            Ok(quotes) => {
                st.live_prices = quotes.into_iter().collect();
                st.prices_quoted_at = Some(now);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot refresh live prices; keeping the last quotes");
                if st.prices_quoted_at.is_some_and(|at| now - at > stale_after) {
                    tracing::warn!("live prices are stale; planning with the configured prices");
                    st.live_prices.clear();
                    st.prices_quoted_at = None;
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
        in_force(offering, &self.state().live_prices).0
    }

    /// Every configured offering's price as the planner sees it now.
    pub fn offering_prices(&self) -> Vec<OfferingPrice> {
        let now = self.clock.now();
        let st = self.state();
        self.config
            .offerings
            .iter()
            .map(|o| {
                let offering = &o.offering;
                let live = st.live_prices.get(&offering.id).copied();
                let (priced, above_max_price) = in_force(offering, &st.live_prices);
                OfferingPrice {
                    offering: offering.id.clone(),
                    market: offering.market,
                    configured_usd_per_hour: offering.price_usd_per_hour,
                    live_usd_per_hour: live,
                    effective_usd_per_hour: priced.price_usd_per_hour,
                    above_max_price,
                    cooling_down_until: st
                        .unavailable_until
                        .get(&offering.id)
                        .copied()
                        .filter(|until| *until > now),
                    recent_refusals: st.refusal_log.get(&offering.id).map_or(0, |log| {
                        log.iter().filter(|t| **t >= now - RECENT_REFUSALS).count() as u32
                    }),
                    quoted_at: live.and(st.prices_quoted_at),
                }
            })
            .collect()
    }
}

/// `offering` at the price in force (the live quote where there is one), and whether that quote
/// is above the offering's configured price — for spot, the most a launch pays, so plans leave
/// the offering out.
pub(super) fn in_force(offering: &Offering, live: &HashMap<OfferingId, Money>) -> (Offering, bool) {
    let mut priced = offering.clone();
    let Some(quote) = live.get(&offering.id) else {
        return (priced, false);
    };
    priced.price_usd_per_hour = *quote;
    (priced, *quote > offering.price_usd_per_hour)
}
