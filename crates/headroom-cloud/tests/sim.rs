//! The simulated cloud: the shared contract, plus what only a simulator can show.

use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::contract::{ContractFixture, run_all};
use headroom_cloud::{
    Clock, CloudProvider, InstancePhase, LaunchSpec, ManualClock, OwnershipTags, SimCloud,
    SimConfig, SimOffering,
};
use headroom_core::pool::ColdStartLadder;
use headroom_core::{ErrorClass, LadderRung, Market, Offering, ProviderKind};

fn offering(id: &str, market: Market, gpus: u32) -> Offering {
    Offering {
        id: id.parse().unwrap(),
        provider: ProviderKind::Sim,
        region: "us-east-1".into(),
        zone: "use1-az1".into(),
        instance_type: "p5.48xlarge".into(),
        market,
        price_usd_per_hour: "55.04".parse().unwrap(),
        gpus_per_node: gpus,
        warm_usd_per_hour: headroom_core::Money::ZERO,
    }
}

fn ladder() -> ColdStartLadder {
    ColdStartLadder {
        node_acquisition: Duration::from_secs(60),
        image_pull: Duration::from_secs(40),
        weight_load: Duration::from_secs(90),
        compile: Duration::from_secs(30),
        warmup: Duration::from_secs(10),
    }
}

fn sim(clock: Arc<ManualClock>, offerings: Vec<(Offering, u32, f64)>) -> SimCloud {
    SimCloud::new(
        SimConfig {
            seed: 7,
            offerings: offerings
                .into_iter()
                .map(|(offering, capacity, rate)| SimOffering {
                    offering,
                    capacity,
                    ladder: ladder(),
                    spot_interruptions_per_hour: rate,
                })
                .collect(),
            gpu_quota_per_region: [("us-east-1".to_string(), 24)].into(),
        },
        clock,
    )
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new("2026-11-30T09:00:00Z".parse().unwrap()))
}

fn spec(offering: &Offering, token: &str) -> LaunchSpec {
    LaunchSpec {
        offering: offering.clone(),
        client_token: token.into(),
        tags: OwnershipTags {
            cluster: "t".into(),
            pool: "p".into(),
            node: token.into(),
            request: None,
        },
        user_data: None,
    }
}

#[tokio::test]
async fn sim_passes_the_provider_contract() {
    let ok = offering("ok", Market::OnDemand, 1);
    let none = offering("none", Market::OnDemand, 1);
    let cloud = Arc::new(sim(
        clock(),
        vec![(ok.clone(), 10, 0.0), (none.clone(), 0, 0.0)],
    ));
    run_all(
        cloud.as_ref(),
        &ContractFixture {
            cluster: "contract".into(),
            offering: ok,
            stockout: Some(none),
            faults: Some(Arc::new(SimFaults(cloud.clone()))),
        },
    )
    .await;
}

/// The simulated cloud's faults for the contract: server errors on launch. Its launch answers
/// with the instance and it keeps ownership as tags, so the read-back and label checks do not
/// apply.
#[derive(Debug)]
struct SimFaults(Arc<SimCloud>);

impl headroom_cloud::contract::ContractFaults for SimFaults {
    fn fail_launches(&self, offering: &Offering) -> bool {
        self.0
            .inject_launch_fault(&offering.id, headroom_core::ErrorClass::Transient, u32::MAX);
        true
    }
    fn heal(&self) {
        self.0.clear_launch_faults();
    }
}

#[tokio::test]
async fn nodes_climb_the_ladder_and_warm_nodes_skip_two_rungs() {
    let clock = clock();
    let o = offering("o", Market::OnDemand, 8);
    let cloud = sim(clock.clone(), vec![(o.clone(), 4, 0.0)]);
    let i = cloud.launch(&spec(&o, "a")).await.unwrap();
    // Pending while the node is acquired, as EC2 reports it, then running up the ladder.
    assert_eq!(i.phase, InstancePhase::Pending);
    clock.advance(Duration::from_secs(100));
    assert_eq!(
        cloud.describe(&i.id).await.unwrap().phase,
        InstancePhase::Booting(LadderRung::WeightLoad)
    );
    clock.advance(Duration::from_secs(130));
    assert_eq!(
        cloud.describe(&i.id).await.unwrap().phase,
        InstancePhase::Ready
    );

    cloud.stop(&i.id).await.unwrap();
    let woken = cloud.start(&i.id).await.unwrap();
    assert_eq!(
        woken.phase,
        InstancePhase::Booting(LadderRung::WeightLoad),
        "a stopped node keeps its disk"
    );
    clock.advance(Duration::from_secs(130));
    assert_eq!(
        cloud.describe(&i.id).await.unwrap().phase,
        InstancePhase::Ready
    );
}

#[tokio::test]
async fn capacity_and_quota_refuse_with_their_class() {
    let o = offering("o", Market::OnDemand, 8);
    let cloud = sim(clock(), vec![(o.clone(), 2, 0.0)]);
    cloud.launch(&spec(&o, "a")).await.unwrap();
    cloud.launch(&spec(&o, "b")).await.unwrap();
    let err = cloud.launch(&spec(&o, "c")).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Capacity);

    cloud.set_capacity(&o.id, 10);
    cloud.launch(&spec(&o, "c")).await.unwrap();
    // 3 × 8 GPUs = 24, the region's quota.
    let err = cloud.launch(&spec(&o, "d")).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Quota);
    assert_eq!(cloud.list_owned("t").await.unwrap().len(), 3);
}

/// A stopped instance gave up its host: starting it meets a stockout as a launch does, and
/// it stays stopped (and whole) to be started once there is room.
#[tokio::test]
async fn a_wake_is_refused_for_capacity_like_a_launch() {
    let o = offering("o", Market::OnDemand, 1);
    let cloud = sim(clock(), vec![(o.clone(), 2, 0.0)]);
    let parked = cloud.launch(&spec(&o, "a")).await.unwrap();
    cloud.stop(&parked.id).await.unwrap();
    cloud.set_capacity(&o.id, 0);
    let err = cloud.start(&parked.id).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Capacity, "{err}");
    assert_eq!(
        cloud.describe(&parked.id).await.unwrap().phase,
        InstancePhase::Stopped
    );
    cloud.set_capacity(&o.id, 1);
    assert!(cloud.start(&parked.id).await.is_ok());
}

#[tokio::test]
async fn injected_faults_fire_then_clear() {
    let o = offering("o", Market::OnDemand, 1);
    let cloud = sim(clock(), vec![(o.clone(), 10, 0.0)]);
    cloud.inject_launch_fault(&o.id, ErrorClass::Throttled, 1);
    assert_eq!(
        cloud.launch(&spec(&o, "a")).await.unwrap_err().class(),
        ErrorClass::Throttled
    );
    assert!(cloud.launch(&spec(&o, "a")).await.is_ok());
}

async fn interruption_times(seed: u64) -> Vec<i64> {
    let clock = clock();
    let o = offering("spot", Market::Spot, 1);
    let cloud = SimCloud::new(
        SimConfig {
            seed,
            offerings: vec![SimOffering {
                offering: o.clone(),
                capacity: 100,
                ladder: ladder(),
                spot_interruptions_per_hour: 2.0,
            }],
            gpu_quota_per_region: Default::default(),
        },
        clock.clone(),
    );
    let mut ids = vec![];
    for n in 0..20 {
        ids.push(cloud.launch(&spec(&o, &format!("s{n}"))).await.unwrap().id);
    }
    let start = clock.now();
    let mut interrupted_at = vec![-1i64; ids.len()];
    for minute in 1..=240 {
        clock.advance(Duration::from_secs(60));
        for (k, id) in ids.iter().enumerate() {
            if interrupted_at[k] < 0
                && cloud.describe(id).await.unwrap().phase == InstancePhase::Interrupted
            {
                interrupted_at[k] = minute;
            }
        }
    }
    assert!(clock.now() > start);
    interrupted_at
}

#[tokio::test]
async fn spot_interruptions_are_deterministic_under_a_seed() {
    let a = interruption_times(42).await;
    assert_eq!(
        a,
        interruption_times(42).await,
        "the same seed must replay the same interruptions"
    );
    assert_ne!(
        a,
        interruption_times(43).await,
        "another seed must give other interruptions"
    );
    // At two interruptions an hour, nearly all of twenty nodes are gone within four hours.
    assert!(a.iter().filter(|m| **m > 0).count() >= 15, "{a:?}");
}

#[tokio::test]
async fn a_state_file_is_one_cloud_for_every_process_and_survives_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cloud.json");
    let clock = clock();
    let o = offering("o", Market::OnDemand, 1);
    let first = sim(clock.clone(), vec![(o.clone(), 2, 0.0)]).with_state_file(path.clone());
    let second = sim(clock.clone(), vec![(o.clone(), 2, 0.0)]).with_state_file(path.clone());

    let launched = first.launch(&spec(&o, "a")).await.unwrap();
    // The other "process" sees it, and the same client token returns it instead of a second one.
    assert_eq!(second.list_owned("t").await.unwrap().len(), 1);
    assert_eq!(second.launch(&spec(&o, "a")).await.unwrap().id, launched.id);
    // Capacity is shared too: one more fits, then the offering is full for both.
    second.launch(&spec(&o, "b")).await.unwrap();
    assert_eq!(
        first.launch(&spec(&o, "c")).await.unwrap_err().class(),
        ErrorClass::Capacity
    );

    drop(first);
    drop(second);
    let reopened = sim(clock, vec![(o.clone(), 2, 0.0)]).with_state_file(path);
    assert_eq!(
        reopened.list_owned("t").await.unwrap().len(),
        2,
        "state outlives the processes"
    );
}

#[tokio::test]
async fn quota_headroom_reports_the_region_s_gpu_quota_as_launches_use_it() {
    use headroom_cloud::{QuotaUnit, Quotas};
    let big = offering("big", Market::OnDemand, 8);
    let cloud = sim(clock(), vec![(big.clone(), 10, 0.0)]);
    let read = || async {
        match cloud
            .quota_headroom("us-east-1", std::slice::from_ref(&big))
            .await
            .unwrap()
        {
            Quotas::Known(q) => q,
            Quotas::Unknown => panic!("the simulated cloud knows its quotas"),
        }
    };
    let quotas = read().await;
    assert_eq!(quotas.len(), 1);
    assert_eq!(
        (quotas[0].unit, quotas[0].limit, quotas[0].in_use),
        (QuotaUnit::Gpu, 24, 0)
    );
    assert_eq!(quotas[0].nodes_left(&big.id), Some(3));
    let first = cloud.launch(&spec(&big, "q1")).await.unwrap();
    cloud.launch(&spec(&big, "q2")).await.unwrap();
    assert_eq!(read().await[0].in_use, 16);
    assert_eq!(read().await[0].nodes_left(&big.id), Some(1));
    cloud.stop(&first.id).await.unwrap();
    assert_eq!(read().await[0].in_use, 8, "a stopped node holds no quota");
    // A region without a quota is known to be unlimited.
    assert_eq!(
        cloud.quota_headroom("eu-west-1", &[]).await.unwrap(),
        Quotas::Known(Vec::new())
    );
}

#[tokio::test]
async fn a_terminated_instance_stays_described_but_out_of_play_and_through_a_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cloud.json");
    let clock = clock();
    let o = offering("o", Market::OnDemand, 1);
    let cloud = sim(clock.clone(), vec![(o.clone(), 2, 0.0)]).with_state_file(path.clone());
    let gone = cloud.launch(&spec(&o, "a")).await.unwrap();
    let kept = cloud.launch(&spec(&o, "b")).await.unwrap();
    cloud.terminate(&gone.id).await.unwrap();
    // Terminating twice is not an error, as on EC2.
    cloud.terminate(&gone.id).await.unwrap();

    let check = |cloud: &SimCloud| {
        let all: Vec<_> = cloud
            .all_instances()
            .into_iter()
            .map(|i| (i.id, i.phase))
            .collect();
        assert_eq!(
            all,
            [
                (gone.id.clone(), InstancePhase::Terminated),
                (kept.id.clone(), InstancePhase::Pending)
            ],
            "every instance ever made, in id order"
        );
        let in_play: Vec<_> = cloud
            .instances_in_play()
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(in_play, std::slice::from_ref(&kept.id));
    };
    check(&cloud);
    assert_eq!(
        cloud.describe(&gone.id).await.unwrap().phase,
        InstancePhase::Terminated
    );
    assert_eq!(cloud.list_owned("t").await.unwrap().len(), 1);
    // Its client token still answers with it, terminated, rather than making a second one.
    assert_eq!(cloud.launch(&spec(&o, "a")).await.unwrap().id, gone.id);
    assert!(
        cloud.start(&gone.id).await.is_err(),
        "a terminated instance never starts"
    );
    // It holds no capacity: a second live instance fits beside the first.
    cloud.launch(&spec(&o, "c")).await.unwrap();
    cloud.terminate(&kept.id).await.unwrap();

    drop(cloud);
    let reopened = sim(clock, vec![(o.clone(), 2, 0.0)]).with_state_file(path);
    let phases: Vec<_> = reopened
        .all_instances()
        .into_iter()
        .map(|i| i.phase)
        .collect();
    assert_eq!(
        phases,
        [
            InstancePhase::Terminated,
            InstancePhase::Terminated,
            InstancePhase::Pending
        ]
    );
    assert_eq!(reopened.instances_in_play().len(), 1);
    assert_eq!(
        reopened.describe(&gone.id).await.unwrap().phase,
        InstancePhase::Terminated
    );
}
