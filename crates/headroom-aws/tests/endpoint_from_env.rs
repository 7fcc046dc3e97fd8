//! `AWS_ENDPOINT_URL` from the environment, with no `aws.endpoint_url` in the configuration: the
//! SDK's own lookup sends every call there. The environment is process-wide, so this binary runs
//! itself again as a child with the variable set (no test harness: `main` is the test, and it
//! fails by panicking or by the child's exit status).

// Shared with tests/moto.rs; this binary uses only part of it.
#[allow(dead_code)]
mod support;

use std::process::Command;

use headroom_aws::{AwsProvider, AwsSettings};
use headroom_cloud::CloudProvider;
use headroom_core::Market;
use support::{GOOD_TYPE, IMAGE, Moto, REGION, clock, offering, spec};

/// Set in the child: the moto endpoint the parent started.
const CHILD: &str = "HEADROOM_TEST_MOTO_ENDPOINT";

fn main() {
    match std::env::var(CHILD) {
        Ok(endpoint) => launch_without_a_configured_endpoint(&endpoint),
        Err(_) => {
            let moto = Moto::start();
            let status = Command::new(std::env::current_exe().unwrap())
                .env("AWS_ENDPOINT_URL", moto.endpoint())
                .env(CHILD, moto.endpoint())
                .status()
                .unwrap();
            assert!(status.success(), "the child failed: {status}");
            println!(
                "test calls_go_to_aws_endpoint_url_when_the_configuration_names_no_endpoint ... ok"
            );
        }
    }
}

fn launch_without_a_configured_endpoint(moto_endpoint: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let settings = AwsSettings {
            endpoint_url: None,
            image_id: Some(IMAGE.to_string()),
            ..AwsSettings::default()
        };
        let loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .credentials_provider(aws_sdk_ec2::config::Credentials::new(
                "test", "test", None, None, "moto",
            ));
        let provider =
            AwsProvider::with_loader(loader, settings, vec![REGION.to_string()], clock())
                .await
                .unwrap();
        let g6 = offering("g6-od", GOOD_TYPE, Market::OnDemand, "0.80");
        let launched = provider.launch(&spec("env", &g6, "n-1")).await.unwrap();

        // Read back through a client given the endpoint explicitly: the instance is on moto.
        let raw = aws_sdk_ec2::Client::from_conf(
            aws_sdk_ec2::config::Builder::new()
                .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
                .region(aws_sdk_ec2::config::Region::new(REGION))
                .credentials_provider(aws_sdk_ec2::config::Credentials::new(
                    "test", "test", None, None, "moto",
                ))
                .endpoint_url(moto_endpoint)
                .build(),
        );
        let found = raw
            .describe_instances()
            .instance_ids(&launched.id.0)
            .send()
            .await
            .unwrap();
        assert_eq!(
            found.reservations().len(),
            1,
            "the instance is on the moto server AWS_ENDPOINT_URL names"
        );
        assert_eq!(provider.list_owned("env").await.unwrap().len(), 1);
    });
}
