//! What the tests of several crates share, written once: a real SQLite ledger and a manual
//! clock in a temporary directory with an engine on them ([`Rig`]), a provider that "dies"
//! between a cloud call and its ledger outcome ([`DiesAfterLaunch`]), and a fresh database on
//! the PostgreSQL server the test command started ([`fresh_postgres_database`]), and a real
//! Prometheus scraping exporters a test drives ([`prometheus`]).
//!
//! A dev-dependency only; nothing here is compiled into the binary.

pub mod prometheus;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use headroom_cloud::{
    Clock, CloudError, CloudProvider, Instance, InstanceId, LaunchSpec, ManualClock, SimCloud,
};
use headroom_config::Config;
use headroom_core::{ErrorClass, Money, Offering, OfferingId, Priority, ProviderKind, RequestId};
use headroom_engine::cluster::Cluster;
use headroom_engine::{Engine, sim_cloud_for};
use headroom_ledger::{NewCapacityRequest, Requests, SqliteLedger};

/// The instant every rig's clock starts at, unless a test asks for another.
pub const EPOCH: &str = "2026-11-30T09:00:00Z";

/// `config` (the example configuration, or one made from it) with two g6.xlarge nodes reserved
/// at 0.50/h, offering `use1-g6-reserved`, listed last by the batch pool; `term` adds the
/// reservation's keys (`reservation_starts = "…"`, `reservation_ends = "…"`).
pub fn with_reserved_g6(config: &str, term: &str) -> String {
    let reserved = format!(
        "[[offerings]]\nid = \"use1-g6-reserved\"\nprovider = \"sim\"\nregion = \"us-east-1\"\nzone = \"use1-az1\"\ninstance_type = \"g6.xlarge\"\nmarket = \"reserved\"\nprice_usd_per_hour = \"0.50\"\ngpus = 1\nreserved_nodes = 2\n{term}\n\n[[offerings]]"
    );
    let batch = "offerings = [\"use2-g6-spot\", \"use1-g6-spot\", \"use1-g6-od\"]";
    assert!(config.contains(batch), "the example's batch pool moved");
    config.replacen("[[offerings]]", &reserved, 1).replace(
        batch,
        "offerings = [\"use2-g6-spot\", \"use1-g6-spot\", \"use1-g6-od\", \"use1-g6-reserved\"]",
    )
}

/// A configuration, a manual clock and a SQLite ledger file in a temporary directory: what one
/// `headroom serve` process has, minus its cloud.
#[derive(Debug)]
pub struct Rig {
    pub dir: tempfile::TempDir,
    pub config: Arc<Config>,
    pub clock: Arc<ManualClock>,
    pub ledger: Arc<SqliteLedger>,
}

impl Rig {
    /// A rig on `config_text` (which must be valid), its clock at [`EPOCH`].
    pub async fn new(config_text: &str) -> Rig {
        let clock = Arc::new(ManualClock::new(EPOCH.parse().expect("EPOCH parses")));
        Rig::with_clock(config_text, clock).await
    }

    /// A rig whose clock is `clock`.
    pub async fn with_clock(config_text: &str, clock: Arc<ManualClock>) -> Rig {
        let config = Arc::new(Config::parse(config_text, "test").expect("test configuration"));
        let dir = tempfile::tempdir().expect("temporary directory");
        let ledger = Arc::new(
            SqliteLedger::open_path(&dir.path().join("ledger.db"))
                .await
                .expect("SQLite ledger"),
        );
        Rig {
            dir,
            config,
            clock,
            ledger,
        }
    }

    pub fn ledger_path(&self) -> PathBuf {
        self.dir.path().join("ledger.db")
    }

    /// The ledger as a restarted process opens it: a new connection to the same file.
    pub async fn reopen_ledger(&self) -> Arc<SqliteLedger> {
        Arc::new(
            SqliteLedger::open_path(&self.ledger_path())
                .await
                .expect("reopen the ledger"),
        )
    }

    /// The simulated cloud the configuration describes, on the rig's clock.
    pub fn sim_cloud(&self) -> Arc<SimCloud> {
        Arc::new(sim_cloud_for(&self.config, self.clock.clone()))
    }

    /// An engine on the rig's ledger and clock and `cloud`.
    pub fn engine(&self, cloud: Arc<dyn CloudProvider>) -> Arc<Engine> {
        Engine::new(
            self.config.clone(),
            self.ledger.clone(),
            cloud,
            self.clock.clone(),
        )
    }

    /// An engine that takes readiness from `cluster`.
    pub fn engine_with_cluster(
        &self,
        cloud: Arc<dyn CloudProvider>,
        cluster: Arc<dyn Cluster>,
    ) -> Arc<Engine> {
        Engine::with_cluster(
            self.config.clone(),
            self.ledger.clone(),
            cloud,
            self.clock.clone(),
            Some(cluster),
        )
    }

    /// Records a capacity request for `replicas` more ready replicas of `pool`, now.
    pub async fn request(&self, pool: &str, replicas: u32) -> RequestId {
        request(self.ledger.as_ref(), self.clock.as_ref(), pool, replicas).await
    }
}

/// Records a capacity request for `replicas` more ready replicas of `pool` at the clock's now,
/// at normal priority, without an idempotency key.
pub async fn request(
    ledger: &dyn Requests,
    clock: &dyn Clock,
    pool: &str,
    replicas: u32,
) -> RequestId {
    let new = NewCapacityRequest {
        pool: pool.parse().expect("pool name"),
        replicas,
        priority: Priority::Normal,
        idempotency_key: None,
        at: clock.now(),
    };
    ledger
        .record_capacity_request(&new)
        .await
        .expect("record the capacity request")
        .0
        .id
}

/// How a process dies right after the cloud made its instance, before the ledger heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Death {
    /// The task panics inside the call (the process is gone; a restart picks up).
    Panic,
    /// The call's answer is lost (a transient error): the same engine sees no outcome.
    LostAnswer,
}

/// A provider whose launches succeed at the cloud and then die as `death` says, so the ledger
/// keeps an intent without an outcome. Everything else is passed through.
#[derive(Debug)]
pub struct DiesAfterLaunch {
    pub inner: Arc<dyn CloudProvider>,
    pub death: Death,
}

#[async_trait]
impl CloudProvider for DiesAfterLaunch {
    fn kind(&self) -> ProviderKind {
        self.inner.kind()
    }

    async fn launch(&self, spec: &LaunchSpec) -> Result<Instance, CloudError> {
        let made = self.inner.launch(spec).await?;
        match self.death {
            Death::Panic => panic!("simulated crash after launching {}", made.id),
            Death::LostAnswer => Err(CloudError::Refused {
                provider: self.inner.kind(),
                class: ErrorClass::Transient,
                code: "killed".into(),
                message: "the process died before recording the outcome".into(),
            }),
        }
    }

    async fn start(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        self.inner.start(id).await
    }

    async fn stop(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        self.inner.stop(id).await
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), CloudError> {
        self.inner.terminate(id).await
    }

    async fn describe(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        self.inner.describe(id).await
    }

    async fn list_owned(&self, cluster: &str) -> Result<Vec<Instance>, CloudError> {
        self.inner.list_owned(cluster).await
    }

    async fn current_prices(
        &self,
        offerings: &[Offering],
    ) -> Result<Vec<(OfferingId, Money)>, CloudError> {
        self.inner.current_prices(offerings).await
    }
    async fn quota_headroom(
        &self,
        region: &str,
        offerings: &[Offering],
    ) -> Result<headroom_cloud::Quotas, CloudError> {
        self.inner.quota_headroom(region, offerings).await
    }
}

/// A fresh, empty database on the PostgreSQL server `DATABASE_URL` names (`./scripts/test`
/// starts a throwaway one), as a URL. Each test gets its own, so tests run in parallel.
pub async fn fresh_postgres_database(prefix: &str) -> String {
    let url = std::env::var("DATABASE_URL")
        .expect("DATABASE_URL is not set: run ./scripts/test, which starts a throwaway PostgreSQL");
    let admin = sqlx::PgPool::connect(&url)
        .await
        .expect("cannot reach DATABASE_URL");
    #[allow(clippy::disallowed_methods)] // a database name no other test run picks
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await
        .expect("CREATE DATABASE");
    admin.close().await;
    let (base, _) = url
        .rsplit_once('/')
        .expect("DATABASE_URL ends in /DATABASE");
    format!("{base}/{name}")
}
