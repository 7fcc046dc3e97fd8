//! The alert rules: which conditions hold, as a pure function of a snapshot of one tick. The
//! engine gathers the snapshot (`engine/alerting.rs`); the [`super::AlertBook`] turns what holds
//! into notifications.

use std::collections::BTreeMap;

use headroom_cloud::InstanceId;
use headroom_core::budget::BudgetStanding;
use headroom_core::controller::ScalingHold;
use headroom_core::{
    Budget, ErrorClass, Money, OfferingId, PoolName, ProviderKind, QuotaHeadroom, RefusalReason,
    Timestamp,
};
use headroom_ledger::RefusalRecord;

use super::Alert;
use crate::views::{PoolStatus, ProviderTrouble};

/// A reservation unused this long raises an alert...
pub const RESERVATION_IDLE_ALERT: chrono::Duration = chrono::Duration::minutes(30);
/// ...and so does one ending within this.
pub const RESERVATION_ENDING_ALERT: chrono::Duration = chrono::Duration::days(7);

/// What the rules look at: the pools this process owns and, when it owns the first pool, the
/// deployment-wide conditions (reservations, budgets).
#[derive(Debug)]
pub struct AlertSnapshot<'a> {
    pub now: Timestamp,
    pub cluster_id: &'a str,
    /// The status of every owned pool.
    pub pools: Vec<PoolStatus>,
    /// Refusals of owned pools within the refusal window.
    pub refusals: Vec<RefusalRecord>,
    /// Orphans left running under `engine.orphan_policy = "report"`, by pool (empty otherwise).
    pub reported_orphans: BTreeMap<PoolName, Vec<InstanceId>>,
    /// Owned pools whose launches fail with provider errors (5xx, timeouts), none succeeding.
    pub provider_trouble: Vec<ProviderTrouble>,
    /// How long that must last before `ProviderErrors` fires (`engine.provider_errors_alert_after`).
    pub provider_errors_after: chrono::Duration,
    pub reservations: Vec<ReservationUse>,
    pub budgets: Vec<(Budget, BudgetStanding)>,
    /// Owned pools whose every offering a known quota covers, with the room those quotas leave.
    pub quota_room: Vec<PoolQuotaRoom>,
    /// Clouds whose inventory the latest ticks could not read (while others answered), when
    /// this process owns the first pool.
    pub unreadable_clouds: Vec<UnreadableCloud>,
    /// Whether this process sends the deployment's [`super::WATCHDOG`].
    pub watchdog: bool,
}

/// A cloud of a several-cloud deployment whose inventory cannot be read: its nodes stay as they
/// were and its offerings fail over to the other clouds, but nothing it holds is reconciled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableCloud {
    pub provider: ProviderKind,
    /// The first tick of this spell that could not read it.
    pub since: Timestamp,
    pub last_error: String,
}

/// What the quotas of a pool's whole fallback chain still take, against what it may grow by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolQuotaRoom {
    pub pool: PoolName,
    /// Nodes the chain's quotas still take ([`chain_room`]).
    pub room: u64,
    /// Nodes `max_replicas` would still add to the pool's serving and starting ones.
    pub needed: u32,
    /// Each covering quota, for the summary ("L-DB2E81BA in us-east-1 (8 vcpu left)").
    pub quotas: Vec<String>,
}

/// Nodes the quotas leave across `offerings` (a pool's fallback chain): each offering counts
/// under its tightest quota, and each quota once, at the most nodes it takes of the offerings
/// it binds. `None` when an offering is covered by no known quota (the chain is not bound).
pub fn chain_room(offerings: &[OfferingId], quotas: &[QuotaHeadroom]) -> Option<u64> {
    let mut per_quota: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for offering in offerings {
        let tightest = quotas
            .iter()
            .filter_map(|q| Some((q.nodes_left(offering)?, q)))
            .min_by_key(|(n, _)| *n)?;
        let slot = per_quota
            .entry((tightest.1.region.as_str(), tightest.1.name.as_str()))
            .or_default();
        *slot = (*slot).max(tightest.0);
    }
    Some(per_quota.values().sum())
}

/// One reservation and how it is used now.
#[derive(Debug, Clone)]
pub struct ReservationUse {
    pub offering: OfferingId,
    pub nodes: u32,
    pub used: u32,
    /// What one reserved node costs per hour, used or not.
    pub price_usd_per_hour: Money,
    /// Since when no node has been on it, if none is.
    pub idle_since: Option<Timestamp>,
    pub ends_at: Option<Timestamp>,
}

/// Every condition that holds, deduplicated by key.
pub fn conditions(s: &AlertSnapshot<'_>) -> Vec<Alert> {
    let mut holding: Vec<Alert> = s.pools.iter().flat_map(pool_conditions).collect();
    holding.extend(s.refusals.iter().filter_map(refusal_condition));
    holding.extend(orphan_conditions(s));
    holding.extend(
        s.provider_trouble
            .iter()
            .filter_map(|t| provider_errors_condition(t, s.now, s.provider_errors_after)),
    );
    holding.extend(
        s.reservations
            .iter()
            .flat_map(|r| reservation_conditions(r, s.now)),
    );
    holding.extend(
        s.budgets
            .iter()
            .filter_map(|(b, standing)| budget_condition(b, standing)),
    );
    holding.extend(s.quota_room.iter().filter_map(quota_condition));
    holding.extend(
        s.unreadable_clouds
            .iter()
            .filter_map(|c| unreadable_cloud_condition(c, s.now, s.provider_errors_after)),
    );
    if s.watchdog {
        holding.push(Alert::new(
            super::WATCHDOG,
            "none",
            &[],
            "Headroom is running; this alert always fires, and its end means Headroom or its path to Alertmanager is down".to_string(),
        ));
    }
    // Deduplicate conditions that hold several times (several refusals of one reason).
    holding.sort_by_key(|a| a.key());
    holding.dedup_by_key(|a| a.key());
    holding
}

fn pool_conditions(status: &PoolStatus) -> Vec<Alert> {
    let pool = status.name.to_string();
    let labels = [("pool", pool.clone())];
    let mut out = Vec::new();
    let reason = status.reason.clone().unwrap_or_default();
    match status.scaling_hold {
        Some(ScalingHold::SignalMissing | ScalingHold::SignalStale) => out.push(Alert::new(
            "PoolSignalsMissing",
            "warning",
            &labels,
            format!("pool {pool} is holding: {reason}"),
        )),
        Some(ScalingHold::DispatchFailure) => out.push(Alert::new(
            "PoolDeparturesStalled",
            "critical",
            &labels,
            format!("pool {pool}: {reason}"),
        )),
        _ => {}
    }
    if let Some(spread) = status.replica_queues.filter(|q| q.imbalanced()) {
        out.push(Alert::new(
            "ReplicaImbalance",
            "warning",
            &labels,
            format!(
                "pool {pool}: one of {} replicas holds {} waiting requests against a mean of {:.1} ({:.1}x its share); the router or load balancer is not spreading work, and more replicas would not help it",
                spread.replicas, spread.max, spread.mean, spread.skew
            ),
        ));
    }
    if let Some(why) = &status.halted {
        out.push(Alert::new(
            "PoolHalted",
            "critical",
            &labels,
            format!("pool {pool} launches nothing: {why}; restart once it is fixed"),
        ));
    }
    if status.handed_to_fallback > 0 {
        out.push(Alert::new(
            "PoolServedByFallback",
            "warning",
            &labels,
            format!("pool {pool}: no offering can supply {} replicas; its fallback pool (a smaller model) serves that traffic", status.handed_to_fallback),
        ));
    }
    let shed: Vec<&str> = status
        .admission
        .iter()
        .filter(|t| t.sheds())
        .map(|t| t.priority.as_str())
        .collect();
    if !shed.is_empty() {
        out.push(Alert::new(
            "PoolShedding",
            "warning",
            &labels,
            format!(
                "pool {pool} is shedding tiers {} until capacity lands ({} ready of {} wanted)",
                shed.join(", "),
                status.ready,
                status.unclamped_desired
            ),
        ));
    }
    // Depleted is nothing parked and nothing on its way to be: a warm pool still filling (as
    // every one does after a start) is not depleted yet.
    if status.warm_pool_size > 0 && status.warm == 0 && status.warming == 0 {
        out.push(Alert::new(
            "WarmPoolDepleted",
            "warning",
            &labels,
            format!("pool {pool} has no warm node left of its {}; the next burst meets the full cold start", status.warm_pool_size),
        ));
    }
    out
}

fn refusal_condition(r: &RefusalRecord) -> Option<Alert> {
    let pool = r.pool.to_string();
    match r.reason {
        RefusalReason::Cloud(ErrorClass::Quota) => Some(Alert::new(
            "CloudQuotaExhausted",
            "warning",
            &[
                ("pool", pool),
                (
                    "offering",
                    r.offering
                        .as_ref()
                        .map(|o| o.to_string())
                        .unwrap_or_default(),
                ),
            ],
            r.detail.clone(),
        )),
        // A refused hold renewal stopped or released a running or parked node, or a refused
        // park hold released a node instead of parking it.
        RefusalReason::Budget if r.node.is_some() => Some(Alert::new(
            "BudgetStoppedCapacity",
            "critical",
            &[("pool", pool)],
            r.detail.clone(),
        )),
        reason if reason.closes_request() => Some(Alert::new(
            "CapacityRefused",
            "critical",
            &[("pool", pool), ("reason", reason.code())],
            r.detail.clone(),
        )),
        _ => None,
    }
}

fn orphan_conditions<'a>(s: &'a AlertSnapshot<'_>) -> impl Iterator<Item = Alert> + 'a {
    s.reported_orphans.iter().map(|(pool, ids)| {
        let shown: Vec<String> = ids.iter().take(5).map(|i| i.to_string()).collect();
        Alert::new(
            "OrphanInstances",
            "warning",
            &[("pool", pool.to_string())],
            format!(
                "{} instance(s) tagged for pool {pool} of cluster {} are unknown to the ledger and left running ({}{}); terminate them, or set engine.orphan_policy = \"terminate\"",
                ids.len(),
                s.cluster_id,
                shown.join(", "),
                if ids.len() > shown.len() { ", …" } else { "" }
            ),
        )
    })
}

/// `ProviderErrors`: a pool's launches have failed with provider errors for at least `after`,
/// none succeeding since, and the latest failure is within `after` (a quiet spell resolves it,
/// as does a launch that goes through).
fn provider_errors_condition(
    t: &ProviderTrouble,
    now: Timestamp,
    after: chrono::Duration,
) -> Option<Alert> {
    (now - t.since >= after && now - t.last_at < after).then(|| {
        Alert::new(
            "ProviderErrors",
            "critical",
            &[("pool", t.pool.to_string())],
            format!(
                "pool {} cannot launch: {} launch attempts failed with provider errors (5xx, timeouts) since {}, none succeeding (last: {}); check the cloud's status and the provider's endpoint and credentials",
                t.pool, t.failures, t.since, t.last_error
            ),
        )
    })
}

/// `CloudUnreachable`: one cloud's inventory has been unreadable for at least `after` (the span
/// `ProviderErrors` waits too); a blip of one tick does not page.
fn unreadable_cloud_condition(
    c: &UnreadableCloud,
    now: Timestamp,
    after: chrono::Duration,
) -> Option<Alert> {
    (now - c.since >= after).then(|| {
        Alert::new(
            "CloudUnreachable",
            "critical",
            &[("provider", c.provider.to_string())],
            format!(
                "cannot read the {} inventory since {} (last: {}); its nodes are left as they were and not reconciled, its offerings fall back to the other clouds; check the provider's endpoint, credentials and status page",
                c.provider, c.since, c.last_error
            ),
        )
    })
}

/// `QuotaBelowMaxReplicas`: the quotas of a pool's whole fallback chain take fewer nodes than
/// its `max_replicas` would add, so a burst will be refused before the pool's own limit.
fn quota_condition(q: &PoolQuotaRoom) -> Option<Alert> {
    (q.room < u64::from(q.needed)).then(|| {
        Alert::new(
            "QuotaBelowMaxReplicas",
            "warning",
            &[("pool", q.pool.to_string())],
            format!(
                "pool {}: its offerings' quotas take {} more nodes, max_replicas would need {} ({}); request a quota increase or add offerings in other regions or families",
                q.pool,
                q.room,
                q.needed,
                q.quotas.join(", ")
            ),
        )
    })
}

fn reservation_conditions(r: &ReservationUse, now: Timestamp) -> Vec<Alert> {
    let labels = [("offering", r.offering.to_string())];
    let mut out = Vec::new();
    if let Some(since) = r.idle_since
        && now - since >= RESERVATION_IDLE_ALERT
    {
        out.push(Alert::new(
            "ReservationIdle",
            "warning",
            &labels,
            format!(
                "reservation {} ({} nodes) has been unused since {since}: {} paid for nothing so far ({}/h); route a pool to it or release it",
                r.offering,
                r.nodes,
                r.price_usd_per_hour
                    .times(r.nodes)
                    .per_hour_for_millis((now - since).num_milliseconds()),
                r.price_usd_per_hour.times(r.nodes),
            ),
        ));
    }
    if let Some(ends) = r.ends_at
        && ends - now <= RESERVATION_ENDING_ALERT
    {
        out.push(Alert::new(
            "ReservationEnding",
            "warning",
            &labels,
            format!("reservation {} ends at {ends} with {} of {} nodes in use; renew it or make room on other offerings", r.offering, r.used, r.nodes),
        ));
    }
    out
}

fn budget_condition(budget: &Budget, s: &BudgetStanding) -> Option<Alert> {
    let committed = s.spent + s.held;
    let crossed = (committed.micros() as i128) * 100
        >= (budget.ceiling.micros() as i128) * budget.soft_threshold_percent as i128;
    crossed.then(|| {
        Alert::new(
            "BudgetSoftThresholdReached",
            "warning",
            &[("account", budget.account.to_string())],
            format!(
                "account {} has ${} spent and ${} held of its ${} {} ceiling ({}% threshold)",
                budget.account,
                s.spent,
                s.held,
                s.ceiling,
                budget.period.as_str(),
                budget.soft_threshold_percent
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use headroom_core::{OfferingId, ProviderKind, QuotaHeadroom, Timestamp};

    use super::{
        PoolQuotaRoom, UnreadableCloud, chain_room, provider_errors_condition, quota_condition,
        unreadable_cloud_condition,
    };
    use crate::views::ProviderTrouble;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn quota_below_max_replicas_fires_when_the_chain_cannot_take_the_pool_s_growth() {
        use headroom_core::{QuotaDraw, QuotaUnit};
        let quota = |region: &str, name: &str, remaining: u64, covers: &[&str]| QuotaHeadroom {
            name: name.into(),
            description: String::new(),
            region: region.into(),
            unit: QuotaUnit::Gpu,
            limit: remaining + 4,
            in_use: 4,
            covers: covers
                .iter()
                .map(|o| QuotaDraw {
                    offering: o.parse().unwrap(),
                    per_node: 8,
                })
                .collect(),
        };
        let chain: Vec<OfferingId> = ["east", "east-spot", "west"]
            .iter()
            .map(|o| o.parse().unwrap())
            .collect();
        let quotas = [
            quota("us-east-1", "gpus", 16, &["east", "east-spot"]),
            quota("us-west-2", "gpus", 8, &["west"]),
        ];
        // Two offerings sharing one quota count it once: 2 + 1 nodes.
        assert_eq!(chain_room(&chain, &quotas), Some(3));
        assert_eq!(chain_room(&chain, &quotas[..1]), None, "west is not bound");
        let room = |needed| PoolQuotaRoom {
            pool: "llm".parse().unwrap(),
            room: 3,
            needed,
            quotas: vec!["gpus in us-east-1 (16 gpu left)".into()],
        };
        assert!(quota_condition(&room(3)).is_none());
        let alert = quota_condition(&room(4)).unwrap();
        assert_eq!(alert.name, "QuotaBelowMaxReplicas");
        assert!(
            alert.summary.contains("take 3 more nodes"),
            "{}",
            alert.summary
        );
    }

    /// `CloudUnreachable` waits for its span, names the cloud and its last error.
    #[test]
    fn an_unreadable_cloud_pages_only_after_its_span() {
        let cloud = UnreadableCloud {
            provider: ProviderKind::Gcp,
            since: at("2026-11-30T09:00:00Z"),
            last_error: "ServiceUnavailable".into(),
        };
        let after = chrono::Duration::minutes(5);
        assert!(unreadable_cloud_condition(&cloud, at("2026-11-30T09:04:59Z"), after).is_none());
        let alert = unreadable_cloud_condition(&cloud, at("2026-11-30T09:05:00Z"), after).unwrap();
        assert_eq!(alert.name, "CloudUnreachable");
        assert_eq!(
            alert.labels.get("provider").map(String::as_str),
            Some("gcp")
        );
        assert!(
            alert.summary.contains("ServiceUnavailable"),
            "{}",
            alert.summary
        );
    }

    /// `ProviderErrors` waits for its span, holds while failures continue, and resolves after a
    /// quiet span.
    #[test]
    fn provider_errors_fire_after_their_span_and_resolve_when_quiet() {
        let trouble = ProviderTrouble {
            pool: "llm".parse().unwrap(),
            since: at("2026-11-30T09:00:00Z"),
            last_at: at("2026-11-30T09:04:00Z"),
            failures: 9,
            last_error: "InternalError on spot".into(),
        };
        let after = chrono::Duration::minutes(5);
        let fires = |now: &str| provider_errors_condition(&trouble, at(now), after).is_some();
        assert!(!fires("2026-11-30T09:04:30Z"), "not yet five minutes");
        assert!(fires("2026-11-30T09:05:00Z"));
        assert!(fires("2026-11-30T09:08:59Z"), "the last failure is recent");
        assert!(
            !fires("2026-11-30T09:09:00Z"),
            "five quiet minutes resolve it"
        );
        let alert = provider_errors_condition(&trouble, at("2026-11-30T09:06:00Z"), after).unwrap();
        assert_eq!(alert.name, "ProviderErrors");
        assert!(
            alert.summary.contains("InternalError on spot"),
            "{}",
            alert.summary
        );
    }
}
