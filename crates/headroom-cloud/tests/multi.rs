//! The composite of clouds, over two simulated clouds (one answering as `sim`, one standing in
//! for `gcp`): the shared contract, and routing by offering and by instance id.

use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::contract::{ContractFaults, ContractFixture, run_all};
use headroom_cloud::{
    CloudError, CloudProvider, InstanceId, LaunchSpec, ManualClock, MultiCloud, OwnershipTags,
    Quotas, SimCloud, SimConfig, SimOffering,
};
use headroom_core::pool::ColdStartLadder;
use headroom_core::{ErrorClass, Market, Offering, ProviderKind};

fn offering(id: &str, provider: ProviderKind, region: &str) -> Offering {
    Offering {
        id: id.parse().unwrap(),
        provider,
        region: region.into(),
        zone: format!("{region}-a"),
        instance_type: "gpu-8".into(),
        market: Market::OnDemand,
        price_usd_per_hour: "30".parse().unwrap(),
        gpus_per_node: 8,
        warm_usd_per_hour: headroom_core::Money::ZERO,
    }
}

fn cloud(provider: ProviderKind, offerings: &[(Offering, u32)], quota: Option<u32>) -> SimCloud {
    let clock = Arc::new(ManualClock::new("2026-12-01T09:00:00Z".parse().unwrap()));
    SimCloud::new(
        SimConfig {
            seed: 3,
            offerings: offerings
                .iter()
                .map(|(offering, capacity)| SimOffering {
                    offering: offering.clone(),
                    capacity: *capacity,
                    ladder: ColdStartLadder {
                        node_acquisition: Duration::from_secs(60),
                        image_pull: Duration::from_secs(30),
                        weight_load: Duration::from_secs(60),
                        compile: Duration::ZERO,
                        warmup: Duration::ZERO,
                    },
                    spot_interruptions_per_hour: 0.0,
                })
                .collect(),
            gpu_quota_per_region: offerings
                .iter()
                .filter_map(|(o, _)| Some((o.region.clone(), quota?)))
                .collect(),
        },
        clock,
    )
    .standing_in_for(provider)
}

fn spec(offering: &Offering, token: &str) -> LaunchSpec {
    LaunchSpec {
        offering: offering.clone(),
        client_token: token.into(),
        tags: OwnershipTags {
            cluster: "c".into(),
            pool: "p".into(),
            node: token.into(),
            request: None,
        },
        user_data: None,
    }
}

/// Two clouds: `sim` with offering `s` (and `s-none`, stocked out), `gcp` with `g` (and
/// `g-none`).
fn two_clouds() -> (Arc<SimCloud>, Arc<SimCloud>) {
    let sim = cloud(
        ProviderKind::Sim,
        &[
            (offering("s", ProviderKind::Sim, "us-east-1"), 10),
            (offering("s-none", ProviderKind::Sim, "us-east-1"), 0),
        ],
        Some(64),
    );
    let gcp = cloud(
        ProviderKind::Gcp,
        &[
            (offering("g", ProviderKind::Gcp, "us-central1"), 10),
            (offering("g-none", ProviderKind::Gcp, "us-central1"), 0),
        ],
        None,
    );
    (Arc::new(sim), Arc::new(gcp))
}

fn composite(sim: &Arc<SimCloud>, gcp: &Arc<SimCloud>) -> MultiCloud {
    MultiCloud::new(vec![sim.clone(), gcp.clone()]).expect("one provider a kind")
}

#[derive(Debug)]
struct SimFaults(Arc<SimCloud>);

impl ContractFaults for SimFaults {
    fn fail_launches(&self, offering: &Offering) -> bool {
        self.0
            .inject_launch_fault(&offering.id, ErrorClass::Transient, u32::MAX);
        true
    }
    fn heal(&self) {
        self.0.clear_launch_faults();
    }
}

#[tokio::test]
async fn the_composite_passes_the_provider_contract_on_each_of_its_clouds() {
    let (sim, gcp) = two_clouds();
    let multi = composite(&sim, &gcp);
    for (member, id) in [(&sim, "s"), (&gcp, "g")] {
        let offering = |id: &str| {
            let provider = member.kind();
            let region = if provider == ProviderKind::Sim {
                "us-east-1"
            } else {
                "us-central1"
            };
            offering(id, provider, region)
        };
        run_all(
            &multi,
            &ContractFixture {
                cluster: format!("contract-{id}"),
                offering: offering(id),
                stockout: Some(offering(&format!("{id}-none"))),
                faults: Some(Arc::new(SimFaults(member.clone()))),
            },
        )
        .await;
    }
}

#[tokio::test]
async fn launches_go_to_the_offering_s_cloud_and_the_inventory_merges_both() {
    let (sim, gcp) = two_clouds();
    let multi = composite(&sim, &gcp);
    let on_sim = multi
        .launch(&spec(&offering("s", ProviderKind::Sim, "us-east-1"), "a"))
        .await
        .unwrap();
    let on_gcp = multi
        .launch(&spec(&offering("g", ProviderKind::Gcp, "us-central1"), "b"))
        .await
        .unwrap();
    assert_eq!(sim.all_instances().len(), 1);
    assert_eq!(gcp.all_instances().len(), 1);
    assert_eq!(sim.all_instances()[0].id, on_sim.id);
    assert_eq!(gcp.all_instances()[0].id, on_gcp.id);
    // A stockout on one cloud is that cloud's refusal, with its own name.
    let refused = multi
        .launch(&spec(
            &offering("g-none", ProviderKind::Gcp, "us-central1"),
            "c",
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            CloudError::Refused {
                provider: ProviderKind::Gcp,
                class: ErrorClass::Capacity,
                ..
            }
        ),
        "{refused:?}"
    );
    let mut listed: Vec<InstanceId> = multi
        .list_owned("c")
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    listed.sort();
    let mut expected = vec![on_sim.id, on_gcp.id];
    expected.sort();
    assert_eq!(listed, expected);
}

#[tokio::test]
async fn after_a_restart_calls_by_id_reach_the_cloud_that_holds_the_instance() {
    let (sim, gcp) = two_clouds();
    let before = composite(&sim, &gcp);
    let on_gcp = before
        .launch(&spec(&offering("g", ProviderKind::Gcp, "us-central1"), "a"))
        .await
        .unwrap();
    let on_sim = before
        .launch(&spec(&offering("s", ProviderKind::Sim, "us-east-1"), "b"))
        .await
        .unwrap();
    // A new process: the composite has learned nothing, and no inventory was read yet.
    let after = composite(&sim, &gcp);
    after.stop(&on_gcp.id).await.unwrap();
    after.terminate(&on_sim.id).await.unwrap();
    let stop_calls = |c: &SimCloud| c.calls().iter().filter(|c| c.starts_with("stop ")).count();
    let terminate_calls = |c: &SimCloud| {
        c.calls()
            .iter()
            .filter(|c| c.starts_with("terminate "))
            .count()
    };
    assert_eq!((stop_calls(&gcp), stop_calls(&sim)), (1, 0));
    assert_eq!((terminate_calls(&sim), terminate_calls(&gcp)), (1, 0));
    // Terminated instances are still found (terminate is idempotent through the composite).
    let again = composite(&sim, &gcp);
    again.terminate(&on_sim.id).await.unwrap();
    assert_eq!(terminate_calls(&gcp), 0);
    // An id no cloud knows is NotFound, from nobody in particular.
    let unknown = InstanceId("i-unknown".into());
    assert_eq!(
        again.describe(&unknown).await.unwrap_err(),
        CloudError::NotFound(unknown)
    );
}

#[tokio::test]
async fn a_cloud_that_cannot_answer_is_never_guessed_around() {
    let (sim, gcp) = two_clouds();
    let before = composite(&sim, &gcp);
    let on_sim = before
        .launch(&spec(&offering("s", ProviderKind::Sim, "us-east-1"), "a"))
        .await
        .unwrap();
    let _on_gcp = before
        .launch(&spec(&offering("g", ProviderKind::Gcp, "us-central1"), "b"))
        .await
        .unwrap();
    gcp.set_outage(true);
    // The inventory fails as a whole: a partial one would make gcp's instances look gone.
    let err = before.list_owned("c").await.unwrap_err();
    assert!(
        matches!(
            err,
            CloudError::Refused {
                provider: ProviderKind::Gcp,
                class: ErrorClass::Transient,
                ..
            }
        ),
        "{err:?}"
    );
    // A learned route still works with the other cloud down.
    before.stop(&on_sim.id).await.unwrap();
    // After a restart, an unknown id is not acted on while a cloud that might hold it is
    // down: the call fails transiently and nothing is stopped.
    let after = composite(&sim, &gcp);
    let err = after.start(&on_sim.id).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Transient);
    assert!(!sim.calls().iter().any(|c| c.starts_with("start ")));
    gcp.set_outage(false);
    after.start(&on_sim.id).await.unwrap();
    assert_eq!(after.list_owned("c").await.unwrap().len(), 2);
}

#[tokio::test]
async fn an_id_two_clouds_claim_is_refused_not_guessed() {
    // Two clouds that see one world (a misconfiguration: both simulated clouds keep their
    // state in one file), so both claim every instance.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cloud.json");
    let s = offering("s", ProviderKind::Sim, "us-east-1");
    let sim =
        Arc::new(cloud(ProviderKind::Sim, &[(s.clone(), 4)], None).with_state_file(file.clone()));
    let gcp = Arc::new(cloud(ProviderKind::Gcp, &[(s.clone(), 4)], None).with_state_file(file));
    let made = sim.launch(&spec(&s, "a")).await.unwrap();
    let multi = composite(&sim, &gcp);
    // Unknown, described by both: refused.
    let err = multi.stop(&made.id).await.unwrap_err();
    assert_eq!(err.code(), "AmbiguousInstanceId");
    // Listed by both: still refused, never routed to the first that answered.
    assert_eq!(multi.list_owned("c").await.unwrap().len(), 2);
    let err = multi.terminate(&made.id).await.unwrap_err();
    assert_eq!(err.code(), "AmbiguousInstanceId");
    assert!(
        !sim.calls()
            .iter()
            .any(|c| c.starts_with("terminate ") || c.starts_with("stop "))
    );
    assert!(
        !gcp.calls()
            .iter()
            .any(|c| c.starts_with("terminate ") || c.starts_with("stop "))
    );
}

#[tokio::test]
async fn quotas_and_prices_are_asked_of_each_offering_s_own_cloud() {
    let (sim, gcp) = two_clouds();
    let multi = composite(&sim, &gcp);
    let s = offering("s", ProviderKind::Sim, "us-east-1");
    let g = offering("g", ProviderKind::Gcp, "us-central1");
    // The sim cloud knows a GPU quota in us-east-1; the gcp one knows none limits `g`.
    let Quotas::Known(quotas) = multi
        .quota_headroom("us-east-1", &[s.clone(), g.clone()])
        .await
        .unwrap()
    else {
        panic!("the sim cloud's quota is known")
    };
    assert_eq!(quotas.len(), 1);
    assert!(quotas[0].draw(&s.id).is_some());
    assert!(quotas[0].draw(&g.id).is_none());
    assert!(sim.calls().iter().any(|c| c == "quota_headroom us-east-1"));
    assert!(multi.current_prices(&[s, g]).await.unwrap().is_empty());
    gcp.set_outage(true);
    assert!(
        multi
            .current_prices(&[offering("g", ProviderKind::Gcp, "us-central1")])
            .await
            .is_err()
    );
}
