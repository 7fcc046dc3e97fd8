//! The contract test suite every [`CloudProvider`] must pass: the simulated cloud here, the AWS
//! provider against moto, the GCP provider against a local Compute API server.
//!
//! Each check panics with a message naming the broken clause. Call [`run_all`] from a test of the
//! provider's crate with a fixture describing what that provider can launch.

use headroom_core::{ErrorClass, Offering};

use crate::provider::{
    CloudError, CloudProvider, InstanceId, InstancePhase, LaunchSpec, OwnershipTags,
};

/// What the suite needs to know about the provider under test.
#[derive(Debug, Clone)]
pub struct ContractFixture {
    /// The ownership tag value for this run; use a fresh one per run.
    pub cluster: String,
    /// An offering the provider will launch.
    pub offering: Offering,
    /// An offering the provider will refuse for want of capacity, if the test can arrange one.
    pub stockout: Option<Offering>,
    /// Faults the test can make the provider's cloud show; the checks that need one it cannot
    /// show are skipped.
    pub faults: Option<std::sync::Arc<dyn ContractFaults>>,
}

/// What the test behind a provider can make its cloud (or emulator) do, for the checks of
/// failures. Each method says whether it can; the defaults cannot.
pub trait ContractFaults: Send + Sync + std::fmt::Debug {
    /// Every launch of `offering` answers a server error (HTTP 500) until [`Self::heal`].
    fn fail_launches(&self, offering: &Offering) -> bool;
    /// Ends every fault this trait set.
    fn heal(&self);
    /// The first `n` reads of each instance after its create miss (a read that lags the write);
    /// `n = 0` ends it.
    fn miss_reads_after_create(&self, _n: u32) -> bool {
        false
    }
    /// Makes an instance of `offering` that carries only the ownership labels or tags the
    /// provider writes for `cluster` and token `token` (no other record of ownership); its id.
    fn plant_tagged_only(
        &self,
        _cluster: &str,
        _offering: &Offering,
        _token: &str,
    ) -> Option<InstanceId> {
        None
    }
}

fn spec(fixture: &ContractFixture, offering: &Offering, token: &str) -> LaunchSpec {
    LaunchSpec {
        offering: offering.clone(),
        client_token: format!("{}-{token}", fixture.cluster),
        tags: OwnershipTags {
            cluster: fixture.cluster.clone(),
            pool: "contract".to_string(),
            node: token.to_string(),
            request: None,
        },
        user_data: None,
    }
}

async fn owned_ids(provider: &dyn CloudProvider, cluster: &str) -> Vec<InstanceId> {
    let mut ids: Vec<InstanceId> = provider
        .list_owned(cluster)
        .await
        .expect("list_owned must succeed")
        .into_iter()
        .map(|i| i.id)
        .collect();
    ids.sort();
    ids
}

/// launch tags the instance and lists it as owned; describe agrees.
pub async fn launch_is_tagged_and_listed(p: &dyn CloudProvider, f: &ContractFixture) {
    let spec = spec(f, &f.offering, "tagged");
    let launched = p.launch(&spec).await.expect("launch must succeed");
    assert_eq!(
        launched.tags, spec.tags,
        "launch must carry the ownership tags"
    );
    assert_eq!(launched.offering, f.offering.id);
    assert!(
        owned_ids(p, &f.cluster).await.contains(&launched.id),
        "list_owned must list a launched instance"
    );
    let described = p
        .describe(&launched.id)
        .await
        .expect("describe must find a launched instance");
    assert_eq!(described.id, launched.id);
    assert_eq!(described.client_token, spec.client_token);
    p.terminate(&launched.id)
        .await
        .expect("terminate must succeed");
}

/// The same client token never yields a second instance.
pub async fn launch_is_idempotent_on_client_token(p: &dyn CloudProvider, f: &ContractFixture) {
    let spec = spec(f, &f.offering, "idempotent");
    let first = p.launch(&spec).await.expect("launch must succeed");
    let before = owned_ids(p, &f.cluster).await;
    let again = p
        .launch(&spec)
        .await
        .expect("a repeated launch must succeed");
    assert_eq!(
        again.id, first.id,
        "a repeated client token must return the same instance"
    );
    assert_eq!(
        owned_ids(p, &f.cluster).await,
        before,
        "a repeated launch must not add an instance"
    );
    p.terminate(&first.id)
        .await
        .expect("terminate must succeed");
}

/// Terminate is idempotent; terminated instances leave the owned inventory.
pub async fn terminate_is_idempotent(p: &dyn CloudProvider, f: &ContractFixture) {
    let launched = p
        .launch(&spec(f, &f.offering, "terminate"))
        .await
        .expect("launch must succeed");
    p.terminate(&launched.id)
        .await
        .expect("terminate must succeed");
    p.terminate(&launched.id)
        .await
        .expect("terminating twice must succeed");
    assert!(
        !owned_ids(p, &f.cluster).await.contains(&launched.id),
        "a terminated instance is not owned inventory"
    );
    let unknown = InstanceId("headroom-contract-never-existed".to_string());
    match p.terminate(&unknown).await {
        Err(CloudError::NotFound(_)) => {}
        Err(e) if e.class() == ErrorClass::NotFound || e.class() == ErrorClass::InvalidRequest => {}
        other => panic!("terminating an unknown id must fail with NotFound, got {other:?}"),
    }
}

/// Stop keeps the instance; start brings it back.
pub async fn stop_and_start_keep_the_instance(p: &dyn CloudProvider, f: &ContractFixture) {
    let launched = p
        .launch(&spec(f, &f.offering, "stopstart"))
        .await
        .expect("launch must succeed");
    let stopped = p.stop(&launched.id).await.expect("stop must succeed");
    assert_eq!(stopped.id, launched.id);
    let phase = p.describe(&launched.id).await.expect("describe").phase;
    assert_eq!(
        phase,
        InstancePhase::Stopped,
        "a stopped instance must describe as stopped"
    );
    assert!(
        owned_ids(p, &f.cluster).await.contains(&launched.id),
        "a stopped instance is still owned"
    );
    let started = p.start(&launched.id).await.expect("start must succeed");
    assert!(
        started.phase.is_running(),
        "a started instance must be pending, booting or ready, was {:?}",
        started.phase
    );
    p.terminate(&launched.id)
        .await
        .expect("terminate must succeed");
}

/// A stockout is a `Capacity` refusal and creates nothing.
pub async fn stockout_is_a_capacity_refusal(p: &dyn CloudProvider, f: &ContractFixture) {
    let Some(stockout) = &f.stockout else { return };
    let before = owned_ids(p, &f.cluster).await;
    let err = p
        .launch(&spec(f, stockout, "stockout"))
        .await
        .expect_err("a launch into a stockout must fail");
    assert_eq!(
        err.class(),
        ErrorClass::Capacity,
        "a stockout must be classed as capacity: {err}"
    );
    assert_eq!(
        owned_ids(p, &f.cluster).await,
        before,
        "a refused launch must create nothing"
    );
}

/// Instances of other clusters are not listed.
pub async fn inventory_is_scoped_to_the_cluster(p: &dyn CloudProvider, f: &ContractFixture) {
    let other = ContractFixture {
        cluster: format!("{}-other", f.cluster),
        ..f.clone()
    };
    let foreign = p
        .launch(&spec(&other, &f.offering, "foreign"))
        .await
        .expect("launch must succeed");
    assert!(
        !owned_ids(p, &f.cluster).await.contains(&foreign.id),
        "another cluster's instance must not be listed"
    );
    p.terminate(&foreign.id)
        .await
        .expect("terminate must succeed");
}

/// A launch that keeps answering a server error is `Transient` every time (the engine bounds
/// the retries), creates nothing, and once the cloud recovers the same client token makes one
/// instance.
pub async fn persistent_server_errors_are_transient_and_create_nothing(
    p: &dyn CloudProvider,
    f: &ContractFixture,
) {
    let Some(faults) = &f.faults else { return };
    if !faults.fail_launches(&f.offering) {
        return;
    }
    let before = owned_ids(p, &f.cluster).await;
    let spec = spec(f, &f.offering, "server-errors");
    for attempt in 1..=3 {
        let err = p
            .launch(&spec)
            .await
            .expect_err("a launch answered with a server error must fail");
        assert_eq!(
            err.class(),
            ErrorClass::Transient,
            "attempt {attempt}: a server error must be classed as transient: {err}"
        );
    }
    assert_eq!(
        owned_ids(p, &f.cluster).await,
        before,
        "launches that failed with server errors must create nothing"
    );
    faults.heal();
    let launched = p
        .launch(&spec)
        .await
        .expect("the same client token launches once the cloud recovers");
    let after = owned_ids(p, &f.cluster).await;
    assert_eq!(after.len(), before.len() + 1, "exactly one instance");
    p.terminate(&launched.id)
        .await
        .expect("terminate must succeed");
}

/// A successful create is never a refusal: when the reads right after it miss, the launch still
/// returns the instance (read again by its name), and a repeat of the token returns the same one.
pub async fn a_create_whose_first_reads_miss_is_adopted(
    p: &dyn CloudProvider,
    f: &ContractFixture,
) {
    let Some(faults) = &f.faults else { return };
    if !faults.miss_reads_after_create(2) {
        return;
    }
    let before = owned_ids(p, &f.cluster).await;
    let spec = spec(f, &f.offering, "read-back");
    let launched = p
        .launch(&spec)
        .await
        .expect("a create whose first reads miss must still return the instance");
    faults.miss_reads_after_create(0);
    faults.heal();
    let again = p
        .launch(&spec)
        .await
        .expect("a repeated launch must succeed");
    assert_eq!(
        again.id, launched.id,
        "the repeat must return the same instance"
    );
    assert_eq!(
        owned_ids(p, &f.cluster).await.len(),
        before.len() + 1,
        "exactly one instance"
    );
    p.terminate(&launched.id)
        .await
        .expect("terminate must succeed");
}

/// Ownership is read from the labels or tags the provider writes: an instance carrying only
/// those is listed as owned (so the orphan sweep can end it).
pub async fn ownership_is_read_from_the_provider_s_labels(
    p: &dyn CloudProvider,
    f: &ContractFixture,
) {
    let Some(faults) = &f.faults else { return };
    let Some(id) = faults.plant_tagged_only(&f.cluster, &f.offering, "planted") else {
        return;
    };
    assert!(
        owned_ids(p, &f.cluster).await.contains(&id),
        "an instance with the cluster's ownership labels must be listed as owned"
    );
    p.terminate(&id).await.expect("terminate must succeed");
    assert!(!owned_ids(p, &f.cluster).await.contains(&id));
}

/// Runs every check, in order.
pub async fn run_all(p: &dyn CloudProvider, f: &ContractFixture) {
    launch_is_tagged_and_listed(p, f).await;
    launch_is_idempotent_on_client_token(p, f).await;
    terminate_is_idempotent(p, f).await;
    stop_and_start_keep_the_instance(p, f).await;
    stockout_is_a_capacity_refusal(p, f).await;
    inventory_is_scoped_to_the_cluster(p, f).await;
    persistent_server_errors_are_transient_and_create_nothing(p, f).await;
    a_create_whose_first_reads_miss_is_adopted(p, f).await;
    ownership_is_read_from_the_provider_s_labels(p, f).await;
    quotas_cover_what_was_asked_and_count_a_launch(p, f).await;
}

/// A quota read names only offerings it was asked about, and a quota that covers the offering
/// counts a launched instance in its use (a provider that knows no quotas passes).
pub async fn quotas_cover_what_was_asked_and_count_a_launch(
    p: &dyn CloudProvider,
    f: &ContractFixture,
) {
    let asked = std::slice::from_ref(&f.offering);
    let region = &f.offering.region;
    let read = |what: &'static str| async move {
        match p.quota_headroom(region, asked).await {
            Ok(crate::Quotas::Known(quotas)) => Some(quotas),
            Ok(crate::Quotas::Unknown) => None,
            Err(e) => panic!("quota_headroom must succeed {what}: {e}"),
        }
    };
    let Some(before) = read("before a launch").await else {
        return;
    };
    for q in &before {
        assert_eq!(&q.region, region, "a quota of the region asked about");
        assert!(
            q.covers
                .iter()
                .all(|d| d.offering == f.offering.id && d.per_node > 0),
            "quota {} must cover only the offerings asked about, each drawing something",
            q.name
        );
    }
    let launched = p
        .launch(&spec(f, &f.offering, "quota"))
        .await
        .expect("launch must succeed");
    let after = read("after a launch").await.unwrap_or_default();
    for q in after.iter().filter(|q| q.draw(&f.offering.id).is_some()) {
        let per_node = u64::from(q.draw(&f.offering.id).unwrap_or(0));
        assert!(
            q.in_use >= per_node,
            "quota {} must count the launched instance ({} in use, a node draws {per_node})",
            q.name,
            q.in_use
        );
    }
    p.terminate(&launched.id)
        .await
        .expect("terminate must succeed");
}
