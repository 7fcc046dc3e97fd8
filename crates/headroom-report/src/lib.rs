//! Budget reports for finance, derived from the ledger's rows by pure functions.
//!
//! [`budget_report`] turns node events, refusals and budgets into a [`BudgetReport`]: spend by
//! group and market, parked nodes' volumes, the warm-pool idle premium, requested versus
//! delivered GPU-hours, refusals by reason, each budget's standing with a forecast, and a spend
//! series for charts. Renderers write it as CSV ([`to_csv`]), FinOps FOCUS 1.2 CSV
//! ([`focus::to_focus_csv`], one row per span that costs money, compute or parked volumes,
//! summing exactly to the ledger's spend) and a self-contained HTML page ([`html::to_html`]).

pub mod focus;
pub mod html;
pub mod reservations;
pub mod reserved;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use headroom_core::planner::Destination;
use headroom_core::{Budget, BudgetPeriod, Market, Money, NodeState, Timestamp};
use headroom_records::derive::{as_of, histories, spend, standing};
use headroom_records::{NodeEvent, RefusalRecord, ReportRows};
use reserved::{IdleStretch, ReservedCapacity};
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ReportError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("writing the report")]
    Write(#[from] csv::Error),
    #[error("writing the report")]
    Io(#[from] std::io::Error),
}

/// What rows are grouped by.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    Account,
    Pool,
    Provider,
    Region,
    Market,
}

impl FromStr for GroupBy {
    type Err = ReportError;
    fn from_str(s: &str) -> Result<Self, ReportError> {
        Ok(match s {
            "account" => GroupBy::Account,
            "pool" => GroupBy::Pool,
            "provider" => GroupBy::Provider,
            "region" => GroupBy::Region,
            "market" => GroupBy::Market,
            other => {
                return Err(ReportError::InvalidArgument(format!(
                    "group_by: {other:?} is not one of account, pool, provider, region, market"
                )));
            }
        })
    }
}

impl fmt::Display for GroupBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GroupBy::Account => "account",
            GroupBy::Pool => "pool",
            GroupBy::Provider => "provider",
            GroupBy::Region => "region",
            GroupBy::Market => "market",
        })
    }
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
    Focus,
    Html,
}

impl FromStr for Format {
    type Err = ReportError;
    fn from_str(s: &str) -> Result<Self, ReportError> {
        Ok(match s {
            "json" => Format::Json,
            "csv" => Format::Csv,
            "focus" => Format::Focus,
            "html" => Format::Html,
            other => {
                return Err(ReportError::InvalidArgument(format!(
                    "format: {other:?} is not one of csv, json, focus, html"
                )));
            }
        })
    }
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Csv | Format::Focus => "text/csv; charset=utf-8",
            Format::Html => "text/html; charset=utf-8",
        }
    }
}

/// One group's figures over the report's range.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportRow {
    pub group: String,
    pub spend: Money,
    pub on_demand: Money,
    pub spot: Money,
    /// Spend on nodes that ran on a reservation.
    pub reserved: Money,
    /// What the reservations' unused nodes cost: paid whether a node ran or not.
    pub reserved_idle: Money,
    /// What nodes parked warm and stopped cost: their volumes, at their offering's parked
    /// price. Part of `spend` beside the markets' compute (`on_demand`, `spot`, `reserved`,
    /// `reserved_idle`), which it adds up to.
    pub parked: Money,
    /// Node-hours run on reservations.
    pub reserved_used_node_hours: f64,
    /// Node-hours of reservations that ran no node.
    pub reserved_idle_node_hours: f64,
    /// Spend on warm capacity while it serves nobody: nodes climbing the ladder to wait warm,
    /// nodes waiting warm and running, and parked nodes' volumes (`parked`). The insurance
    /// premium of warm pools.
    pub warm_idle_premium: Money,
    /// GPU-hours from each launch or wake toward serving until the node left service.
    pub requested_gpu_hours: f64,
    /// GPU-hours actually serving.
    pub delivered_gpu_hours: f64,
    /// Delivered over requested GPU-hours; 1 when nothing was requested.
    pub fill_ratio: f64,
    pub refusals_by_reason: BTreeMap<String, u32>,
}

impl ReportRow {
    fn new(group: String) -> ReportRow {
        ReportRow {
            group,
            spend: Money::ZERO,
            on_demand: Money::ZERO,
            spot: Money::ZERO,
            reserved: Money::ZERO,
            reserved_idle: Money::ZERO,
            parked: Money::ZERO,
            reserved_used_node_hours: 0.0,
            reserved_idle_node_hours: 0.0,
            warm_idle_premium: Money::ZERO,
            requested_gpu_hours: 0.0,
            delivered_gpu_hours: 0.0,
            fill_ratio: 1.0,
            refusals_by_reason: BTreeMap::new(),
        }
    }

    fn absorb(&mut self, other: &ReportRow) {
        self.spend += other.spend;
        self.on_demand += other.on_demand;
        self.spot += other.spot;
        self.reserved += other.reserved;
        self.reserved_idle += other.reserved_idle;
        self.parked += other.parked;
        self.reserved_used_node_hours += other.reserved_used_node_hours;
        self.reserved_idle_node_hours += other.reserved_idle_node_hours;
        self.warm_idle_premium += other.warm_idle_premium;
        self.requested_gpu_hours += other.requested_gpu_hours;
        self.delivered_gpu_hours += other.delivered_gpu_hours;
        for (reason, n) in &other.refusals_by_reason {
            *self.refusals_by_reason.entry(reason.clone()).or_default() += n;
        }
    }

    fn finish(&mut self) {
        self.fill_ratio = if self.requested_gpu_hours > 0.0 {
            self.delivered_gpu_hours / self.requested_gpu_hours
        } else {
            1.0
        };
    }
}

/// A budget's standing in its current period, with a forecast.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetLine {
    pub account: String,
    pub period: BudgetPeriod,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub period_start: Timestamp,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub period_end: Timestamp,
    pub ceiling: Money,
    pub spent: Money,
    pub held: Money,
    pub remaining: Money,
    /// Spend by the end of the period if the nodes billing now keep billing.
    pub forecast: Money,
    pub soft_threshold_reached: bool,
    /// The account's cumulative spend from the period's start to now: what the ceiling is drawn
    /// against on the HTML page. Not in the JSON, whose `spend_series` is the report range's.
    #[serde(skip)]
    pub spend_series: Vec<SpendPoint>,
}

/// Cumulative spend at the end of each step of the range, for charts.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpendPoint {
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
    pub cumulative_spend: Money,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetReport {
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub from: Timestamp,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub to: Timestamp,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub generated_at: Timestamp,
    pub currency: &'static str,
    pub group_by: GroupBy,
    pub rows: Vec<ReportRow>,
    pub totals: ReportRow,
    pub budgets: Vec<BudgetLine>,
    pub spend_series: Vec<SpendPoint>,
}

/// What a report reads.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    pub events: &'a [NodeEvent],
    pub refusals: &'a [RefusalRecord],
    pub budgets: &'a [Budget],
    /// The reservations configured: their unused hours are spend too.
    pub reservations: &'a [reserved::ReservedCapacity],
    pub from: Timestamp,
    pub to: Timestamp,
    /// Spend is counted up to `min(to, now)`; budgets stand at `now`.
    pub now: Timestamp,
    pub group_by: GroupBy,
}

/// One stretch of one node in one state, clipped to a range.
#[derive(Debug, Clone, Copy)]
pub struct Span<'a> {
    pub event: &'a NodeEvent,
    pub start: Timestamp,
    pub end: Timestamp,
}

impl Span<'_> {
    pub fn millis(&self) -> i64 {
        (self.end - self.start).num_milliseconds().max(0)
    }

    /// What the span cost: compute in a billable state, volumes parked warm, nothing otherwise
    /// ([`NodeEvent::hourly_rate`]), as the ledger's spend counts it.
    pub fn cost(&self) -> Money {
        self.event.hourly_rate().per_hour_for_millis(self.millis())
    }

    fn gpu_hours(&self) -> f64 {
        self.millis() as f64 / 3_600_000.0 * self.event.gpus as f64
    }
}

/// Every node's state spans clipped to `[from, until)`, in ledger order.
pub fn spans(events: &[NodeEvent], from: Timestamp, until: Timestamp) -> Vec<Span<'_>> {
    let mut out = Vec::new();
    for history in histories(events).values() {
        for (i, event) in history.iter().enumerate() {
            let end = history.get(i + 1).map_or(until, |next| next.at).min(until);
            let start = event.at.max(from);
            if end > start {
                out.push(Span { event, start, end });
            }
        }
    }
    out
}

pub fn group_key(event: &NodeEvent, by: GroupBy) -> String {
    match by {
        GroupBy::Account => event.account.to_string(),
        GroupBy::Pool => event.pool.to_string(),
        GroupBy::Provider => event.provider.to_string(),
        GroupBy::Region => format!("{}/{}", event.provider, event.region),
        GroupBy::Market => event.market.to_string(),
    }
}

/// Builds the report.
pub fn budget_report(input: &ReportInput<'_>) -> Result<BudgetReport, ReportError> {
    if input.from >= input.to {
        return Err(ReportError::InvalidArgument(
            "from: must be before to".into(),
        ));
    }
    let until = input.to.min(input.now).max(input.from);
    let mut rows: BTreeMap<String, ReportRow> = BTreeMap::new();
    for span in spans(input.events, input.from, until) {
        let e = span.event;
        let row = rows
            .entry(group_key(e, input.group_by))
            .or_insert_with_key(|k| ReportRow::new(k.clone()));
        if e.state == NodeState::Warm {
            // Parked and stopped: its volumes (nothing for a row without a parked price).
            let cost = span.cost();
            row.spend += cost;
            row.parked += cost;
            row.warm_idle_premium += cost;
        }
        if e.state.is_billable() {
            let cost = span.cost();
            row.spend += cost;
            match e.market {
                Market::OnDemand => row.on_demand += cost,
                Market::Spot => row.spot += cost,
                Market::Reserved => {
                    row.reserved += cost;
                    row.reserved_used_node_hours += span.millis() as f64 / 3_600_000.0;
                }
            }
            if e.destination == Destination::Warm {
                row.warm_idle_premium += cost;
            }
        }
        if e.destination == Destination::Serve {
            let wanted = e.state.is_starting() || e.state == NodeState::Serving;
            if wanted {
                row.requested_gpu_hours += span.gpu_hours();
            }
            if e.state == NodeState::Serving {
                row.delivered_gpu_hours += span.gpu_hours();
            }
        }
    }
    let idle_stretches =
        reserved::idle_stretches(input.reservations, input.events, input.from, until);
    for idle in &idle_stretches {
        let row = rows
            .entry(reserved::owner(idle.reservation, input.group_by))
            .or_insert_with_key(|k| ReportRow::new(k.clone()));
        let cost = idle.cost();
        row.spend += cost;
        row.reserved_idle += cost;
        row.reserved_idle_node_hours += idle.node_hours();
    }
    for r in input
        .refusals
        .iter()
        .filter(|r| r.at >= input.from && r.at < input.to)
    {
        // Refusals carry the pool; other groupings take it from the pool's events.
        let key = match input.group_by {
            GroupBy::Pool => Some(r.pool.to_string()),
            by => input
                .events
                .iter()
                .find(|e| e.pool == r.pool && r.offering.as_ref().is_none_or(|o| &e.offering == o))
                .map(|e| group_key(e, by)),
        }
        .unwrap_or_else(|| format!("pool {}", r.pool));
        let row = rows
            .entry(key)
            .or_insert_with_key(|k| ReportRow::new(k.clone()));
        *row.refusals_by_reason.entry(r.reason.code()).or_default() += r.replicas;
    }
    let mut totals = ReportRow::new("total".to_string());
    let mut rows: Vec<ReportRow> = rows.into_values().collect();
    for row in &mut rows {
        row.finish();
        totals.absorb(row);
    }
    totals.finish();

    let budgets = input
        .budgets
        .iter()
        .map(|b| budget_line(input.events, b, input.now))
        .collect();
    Ok(BudgetReport {
        from: input.from,
        to: input.to,
        generated_at: input.now,
        currency: "USD",
        group_by: input.group_by,
        rows,
        totals,
        budgets,
        spend_series: spend_series(input.events, &idle_stretches, input.from, until),
    })
}

fn budget_line(events: &[NodeEvent], budget: &Budget, now: Timestamp) -> BudgetLine {
    let s = standing(events, budget, now);
    let (period_start, period_end) = budget.period.bounds(now);
    // The burn rate now: what this account's nodes cost an hour at this instant (compute, or
    // volumes for a parked node).
    let burn: Money = histories(events)
        .values()
        .filter(|h| h[0].account == budget.account)
        .filter_map(|h| h.iter().rev().find(|e| e.at <= now))
        .map(|e| e.hourly_rate())
        .sum();
    let left_ms = (period_end - now).num_milliseconds().max(0);
    let committed = s.spent + s.held;
    BudgetLine {
        account: budget.account.to_string(),
        period: budget.period,
        period_start,
        period_end,
        ceiling: s.ceiling,
        spent: s.spent,
        held: s.held,
        remaining: s.remaining(),
        forecast: s.spent + burn.per_hour_for_millis(left_ms),
        soft_threshold_reached: (committed.micros() as i128) * 100
            >= (budget.ceiling.micros() as i128) * budget.soft_threshold_percent as i128,
        spend_series: steps(period_start, now.min(period_end))
            .map(|at| SpendPoint {
                at,
                cumulative_spend: spend(events, Some(&budget.account), Some(period_start), at),
            })
            .collect(),
    }
}

/// Up to 100 evenly spaced instants after `from`, at least a minute apart, the last `until`.
fn steps(from: Timestamp, until: Timestamp) -> impl Iterator<Item = Timestamp> {
    let range_ms = (until - from).num_milliseconds().max(0);
    let step = chrono::Duration::milliseconds((range_ms / 100).max(60_000));
    let mut t = from;
    std::iter::from_fn(move || {
        if t >= until {
            return None;
        }
        t = (t + step).min(until);
        Some(t)
    })
}

/// Cumulative spend at up to 100 evenly spaced instants (at least a minute apart).
fn spend_series(
    events: &[NodeEvent],
    idle: &[reserved::IdleStretch<'_>],
    from: Timestamp,
    until: Timestamp,
) -> Vec<SpendPoint> {
    let all = spans(events, from, until);
    let mut points = Vec::new();
    for t in steps(from, until) {
        let cumulative: Money = all
            .iter()
            .filter(|s| s.start < t)
            .map(|s| {
                Span {
                    end: s.end.min(t),
                    ..*s
                }
                .cost()
            })
            .sum::<Money>()
            + idle
                .iter()
                .filter(|i| i.start < t)
                .map(|i| {
                    IdleStretch {
                        end: i.end.min(t),
                        ..i.clone()
                    }
                    .cost()
                })
                .sum::<Money>();
        points.push(SpendPoint {
            at: t,
            cumulative_spend: cumulative,
        });
    }
    points
}

/// The report's rows as CSV, one line per group and a total line.
pub fn to_csv(report: &BudgetReport) -> Result<String, ReportError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        report.group_by.to_string().as_str(),
        "from",
        "to",
        "currency",
        "spend",
        "on_demand",
        "spot",
        "reserved",
        "reserved_idle",
        "parked",
        "reserved_used_node_hours",
        "reserved_idle_node_hours",
        "warm_idle_premium",
        "requested_gpu_hours",
        "delivered_gpu_hours",
        "fill_ratio",
        "refusals",
    ])?;
    for row in report.rows.iter().chain(std::iter::once(&report.totals)) {
        let refusals: Vec<String> = row
            .refusals_by_reason
            .iter()
            .map(|(reason, n)| format!("{reason}={n}"))
            .collect();
        w.write_record([
            row.group.clone(),
            report
                .from
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            report.to.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            report.currency.to_string(),
            row.spend.to_string(),
            row.on_demand.to_string(),
            row.spot.to_string(),
            row.reserved.to_string(),
            row.reserved_idle.to_string(),
            row.parked.to_string(),
            format!("{:.4}", row.reserved_used_node_hours),
            format!("{:.4}", row.reserved_idle_node_hours),
            row.warm_idle_premium.to_string(),
            format!("{:.4}", row.requested_gpu_hours),
            format!("{:.4}", row.delivered_gpu_hours),
            format!("{:.4}", row.fill_ratio),
            refusals.join(";"),
        ])?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| ReportError::Io(e.into_error()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The report of `rows` over `[from, to)` for a reader (`rows` and `reservations` already cut to
/// the accounts it acts for; the ledger's `report_rows::budget` reads them). A ledger written in
/// virtual time (the demo's, the simulator's) may run ahead of the wall clock: it is reported up
/// to its last event.
pub fn from_rows(
    rows: &ReportRows,
    reservations: &[ReservedCapacity],
    from: Timestamp,
    to: Timestamp,
    group_by: GroupBy,
    now: Timestamp,
) -> Result<BudgetReport, ReportError> {
    budget_report(&ReportInput {
        events: &rows.events,
        refusals: &rows.refusals,
        budgets: &rows.budgets,
        reservations,
        from,
        to,
        now: as_of(&rows.events, now),
        group_by,
    })
}

/// Renders `report` in `format`.
pub fn render(
    report: &BudgetReport,
    events: &[NodeEvent],
    reservations: &[ReservedCapacity],
    format: Format,
) -> Result<String, ReportError> {
    match format {
        Format::Json => serde_json::to_string_pretty(report).map_err(|e| ReportError::Io(e.into())),
        Format::Csv => to_csv(report),
        Format::Focus => focus::to_focus_csv(
            events,
            reservations,
            report.from,
            report.to.min(report.generated_at),
        ),
        Format::Html => Ok(html::to_html(report)),
    }
}
