//! `[[pools]]`: each pool's bounds, its ladder, and (in their own modules) its scaling, supply
//! and scrape tables; the offerings and account it names are checked against the sections that
//! define them.

use std::collections::{BTreeMap, BTreeSet};

use headroom_core::{PoolName, PoolSpec};

use super::raw::RawPool;
use super::{Known, Problems, scaling, scrape, supply};
use crate::prometheus::PrometheusSource;
use crate::schedule::{MAX_WINDOWS_PER_POOL, ScheduleWindow};
use crate::scrape::ScrapeTarget;

/// The validated pools and what `Config` keeps beside them, per pool.
pub(super) struct Pools {
    pub(super) specs: Vec<PoolSpec>,
    pub(super) scrape: BTreeMap<PoolName, ScrapeTarget>,
    pub(super) prometheus: BTreeMap<PoolName, PrometheusSource>,
    pub(super) schedules: BTreeMap<PoolName, Vec<ScheduleWindow>>,
    pub(super) age_classes: BTreeMap<PoolName, Vec<String>>,
}

pub(super) fn pools(raw: Vec<RawPool>, known: &Known, p: &mut Problems) -> Pools {
    let mut pools = Pools {
        specs: Vec::new(),
        scrape: BTreeMap::new(),
        prometheus: BTreeMap::new(),
        schedules: BTreeMap::new(),
        age_classes: BTreeMap::new(),
    };
    let mut names = BTreeSet::new();
    for (i, raw) in raw.into_iter().enumerate() {
        let key = format!("pools[{i}]");
        if !names.insert(raw.name.clone()) {
            p.add(
                &format!("{key}.name"),
                format!("pool {} is defined twice", raw.name),
                "give each pool its own name",
            );
        }
        if raw.offerings.is_empty() {
            p.add(
                &format!("{key}.offerings"),
                "lists no offering",
                "list at least one offering id",
            );
        }
        known.check_offerings(&key, &raw.offerings, p);
        let mut listed = BTreeSet::new();
        for offering in raw.offerings.iter().filter(|o| !listed.insert(*o)) {
            // Listed twice, a reservation would be offered twice its free slots in one plan.
            p.add(
                &format!("{key}.offerings"),
                format!("lists offering {offering} twice"),
                "list each offering once",
            );
        }
        replica_bounds(&key, &raw, p);
        known.check_account(&key, &raw.account, p);
        let scaling = scaling::scaling(&format!("{key}.scaling"), &raw.scaling, p);
        if let Some(classes) = &raw.scaling.age_classes {
            pools.age_classes.insert(raw.name.clone(), classes.clone());
        }
        if let Some(target) = &raw.scrape {
            let target = scrape::target(&format!("{key}.scrape"), target, known.kube_enabled, p);
            pools.scrape.insert(raw.name.clone(), target);
        }
        if let Some(signals) = &raw.signals {
            if raw.scrape.is_some() {
                p.add(
                    &format!("{key}.signals"),
                    "is set beside [pools.scrape]: a pool reads its signals from one source",
                    "keep one of the two tables",
                );
            }
            let source = scrape::prometheus(&format!("{key}.signals"), signals, p);
            pools.prometheus.insert(raw.name.clone(), source);
        }
        let windows = schedule(&key, &raw.schedule, raw.max_replicas, p);
        if !windows.is_empty() {
            pools.schedules.insert(raw.name.clone(), windows);
        }
        if let Some(max) = raw.supply.warm_pool_max
            && max < raw.warm_pool_size
        {
            p.add(
                &format!("{key}.supply.warm_pool_max"),
                format!("{max} is below warm_pool_size {}", raw.warm_pool_size),
                "raise warm_pool_max to at least warm_pool_size, or remove it",
            );
        }
        if scaling.buffer_replicas > raw.max_replicas {
            p.add(
                &format!("{key}.scaling.buffer_replicas"),
                format!(
                    "{} is above max_replicas {}",
                    scaling.buffer_replicas, raw.max_replicas
                ),
                "keep a buffer smaller than the pool, e.g. a quarter of min_replicas",
            );
        }
        let ladder = p.ladder(&format!("{key}.ladder"), &raw.ladder);
        let supply = supply::supply(&format!("{key}.supply"), &raw.supply, &raw.name, p);
        pools.specs.push(PoolSpec {
            name: raw.name,
            account: raw.account,
            offerings: raw.offerings,
            min_replicas: raw.min_replicas,
            max_replicas: raw.max_replicas,
            max_scale_up_per_step: raw.max_scale_up_per_step,
            warm_pool_size: raw.warm_pool_size,
            ladder,
            scaling,
            supply,
        });
    }
    pools
}

/// The most replicas one pool may run, and launch in one step: every plan's loops are bounded
/// by them.
const MOST_REPLICAS: u32 = 10_000;
const MOST_PER_STEP: u32 = 1_000;

/// `min_replicas`, `max_replicas` and `max_scale_up_per_step` leave the pool room to run.
fn replica_bounds(key: &str, raw: &RawPool, p: &mut Problems) {
    if !(1..=MOST_REPLICAS).contains(&raw.max_replicas) {
        p.add(
            &format!("{key}.max_replicas"),
            format!("must be between 1 and {MOST_REPLICAS}"),
            "set the most replicas this pool may run",
        );
    }
    if raw.warm_pool_size > MOST_REPLICAS {
        p.add(
            &format!("{key}.warm_pool_size"),
            format!("must be at most {MOST_REPLICAS}"),
            "keep as many warm nodes as a burst needs, e.g. 2",
        );
    }
    if raw.max_scale_up_per_step > MOST_PER_STEP {
        p.add(
            &format!("{key}.max_scale_up_per_step"),
            format!("must be at most {MOST_PER_STEP}"),
            "use e.g. 10",
        );
    }
    if raw.min_replicas > raw.max_replicas {
        p.add(
            &format!("{key}.min_replicas"),
            format!(
                "{} is above max_replicas {}",
                raw.min_replicas, raw.max_replicas
            ),
            "lower min_replicas or raise max_replicas",
        );
    }
    if raw.max_scale_up_per_step == 0 {
        p.add(
            &format!("{key}.max_scale_up_per_step"),
            "must be at least 1",
            "allow at least one launch per step",
        );
    }
}

/// `[[pools.schedule]]`: each window checked, names unique, at most [`MAX_WINDOWS_PER_POOL`].
fn schedule(
    key: &str,
    specs: &[crate::schedule::WindowSpec],
    max_replicas: u32,
    p: &mut Problems,
) -> Vec<ScheduleWindow> {
    if specs.len() > MAX_WINDOWS_PER_POOL {
        p.add(
            &format!("{key}.schedule"),
            format!("lists {} windows", specs.len()),
            format!("keep at most {MAX_WINDOWS_PER_POOL}"),
        );
    }
    let mut names = BTreeSet::new();
    let mut windows = Vec::new();
    for (j, spec) in specs.iter().enumerate() {
        let at = format!("{key}.schedule[{j}]");
        match spec.parse(max_replicas) {
            Ok(window) if !names.insert(window.name.clone()) => p.add(
                &format!("{at}.name"),
                format!("window {} is declared twice", window.name),
                "give each window its own name",
            ),
            Ok(window) => windows.push(window),
            Err(e) => p.add(&format!("{at}.{}", e.field), e.what, e.fix),
        }
    }
    windows
}
