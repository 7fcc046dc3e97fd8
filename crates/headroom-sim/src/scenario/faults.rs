//! `[[faults]]`: what the cloud does to an offering, and when (capacity, interruptions, launch
//! errors, spot prices).

use headroom_config::Config;
use headroom_core::{ErrorClass, Money, OfferingId};

use crate::error::SimError;

use super::raw::RawFault;
use super::validate::duration;
use super::{Fault, FaultKind};

/// One `[[faults]]` entry: an offering of `[headroom]`, what happens to it, and when.
pub(super) fn fault(
    origin: &str,
    i: usize,
    f: &RawFault,
    config: &Config,
) -> Result<Fault, SimError> {
    let key = |k: &str| format!("faults[{i}].{k}");
    let offering: OfferingId = f
        .offering
        .parse()
        .map_err(|e| SimError::scenario(origin, format!("key `{}`: {e}", key("offering"))))?;
    if config.offering(&offering).is_none() {
        return Err(SimError::scenario(
            origin,
            format!(
                "key `{}`: {offering} is not an offering of [headroom]; name one of its [[headroom.offerings]]",
                key("offering")
            ),
        ));
    }
    Ok(Fault {
        kind: fault_kind(origin, i, f, &offering, config)?,
        at_s: duration(origin, &key("at"), &f.at)?,
        offering,
    })
}

fn fault_kind(
    origin: &str,
    i: usize,
    f: &RawFault,
    offering: &OfferingId,
    config: &Config,
) -> Result<FaultKind, SimError> {
    let key = |k: &str| format!("faults[{i}].{k}");
    let missing = |k: &str| {
        SimError::scenario(
            origin,
            format!("key `{}`: required for kind {:?}; add it", key(k), f.kind),
        )
    };
    Ok(match f.kind.as_str() {
        "capacity" => FaultKind::Capacity(f.capacity.ok_or_else(|| missing("capacity"))?),
        "interrupt" => {
            let x = f.fraction.ok_or_else(|| missing("fraction"))?;
            if !(0.0..=1.0).contains(&x) {
                return Err(SimError::scenario(
                    origin,
                    format!(
                        "key `{}`: {x} is not a share between 0 and 1",
                        key("fraction")
                    ),
                ));
            }
            FaultKind::Interrupt(x)
        }
        "spot-price" => {
            let text = f
                .price_usd_per_hour
                .as_deref()
                .ok_or_else(|| missing("price_usd_per_hour"))?;
            let price: Money = text.parse().map_err(|e| {
                SimError::scenario(origin, format!("key `{}`: {e}", key("price_usd_per_hour")))
            })?;
            let spot = config
                .offering(offering)
                .is_some_and(|o| o.market == headroom_core::Market::Spot);
            if !spot {
                return Err(SimError::scenario(
                    origin,
                    format!(
                        "key `{}`: {offering} is not a spot offering; a spot price moves only spot offerings",
                        key("offering")
                    ),
                ));
            }
            FaultKind::SpotPrice(price)
        }
        "launch-errors" => {
            let class = match f.class.as_deref().unwrap_or("capacity") {
                "capacity" => ErrorClass::Capacity,
                "quota" => ErrorClass::Quota,
                "price" => ErrorClass::Price,
                "throttled" => ErrorClass::Throttled,
                "transient" => ErrorClass::Transient,
                other => {
                    return Err(SimError::scenario(
                        origin,
                        format!(
                            "key `{}`: {other:?}; use capacity, quota, price, throttled or transient",
                            key("class")
                        ),
                    ));
                }
            };
            FaultKind::LaunchErrors(class, f.count.ok_or_else(|| missing("count"))?)
        }
        other => {
            return Err(SimError::scenario(
                origin,
                format!(
                    "key `{}`: {other:?}; use \"capacity\", \"interrupt\", \"launch-errors\" or \"spot-price\"",
                    key("kind")
                ),
            ));
        }
    })
}
