//! Reservations advised from the ledger: for each pool and offering family (provider, region,
//! instance type) the demand profile it had, the refusals a reservation would have avoided, and
//! the commitments that minimise its cost at its objective, with the savings and the risk.
//!
//! The rules, in order:
//! - Demand is measured per hour of the history: the average number of billed nodes (booting,
//!   standby, serving, draining) not already on a reservation, and what they cost. Refused demand
//!   is the most nodes of the family refused at once in the hour (for capacity, or for want of
//!   any offering, which counts against the pool's busiest family).
//! - The pool's objective is to serve what it asked for: an hour of the day refused on two or
//!   more days is a pattern, and capacity is reserved to cover it (what ran then plus what was
//!   refused). A single refusal is reported, not reserved for.
//! - A discount is committed to the number of nodes that minimises the history's cost (nodes
//!   above it pay what they paid, spot included), kept only if it still saves when demand falls
//!   to 80 %; among the terms the largest saving wins, the shorter term on a tie.
//! - A capacity block (a window bought ahead) is advised when every refusal falls within a window
//!   no longer than the block's longest term and half the history, on two days or more, and it
//!   costs less than a standing reservation for the same refusals.

mod render;
mod terms;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{Datelike, Timelike};
use headroom_core::refusal::ErrorClass;
use headroom_core::{Market, Money, NodeState, RefusalReason, Timestamp};
use headroom_records::derive::as_of;
use headroom_records::{NodeEvent, RefusalRecord};
use serde::Serialize;

use crate::{ReportError, spans};

pub use render::{html_section, to_csv, to_html, to_table};
pub use terms::{CommitmentKind, CommitmentTerm, DEFAULT_TERMS, cloud_of, parse_terms};

const HOUR_MS: i64 = 3_600_000;
/// Hours in the 30 days every saving is quoted for.
const MONTH_HOURS: f64 = 720.0;
/// Demand levels the risk is quoted at, as fractions of the history's.
const RISK_LEVELS: [f64; 2] = [0.8, 0.5];
/// An hour of the day refused on this many days is a pattern a reservation covers.
const RECURRING_DAYS: usize = 2;
/// A term commitment is weighed on a week of history at least: a shorter one has not shown the
/// weekly cycle, and its savings would be a guess scaled up.
const MIN_DISCOUNT_HISTORY_HOURS: f64 = 168.0;

/// What the advice reads.
#[derive(Debug, Clone, Copy)]
pub struct ReservationInput<'a> {
    pub events: &'a [NodeEvent],
    pub refusals: &'a [RefusalRecord],
    pub terms: &'a [CommitmentTerm],
    pub from: Timestamp,
    /// End of the history (exclusive): the report's end or the ledger's last instant, earlier.
    pub until: Timestamp,
}

/// The advice for every pool and family in the history.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReservationReport {
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub from: Timestamp,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub until: Timestamp,
    /// Hours of history read.
    pub hours: f64,
    pub currency: &'static str,
    pub families: Vec<FamilyAdvice>,
    /// Pools refused in the range that never ran a node: nothing to size a commitment on.
    pub pools_without_history: Vec<PoolWithoutHistory>,
    /// The terms the advice weighed, with their sources.
    pub terms: Vec<CommitmentTerm>,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolWithoutHistory {
    pub pool: String,
    pub refused_replicas: u32,
    pub why: String,
}

/// One pool's nodes of one instance type in one region, and what to commit to for them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FamilyAdvice {
    pub pool: String,
    pub provider: String,
    pub region: String,
    /// The zone most of its node-hours ran in (capacity reservations are zonal).
    pub zone: String,
    pub instance_type: String,
    pub gpus_per_node: u32,
    /// The on-demand rate the commitments are priced from: the highest on-demand rate the
    /// family paid, else the highest rate it paid.
    pub on_demand_usd_per_hour: Money,
    /// What its node-hours cost on average (spot pulls it under on-demand).
    pub paid_usd_per_hour: Money,
    pub node_hours: f64,
    /// Everything the family was billed in the window: its node-hours and its parked nodes'
    /// volumes.
    pub spend: Money,
    /// Node-hours on reservations it already has (not advised on again).
    pub reserved_node_hours: f64,
    /// The fewest, mean and most nodes billed in an hour of the history.
    pub base_nodes: f64,
    pub mean_nodes: f64,
    pub peak_nodes: f64,
    /// Delivered (serving) GPU-hours by weekday (Monday first) and hour of day (UTC), averaged
    /// over the times each hour occurs in the history; `None` where it does not occur.
    pub profile: Vec<Vec<Option<f64>>>,
    /// Node-hours refused (the most refused at once, each hour with refusals).
    pub refused_node_hours: f64,
    /// Hours with a refusal, and those whose hour of day was refused on two days or more.
    pub refused_hours: u32,
    pub recurring_refused_hours: u32,
    pub recommendations: Vec<Recommendation>,
    /// Why nothing (or nothing more) is advised.
    pub why: String,
}

/// One commitment to buy.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    pub product: String,
    pub kind: CommitmentKind,
    pub instances: u32,
    /// Where: the zone for capacity, the region for a discount.
    pub location: String,
    pub term: String,
    /// A block's first instant and length; `None` for standing commitments.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub starts_at: Option<Timestamp>,
    pub length_hours: Option<u32>,
    pub usd_per_node_hour: Money,
    /// The history's cost (30 days of it) without and with this and the lines before it.
    pub cost_without_per_30d: Money,
    pub cost_with_per_30d: Money,
    /// Negative when the commitment costs more: the price of the refusals it avoids.
    pub savings_per_30d: f64,
    /// The share of committed node-hours that must be used for it to pay for itself.
    pub break_even_utilisation: f64,
    /// Savings (30 days) if demand were 80 % and 50 % of the history's.
    pub savings_at_80_percent_per_30d: f64,
    pub savings_at_50_percent_per_30d: f64,
    pub refused_node_hours_avoided: f64,
    pub why: String,
    pub source: String,
}

/// One family's history, hour by hour.
#[derive(Debug, Clone)]
struct FamilyHistory {
    provider: headroom_core::ProviderKind,
    gpus: u32,
    on_demand_rate: f64,
    any_rate: f64,
    zones: BTreeMap<String, i64>,
    /// Node-hours billed (average nodes once the history is read), what they cost, delivered GPU-hours and most nodes refused at once.
    nodes: Vec<f64>,
    cost: Vec<f64>,
    delivered_gpu_hours: Vec<f64>,
    refused: Vec<f64>,
    reserved_node_hours: f64,
    /// Spend outside reservations, exact (the hourly costs are for weighing, in floating point).
    spend: Money,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct FamilyKey {
    pool: String,
    provider: String,
    region: String,
    instance_type: String,
}

impl FamilyKey {
    fn of(e: &NodeEvent) -> FamilyKey {
        FamilyKey {
            pool: e.pool.to_string(),
            provider: e.provider.to_string(),
            region: e.region.clone(),
            instance_type: e.instance_type.clone(),
        }
    }
}

/// Builds the advice.
pub fn advise(input: &ReservationInput<'_>) -> Result<ReservationReport, ReportError> {
    // Before its first entry the ledger knows nothing: those hours are not hours without demand.
    let first = input.events.iter().map(|e| e.at).min();
    let clamped = ReservationInput {
        from: first.map_or(input.from, |first| input.from.max(first)),
        ..*input
    };
    let input = &clamped;
    if input.from >= input.until {
        return Err(ReportError::InvalidArgument(
            "from: must be before the end of the history".into(),
        ));
    }
    let hours = ((input.until - input.from).num_milliseconds() + HOUR_MS - 1) / HOUR_MS;
    let hours = usize::try_from(hours).unwrap_or(0);
    let length_h = (input.until - input.from).num_milliseconds() as f64 / HOUR_MS as f64;
    // Every hour counts whole but the last, which counts for what of it the history covers.
    let weights: Vec<f64> = (0..hours).map(|i| (length_h - i as f64).min(1.0)).collect();
    let mut families = histories_by_family(input, hours);
    for history in families.values_mut() {
        for (nodes, w) in history.nodes.iter_mut().zip(&weights) {
            *nodes /= w;
        }
    }
    let pools_without_history = attribute_refusals(input, hours, &mut families);
    let families = families
        .into_iter()
        .map(|(key, history)| advise_family(key, &history, input, &weights))
        .collect();
    Ok(ReservationReport {
        from: input.from,
        until: input.until,
        hours: length_h,
        currency: "USD",
        families,
        pools_without_history,
        terms: input.terms.to_vec(),
    })
}

/// Every billed span cut at hour boundaries into its family's hourly series.
fn histories_by_family(
    input: &ReservationInput<'_>,
    hours: usize,
) -> BTreeMap<FamilyKey, FamilyHistory> {
    let mut out: BTreeMap<FamilyKey, FamilyHistory> = BTreeMap::new();
    for span in spans(input.events, input.from, input.until) {
        let e = span.event;
        let billed = e.state.is_billable();
        let serving = e.state == NodeState::Serving;
        // A parked node's volumes are the family's spend, but no node-hour a reservation covers.
        let parked = e.state == NodeState::Warm && span.cost() > Money::ZERO;
        if !billed && !serving && !parked {
            continue;
        }
        let h = out
            .entry(FamilyKey::of(e))
            .or_insert_with(|| FamilyHistory {
                provider: e.provider,
                gpus: 0,
                on_demand_rate: 0.0,
                any_rate: 0.0,
                zones: BTreeMap::new(),
                nodes: vec![0.0; hours],
                cost: vec![0.0; hours],
                delivered_gpu_hours: vec![0.0; hours],
                refused: vec![0.0; hours],
                reserved_node_hours: 0.0,
                spend: Money::ZERO,
            });
        h.gpus = h.gpus.max(e.gpus);
        let rate = e.price_usd_per_hour.as_f64_lossy();
        h.any_rate = h.any_rate.max(rate);
        if e.market == Market::OnDemand {
            h.on_demand_rate = h.on_demand_rate.max(rate);
        }
        if parked {
            h.spend += span.cost();
            continue;
        }
        if billed && e.market == Market::Reserved {
            h.reserved_node_hours += span.millis() as f64 / HOUR_MS as f64;
            continue;
        }
        if billed {
            *h.zones.entry(e.zone.clone()).or_default() += span.millis();
            h.spend += span.cost();
        }
        let mut start = span.start;
        while start < span.end {
            let offset = (start - input.from).num_milliseconds();
            let hour = usize::try_from(offset / HOUR_MS)
                .unwrap_or(0)
                .min(hours - 1);
            let hour_end = input.from + chrono::Duration::milliseconds((hour as i64 + 1) * HOUR_MS);
            let end = span.end.min(hour_end);
            let share = (end - start).num_milliseconds() as f64 / HOUR_MS as f64;
            if billed {
                h.nodes[hour] += share;
                h.cost[hour] += share * rate;
            }
            if serving {
                h.delivered_gpu_hours[hour] += share * e.gpus as f64;
            }
            start = end;
        }
    }
    out
}

/// Refusals a reservation would have avoided, hour by hour, into their families: a capacity
/// refusal into its offering's (if that ever billed), others into the pool's busiest family.
/// Returns the pools refused that never ran.
fn attribute_refusals(
    input: &ReservationInput<'_>,
    hours: usize,
    families: &mut BTreeMap<FamilyKey, FamilyHistory>,
) -> Vec<PoolWithoutHistory> {
    let offering_family: BTreeMap<(&str, &str), FamilyKey> = input
        .events
        .iter()
        .map(|e| ((e.pool.as_str(), e.offering.as_str()), FamilyKey::of(e)))
        .collect();
    let busiest = |pool: &str, families: &BTreeMap<FamilyKey, FamilyHistory>| {
        families
            .iter()
            .filter(|(k, _)| k.pool == pool)
            .max_by(|a, b| {
                a.1.nodes
                    .iter()
                    .sum::<f64>()
                    .total_cmp(&b.1.nodes.iter().sum())
            })
            .map(|(k, _)| k.clone())
    };
    let mut never_ran: BTreeMap<String, u32> = BTreeMap::new();
    for r in input
        .refusals
        .iter()
        .filter(|r| r.at >= input.from && r.at < input.until)
    {
        let avoidable = matches!(
            r.reason,
            RefusalReason::Cloud(ErrorClass::Capacity) | RefusalReason::NoOffering
        );
        if !avoidable {
            continue;
        }
        let key = r
            .offering
            .as_ref()
            .and_then(|o| offering_family.get(&(r.pool.as_str(), o.as_str())))
            .filter(|k| families.contains_key(*k))
            .cloned()
            .or_else(|| busiest(r.pool.as_str(), families));
        let Some(history) = key.and_then(|k| families.get_mut(&k)) else {
            *never_ran.entry(r.pool.to_string()).or_default() += r.replicas;
            continue;
        };
        let hour = usize::try_from((r.at - input.from).num_milliseconds() / HOUR_MS)
            .unwrap_or(0)
            .min(hours - 1);
        history.refused[hour] = history.refused[hour].max(r.replicas as f64);
    }
    never_ran
        .into_iter()
        .map(|(pool, refused_replicas)| PoolWithoutHistory {
            pool,
            refused_replicas,
            why: "refused but never ran a node in the range: no demand to size a commitment on"
                .to_string(),
        })
        .collect()
}

/// The hour of the day (UTC) and the day of hour `i` of the history.
fn hour_of_day(from: Timestamp, i: usize) -> (u32, i64) {
    let t = from + chrono::Duration::milliseconds(i as i64 * HOUR_MS);
    (t.hour(), t.num_days_from_ce().into())
}

/// Hours whose hour of day had refusals on `RECURRING_DAYS` days or more.
fn recurring_refusals(from: Timestamp, refused: &[f64]) -> Vec<bool> {
    let mut days_by_hour: BTreeMap<u32, BTreeSet<i64>> = BTreeMap::new();
    for (i, r) in refused.iter().enumerate() {
        if *r > 0.0 {
            let (hour, day) = hour_of_day(from, i);
            days_by_hour.entry(hour).or_default().insert(day);
        }
    }
    (0..refused.len())
        .map(|i| {
            let (hour, _) = hour_of_day(from, i);
            refused[i] > 0.0
                && days_by_hour
                    .get(&hour)
                    .is_some_and(|days| days.len() >= RECURRING_DAYS)
        })
        .collect()
}

fn money(usd: f64) -> Money {
    Money::from_f64_decimal((usd * 1e6).round() / 1e6).unwrap_or(Money::ZERO)
}

fn advise_family(
    key: FamilyKey,
    h: &FamilyHistory,
    input: &ReservationInput<'_>,
    weights: &[f64],
) -> FamilyAdvice {
    let hours = weights.len();
    let length_h: f64 = weights.iter().sum();
    let node_hours: f64 = h.nodes.iter().zip(weights).map(|(n, w)| n * w).sum();
    let spend: f64 = h.cost.iter().sum();
    let on_demand = if h.on_demand_rate > 0.0 {
        h.on_demand_rate
    } else {
        h.any_rate
    };
    let paid = if node_hours > 0.0 {
        spend / node_hours
    } else {
        on_demand
    };
    let recurring = recurring_refusals(input.from, &h.refused);
    let mut advice = FamilyAdvice {
        pool: key.pool,
        provider: key.provider,
        region: key.region,
        zone: h
            .zones
            .iter()
            .max_by_key(|(_, ms)| **ms)
            .map(|(z, _)| z.clone())
            .unwrap_or_default(),
        instance_type: key.instance_type,
        gpus_per_node: h.gpus,
        on_demand_usd_per_hour: money(on_demand),
        paid_usd_per_hour: money(paid),
        node_hours,
        spend: h.spend,
        reserved_node_hours: h.reserved_node_hours,
        base_nodes: h.nodes.iter().copied().fold(f64::INFINITY, f64::min),
        mean_nodes: node_hours / length_h,
        peak_nodes: h.nodes.iter().copied().fold(0.0, f64::max),
        profile: profile(input.from, &h.delivered_gpu_hours),
        refused_node_hours: h.refused.iter().sum(),
        refused_hours: h.refused.iter().filter(|r| **r > 0.0).count() as u32,
        recurring_refused_hours: recurring.iter().filter(|r| **r).count() as u32,
        recommendations: Vec::new(),
        why: String::new(),
    };
    let cloud = cloud_of(h.provider, &advice.instance_type);
    let Some(cloud) = cloud else {
        advice.why = format!(
            "no cloud's commitments apply to instance type {:?}",
            advice.instance_type
        );
        return advice;
    };
    let applicable: Vec<&CommitmentTerm> = input
        .terms
        .iter()
        .filter(|t| t.applies_to(cloud, &advice.instance_type))
        .collect();
    if node_hours == 0.0 && advice.refused_node_hours == 0.0 {
        advice.why = "no billed node-hours outside reservations in the range".to_string();
        return advice;
    }
    let demand = Demand {
        nodes: &h.nodes,
        cost: &h.cost,
        weights,
        on_demand,
        hours,
    };
    let mut notes = Vec::new();
    if h.provider == headroom_core::ProviderKind::Sim {
        notes.push(format!(
            "the simulated cloud's {} is priced with {cloud}'s terms",
            advice.instance_type
        ));
    }
    let covered = capacity_line(
        &demand,
        h,
        &recurring,
        input,
        &applicable,
        &mut advice,
        &mut notes,
    );
    // A discount applies to a standing reservation's usage, not to a block bought at its own rate.
    let block = advice
        .recommendations
        .iter()
        .any(|r| r.kind == CommitmentKind::Block);
    let covered = if block { vec![0.0; hours] } else { covered };
    discount_line(&demand, &covered, &applicable, &mut advice, &mut notes);
    advice.why = notes.join("; ");
    advice
}

/// Delivered GPU-hours by weekday and hour, averaged over the hours of the history in each cell.
fn profile(from: Timestamp, delivered: &[f64]) -> Vec<Vec<Option<f64>>> {
    let mut sum = vec![vec![0.0; 24]; 7];
    let mut seen = vec![vec![0u32; 24]; 7];
    for (i, gpu_hours) in delivered.iter().enumerate() {
        let t = from + chrono::Duration::milliseconds(i as i64 * HOUR_MS);
        let (d, hr) = (
            t.weekday().num_days_from_monday() as usize,
            t.hour() as usize,
        );
        sum[d][hr] += gpu_hours;
        seen[d][hr] += 1;
    }
    sum.iter()
        .zip(&seen)
        .map(|(s, n)| {
            s.iter()
                .zip(n)
                .map(|(s, n)| (*n > 0).then(|| s / *n as f64))
                .collect()
        })
        .collect()
}

/// One family's hourly demand and cost: what a commitment is weighed against.
struct Demand<'a> {
    /// Average nodes billed each hour, what they cost, and how much of the hour the history holds.
    nodes: &'a [f64],
    cost: &'a [f64],
    weights: &'a [f64],
    on_demand: f64,
    hours: usize,
}

impl Demand<'_> {
    /// What an hour's nodes cost each (the on-demand rate where none ran).
    fn rate(&self, hour: usize) -> f64 {
        if self.nodes[hour] > 0.0 {
            self.cost[hour] / (self.nodes[hour] * self.weights[hour])
        } else {
            self.on_demand
        }
    }

    /// The history's cost with demand scaled by `scale` and `extra[h]` nodes more wanted, when
    /// `committed` nodes are paid at `rate` every hour: usage above them pays what it paid.
    fn cost_with(&self, scale: f64, extra: &[f64], committed: f64, rate: f64) -> f64 {
        (0..self.hours)
            .map(|i| {
                let wanted = self.nodes[i] * scale + extra[i];
                self.weights[i] * (committed * rate + (wanted - committed).max(0.0) * self.rate(i))
            })
            .sum()
    }

    /// The history's cost with demand scaled, nothing committed, `extra` served on demand.
    fn cost_without(&self, scale: f64, extra: &[f64]) -> f64 {
        self.cost_with(scale, extra, 0.0, 0.0)
    }

    /// Hours of history.
    fn length(&self) -> f64 {
        self.weights.iter().sum()
    }

    /// Committed node-hours that demand used, as a share of them.
    fn use_of(&self, committed: f64, extra: &[f64]) -> f64 {
        let used: f64 = (0..self.hours)
            .map(|i| self.weights[i] * (self.nodes[i] + extra[i]).min(committed))
            .sum();
        used / (committed * self.length()).max(f64::MIN_POSITIVE)
    }
}

fn per_month(usd: f64, hours: f64) -> f64 {
    usd * MONTH_HOURS / hours.max(f64::MIN_POSITIVE)
}

/// Capacity for the refused hours: a standing reservation for the recurring ones, or a block
/// over the window when every refusal falls within one shorter than the block's longest term and
/// half the history; the cheaper when both apply. Returns the refused nodes it serves, hourly.
fn capacity_line(
    demand: &Demand<'_>,
    h: &FamilyHistory,
    recurring: &[bool],
    input: &ReservationInput<'_>,
    terms: &[&CommitmentTerm],
    advice: &mut FamilyAdvice,
    notes: &mut Vec<String>,
) -> Vec<f64> {
    let hours = demand.hours;
    if advice.refused_hours == 0 {
        notes.push("never refused for capacity: no capacity reservation needed".into());
        return vec![0.0; hours];
    }
    let refused_at: Vec<usize> = (0..hours).filter(|i| h.refused[*i] > 0.0).collect();
    let (first_day, last_day) = (refused_at[0] / 24, refused_at[refused_at.len() - 1] / 24);
    let window_days = last_day - first_day + 1;
    let refused_days: BTreeSet<usize> = refused_at.iter().map(|i| i / 24).collect();
    let mut candidates = Vec::new();
    let standing = terms.iter().find(|t| t.kind == CommitmentKind::Capacity);
    if let Some(term) = standing.filter(|_| advice.recurring_refused_hours > 0) {
        candidates.push(capacity_candidate(
            demand,
            h,
            recurring,
            (0..hours, None),
            term,
            &advice.zone,
        ));
    }
    for term in terms.iter().filter(|t| t.kind == CommitmentKind::Block) {
        let fits = window_days <= term.term_days as usize && 2 * window_days * 24 <= hours;
        if fits && refused_days.len() >= RECURRING_DAYS {
            let start =
                input.from + chrono::Duration::milliseconds((first_day * 24) as i64 * HOUR_MS);
            let window = first_day * 24..((last_day + 1) * 24).min(hours);
            let every: Vec<bool> = (0..hours).map(|i| h.refused[i] > 0.0).collect();
            candidates.push(capacity_candidate(
                demand,
                h,
                &every,
                (window, Some(start)),
                term,
                &advice.zone,
            ));
        }
    }
    let Some((line, extra)) = candidates
        .into_iter()
        .min_by(|a, b| a.0.cost_with_per_30d.cmp(&b.0.cost_with_per_30d))
    else {
        notes.push(if advice.recurring_refused_hours == 0 {
            format!(
                "refused in {} hour(s), never at the same hour of day on {RECURRING_DAYS} days: not a pattern to reserve for",
                advice.refused_hours
            )
        } else {
            "no capacity product in the terms for this instance type".to_string()
        });
        return vec![0.0; hours];
    };
    advice.recommendations.push(line);
    extra
}

/// Capacity held over `window` (every hour for a standing reservation) for the hours `covers`
/// marks: as many nodes as ran then plus the most refused at once.
fn capacity_candidate(
    demand: &Demand<'_>,
    h: &FamilyHistory,
    covers: &[bool],
    (window, starts_at): (std::ops::Range<usize>, Option<Timestamp>),
    term: &CommitmentTerm,
    zone: &str,
) -> (Recommendation, Vec<f64>) {
    let hours = demand.hours;
    let instances = (0..hours)
        .filter(|i| covers[*i])
        .map(|i| (demand.nodes[i] + h.refused[i] - 1e-9).ceil() as u32)
        .max()
        .unwrap_or(0);
    let extra: Vec<f64> = (0..hours)
        .map(|i| if covers[i] { h.refused[i] } else { 0.0 })
        .collect();
    let rate = term.rate(demand.on_demand);
    let nothing = vec![0.0; hours];
    let cost_with = |scale: f64| -> f64 {
        (0..hours)
            .map(|i| {
                let wanted = demand.nodes[i] * scale + extra[i];
                let held = if window.contains(&i) {
                    instances as f64
                } else {
                    0.0
                };
                demand.weights[i] * (held * rate + (wanted - held).max(0.0) * demand.rate(i))
            })
            .sum()
    };
    let is_block = starts_at.is_some();
    let line = recommendation(
        term,
        instances,
        zone,
        demand,
        starts_at,
        is_block.then(|| window.len() as u32),
        rate,
        &|scale| demand.cost_without(scale, &nothing),
        &cost_with,
        extra.iter().sum(),
        format!(
            "covers the {} refused hour(s){}: the most nodes that ran then plus the most refused at once",
            extra.iter().filter(|e| **e > 0.0).count(),
            if is_block {
                " (all within this window)"
            } else {
                " whose hour of day was refused on two days or more"
            },
        ),
    );
    (line, extra)
}

/// A discount on the nodes that minimise the history's cost, among the terms that still save at
/// 80 % of the demand; the largest saving wins.
fn discount_line(
    demand: &Demand<'_>,
    covered: &[f64],
    terms: &[&CommitmentTerm],
    advice: &mut FamilyAdvice,
    notes: &mut Vec<String>,
) {
    let most = (0..demand.hours)
        .map(|i| demand.nodes[i] + covered[i])
        .fold(0.0, f64::max)
        .ceil() as u32;
    if demand.length() < MIN_DISCOUNT_HISTORY_HOURS {
        notes.push(format!(
            "{:.1} hours of history: a term commitment is weighed on a week at least",
            demand.length()
        ));
        return;
    }
    let mut best: Option<Recommendation> = None;
    for term in terms.iter().filter(|t| t.kind == CommitmentKind::Discount) {
        let rate = term.rate(demand.on_demand);
        let without = |scale: f64| demand.cost_without(scale, covered);
        let with = |n: u32| move |scale: f64| demand.cost_with(scale, covered, n as f64, rate);
        let Some(n) = (1..=most).min_by(|a, b| with(*a)(1.0).total_cmp(&with(*b)(1.0))) else {
            continue;
        };
        let line = recommendation(
            term,
            n,
            &advice.region,
            demand,
            None,
            None,
            rate,
            &without,
            &with(n),
            0.0,
            format!(
                "the history would have used {:.0} % of {n} committed node(s)' hours",
                100.0 * demand.use_of(n as f64, covered),
            ),
        );
        if line.savings_per_30d <= 0.0 || line.savings_at_80_percent_per_30d < 0.0 {
            continue;
        }
        let better = best
            .as_ref()
            .is_none_or(|b| line.savings_per_30d > b.savings_per_30d + 1e-6);
        if better {
            best = Some(line);
        }
    }
    match best {
        Some(line) => advice.recommendations.push(line),
        None => notes
            .push("no discount saves on this history and still saves at 80 % of its demand".into()),
    }
}

#[allow(clippy::too_many_arguments)]
fn recommendation(
    term: &CommitmentTerm,
    instances: u32,
    location: &str,
    demand: &Demand<'_>,
    starts_at: Option<Timestamp>,
    length_hours: Option<u32>,
    rate: f64,
    without: &dyn Fn(f64) -> f64,
    with: &dyn Fn(f64) -> f64,
    refused_avoided: f64,
    why: String,
) -> Recommendation {
    let hours = demand.length();
    let savings = |scale: f64| per_month(without(scale) - with(scale), hours);
    let paid: f64 = demand.cost.iter().sum::<f64>();
    let node_hours: f64 = (0..demand.hours)
        .map(|i| demand.nodes[i] * demand.weights[i])
        .sum();
    let paid_rate = if node_hours > 0.0 {
        paid / node_hours
    } else {
        demand.on_demand
    };
    Recommendation {
        product: term.product.clone(),
        kind: term.kind,
        instances,
        location: location.to_string(),
        term: term.term_label(),
        starts_at,
        length_hours,
        usd_per_node_hour: money(rate),
        cost_without_per_30d: money(per_month(without(1.0), hours)),
        cost_with_per_30d: money(per_month(with(1.0), hours)),
        savings_per_30d: savings(1.0),
        break_even_utilisation: rate / paid_rate.max(f64::MIN_POSITIVE),
        savings_at_80_percent_per_30d: savings(RISK_LEVELS[0]),
        savings_at_50_percent_per_30d: savings(RISK_LEVELS[1]),
        refused_node_hours_avoided: refused_avoided,
        why,
        source: format!("{} (read {})", term.source, term.read_on),
    }
}

/// The history advice reads, `[from, end)`, and how far it is priced (`until`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryRange {
    pub from: Timestamp,
    pub end: Timestamp,
    pub until: Timestamp,
}

/// The range advice reads from `events` (a reader's, all its nodes' events): `[from, to)`, by
/// default the whole ledger: to `now` (or the ledger's last instant when it runs ahead, the
/// demo's virtual time) while nodes run, and to its last entry when none does (`finished`: a
/// finished history, the simulator's, the demo's), so the hours after a run are not read as
/// hours without demand. The refusals read for it are those of `[from, end)`.
pub fn history_range(
    events: &[NodeEvent],
    finished: bool,
    from: Option<Timestamp>,
    to: Option<Timestamp>,
    now: Timestamp,
) -> Result<HistoryRange, ReportError> {
    let last = events.iter().map(|e| e.at).max();
    let end = match (to, last) {
        (Some(to), _) => to,
        (None, Some(last)) if finished => last,
        _ => as_of(events, now),
    };
    if events.is_empty() {
        // Nothing ran: `from_rows` advises nothing, and no refusal is in an empty range.
        return Ok(HistoryRange {
            from: end,
            end,
            until: end,
        });
    }
    // `advise` starts the history at the first entry when `from` is earlier.
    let first = events.iter().map(|e| e.at).min().unwrap_or(end);
    let from = from.unwrap_or(first);
    if from >= end {
        return Err(ReportError::InvalidArgument(
            "from: must be before to (and before the ledger's last instant)".into(),
        ));
    }
    Ok(HistoryRange {
        from,
        end,
        until: end.min(as_of(events, now)),
    })
}

/// Advises on `events` and `refusals` (a reader's) over `range` ([`history_range`]).
pub fn from_rows(
    events: &[NodeEvent],
    refusals: &[RefusalRecord],
    terms: &[CommitmentTerm],
    range: &HistoryRange,
) -> Result<ReservationReport, ReportError> {
    if events.is_empty() {
        // Nothing ran (for these accounts): nothing to size a commitment on.
        return Ok(ReservationReport {
            from: range.end,
            until: range.end,
            hours: 0.0,
            currency: "USD",
            families: Vec::new(),
            pools_without_history: Vec::new(),
            terms: terms.to_vec(),
        });
    }
    advise(&ReservationInput {
        events,
        refusals,
        terms,
        from: range.from,
        until: range.until,
    })
}
