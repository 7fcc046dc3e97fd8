//! The simulated pools: `pool` or `[[pools]]`, each a pool of `[headroom]` with its replicas'
//! speed (`[service]`, per offering) and its simulated fallback pool.

use std::collections::BTreeMap;

use headroom_config::Config;
use headroom_core::{OfferingId, PoolName, PoolSpec};

use crate::error::SimError;
use crate::model::Service;

use super::SimPool;
use super::raw::{Raw, RawPool, RawService};
use super::validate::positive;

/// A pool of `[headroom]` by name; `key` is what names it.
fn pool_of(origin: &str, config: &Config, key: &str, name: &str) -> Result<PoolSpec, SimError> {
    let name: PoolName = name
        .parse()
        .map_err(|e| SimError::scenario(origin, format!("key `{key}`: {e}")))?;
    config.pool(&name).cloned().ok_or_else(|| {
        SimError::scenario(
            origin,
            format!("key `{key}`: {name} is not a pool of [headroom]; name one of its [[headroom.pools]]"),
        )
    })
}

/// The pools the run simulates: `[[pools]]` if given, else the one `pool` names (default the
/// first of `[headroom]`) at the top-level `[service]`. A simulated pool's fallback pool must be
/// simulated too, so the demand it hands over has somewhere to go.
pub(super) fn pools(
    origin: &str,
    raw: &Raw,
    config: &Config,
    default_service: Service,
) -> Result<Vec<SimPool>, SimError> {
    let single = |spec: PoolSpec| SimPool {
        spec,
        service: default_service,
        on_offering: BTreeMap::new(),
        fallback: None,
    };
    let mut pools = match (&raw.pool, raw.pools.is_empty()) {
        (Some(_), false) => {
            return Err(SimError::scenario(
                origin,
                "key `pool`: given with [[pools]]; list the pools in [[pools]] only (the first is where a trace arrives)",
            ));
        }
        (Some(name), true) => vec![single(pool_of(origin, config, "pool", name)?)],
        (None, true) => vec![single(config.pools.first().cloned().ok_or_else(|| {
            SimError::scenario(
                origin,
                "table `headroom`: no [[headroom.pools]]; add the pool to simulate",
            )
        })?)],
        (None, false) => raw
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| sim_pool(origin, i, p, config, default_service))
            .collect::<Result<Vec<_>, _>>()?,
    };
    if pools.len() > u8::MAX as usize {
        return Err(SimError::scenario(
            origin,
            "key `pools`: more than 255 pools; simulate fewer",
        ));
    }
    let names: Vec<PoolName> = pools.iter().map(|p| p.spec.name.clone()).collect();
    for (i, pool) in pools.iter_mut().enumerate() {
        if names[..i].contains(&pool.spec.name) {
            return Err(SimError::scenario(
                origin,
                format!(
                    "key `pools[{i}].name`: {} is listed twice; list each pool once",
                    pool.spec.name
                ),
            ));
        }
        let Some(fallback) = &pool.spec.supply.fallback_pool else {
            continue;
        };
        match names.iter().position(|n| n == fallback) {
            Some(j) => pool.fallback = Some(j),
            None if raw.pools.is_empty() => {}
            None => {
                return Err(SimError::scenario(
                    origin,
                    format!(
                        "key `pools[{i}]`: {} falls back to {fallback}, which is not simulated; add a [[pools]] entry for it",
                        pool.spec.name
                    ),
                ));
            }
        }
    }
    Ok(pools)
}

/// One `[[pools]]` entry.
fn sim_pool(
    origin: &str,
    i: usize,
    raw: &RawPool,
    config: &Config,
    default_service: Service,
) -> Result<SimPool, SimError> {
    let spec = pool_of(origin, config, &format!("pools[{i}].name"), &raw.name)?;
    let base = match &raw.service {
        Some(s) => service(origin, &format!("pools[{i}].service"), s)?,
        None => default_service,
    };
    let mut on_offering = BTreeMap::new();
    for (id, change) in &raw.offerings {
        let key = format!("pools[{i}].offerings.{id}");
        let offering: OfferingId = id
            .parse()
            .map_err(|e| SimError::scenario(origin, format!("key `{key}`: {e}")))?;
        if !spec.offerings.contains(&offering) {
            return Err(SimError::scenario(
                origin,
                format!(
                    "key `{key}`: {offering} is not an offering of pool {}; name one of its `offerings`",
                    spec.name
                ),
            ));
        }
        let changed = RawService {
            tokens_per_s: change.tokens_per_s.unwrap_or(base.tokens_per_s),
            request_tokens_per_s: Some(
                change
                    .request_tokens_per_s
                    .unwrap_or(base.request_tokens_per_s),
            ),
            max_batch: Some(change.max_batch.unwrap_or(base.max_batch)),
            input_token_weight: Some(base.input_token_weight),
        };
        on_offering.insert(offering, service(origin, &key, &changed)?);
    }
    Ok(SimPool {
        spec,
        service: base,
        on_offering,
        fallback: None,
    })
}

/// A `[service]` table (`key` names it): the serving model's token rates and batch.
pub(super) fn service(origin: &str, key: &str, s: &RawService) -> Result<Service, SimError> {
    let tokens_per_s = positive(origin, &format!("{key}.tokens_per_s"), s.tokens_per_s)?;
    Ok(Service {
        input_token_weight: s.input_token_weight.unwrap_or(0.0).max(0.0),
        tokens_per_s,
        request_tokens_per_s: positive(
            origin,
            &format!("{key}.request_tokens_per_s"),
            s.request_tokens_per_s.unwrap_or(tokens_per_s),
        )?,
        max_batch: s.max_batch.unwrap_or(1).max(1),
    })
}
