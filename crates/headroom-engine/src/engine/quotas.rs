//! Quota preflight: each region's quotas, read from the cloud once per `engine.quota_cache_ttl`
//! before the pools decide (never inside a pool's decision), drawn down by the launches this
//! process makes meanwhile, and read again at once after a quota refusal. The pure planner gets
//! them in its input and skips the destinations they cannot take.

use std::collections::{BTreeMap, BTreeSet};

use headroom_cloud::Quotas;
use headroom_core::planner::Destination;
use headroom_core::{
    Offering, OfferingId, PoolSpec, QuotaHeadroom, QuotaUnit, Timestamp, chrono_or,
};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde::Serialize;

use super::input::TickInput;
use super::{Engine, error_chain, lock};

/// A failed read keeps the last answer for this many TTLs; then the region's quotas are unknown
/// (nothing is skipped, the cloud's refusals decide).
const STALE_QUOTA_TTLS: i32 = 3;

#[derive(Debug, Default)]
pub(super) struct QuotaBook {
    regions: BTreeMap<String, RegionQuotas>,
    /// The gauge series last exported, so a quota no longer read is removed.
    /// With their unit: each unit has its own families.
    exported: BTreeSet<(QuotaUnit, crate::metrics::QuotaLabels)>,
}

#[derive(Debug, Default)]
struct RegionQuotas {
    /// When the cloud was last asked; `None` asks at the next tick.
    asked_at: Option<Timestamp>,
    /// When it last answered, and what: `None` while unknown.
    read_at: Option<Timestamp>,
    quotas: Option<Vec<QuotaHeadroom>>,
}

/// One quota covering an offering, for `GET /v1/offerings`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OfferingQuota {
    /// The cloud's name (`L-DB2E81BA`, `NVIDIA_L4_GPUS`, `gpus`).
    pub quota: String,
    pub description: String,
    pub unit: headroom_core::QuotaUnit,
    pub limit: u64,
    pub in_use: u64,
    pub remaining: u64,
    /// What one node of the offering draws.
    pub per_node: u32,
    /// Whole nodes of the offering this quota still takes.
    pub nodes_left: u64,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub read_at: Timestamp,
}

impl Engine {
    /// Reads the quotas of every region that has an offering, where the cache is due. A failed
    /// read never fails the tick.
    pub(super) async fn refresh_quotas(&self) {
        let ttl = self.config.engine.quota_cache_ttl;
        if ttl.is_zero() {
            return;
        }
        let ttl = chrono_or(ttl, chrono::Duration::minutes(5));
        let mut regions: BTreeMap<&str, Vec<Offering>> = BTreeMap::new();
        for o in &self.config.offerings {
            regions
                .entry(o.offering.region.as_str())
                .or_default()
                .push(o.offering.clone());
        }
        for (region, offerings) in regions {
            let now = self.clock.now();
            let due = {
                let mut book = lock(&self.quotas);
                let entry = book.regions.entry(region.to_string()).or_default();
                let due = entry.asked_at.is_none_or(|at| now - at >= ttl);
                if due {
                    entry.asked_at = Some(now);
                }
                due
            };
            if !due {
                continue;
            }
            let answer = self.cloud.quota_headroom(region, &offerings).await;
            let mut book = lock(&self.quotas);
            let entry = book.regions.entry(region.to_string()).or_default();
            match answer {
                Ok(Quotas::Known(quotas)) => {
                    entry.quotas = Some(quotas);
                    entry.read_at = Some(now);
                }
                Ok(Quotas::Unknown) => {
                    entry.quotas = None;
                    entry.read_at = Some(now);
                }
                Err(e) => {
                    tracing::warn!(%region, error = %error_chain(&e), "cannot read quotas; keeping the last answer");
                    if entry
                        .read_at
                        .is_some_and(|at| now - at > ttl * STALE_QUOTA_TTLS)
                    {
                        tracing::warn!(%region, "quotas are stale; planning as if unknown");
                        entry.quotas = None;
                        entry.read_at = None;
                    }
                }
            }
        }
        self.export_quotas();
    }

    /// Every known quota in the regions of `pool`'s offerings, for the planner.
    pub(super) fn quotas_for(&self, pool: &PoolSpec) -> Vec<QuotaHeadroom> {
        let regions: BTreeSet<&str> = pool
            .offerings
            .iter()
            .filter_map(|id| self.config.offerings.iter().find(|o| &o.offering.id == id))
            .map(|o| o.offering.region.as_str())
            .collect();
        let book = lock(&self.quotas);
        regions
            .into_iter()
            .filter_map(|r| book.regions.get(r)?.quotas.as_ref())
            .flatten()
            .cloned()
            .collect()
    }

    /// A launch of `offering` went through: until the next read, its quotas count it.
    pub(super) fn note_quota_draw(&self, offering: &OfferingId) {
        let mut book = lock(&self.quotas);
        for quota in book
            .regions
            .values_mut()
            .filter_map(|r| r.quotas.as_mut())
            .flatten()
        {
            if let Some(per_node) = quota.draw(offering) {
                quota.in_use = quota.in_use.saturating_add(u64::from(per_node));
            }
        }
    }

    /// The cloud refused a launch in `region` for quota: what was read is wrong (another
    /// tenant's launches, a lowered limit), so read it again at the next tick.
    pub(super) fn quota_refused(&self, region: &str) {
        if let Some(entry) = lock(&self.quotas).regions.get_mut(region) {
            entry.asked_at = None;
        }
    }

    /// The quotas covering `offering`, as `GET /v1/offerings` shows them.
    pub(super) fn offering_quotas(&self, offering: &OfferingId) -> Vec<OfferingQuota> {
        let book = lock(&self.quotas);
        book.regions
            .values()
            .filter_map(|r| Some((r.read_at?, r.quotas.as_ref()?)))
            .flat_map(|(read_at, quotas)| quotas.iter().map(move |q| (read_at, q)))
            .filter_map(|(read_at, q)| {
                let per_node = q.draw(offering)?;
                Some(OfferingQuota {
                    quota: q.name.clone(),
                    description: q.description.clone(),
                    unit: q.unit,
                    limit: q.limit,
                    in_use: q.in_use,
                    remaining: q.remaining(),
                    per_node,
                    nodes_left: q.nodes_left(offering).unwrap_or(0),
                    read_at,
                })
            })
            .collect()
    }

    /// `headroom_quota_remaining_gpus{provider,region,quota}` (and `_vcpus`, and their limits),
    /// one series per quota read, in the family of its unit; quotas no longer known are removed.
    fn export_quotas(&self) {
        // A quota is its offerings' cloud's: several clouds may name a region alike.
        let provider_of = |q: &QuotaHeadroom| {
            q.covers
                .iter()
                .find_map(|d| self.config.offering(&d.offering))
                .map_or_else(|| self.cloud.kind(), |o| o.provider)
                .to_string()
        };
        let mut book = lock(&self.quotas);
        let QuotaBook { regions, exported } = &mut *book;
        let mut now_seen = BTreeSet::new();
        for (region, entry) in regions.iter() {
            for q in entry.quotas.iter().flatten() {
                let labels = crate::metrics::QuotaLabels {
                    provider: provider_of(q),
                    region: region.clone(),
                    quota: q.name.clone(),
                };
                let (remaining, limit) = self.quota_families(q.unit);
                remaining
                    .get_or_create(&labels)
                    .set(i64::try_from(q.remaining()).unwrap_or(i64::MAX));
                limit
                    .get_or_create(&labels)
                    .set(i64::try_from(q.limit).unwrap_or(i64::MAX));
                now_seen.insert((q.unit, labels));
            }
        }
        for (unit, gone) in exported.difference(&now_seen) {
            let (remaining, limit) = self.quota_families(*unit);
            remaining.remove(gone);
            limit.remove(gone);
        }
        *exported = now_seen;
    }

    /// The remaining and limit families of quotas counted in `unit`.
    fn quota_families(
        &self,
        unit: QuotaUnit,
    ) -> (
        &Family<crate::metrics::QuotaLabels, Gauge>,
        &Family<crate::metrics::QuotaLabels, Gauge>,
    ) {
        match unit {
            QuotaUnit::Gpu => (
                &self.metrics.quota_remaining_gpus,
                &self.metrics.quota_limit_gpus,
            ),
            QuotaUnit::Vcpu => (
                &self.metrics.quota_remaining_vcpus,
                &self.metrics.quota_limit_vcpus,
            ),
        }
    }

    /// Per owned pool, the nodes its whole fallback chain's quotas still take and how many
    /// more `max_replicas` would need, for the `QuotaBelowMaxReplicas` alert. Pools with an
    /// offering no known quota covers are left out (their chain is not quota-bound).
    pub(super) fn quota_room(&self, input: &TickInput) -> Vec<crate::alerts::rules::PoolQuotaRoom> {
        self.config
            .pools
            .iter()
            .filter(|p| input.owned.contains(&p.name))
            .filter_map(|pool| {
                let quotas = self.quotas_for(pool);
                let room = crate::alerts::rules::chain_room(&pool.offerings, &quotas)?;
                let nodes = input
                    .pool_nodes(&pool.name)
                    .filter(|e| e.destination == Destination::Serve && !e.state.is_warm())
                    .count() as u32;
                Some(crate::alerts::rules::PoolQuotaRoom {
                    pool: pool.name.clone(),
                    room,
                    needed: pool.max_replicas.saturating_sub(nodes),
                    quotas: quotas
                        .iter()
                        .filter(|q| pool.offerings.iter().any(|o| q.draw(o).is_some()))
                        .map(|q| {
                            format!(
                                "{} in {} ({} {} left)",
                                q.name,
                                q.region,
                                q.remaining(),
                                q.unit
                            )
                        })
                        .collect(),
                })
            })
            .collect()
    }
}
