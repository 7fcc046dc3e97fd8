//! `[[offerings]]`: what can be bought, at what price, and what the simulated cloud imitates.

use std::collections::BTreeSet;

use headroom_core::offering::parked_usd_per_hour;
use headroom_core::{Market, Money, Offering, Timestamp};

use super::raw::RawOffering;
use super::{DEFAULT_SIM_LADDER, OfferingConfig, Problems, Reservation};

/// The dearest hourly price a configuration may name: well above any GPU instance, far below
/// what the ledger's integer arithmetic could not hold over a whole hold horizon.
pub(super) const MOST_PER_HOUR: Money = Money::from_micros(10_000 * 1_000_000);

/// The volumes a GPU node keeps while stopped when the offering does not say: a root volume
/// with the serving image, and room for weights that grows with the GPUs a model is sized to
/// (a 70B model, 140 GB in 16 bits, on 8 GPUs: 500 GB in all).
pub fn default_volume_gb(gpus: u32) -> u32 {
    100 + 50 * gpus.min(64)
}

/// The largest volume set an offering may name (a petabyte): a bound, not a real node's.
const MOST_VOLUME_GB: u32 = 1 << 20;

pub(super) fn offerings(raw: Vec<RawOffering>, p: &mut Problems) -> Vec<OfferingConfig> {
    let mut offerings = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, o) in raw.into_iter().enumerate() {
        let key = format!("offerings[{i}]");
        if !seen.insert(o.id.clone()) {
            p.add(
                &format!("{key}.id"),
                format!("offering {} is defined twice", o.id),
                "give each offering its own id",
            );
        }
        offerings.push(offering(&key, o, p));
    }
    offerings
}

fn offering(key: &str, o: RawOffering, p: &mut Problems) -> OfferingConfig {
    // Free is allowed (a reservation paid for elsewhere); negative would hold negative money.
    p.money(
        &format!("{key}.price_usd_per_hour"),
        o.price_usd_per_hour,
        Money::ZERO,
        MOST_PER_HOUR,
        "55.04",
    );
    if let Some(warm) = o.warm_usd_per_hour {
        p.money(
            &format!("{key}.warm_usd_per_hour"),
            warm,
            Money::ZERO,
            MOST_PER_HOUR,
            "0.0548",
        );
    }
    let volume_gb = o.volume_gb.unwrap_or_else(|| default_volume_gb(o.gpus));
    if !(1..=MOST_VOLUME_GB).contains(&volume_gb) {
        p.add(
            &format!("{key}.volume_gb"),
            format!("must be between 1 and {MOST_VOLUME_GB}"),
            "set the GB of volumes a node keeps while stopped, e.g. 500",
        );
    }
    if !(1..=64).contains(&o.gpus) {
        p.add(
            &format!("{key}.gpus"),
            "must be between 1 and 64",
            "set the number of GPUs per node",
        );
    }
    if !(0.0..=1000.0).contains(&o.sim_spot_interruptions_per_hour) {
        p.add(
            &format!("{key}.sim_spot_interruptions_per_hour"),
            "must be between 0 and 1000",
            "use e.g. 0.05",
        );
    }
    for (field, value) in [
        ("region", &o.region),
        ("zone", &o.zone),
        ("instance_type", &o.instance_type),
    ] {
        if value.trim().is_empty() {
            p.add(&format!("{key}.{field}"), "must not be empty", "fill it in");
        }
    }
    let reservation = reservation(key, &o, p);
    let sim_ladder = match &o.sim_ladder {
        Some(l) => p.ladder(&format!("{key}.sim_ladder"), l),
        None => DEFAULT_SIM_LADDER,
    };
    OfferingConfig {
        offering: Offering {
            id: o.id,
            provider: o.provider,
            region: o.region,
            zone: o.zone,
            instance_type: o.instance_type,
            market: o.market,
            price_usd_per_hour: o.price_usd_per_hour,
            gpus_per_node: o.gpus,
            warm_usd_per_hour: o
                .warm_usd_per_hour
                .unwrap_or_else(|| parked_usd_per_hour(o.provider, volume_gb)),
        },
        sim_capacity: o.sim_capacity,
        sim_ladder,
        sim_spot_interruptions_per_hour: o.sim_spot_interruptions_per_hour,
        reservation,
    }
}

/// An optional RFC 3339 instant of a reservation.
fn instant(key: &str, field: &str, text: Option<&str>, p: &mut Problems) -> Option<Timestamp> {
    let text = text?;
    match text.parse::<Timestamp>() {
        Ok(t) => Some(t),
        Err(_) => {
            p.add(
                &format!("{key}.{field}"),
                format!("{text:?} is not a timestamp"),
                "write RFC 3339, e.g. \"2026-12-31T00:00:00Z\"",
            );
            None
        }
    }
}

/// A reserved offering has its reserved nodes (and maybe an end); no other offering has any.
fn reservation(key: &str, o: &RawOffering, p: &mut Problems) -> Option<Reservation> {
    match (o.market, o.reserved_nodes) {
        (Market::Reserved, Some(nodes)) if nodes > 0 => {
            let starts_at = instant(
                key,
                "reservation_starts",
                o.reservation_starts.as_deref(),
                p,
            );
            let ends_at = instant(key, "reservation_ends", o.reservation_ends.as_deref(), p);
            if let (Some(start), Some(end)) = (starts_at, ends_at)
                && start >= end
            {
                p.add(
                    &format!("{key}.reservation_ends"),
                    "the reservation ends before it starts",
                    "set reservation_ends after reservation_starts",
                );
            }
            Some(Reservation {
                nodes,
                starts_at,
                ends_at,
            })
        }
        (Market::Reserved, _) => {
            p.add(
                &format!("{key}.reserved_nodes"),
                "a reserved offering needs the number of nodes reserved",
                "set reserved_nodes = N (at least 1)",
            );
            None
        }
        (_, Some(_)) => {
            p.add(
                &format!("{key}.reserved_nodes"),
                "only a reserved offering has reserved nodes",
                "set market = \"reserved\" or remove reserved_nodes",
            );
            None
        }
        (_, None) => None,
    }
}
