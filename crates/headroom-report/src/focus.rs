//! FinOps FOCUS 1.2 export: one row per span of one node that costs money (its compute in a
//! billable state, or its volumes while it is parked warm and stopped: a row of its own, priced
//! at the parked price), so finance can load Headroom's view beside the clouds' own bills.
//! `BilledCost` and `EffectiveCost` keep the ledger's micro-dollar precision, so their sum over
//! a range equals the ledger's spend for it exactly; `ListCost` and `ContractedCost` are exactly the unit price times `PricingQuantity`
//! (see [`pricing`]).

use chrono::{Datelike, TimeZone, Utc};
use headroom_core::{Market, Money, NodeState, ProviderKind, Timestamp};
use headroom_records::NodeEvent;

use crate::reserved::{IdleStretch, ReservedCapacity, idle_stretches};
use crate::{ReportError, spans};

/// The FOCUS columns written, in order; Headroom's own columns carry the `x_` prefix. The
/// conditional ones are those the ledger's data supports: region and sub-account names, the
/// resource's name, the SKU and its price, the contracted price, and the commitment discount
/// and capacity reservation columns for reserved capacity (null on other rows, as FOCUS
/// requires).
pub const COLUMNS: [&str; 50] = [
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "BillingCurrency",
    "BillingAccountId",
    "BillingAccountName",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ListUnitPrice",
    "ContractedUnitPrice",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ProviderName",
    "PublisherName",
    "InvoiceIssuerName",
    "ServiceName",
    "ServiceCategory",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "RegionId",
    "RegionName",
    "AvailabilityZone",
    "SubAccountId",
    "SubAccountName",
    "SkuId",
    "SkuPriceId",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountType",
    "CommitmentDiscountCategory",
    "CommitmentDiscountStatus",
    "CommitmentDiscountQuantity",
    "CommitmentDiscountUnit",
    "CapacityReservationId",
    "CapacityReservationStatus",
    "Tags",
    "x_Pool",
    "x_CapacityRequestId",
    "x_NodeId",
    "x_Destination",
];

/// A row's `PricingQuantity` and the exact product of it and the unit price (`ListCost`,
/// `ContractedCost`), as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pricing {
    pub quantity: String,
    pub cost: String,
}

/// The pricing of `millis` of one unit (a node, or a node of a reservation) at `price_micros`
/// an hour, billed `billed_micros` by the ledger (which rounds half up to the micro-dollar).
///
/// FOCUS asks `ListCost = ListUnitPrice × PricingQuantity` exactly, but hours from milliseconds
/// do not terminate in decimal (an hour's 3.6e6 ms has a factor 9). So the quantity is the hours
/// to the fewest decimals (6 or more) at which one lies where its product is at least the billed
/// amount and rounds to it: the product is exact, and `BilledCost` is it rounded to the
/// micro-dollar, so never above it.
pub fn pricing(price_micros: i64, millis: i128, billed_micros: i64) -> Pricing {
    const HOUR_MS: i128 = 3_600_000;
    let (p, c) = (i128::from(price_micros), i128::from(billed_micros));
    let mut decimals = 6u32;
    let q = loop {
        let scale = 10i128.pow(decimals);
        // The true hours at this precision, rounded half up.
        let nearest = (2 * millis * scale + HOUR_MS).div_euclid(2 * HOUR_MS);
        if p <= 0 || decimals >= 18 {
            break nearest;
        }
        // c ≤ p·q/scale < c + ½ (in micro-dollars).
        let lo = (c * scale + p - 1).div_euclid(p);
        let hi = ((2 * c + 1) * scale + 2 * p - 1).div_euclid(2 * p) - 1;
        if lo <= hi {
            break nearest.clamp(lo, hi);
        }
        decimals += 1;
    };
    Pricing {
        quantity: decimal(q, decimals),
        cost: decimal(p * q, decimals + 6),
    }
}

/// `units / 10^decimals` written exactly, with trailing zeros dropped past six decimals.
fn decimal(units: i128, decimals: u32) -> String {
    let scale = 10i128.pow(decimals);
    let sign = if units < 0 { "-" } else { "" };
    let (whole, frac) = (units.abs() / scale, units.abs() % scale);
    let frac = format!("{frac:0width$}", width = decimals as usize);
    let keep = frac.trim_end_matches('0').len().max(6);
    format!("{sign}{whole}.{}", &frac[..keep])
}

fn iso(t: Timestamp) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The calendar month (UTC) containing `t`: the billing period.
fn month_of(t: Timestamp) -> (Timestamp, Timestamp) {
    let start = Utc
        .with_ymd_and_hms(t.year(), t.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(t);
    let (y, m) = if t.month() == 12 {
        (t.year() + 1, 1)
    } else {
        (t.year(), t.month() + 1)
    };
    let end = Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0).single().unwrap_or(t);
    (start, end)
}

fn provider_names(p: ProviderKind) -> (&'static str, &'static str) {
    match p {
        ProviderKind::Aws => ("AWS", "Amazon Elastic Compute Cloud"),
        ProviderKind::Gcp => ("Google Cloud", "Compute Engine"),
        ProviderKind::Sim => ("Headroom Simulated Cloud", "Simulated Compute"),
    }
}

/// The provider's display name of a region, for the regions Headroom's price extracts name;
/// others keep their id (FOCUS: RegionName is null only when RegionId is).
pub fn region_name(provider: ProviderKind, region: &str) -> String {
    let known = match (provider, region) {
        (ProviderKind::Aws, "us-east-1") => "US East (N. Virginia)",
        (ProviderKind::Aws, "us-east-2") => "US East (Ohio)",
        (ProviderKind::Aws, "us-west-2") => "US West (Oregon)",
        (ProviderKind::Aws, "eu-west-1") => "Europe (Ireland)",
        (ProviderKind::Aws, "eu-central-1") => "Europe (Frankfurt)",
        (ProviderKind::Gcp, "us-central1") => "Iowa",
        (ProviderKind::Gcp, "us-east4") => "Northern Virginia",
        (ProviderKind::Gcp, "europe-west4") => "Netherlands",
        _ => region,
    };
    known.to_string()
}

/// The commitment discount columns, from CommitmentDiscountId to CommitmentDiscountUnit, then
/// CapacityReservationId and CapacityReservationStatus: the reservation a reserved node runs on,
/// used for the span's hours; null on other markets.
fn commitment(e: &NodeEvent, hours: &str) -> [String; 9] {
    match e.market {
        Market::Reserved => [
            e.offering.to_string(),
            format!("{} {} in {}", e.instance_type, e.market, e.zone),
            "Reservation".to_string(),
            "Usage".to_string(),
            "Used".to_string(),
            hours.to_string(),
            "Hours".to_string(),
            e.offering.to_string(),
            "Used".to_string(),
        ],
        _ => Default::default(),
    }
}

/// FOCUS rows for every span in `[from, until)` that bills compute, every span a node spent
/// parked warm at a parked price (its volumes: `Standard` pricing at the parked price, service
/// category `Storage`, no commitment), and every stretch in which a reservation's nodes ran
/// nothing (status `Unused`: paid, not consumed).
pub fn to_focus_csv(
    events: &[NodeEvent],
    reservations: &[ReservedCapacity],
    from: Timestamp,
    until: Timestamp,
) -> Result<String, ReportError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(COLUMNS)?;
    if until > from {
        for span in spans(events, from, until).into_iter().filter(|s| {
            s.event.state.is_billable()
                || (s.event.state == NodeState::Warm && s.event.parked_usd_per_hour > Money::ZERO)
        }) {
            let e = span.event;
            let parked = e.state == NodeState::Warm;
            // Compute in a billable state, volumes parked: what the span is billed at.
            let unit_price = e.hourly_rate();
            let billed = span.cost();
            let cost = billed.to_string();
            let Pricing {
                quantity: hours,
                cost: list_cost,
            } = pricing(
                unit_price.micros(),
                i128::from(span.millis()),
                billed.micros(),
            );
            let (billing_start, billing_end) = month_of(span.start);
            let (provider, service) = provider_names(e.provider);
            // A parked node's volumes are billed at their list price, whatever market its
            // compute ran on.
            let pricing_category = match e.market {
                _ if parked => "Standard",
                Market::OnDemand => "Standard",
                Market::Spot => "Dynamic",
                Market::Reserved => "Committed",
            };
            let tags = serde_json::json!({
                "headroom-pool": e.pool.as_str(),
                "headroom-node": e.node.0,
                "headroom-offering": e.offering.as_str(),
            })
            .to_string();
            let price = unit_price.to_string();
            let (description, category, resource_type, sku, sku_price) = if parked {
                (
                    format!(
                        "volumes of {} {} parked (stopped) in {} for pool {}",
                        e.instance_type, e.market, e.zone, e.pool
                    ),
                    "Storage",
                    "Volume",
                    format!("{}-volumes", e.instance_type),
                    format!("{}-parked@{price}", e.offering),
                )
            } else {
                (
                    format!(
                        "{} {} in {} for pool {} ({})",
                        e.instance_type, e.market, e.zone, e.pool, e.state
                    ),
                    "Compute",
                    "Virtual Machine",
                    e.instance_type.clone(),
                    format!("{}@{price}", e.offering),
                )
            };
            let [
                cd_id,
                cd_name,
                cd_type,
                cd_category,
                cd_status,
                cd_quantity,
                cd_unit,
                capacity_reservation_id,
                capacity_reservation_status,
            ] = if parked {
                Default::default()
            } else {
                commitment(e, &hours)
            };
            w.write_record([
                cost.as_str(),
                cost.as_str(),
                list_cost.as_str(),
                list_cost.as_str(),
                "USD",
                e.account.as_str(),
                e.account.as_str(),
                &iso(billing_start),
                &iso(billing_end),
                &iso(span.start),
                &iso(span.end),
                "Usage",
                "",
                &description,
                pricing_category,
                &hours,
                "Hours",
                &price,
                &price,
                &hours,
                "Hours",
                provider,
                provider,
                provider,
                service,
                category,
                e.instance.as_deref().unwrap_or(&e.node.0),
                &format!("{}/{}", e.pool, e.node.0),
                resource_type,
                &e.region,
                &region_name(e.provider, &e.region),
                &e.zone,
                e.pool.as_str(),
                e.pool.as_str(),
                &sku,
                &sku_price,
                &cd_id,
                &cd_name,
                &cd_type,
                &cd_category,
                &cd_status,
                &cd_quantity,
                &cd_unit,
                &capacity_reservation_id,
                &capacity_reservation_status,
                &tags,
                e.pool.as_str(),
                e.request.as_ref().map_or("", |r| r.0.as_str()),
                &e.node.0,
                e.destination.as_str(),
            ])?;
        }
    }
    if until > from {
        for idle in idle_stretches(reservations, events, from, until) {
            w.write_record(unused_row(&idle))?;
        }
    }
    let bytes = w
        .into_inner()
        .map_err(|e| ReportError::Io(e.into_error()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The row of a reservation's unused nodes over one stretch: billed, consumed by nothing, so
/// the consumed columns are null and the commitment's status is `Unused`.
fn unused_row(idle: &IdleStretch<'_>) -> Vec<String> {
    let r = idle.reservation;
    let billed = idle.cost();
    let cost = billed.to_string();
    let millis = (idle.end - idle.start).num_milliseconds().max(0);
    let Pricing {
        quantity: node_hours,
        cost: list_cost,
    } = pricing(
        r.price_usd_per_hour.micros(),
        i128::from(millis) * i128::from(idle.idle_nodes),
        billed.micros(),
    );
    let (billing_start, billing_end) = month_of(idle.start);
    let (provider, service) = provider_names(r.provider);
    let price = r.price_usd_per_hour.to_string();
    let account = r.pools.first().map_or_else(
        || format!("reservation {}", r.offering),
        |(_, a)| a.to_string(),
    );
    let pools: Vec<&str> = r.pools.iter().map(|(p, _)| p.as_str()).collect();
    let tags = serde_json::json!({
        "headroom-offering": r.offering.as_str(),
        "headroom-pools": pools.join(","),
    })
    .to_string();
    let name = format!("{} {} in {}", r.instance_type, Market::Reserved, r.zone);
    vec![
        cost.clone(),
        cost,
        list_cost.clone(),
        list_cost,
        "USD".into(),
        account.clone(),
        account,
        iso(billing_start),
        iso(billing_end),
        iso(idle.start),
        iso(idle.end),
        "Usage".into(),
        String::new(),
        format!(
            "{} of {} reserved {} unused in {}",
            idle.idle_nodes, r.nodes, r.instance_type, r.zone
        ),
        "Committed".into(),
        node_hours.clone(),
        "Hours".into(),
        price.clone(),
        price.clone(),
        // Nothing consumed the unused part: FOCUS leaves the consumed columns null.
        String::new(),
        String::new(),
        provider.into(),
        provider.into(),
        provider.into(),
        service.into(),
        "Compute".into(),
        r.offering.to_string(),
        format!("reservation {}", r.offering),
        "Capacity Reservation".into(),
        r.region.clone(),
        region_name(r.provider, &r.region),
        r.zone.clone(),
        pools.join(","),
        pools.join(","),
        r.instance_type.clone(),
        format!("{}@{price}", r.offering),
        r.offering.to_string(),
        name,
        "Reservation".into(),
        "Usage".into(),
        "Unused".into(),
        node_hours,
        "Hours".into(),
        r.offering.to_string(),
        "Unused".into(),
        tags,
        pools.join(","),
        String::new(),
        String::new(),
        String::new(),
    ]
}
