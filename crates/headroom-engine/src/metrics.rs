//! Prometheus metrics: what dashboards read. Names follow the conventions: `headroom_` prefix,
//! base units, `_total` on counters (added by the encoder).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolStateLabels {
    pub pool: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    pub pool: String,
    pub rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    pub pool: String,
    pub reason: String,
    pub provider: String,
    pub offering: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FallbackLabels {
    pub pool: String,
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

/// One quota of one region, as the cloud names it (quota preflight).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct QuotaLabels {
    pub provider: String,
    pub region: String,
    pub quota: String,
    /// `vcpu` or `gpu`.
    pub unit: String,
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
    pub interruption_notices: Family<PoolLabels, Counter>,
    pub provider_call_seconds: Family<CallLabels, Histogram>,
    pub provider_errors: Family<CallErrorLabels, Counter>,
    pub budget_ceiling_dollars: Family<AccountLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub budget_spent_dollars: Family<AccountLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub budget_held_dollars: Family<AccountLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub offering_price_dollars:
        Family<OfferingPriceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub orphan_instances: Family<PoolLabels, Gauge>,
    /// The most replicas the pool's history expects within its lead time (0: none expected).
    pub forecast_replicas: Family<PoolLabels, Gauge>,
    /// Mean absolute error of the pool's scored forecasts, in replicas.
    pub forecast_error_replicas: Family<PoolLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Units each quota has left (limit less use, floored at zero), and its limit.
    pub quota_remaining: Family<QuotaLabels, Gauge>,
    pub quota_limit: Family<QuotaLabels, Gauge>,
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
            interruption_notices: Family::default(),
            provider_call_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            provider_errors: Family::default(),
            budget_ceiling_dollars: Family::default(),
            budget_spent_dollars: Family::default(),
            budget_held_dollars: Family::default(),
            offering_price_dollars: Family::default(),
            orphan_instances: Family::default(),
            forecast_replicas: Family::default(),
            forecast_error_replicas: Family::default(),
            quota_remaining: Family::default(),
            quota_limit: Family::default(),
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
        "Budget ceiling for the current period",
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
        "quota_remaining",
        "Units a cloud quota has left in a region (vCPUs or GPUs), as last read for the quota preflight",
        m.quota_remaining.clone(),
    );
    registry.register(
        "quota_limit",
        "A cloud quota's limit in a region (vCPUs or GPUs), as last read for the quota preflight",
        m.quota_limit.clone(),
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
    pub fn fallbacks_of(&self, pool: &str) -> std::collections::BTreeMap<String, u64> {
        headroom_core::planner::FallbackKind::ALL
            .iter()
            .filter_map(|kind| {
                let labels = FallbackLabels {
                    pool: pool.to_string(),
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
    /// rule, fallbacks by kind and interruption notices; ticks and alert deliveries by outcome),
    /// so that `increase()` and `rate()` see the first event instead of a series appearing
    /// with it.
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
            for rule in RULES {
                let rule = serde_json::to_value(rule)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                let _ = self.decisions.get_or_create(&RuleLabels {
                    pool: name.clone(),
                    rule,
                });
            }
            for kind in headroom_core::planner::FallbackKind::ALL {
                let _ = self.fallbacks.get_or_create(&FallbackLabels {
                    pool: name.clone(),
                    kind: kind.as_str().to_string(),
                });
            }
            let _ = self
                .interruption_notices
                .get_or_create(&PoolLabels { pool: name.clone() });
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
