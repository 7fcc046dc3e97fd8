//! Commitments replayed: `--reserve OFFERING=N[:PERIOD][@USD]` (or a scenario's
//! `[[reservations]]`) adds a reservation of N nodes beside an offering, so the same history
//! runs with the capacity in place and can be compared with the run without it.
//!
//! A reservation is a reserved offering of its own (`<offering>-reserved`: the same instance
//! type, zone and ladder, capacity N, untouched by the original's stockouts), listed first by
//! every pool that lists the original. It is paid for whether used or not: nodes on it bill at
//! its rate as any node does, and each tick the run adds the idle part (nodes reserved and not
//! running) at the same rate. When its period ends no node launches on it any more; those still
//! on it keep running at the rate (as an EC2 instance outlives its capacity reservation).

use std::str::FromStr;

use headroom_config::Reservation;
use headroom_core::{Market, Money, OfferingId};

use crate::error::SimError;
use crate::scenario::{Fault, FaultKind, Scenario};

/// One `--reserve` flag (or `[[reservations]]` entry), as written.
#[derive(Debug, Clone, PartialEq)]
pub struct ReserveSpec {
    /// The offering whose instance type and zone are reserved.
    pub offering: OfferingId,
    pub nodes: u32,
    /// From the run's start; the whole run when absent.
    pub period_s: Option<f64>,
    /// The rate per node-hour; the offering's on-demand rate when absent.
    pub usd_per_node_hour: Option<Money>,
}

/// A reservation in force in a run: its offering, size, rate and end.
#[derive(Debug, Clone, PartialEq)]
pub struct SimReservation {
    pub offering: OfferingId,
    pub nodes: u32,
    pub usd_per_node_hour: f64,
    pub ends_s: Option<f64>,
}

impl FromStr for ReserveSpec {
    type Err = String;

    /// `OFFERING=N`, `OFFERING=N:PERIOD`, `OFFERING=N@USD`, `OFFERING=N:PERIOD@USD`.
    fn from_str(text: &str) -> Result<ReserveSpec, String> {
        let usage = "write OFFERING=N[:PERIOD][@USD], e.g. h100-od=2:6h@55.04";
        let (offering, rest) = text
            .split_once('=')
            .ok_or_else(|| format!("{text:?} names no node count; {usage}"))?;
        let offering: OfferingId = offering
            .parse()
            .map_err(|e| format!("{offering:?} is not an offering id ({e}); {usage}"))?;
        let (rest, rate) = match rest.split_once('@') {
            Some((rest, rate)) => (rest, Some(rate)),
            None => (rest, None),
        };
        let (nodes, period) = match rest.split_once(':') {
            Some((nodes, period)) => (nodes, Some(period)),
            None => (rest, None),
        };
        let nodes = match nodes.parse::<u32>() {
            Ok(n) if (1..=10_000).contains(&n) => n,
            _ => return Err(format!("{nodes:?} nodes: reserve 1 to 10000; {usage}")),
        };
        let period_s = period
            .map(|p| {
                humantime::parse_duration(p)
                    .ok()
                    .map(|d| d.as_secs_f64())
                    .filter(|s| *s > 0.0)
                    .ok_or_else(|| {
                        format!(
                            "period {p:?} is not a duration above zero (\"6h\", \"2d\"); {usage}"
                        )
                    })
            })
            .transpose()?;
        let usd_per_node_hour = rate
            .map(|r| {
                r.parse::<Money>()
                    .ok()
                    .filter(|m| m.micros() > 0)
                    .ok_or_else(|| {
                        format!("rate {r:?} is not dollars per node-hour above zero; {usage}")
                    })
            })
            .transpose()?;
        Ok(ReserveSpec {
            offering,
            nodes,
            period_s,
            usd_per_node_hour,
        })
    }
}

/// The id of the reservation beside `offering`, in scenario `origin`.
fn reserved_id(origin: &str, offering: &OfferingId) -> Result<OfferingId, SimError> {
    format!("{offering}-reserved")
        .parse()
        .map_err(|e| SimError::scenario(origin, format!("{offering}: {e}")))
}

/// Adds the reservation `spec` describes to `sc`: the reserved offering, its place first in the
/// pools that list the original, the same speed there, and the end of its period as a fault.
pub fn reserve(sc: &mut Scenario, spec: &ReserveSpec) -> Result<(), SimError> {
    let known: Vec<String> = sc
        .config
        .offerings
        .iter()
        .map(|o| o.offering.id.to_string())
        .collect();
    let Some(base) = sc
        .config
        .offerings
        .iter()
        .find(|o| o.offering.id == spec.offering)
        .cloned()
    else {
        return Err(SimError::scenario(
            &sc.name,
            format!(
                "no offering {:?}; name one of {}",
                spec.offering.as_str(),
                known.join(", ")
            ),
        ));
    };
    let id = reserved_id(&sc.name, &spec.offering)?;
    if known.iter().any(|k| *k == id.as_str()) {
        return Err(SimError::scenario(
            &sc.name,
            format!(
                "{} is reserved twice; give one --reserve per offering",
                spec.offering
            ),
        ));
    }
    // The on-demand rate of the same instance type in the same zone is what the capacity costs.
    let on_demand = sc
        .config
        .offerings
        .iter()
        .filter(|o| {
            o.offering.market == Market::OnDemand
                && o.offering.instance_type == base.offering.instance_type
                && o.offering.zone == base.offering.zone
        })
        .map(|o| o.offering.price_usd_per_hour)
        .max()
        .unwrap_or(base.offering.price_usd_per_hour);
    let rate = spec.usd_per_node_hour.unwrap_or(on_demand);
    let mut reserved = base.clone();
    reserved.offering.id = id.clone();
    reserved.offering.market = Market::Reserved;
    reserved.offering.price_usd_per_hour = rate;
    reserved.sim_capacity = spec.nodes;
    reserved.sim_spot_interruptions_per_hour = 0.0;
    reserved.reservation = Some(Reservation {
        nodes: spec.nodes,
        starts_at: None,
        ends_at: None,
    });
    sc.config.offerings.push(reserved);
    for pool in &mut sc.config.pools {
        if pool.offerings.contains(&spec.offering) {
            pool.offerings.insert(0, id.clone());
        }
    }
    for pool in &mut sc.pools {
        if pool.spec.offerings.contains(&spec.offering) {
            pool.spec.offerings.insert(0, id.clone());
            let service = pool.service_on(&spec.offering);
            pool.on_offering.insert(id.clone(), service);
        }
    }
    if let Some(end) = spec.period_s {
        sc.faults.push(Fault {
            at_s: end,
            offering: id.clone(),
            kind: FaultKind::Capacity(0),
        });
        sc.faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    }
    sc.reservations.push(SimReservation {
        offering: id,
        nodes: spec.nodes,
        usd_per_node_hour: rate.as_f64_lossy(),
        ends_s: spec.period_s,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_is_written_offering_nodes_period_and_rate() {
        let spec: ReserveSpec = "h100-od=2:6h@55.04".parse().unwrap();
        assert_eq!(spec.offering.as_str(), "h100-od");
        assert_eq!(spec.nodes, 2);
        assert_eq!(spec.period_s, Some(6.0 * 3600.0));
        assert_eq!(spec.usd_per_node_hour, Some("55.04".parse().unwrap()));
        let plain: ReserveSpec = "h100-od=3".parse().unwrap();
        assert_eq!(
            (plain.nodes, plain.period_s, plain.usd_per_node_hour),
            (3, None, None)
        );
    }

    #[test]
    fn a_mistyped_reservation_names_the_part_and_the_form() {
        for (text, part) in [
            ("h100-od", "names no node count"),
            ("h100-od=0", "reserve 1 to 10000"),
            ("h100-od=two", "reserve 1 to 10000"),
            ("h100-od=2:soon", "is not a duration"),
            ("h100-od=2:0s", "is not a duration"),
            ("h100-od=2@free", "not dollars per node-hour"),
            ("h100-od=2@0", "not dollars per node-hour"),
        ] {
            let error = text.parse::<ReserveSpec>().unwrap_err();
            assert!(
                error.contains(part) && error.contains("OFFERING=N[:PERIOD][@USD]"),
                "{text}: {error}"
            );
        }
    }
}
