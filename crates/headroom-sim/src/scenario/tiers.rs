//! `[[tiers]]` and `shed_depth`: the queue's tiers, objectives, deadlines and priorities, and
//! the shed deadlines the serving layer tells each pool.

use std::time::Duration;

use headroom_config::Config;
use headroom_core::PoolSpec;

use crate::error::SimError;
use crate::model::QueuePolicy;

use super::raw::RawTier;
use super::validate::duration;

/// The index of the tier named `name` in `[[tiers]]`; `key` is what names it.
pub(super) fn tier_index(
    origin: &str,
    tiers: &[RawTier],
    key: &str,
    name: &str,
) -> Result<u8, SimError> {
    tiers
        .iter()
        .position(|t| t.name == name)
        .map(|i| i as u8)
        .ok_or_else(|| {
            SimError::scenario(
                origin,
                format!(
                    "key `{key}`: tier {name:?} is not one of [[tiers]]; use one of their names"
                ),
            )
        })
}

/// `[[tiers]]` and `shed_depth`: the queue's tiers, their objectives, deadlines and priorities.
pub(super) fn queue(
    origin: &str,
    tiers: &[RawTier],
    shed_depth: Option<u64>,
) -> Result<QueuePolicy, SimError> {
    let mut objective_s = Vec::new();
    let mut deadline_s = Vec::new();
    let mut shed_tiers = Vec::new();
    let mut priorities = Vec::new();
    for (i, t) in tiers.iter().enumerate() {
        priorities.push(match &t.priority {
            Some(p) => headroom_core::Priority::parse(p).map_err(|e| {
                SimError::scenario(
                    origin,
                    format!("key `tiers[{i}].priority`: {e}; use low, normal, high or critical"),
                )
            })?,
            None if t.shed => headroom_core::Priority::Low,
            None => headroom_core::Priority::Critical,
        });
        objective_s.push(duration(
            origin,
            &format!("tiers[{i}].objective"),
            &t.objective,
        )?);
        deadline_s.push(match &t.deadline {
            Some(d) => Some(duration(origin, &format!("tiers[{i}].deadline"), d)?),
            None => None,
        });
        if t.shed {
            shed_tiers.push(i as u8);
        }
    }
    Ok(QueuePolicy {
        tiers: tiers.iter().map(|t| t.name.clone()).collect(),
        objective_s,
        deadline_s,
        shed_tiers,
        priorities,
        shed_depth,
        smaller_model: tiers.iter().map(|t| t.smaller_model).collect(),
    })
}

/// The serving layer the scenario stands for knows its sheddable tiers' deadlines and tells
/// Headroom (`[pools.scaling] shed_deadlines`), unless the pool's configuration says otherwise.
pub(super) fn tell_pool_the_deadlines(
    queue: &QueuePolicy,
    config: &mut Config,
    pool: &mut PoolSpec,
) {
    if pool.scaling.shed_deadlines.iter().any(Option::is_some) {
        return;
    }
    for &tier in &queue.shed_tiers {
        let tier = tier as usize;
        if let (Some(priority), Some(Some(deadline))) = (
            queue.priorities.get(tier),
            queue.objective_s.get(tier).map(|o| Some(*o)),
        ) {
            pool.scaling.shed_deadlines[*priority as usize] =
                Some(Duration::from_secs_f64(deadline));
        }
    }
    if let Some(p) = config.pools.iter_mut().find(|p| p.name == pool.name) {
        p.scaling.shed_deadlines = pool.scaling.shed_deadlines;
    }
}
