//! [`AwsProvider`]: the trait's calls as EC2 API calls. Here the struct, its constructor and
//! clients, and the constants its files share; a file a concern beside it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_ec2::Client;
use aws_sdk_ec2::config::Region;
use headroom_cloud::{Clock, CloudError, InstanceId};
use headroom_core::{ErrorClass, ProviderKind, Timestamp};

use crate::{AwsError, AwsSettings};

mod cloud_provider;
mod errors;
mod interruptions;
mod launch;
mod observe;
mod pricing;
#[cfg(test)]
mod tests;

pub use interruptions::warned_instance;
pub use observe::phase_of;

pub(crate) use errors::api_error;
pub(crate) use launch::ec2_tag;
pub(crate) use observe::to_timestamp;

/// The tag carrying the ledger intent's client token, for finding a launch again when EC2's own
/// `ClientToken` idempotency is not there to do it (moto ignores it).
pub const TAG_CLIENT_TOKEN: &str = "headroom-client-token";
/// The tag carrying the offering id an instance was launched for.
pub const TAG_OFFERING: &str = "headroom-offering";

/// Pages of DescribeInstances read per region and call (1000 instances a page).
const MAX_PAGES: usize = 50;
/// Instances whose region (or termination) the provider remembers at most.
const MAX_REMEMBERED: usize = 100_000;
/// The EC2 state reason of an instance the spot market took back.
const SPOT_TERMINATION: &str = "Server.SpotInstanceTermination";

/// The AWS provider. One EC2 client per region; instance ids are region-scoped, so the provider
/// remembers which region each instance it has seen lives in.
#[derive(Debug)]
pub struct AwsProvider {
    clients: BTreeMap<String, Client>,
    /// Region → Auto Scaling client, for pools in group mode.
    pub(crate) autoscaling_clients: BTreeMap<String, aws_sdk_autoscaling::Client>,
    /// Held across the read-decide-write of a group's desired capacity (launch and terminate
    /// of group pools): SetDesiredCapacity is absolute, so two at once would lose one.
    pub(crate) group_changes: tokio::sync::Mutex<()>,
    pub(crate) settings: AwsSettings,
    pub(crate) clock: Arc<dyn Clock>,
    regions_of: Mutex<HashMap<InstanceId, String>>,
    /// Region → the SQS queue of spot interruption warnings, where configured.
    queues: BTreeMap<String, (aws_sdk_sqs::Client, String)>,
    /// Instances a spot interruption warning named, with when EC2 will take them (two minutes
    /// after the warning was read): they carry an interruption notice until then.
    warned: Mutex<HashMap<InstanceId, Timestamp>>,
    /// Interrupted instances we terminated: EC2 keeps listing them (terminated, with the spot
    /// reason) for about an hour, and they must then read as terminated, not interrupted again.
    ended: Mutex<HashSet<InstanceId>>,
    /// Region → Service Quotas client (quota preflight, module `quotas`).
    servicequotas_clients: BTreeMap<String, aws_sdk_servicequotas::Client>,
    /// vCPUs per instance type, as DescribeInstanceTypes answered (they never change).
    pub(crate) vcpus_of: Mutex<HashMap<String, u32>>,
}

impl AwsProvider {
    /// Builds clients for `regions` with credentials from the standard chain. The SDK makes one
    /// attempt per call: the engine repeats throttled and transient calls on its next tick, and a
    /// capacity error that real EC2 answers with a 5xx must not be repeated at all.
    pub async fn new(
        settings: AwsSettings,
        regions: Vec<String>,
        clock: Arc<dyn Clock>,
    ) -> Result<AwsProvider, AwsError> {
        Self::with_loader(
            aws_config::defaults(BehaviorVersion::latest()),
            settings,
            regions,
            clock,
        )
        .await
    }

    /// [`AwsProvider::new`] from a loader the caller has set up (tests give it static
    /// credentials); region, retry, timeouts and endpoint are set here.
    pub async fn with_loader(
        loader: aws_config::ConfigLoader,
        settings: AwsSettings,
        regions: Vec<String>,
        clock: Arc<dyn Clock>,
    ) -> Result<AwsProvider, AwsError> {
        let Some(first) = regions.first() else {
            return Err(AwsError::Config {
                key: "aws.regions".to_string(),
                message: "no region: set aws.region or give the offerings a region".to_string(),
            });
        };
        let mut loader = loader
            .region(Region::new(first.clone()))
            .retry_config(RetryConfig::standard().with_max_attempts(1))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .operation_timeout(Duration::from_secs(60))
                    .build(),
            );
        // Without the key, aws-config reads AWS_ENDPOINT_URL (and AWS_ENDPOINT_URL_EC2) itself.
        if let Some(url) = &settings.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        let shared = loader.load().await;
        let clients = regions
            .iter()
            .map(|region| {
                let config = aws_sdk_ec2::config::Builder::from(&shared)
                    .region(Region::new(region.clone()))
                    .build();
                (region.clone(), Client::from_conf(config))
            })
            .collect();
        let autoscaling_clients = regions
            .iter()
            .map(|region| {
                let config = aws_sdk_autoscaling::config::Builder::from(&shared)
                    .region(aws_sdk_autoscaling::config::Region::new(region.clone()))
                    .build();
                (
                    region.clone(),
                    aws_sdk_autoscaling::Client::from_conf(config),
                )
            })
            .collect();
        let queues = settings
            .interruption_queues
            .iter()
            .map(|(region, url)| {
                let config = aws_sdk_sqs::config::Builder::from(&shared)
                    .region(aws_sdk_sqs::config::Region::new(region.clone()))
                    .build();
                (
                    region.clone(),
                    (aws_sdk_sqs::Client::from_conf(config), url.clone()),
                )
            })
            .collect();
        let servicequotas_clients = regions
            .iter()
            .map(|region| {
                let config = aws_sdk_servicequotas::config::Builder::from(&shared)
                    .region(aws_sdk_servicequotas::config::Region::new(region.clone()))
                    .build();
                (
                    region.clone(),
                    aws_sdk_servicequotas::Client::from_conf(config),
                )
            })
            .collect();
        Ok(AwsProvider {
            servicequotas_clients,
            vcpus_of: Mutex::new(HashMap::new()),
            queues,
            warned: Mutex::new(HashMap::new()),
            clients,
            autoscaling_clients,
            group_changes: tokio::sync::Mutex::new(()),
            settings,
            clock,
            regions_of: Mutex::new(HashMap::new()),
            ended: Mutex::new(HashSet::new()),
        })
    }

    pub(crate) fn client(&self, region: &str) -> Result<&Client, CloudError> {
        self.clients.get(region).ok_or_else(|| CloudError::Refused {
            provider: ProviderKind::Aws,
            class: ErrorClass::InvalidRequest,
            code: "RegionNotConfigured".to_string(),
            message: format!("region {region} is not in aws.regions; add it"),
        })
    }

    pub(crate) fn servicequotas_client(
        &self,
        region: &str,
    ) -> Result<&aws_sdk_servicequotas::Client, CloudError> {
        self.servicequotas_clients
            .get(region)
            .ok_or_else(|| CloudError::Refused {
                provider: ProviderKind::Aws,
                class: ErrorClass::InvalidRequest,
                code: "RegionNotConfigured".to_string(),
                message: format!("region {region} is not in aws.regions; add it"),
            })
    }
}
