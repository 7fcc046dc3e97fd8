//! Prometheus metrics: what dashboards read. Names follow the conventions: `headroom_` prefix,
//! base units, `_total` on counters (added by the encoder).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Every per-pool series carries the pool's account, so a dashboard can sum by team.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub pool: String,
    pub account: String,
}

impl PoolLabels {
    pub fn of(pool: &headroom_core::PoolSpec) -> PoolLabels {
        PoolLabels {
            pool: pool.name.to_string(),
            account: pool.account.to_string(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolStateLabels {
    pub pool: String,
    pub account: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    pub pool: String,
    pub account: String,
    pub rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    pub pool: String,
    pub account: String,
    pub reason: String,
    pub provider: String,
    pub offering: String,
}

/// The money or instance invariant a plan or launch broke (`PlanViolation::invariant`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InvariantLabels {
    pub pool: String,
    pub account: String,
    pub invariant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FallbackLabels {
    pub pool: String,
    pub account: String,
    /// instance_type, zone, region or smaller_model.
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub provider: String,
    pub method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallErrorLabels {
    pub provider: String,
    pub method: String,
    pub class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OfferingPriceLabels {
    pub offering: String,
    pub market: String,
    /// `live` when the cloud quoted it (spot price history), `configured` otherwise.
    pub source: String,
}

/// One quota of one region, as the cloud names it (quota preflight). Its unit is in the family's
/// name: GPUs and vCPUs are never summed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct QuotaLabels {
    pub provider: String,
    pub region: String,
    pub quota: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `ok` or `error` for ticks; delivered, retried, dropped or overflowed for alerts.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    /// The matched route template, e.g. `/v1/pools/{name}`; `unmatched` for a 404.
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpStatusLabels {
    pub method: String,
    pub route: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
}

/// The connection limit that refused a connection: `per_client` or `global`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AccountLabels {
    pub account: String,
}

/// A budget's series: its account and the period its ceiling applies to (hour, day, month).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BudgetLabels {
    pub account: String,
    pub period: String,
}

type GaugeF64 = Gauge<f64, std::sync::atomic::AtomicU64>;
type CounterF64 = Counter<f64, std::sync::atomic::AtomicU64>;

/// Starts a latency measurement (a cloud call, a tick, an HTTP request): real elapsed time, not
/// decision time, so it reads the monotonic clock directly.
#[allow(clippy::disallowed_methods)]
pub fn latency_timer() -> std::time::Instant {
    std::time::Instant::now()
}

/// Every metric Headroom exports, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub replicas: Family<PoolStateLabels, Gauge>,
    pub desired: Family<PoolLabels, Gauge>,
    pub queue_depth: Family<PoolLabels, Gauge>,
    pub oldest_age_seconds: Family<PoolLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub replica_queue_skew: Family<PoolLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub decisions: Family<RuleLabels, Counter>,
    pub refusals: Family<RefusalLabels, Counter>,
    pub fallbacks: Family<FallbackLabels, Counter>,
    /// Plans and launches not applied because they broke a money or instance invariant.
    pub invariant_violations: Family<InvariantLabels, Counter>,
    pub interruption_notices: Family<PoolLabels, Counter>,
    pub provider_call_seconds: Family<CallLabels, Histogram>,
    pub provider_errors: Family<CallErrorLabels, Counter>,
    pub budget_ceiling_dollars: Family<BudgetLabels, GaugeF64>,
    pub budget_spent_dollars: Family<BudgetLabels, GaugeF64>,
    pub budget_held_dollars: Family<BudgetLabels, GaugeF64>,
    /// Spend this process has seen the ledger accrue since it started (see [`SpendMeter`]).
    pub spend_dollars: Family<AccountLabels, CounterF64>,
    spend_meter: std::sync::Mutex<SpendMeter>,
    /// Capacity wanted (desired replicas in the pool's first offering's GPUs) and delivered
    /// (GPUs of the serving nodes): the product's headline ratio.
    pub capacity_requested_gpus: Family<PoolLabels, Gauge>,
    pub capacity_delivered_gpus: Family<PoolLabels, Gauge>,
    pub offering_price_dollars:
        Family<OfferingPriceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub orphan_instances: Family<PoolLabels, Gauge>,
    /// The most replicas the pool's history expects within its lead time (0: none expected).
    pub forecast_replicas: Family<PoolLabels, Gauge>,
    /// Mean absolute error of the pool's scored forecasts, in replicas.
    pub forecast_error_replicas: Family<PoolLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// What each quota has left (limit less use, floored at zero), and its limit: one family
    /// per unit.
    pub quota_remaining_gpus: Family<QuotaLabels, Gauge>,
    pub quota_limit_gpus: Family<QuotaLabels, Gauge>,
    pub quota_remaining_vcpus: Family<QuotaLabels, Gauge>,
    pub quota_limit_vcpus: Family<QuotaLabels, Gauge>,
    pub service: ServiceMetrics,
    /// `process_*`, unprefixed as the convention names them, read from `/proc` when encoded.
    process: crate::process_metrics::ProcessMetrics,
    process_registry: Registry,
}

/// The service's own health: the build, the loop's ticks, the alert outbox, HTTP requests.
#[derive(Debug)]
pub struct ServiceMetrics {
    pub build_info: Family<BuildLabels, Gauge>,
    pub tick_seconds: Histogram,
    pub ticks: Family<OutcomeLabels, Counter>,
    pub last_good_tick_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub alert_outbox_depth: Gauge,
    /// Notification attempts by outcome: delivered, retried, dropped (retries spent), overflowed
    /// (pushed out of the bounded outbox before any attempt succeeded).
    pub alert_deliveries: Family<OutcomeLabels, Counter>,
    pub http_requests: Family<HttpStatusLabels, Counter>,
    pub http_request_seconds: Family<HttpLabels, Histogram>,
    pub http_connections_refused: Family<LimitLabels, Counter>,
    /// Requests answered 503 at once because `api.max_requests_in_flight` were being handled.
    pub http_requests_shed: Counter,
}

impl Default for ServiceMetrics {
    fn default() -> Self {
        ServiceMetrics {
            build_info: Family::default(),
            tick_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            ticks: Family::default(),
            last_good_tick_seconds: Gauge::default(),
            alert_outbox_depth: Gauge::default(),
            alert_deliveries: Family::default(),
            http_requests: Family::default(),
            http_request_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
            http_connections_refused: Family::default(),
            http_requests_shed: Counter::default(),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("headroom");
        let m = Metrics {
            replicas: Family::default(),
            desired: Family::default(),
            queue_depth: Family::default(),
            oldest_age_seconds: Family::default(),
            replica_queue_skew: Family::default(),
            decisions: Family::default(),
            refusals: Family::default(),
            fallbacks: Family::default(),
            invariant_violations: Family::default(),
            interruption_notices: Family::default(),
            provider_call_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            provider_errors: Family::default(),
            budget_ceiling_dollars: Family::default(),
            budget_spent_dollars: Family::default(),
            budget_held_dollars: Family::default(),
            spend_dollars: Family::default(),
            spend_meter: std::sync::Mutex::default(),
            capacity_requested_gpus: Family::default(),
            capacity_delivered_gpus: Family::default(),
            offering_price_dollars: Family::default(),
            orphan_instances: Family::default(),
            forecast_replicas: Family::default(),
            forecast_error_replicas: Family::default(),
            quota_remaining_gpus: Family::default(),
            quota_limit_gpus: Family::default(),
            quota_remaining_vcpus: Family::default(),
            quota_limit_vcpus: Family::default(),
            service: ServiceMetrics::default(),
            registry: Registry::default(),
            process: crate::process_metrics::ProcessMetrics::default(),
            process_registry: Registry::default(),
        };
        register_service(&mut registry, &m.service);
        let mut m = m;
        m.process.register(&mut m.process_registry);
        registry.register(
            "pool_replicas",
            "Nodes per pool by state (requested, starting, ready, warm, warming, draining)",
            m.replicas.clone(),
        );
        registry.register(
            "pool_desired_replicas",
            "Ready replicas wanted: controller target plus capacity requests",
            m.desired.clone(),
        );
        registry.register(
            "pool_queue_depth",
            "Requests waiting, as last signalled",
            m.queue_depth.clone(),
        );
        registry.register(
            "pool_oldest_age_seconds",
            "Age of the oldest waiting request, as last signalled",
            m.oldest_age_seconds.clone(),
        );
        registry.register(
            "pool_replica_queue_skew",
            "The longest replica queue over the mean replica queue, when replicas report their own (1 is even)",
            m.replica_queue_skew.clone(),
        );
        registry.register(
            "decisions",
            "Controller decisions by the rule that set the target",
            m.decisions.clone(),
        );
        registry.register(
            "refusals",
            "Replicas refused, by reason, provider and offering",
            m.refusals.clone(),
        );
        registry.register(
            "fallbacks",
            "Replicas supplied by a fallback, by step: the widest of instance_type, zone or region, market when it changed too (a launch can count under both), or smaller_model",
            m.fallbacks.clone(),
        );
        registry.register(
            "invariant_violations",
            "Plans and launches not applied because they broke a money or instance invariant (hold, budget, per_step, per_period, global_ceiling, client_token); each halts its pool",
            m.invariant_violations.clone(),
        );
        registry.register(
            "spot_interruption_notices",
            "Spot interruption notices received; each node is replaced before it is reclaimed",
            m.interruption_notices.clone(),
        );
        registry.register(
            "provider_call_duration_seconds",
            "Cloud provider call latency",
            m.provider_call_seconds.clone(),
        );
        registry.register(
            "provider_errors",
            "Cloud provider call errors by class",
            m.provider_errors.clone(),
        );
        register_money(&mut registry, &m);
        Metrics { registry, ..m }
    }
}

/// The money series: budgets and what offerings cost.
fn register_money(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "budget_ceiling_dollars",
        "Budget ceiling for the current period (period: hour, day or month)",
        m.budget_ceiling_dollars.clone(),
    );
    registry.register(
        "budget_spent_dollars",
        "Spend in the budget's current period",
        m.budget_spent_dollars.clone(),
    );
    registry.register(
        "budget_held_dollars",
        "Money held for launches not yet spent",
        m.budget_held_dollars.clone(),
    );
    registry.register(
        "offering_price_dollars_per_hour",
        "Price per node-hour the planner ranks and holds budgets with, live or configured",
        m.offering_price_dollars.clone(),
    );
    registry.register(
        "orphan_instances",
        "Instances tagged for the pool that the ledger does not know, in the last inventory (terminated or reported per engine.orphan_policy)",
        m.orphan_instances.clone(),
    );
    registry.register(
        "forecast_replicas",
        "The most replicas the pool's own history expects within its lead time (0 when none)",
        m.forecast_replicas.clone(),
    );
    registry.register(
        "forecast_error_replicas",
        "Mean absolute error of the pool's forecasts scored against the demand that came, over the last day",
        m.forecast_error_replicas.clone(),
    );
    registry.register(
        "quota_remaining_gpus",
        "GPUs a cloud quota counted in GPUs has left in a region, as last read for the quota preflight",
        m.quota_remaining_gpus.clone(),
    );
    registry.register(
        "quota_limit_gpus",
        "The limit of a cloud quota counted in GPUs in a region, as last read for the quota preflight",
        m.quota_limit_gpus.clone(),
    );
    registry.register(
        "quota_remaining_vcpus",
        "vCPUs a cloud quota counted in vCPUs has left in a region, as last read for the quota preflight",
        m.quota_remaining_vcpus.clone(),
    );
    registry.register(
        "quota_limit_vcpus",
        "The limit of a cloud quota counted in vCPUs in a region, as last read for the quota preflight",
        m.quota_limit_vcpus.clone(),
    );
    registry.register(
        "spend_dollars",
        "Spend the ledger accrued while this process watched it, from its start: increase() over it is spend; the budget gauges give the period's total",
        m.spend_dollars.clone(),
    );
    registry.register(
        "capacity_requested_gpus",
        "GPUs the pool wants ready: desired replicas times the GPUs of a node of its first offering",
        m.capacity_requested_gpus.clone(),
    );
    registry.register(
        "capacity_delivered_gpus",
        "GPUs of the pool's nodes serving now",
        m.capacity_delivered_gpus.clone(),
    );
}

fn register_service(registry: &mut Registry, m: &ServiceMetrics) {
    m.build_info
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION").to_string(),
        })
        .set(1);
    registry.register(
        "build_info",
        "Always 1, labelled with the version running",
        m.build_info.clone(),
    );
    registry.register(
        "tick_duration_seconds",
        "How long one reconcile tick took",
        m.tick_seconds.clone(),
    );
    registry.register(
        "ticks",
        "Reconcile ticks by outcome (ok, error)",
        m.ticks.clone(),
    );
    registry.register(
        "last_successful_tick_timestamp_seconds",
        "When the last reconcile tick that succeeded started (Unix seconds, engine clock)",
        m.last_good_tick_seconds.clone(),
    );
    registry.register(
        "http_requests",
        "API requests by method, matched route and status",
        m.http_requests.clone(),
    );
    registry.register(
        "http_request_duration_seconds",
        "API request latency by method and matched route",
        m.http_request_seconds.clone(),
    );
    registry.register(
        "http_connections_refused",
        "API connections refused at a connection limit (per_client, global)",
        m.http_connections_refused.clone(),
    );
    registry.register(
        "http_requests_shed",
        "API requests answered 503 at once because api.max_requests_in_flight were in hand",
        m.http_requests_shed.clone(),
    );
    registry.register(
        "alert_outbox_depth",
        "Alert notifications queued that no webhook has taken yet",
        m.alert_outbox_depth.clone(),
    );
    registry.register(
        "alert_deliveries",
        "Alert notification attempts by outcome: delivered, retried, dropped, overflowed",
        m.alert_deliveries.clone(),
    );
}

impl Metrics {
    /// Replicas supplied by fallbacks so far for `pool`, by kind (kinds never taken are absent).
    pub fn fallbacks_of(
        &self,
        pool: &headroom_core::PoolSpec,
    ) -> std::collections::BTreeMap<String, u64> {
        headroom_core::planner::FallbackKind::ALL
            .iter()
            .filter_map(|kind| {
                let labels = FallbackLabels {
                    pool: pool.name.to_string(),
                    account: pool.account.to_string(),
                    kind: kind.as_str().to_string(),
                };
                let n = self.fallbacks.get(&labels)?.get();
                (n > 0).then(|| (kind.as_str().to_string(), n))
            })
            .collect()
    }

    /// The OpenMetrics text exposition (Prometheus reads it), the process's own last.
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        if let Some(sample) = crate::process_metrics::read() {
            self.process.update(&sample);
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_registry(&mut out, &self.process_registry);
        let _ = encode_eof(&mut out);
        out
    }

    /// Starts every counter whose labels are known in advance at 0 (each pool's decisions by
    /// rule, fallbacks by kind, invariant violations by invariant and interruption notices;
    /// ticks and alert deliveries by outcome), so that `increase()` and `rate()` see the first
    /// event instead of a series appearing with it.
    pub fn initialise(&self, pools: &[headroom_core::PoolSpec]) {
        use headroom_core::controller::Rule;
        const RULES: [Rule; 10] = [
            Rule::Floor,
            Rule::Hpa,
            Rule::BacklogDrain,
            Rule::OldestAge,
            Rule::Ramp,
            Rule::Forecast,
            Rule::Scheduled,
            Rule::Steady,
            Rule::ScaleDown,
            Rule::Hold,
        ];
        for pool in pools {
            let name = pool.name.to_string();
            let account = pool.account.to_string();
            for rule in RULES {
                let rule = serde_json::to_value(rule)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                let _ = self.decisions.get_or_create(&RuleLabels {
                    pool: name.clone(),
                    account: account.clone(),
                    rule,
                });
            }
            for kind in headroom_core::planner::FallbackKind::ALL {
                let _ = self.fallbacks.get_or_create(&FallbackLabels {
                    pool: name.clone(),
                    account: account.clone(),
                    kind: kind.as_str().to_string(),
                });
            }
            for invariant in headroom_core::planner::guard::PlanViolation::INVARIANTS {
                let _ = self.invariant_violations.get_or_create(&InvariantLabels {
                    pool: name.clone(),
                    account: account.clone(),
                    invariant: invariant.to_string(),
                });
            }
            let _ = self
                .interruption_notices
                .get_or_create(&PoolLabels::of(pool));
        }
        for outcome in ["ok", "error"] {
            let _ = self.service.ticks.get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            });
        }
        for outcome in ["delivered", "retried", "dropped", "overflowed"] {
            let _ = self.service.alert_deliveries.get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            });
        }
    }
}

/// One reading of an account's spend in its budget's current period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpendReading {
    pub period: headroom_core::BudgetPeriod,
    pub period_start: headroom_core::Timestamp,
    pub spent: headroom_core::Money,
}

/// Turns each account's spend in its budget period, read at every scrape, into a counter that
/// only rises: the spend accrued between this process's first reading and its latest. The
/// budget gauge falls to zero when a period starts; the counter goes on, so `increase()` over
/// it is spend, and a restart is a counter reset Prometheus already handles. Pure: readings in,
/// increments out.
#[derive(Debug, Default)]
pub struct SpendMeter {
    last: std::collections::BTreeMap<String, SpendReading>,
}

impl SpendMeter {
    /// The account's last reading, so the caller can read how its period closed when a new
    /// period has started since.
    pub fn last(&self, account: &str) -> Option<SpendReading> {
        self.last.get(account).copied()
    }

    /// Records `now` and returns the spend since the last reading. `closed` is the last
    /// period's spend at its end when `now` is in a later period (what accrued between the last
    /// reading and that end counts; periods no reading saw at all are not counted). The first
    /// reading, and one after the budget's period changed, only set the baseline. A reading
    /// below the last (a revised accrual) adds nothing, and the baseline stays at the highest,
    /// so nothing is counted twice.
    pub fn advance(
        &mut self,
        account: &str,
        now: SpendReading,
        closed: Option<headroom_core::Money>,
    ) -> headroom_core::Money {
        use headroom_core::Money;
        let Some(last) = self.last.get(account).copied() else {
            self.last.insert(account.to_string(), now);
            return Money::ZERO;
        };
        let (added, kept) = if last.period != now.period || now.period_start < last.period_start {
            (Money::ZERO, now)
        } else if now.period_start == last.period_start {
            let kept = if now.spent >= last.spent { now } else { last };
            (kept.spent - last.spent, kept)
        } else {
            let tail = closed.map_or(Money::ZERO, |c| c.max(last.spent) - last.spent);
            (tail + now.spent.max(Money::ZERO), now)
        };
        self.last.insert(account.to_string(), kept);
        added
    }
}

impl Metrics {
    /// The account's last spend reading ([`SpendMeter::last`]).
    pub fn last_spend(&self, account: &str) -> Option<SpendReading> {
        self.spend_meter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .last(account)
    }

    /// Sets the budget gauges of `budget`'s account and advances its spend counter.
    pub fn record_budget(
        &self,
        budget: &headroom_core::Budget,
        standing: &headroom_core::budget::BudgetStanding,
        reading: SpendReading,
        closed: Option<headroom_core::Money>,
    ) {
        let account = budget.account.to_string();
        // A budget whose period changed leaves no series under the old one.
        for period in [
            headroom_core::BudgetPeriod::Hour,
            headroom_core::BudgetPeriod::Day,
            headroom_core::BudgetPeriod::Month,
        ] {
            if period != budget.period {
                let old = BudgetLabels {
                    account: account.clone(),
                    period: period.as_str().to_string(),
                };
                self.budget_ceiling_dollars.remove(&old);
                self.budget_spent_dollars.remove(&old);
                self.budget_held_dollars.remove(&old);
            }
        }
        let label = BudgetLabels {
            account: account.clone(),
            period: budget.period.as_str().to_string(),
        };
        self.budget_ceiling_dollars
            .get_or_create(&label)
            .set(standing.ceiling.as_f64_lossy());
        self.budget_spent_dollars
            .get_or_create(&label)
            .set(standing.spent.as_f64_lossy());
        self.budget_held_dollars
            .get_or_create(&label)
            .set(standing.held.as_f64_lossy());
        let added = self
            .spend_meter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .advance(&account, reading, closed);
        self.spend_dollars
            .get_or_create(&AccountLabels { account })
            .inc_by(added.as_f64_lossy());
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::{BudgetPeriod, Money};

    use super::{SpendMeter, SpendReading};

    fn at(s: &str) -> headroom_core::Timestamp {
        s.parse().unwrap()
    }

    fn reading(period_start: &str, dollars: i64) -> SpendReading {
        SpendReading {
            period: BudgetPeriod::Day,
            period_start: at(period_start),
            spent: Money::from_micros(dollars * 1_000_000),
        }
    }

    #[test]
    fn the_spend_counter_only_rises_across_periods_and_counts_nothing_twice() {
        let mut meter = SpendMeter::default();
        let d = |n: i64| Money::from_micros(n * 1_000_000);
        // The first reading is the baseline: what was spent before this process is not counted.
        assert_eq!(
            meter.advance("ml", reading("2025-01-01T00:00:00Z", 40), None),
            d(0)
        );
        assert_eq!(
            meter.advance("ml", reading("2025-01-01T00:00:00Z", 55), None),
            d(15)
        );
        // A revised accrual below the last reading adds nothing, and rising back adds nothing.
        assert_eq!(
            meter.advance("ml", reading("2025-01-01T00:00:00Z", 50), None),
            d(0)
        );
        assert_eq!(
            meter.advance("ml", reading("2025-01-01T00:00:00Z", 55), None),
            d(0)
        );
        // A new day: the gauge falls to 3, the counter adds the old day's tail and the 3.
        assert_eq!(
            meter.advance("ml", reading("2025-01-02T00:00:00Z", 3), Some(d(60))),
            d(5 + 3)
        );
        // Another account is its own series.
        assert_eq!(
            meter.advance("web", reading("2025-01-02T00:00:00Z", 9), None),
            d(0)
        );
        // A budget moved to a monthly period starts a new baseline.
        let monthly = SpendReading {
            period: BudgetPeriod::Month,
            period_start: at("2025-01-01T00:00:00Z"),
            spent: d(500),
        };
        assert_eq!(meter.advance("ml", monthly, None), d(0));
        assert_eq!(meter.last("ml"), Some(monthly));
    }
}
