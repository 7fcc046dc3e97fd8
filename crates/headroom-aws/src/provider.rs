//! [`AwsProvider`]: the trait's calls as EC2 API calls.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_ec2::Client;
use aws_sdk_ec2::config::Region;
use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationSpecification, CapacityReservationTarget,
    DefaultTargetCapacityType, Filter, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest, FleetType,
    InstanceInterruptionBehavior, InstanceMarketOptionsRequest, InstanceStateName, InstanceType,
    LaunchTemplateSpecification, MarketType, Placement, ResourceType, SpotInstanceType,
    SpotMarketOptions, Tag, TagSpecification, TargetCapacitySpecificationRequest,
};
use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use headroom_cloud::{
    Clock, CloudError, CloudProvider, Instance, InstanceId, InstancePhase, LaunchSpec,
    OwnershipTags,
};
use headroom_core::{
    ErrorClass, LadderRung, Market, Money, Offering, OfferingId, ProviderKind, Timestamp,
};

use crate::classify::{ErrorSource, classify};
use crate::{AwsError, AwsSettings};

/// The tag carrying the ledger intent's client token, for finding a launch again when EC2's own
/// `ClientToken` idempotency is not there to do it (moto ignores it).
pub const TAG_CLIENT_TOKEN: &str = "headroom-client-token";
/// The tag carrying the offering id an instance was launched for.
pub const TAG_OFFERING: &str = "headroom-offering";

/// Pages of DescribeInstances read per region and call (1000 instances a page).
const MAX_PAGES: usize = 50;
/// Batches of ten spot interruption warnings read per region and inventory.
const MAX_WARNING_BATCHES: usize = 10;
/// Instances whose region (or termination) the provider remembers at most.
const MAX_REMEMBERED: usize = 100_000;
/// The EC2 state reason of an instance the spot market took back.
const SPOT_TERMINATION: &str = "Server.SpotInstanceTermination";
/// Reads of a just-created instance before it is adopted as created (100 ms doubling: ~1.5 s).
const READ_BACK_ATTEMPTS: u32 = 5;

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

    fn remember(&self, id: &InstanceId, region: &str) {
        let mut regions = self.regions_of.lock().unwrap_or_else(|e| e.into_inner());
        // A cache, bounded: an instance it forgot is looked for in each region again.
        if regions.len() >= MAX_REMEMBERED && !regions.contains_key(id) {
            regions.clear();
        }
        regions.insert(id.clone(), region.to_string());
    }

    /// Describes `id`, finding its region: the one it was last seen in, else each in turn.
    async fn locate(&self, id: &InstanceId) -> Result<(String, Instance), CloudError> {
        let (region, raw) = self.locate_raw(id).await?;
        let instance = self.to_instance(&region, &raw);
        Ok((region, instance))
    }

    async fn locate_raw(
        &self,
        id: &InstanceId,
    ) -> Result<(String, aws_sdk_ec2::types::Instance), CloudError> {
        let known = self
            .regions_of
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned();
        let candidates: Vec<String> = match known {
            Some(region) => vec![region],
            None => self.clients.keys().cloned().collect(),
        };
        for region in candidates {
            match self.describe_raw(&region, id).await {
                Ok(raw) => return Ok((region, raw)),
                Err(CloudError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(CloudError::NotFound(id.clone()))
    }

    /// Reads an instance back right after the call that created it. EC2's reads are eventually
    /// consistent (DescribeInstances may answer `InvalidInstanceID.NotFound` at first), and a
    /// successful create is never a refusal: the read is repeated a bounded number of times,
    /// then the instance is adopted from what the create said (its id, the launch's tags,
    /// pending) for the next inventory to settle.
    async fn read_back(&self, region: &str, id: &InstanceId, spec: &LaunchSpec) -> Instance {
        let mut delay = Duration::from_millis(100);
        for attempt in 1..=READ_BACK_ATTEMPTS {
            match self.describe_in(region, id).await {
                Ok(instance) => return instance,
                Err(e) => {
                    tracing::debug!(instance = %id, attempt, error = %e, "created instance not readable yet");
                }
            }
            if attempt < READ_BACK_ATTEMPTS {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
        tracing::warn!(instance = %id, "created instance still unreadable; adopting it as created");
        Instance {
            id: id.clone(),
            offering: spec.offering.id.clone(),
            client_token: spec.client_token.clone(),
            tags: spec.tags.clone(),
            phase: InstancePhase::Pending,
            launched_at: self.clock.now(),
            interruption_notice: None,
        }
    }

    async fn describe_in(&self, region: &str, id: &InstanceId) -> Result<Instance, CloudError> {
        let raw = self.describe_raw(region, id).await?;
        Ok(self.to_instance(region, &raw))
    }

    pub(crate) async fn describe_raw(
        &self,
        region: &str,
        id: &InstanceId,
    ) -> Result<aws_sdk_ec2::types::Instance, CloudError> {
        let ec2 = self.client(region)?;
        let out = ec2
            .describe_instances()
            .instance_ids(id.0.clone())
            .send()
            .await
            .map_err(|e| api_error(e, Some(id)))?;
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find(|i| i.instance_id() == Some(id.0.as_str()))
            .cloned()
            .ok_or_else(|| CloudError::NotFound(id.clone()))
    }

    /// Every instance in `region` matching `filter`, bounded by [`MAX_PAGES`].
    async fn list(&self, region: &str, filter: Filter) -> Result<Vec<Instance>, CloudError> {
        let ec2 = self.client(region)?;
        let mut instances = Vec::new();
        let mut next: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let out = ec2
                .describe_instances()
                .filters(filter.clone())
                .max_results(1000)
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| api_error(e, None))?;
            instances.extend(
                out.reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    // An Auto Scaling group's instance is ours once a launch claims it, or once
                    // it has waited unclaimed too long (then as an orphan of its pool).
                    .filter_map(|i| {
                        if !self.is_unclaimed_group_member(i) {
                            return Some(self.to_instance(region, i));
                        }
                        let pool = self.abandoned_group_member(i)?;
                        let mut instance = self.to_instance(region, i);
                        instance.tags.pool = pool;
                        Some(instance)
                    }),
            );
            match out.next_token() {
                Some(token) if !token.is_empty() => next = Some(token.to_string()),
                _ => return Ok(instances),
            }
        }
        tracing::warn!(
            region,
            "more than {MAX_PAGES} pages of instances; the rest are not listed"
        );
        Ok(instances)
    }

    pub(crate) fn to_instance(&self, region: &str, i: &aws_sdk_ec2::types::Instance) -> Instance {
        let tags: HashMap<&str, &str> = i
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?, t.value()?)))
            .collect();
        let tag = |k: &str| tags.get(k).map(|v| v.to_string());
        let id = InstanceId(i.instance_id().unwrap_or_default().to_string());
        self.remember(&id, region);
        let now = self.clock.now();
        let launched_at = i.launch_time().and_then(to_timestamp).unwrap_or(now);
        let state = i.state().and_then(|s| s.name());
        let mut phase = phase_of(
            state.map(InstanceStateName::as_str).unwrap_or("pending"),
            i.state_reason().and_then(|r| r.code()),
            (now - launched_at).to_std().unwrap_or_default(),
            Duration::from_secs(self.settings.ready_after_secs),
        );
        // A warned instance still runs: the notice lets the planner replace it before EC2 takes
        // it; past the reclaim time it reads as interrupted even if EC2 has not caught up.
        let reclaim_at = self
            .warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .copied();
        let mut interruption_notice = None;
        if let Some(at) = reclaim_at
            && matches!(
                phase,
                InstancePhase::Pending
                    | InstancePhase::Booting(_)
                    | InstancePhase::Ready
                    | InstancePhase::Stopped
            )
        {
            if now >= at {
                phase = InstancePhase::Interrupted;
            } else {
                interruption_notice = Some(at);
            }
        }
        if phase == InstancePhase::Interrupted
            && self
                .ended
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&id)
        {
            phase = InstancePhase::Terminated;
        }
        Instance {
            offering: tag(TAG_OFFERING)
                .and_then(|o| o.parse::<OfferingId>().ok())
                .unwrap_or_else(|| "unknown".parse().expect("a valid offering id")),
            client_token: tag(TAG_CLIENT_TOKEN)
                .or_else(|| i.client_token().map(str::to_string))
                .unwrap_or_default(),
            tags: OwnershipTags {
                cluster: tag("headroom-cluster").unwrap_or_default(),
                pool: tag("headroom-pool").unwrap_or_default(),
                node: tag("headroom-node").unwrap_or_default(),
                request: tag("headroom-request"),
            },
            id,
            phase,
            launched_at,
            interruption_notice,
        }
    }

    /// Launches one instance with an EC2 Fleet of type `instant` from the pool's launch template.
    /// Such a fleet reports a refusal (capacity, price, quota) per instance in `Errors[]` of a
    /// successful call, not as a failed call.
    async fn launch_fleet(
        &self,
        spec: &LaunchSpec,
        template: &str,
        tags: Vec<Tag>,
    ) -> Result<Instance, CloudError> {
        let region = spec.offering.region.as_str();
        let ec2 = self.client(region)?;
        let mut overrides = FleetLaunchTemplateOverridesRequest::builder()
            .instance_type(InstanceType::from(spec.offering.instance_type.as_str()))
            .availability_zone(&spec.offering.zone)
            .set_subnet_id(self.settings.subnets.get(&spec.offering.zone).cloned());
        let capacity_type = match spec.offering.market {
            Market::Spot => {
                overrides = overrides.max_price(spec.offering.price_usd_per_hour.to_string());
                DefaultTargetCapacityType::Spot
            }
            Market::OnDemand | Market::Reserved => DefaultTargetCapacityType::OnDemand,
        };
        let out = ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .client_token(&spec.client_token)
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(capacity_type)
                    .build(),
            )
            .launch_template_configs(
                FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name(template)
                            .version("$Default")
                            .build(),
                    )
                    .overrides(overrides.build())
                    .build(),
            )
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Instance)
                    .set_tags(Some(tags))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| api_error(e, None))?;
        let made = out
            .instances()
            .iter()
            .flat_map(|i| i.instance_ids())
            .next()
            .map(|id| InstanceId(id.clone()));
        match (made, out.errors().first()) {
            (Some(id), _) => {
                self.remember(&id, region);
                let instance = self.read_back(region, &id, spec).await;
                tracing::info!(instance = %instance.id, token = %spec.client_token, offering = %spec.offering.id, "launched by fleet");
                Ok(instance)
            }
            (None, Some(error)) => {
                let code = error.error_code().unwrap_or_default();
                Err(CloudError::Refused {
                    provider: ProviderKind::Aws,
                    class: classify(code, ErrorSource::FleetInstance),
                    code: code.to_string(),
                    message: error.error_message().unwrap_or_default().to_string(),
                })
            }
            (None, None) => Err(CloudError::Refused {
                provider: ProviderKind::Aws,
                class: ErrorClass::Unknown,
                code: "NoInstance".to_string(),
                message: "CreateFleet succeeded without an instance or an error".to_string(),
            }),
        }
    }

    /// Reads the spot interruption warnings waiting in `region`'s queue, a bounded number of
    /// batches, and deletes them once remembered. Warnings only hasten what the instance state
    /// shows later, so a queue that cannot be read is logged, not an inventory failure.
    async fn read_warnings(&self, region: &str) {
        let Some((sqs, url)) = self.queues.get(region) else {
            return;
        };
        for _ in 0..MAX_WARNING_BATCHES {
            let out = match sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .wait_time_seconds(0)
                .send()
                .await
            {
                Ok(out) => out,
                Err(e) => {
                    tracing::warn!(region, error = %api_error(e, None), "cannot read spot interruption warnings");
                    return;
                }
            };
            let messages = out.messages();
            if messages.is_empty() {
                return;
            }
            let mut done = Vec::new();
            for (n, message) in messages.iter().enumerate() {
                if let Some(id) = message.body().and_then(warned_instance) {
                    tracing::warn!(instance = %id, "spot interruption warning");
                    let reclaim_at = self.clock.now() + chrono::Duration::minutes(2);
                    let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
                    if warned.len() >= MAX_REMEMBERED {
                        warned.clear();
                    }
                    warned.entry(id).or_insert(reclaim_at);
                }
                if let Some(handle) = message.receipt_handle()
                    && let Ok(entry) = DeleteMessageBatchRequestEntry::builder()
                        .id(n.to_string())
                        .receipt_handle(handle)
                        .build()
                {
                    done.push(entry);
                }
            }
            if let Err(e) = sqs
                .delete_message_batch()
                .queue_url(url)
                .set_entries(Some(done))
                .send()
                .await
            {
                // They come back after their visibility timeout and are read again: harmless.
                tracing::warn!(region, error = %api_error(e, None), "cannot delete spot interruption warnings");
                return;
            }
        }
    }

    /// The current spot price per (instance type, availability zone) in `region`, for Linux.
    pub async fn spot_prices(
        &self,
        region: &str,
        instance_types: &[&str],
    ) -> Result<BTreeMap<(String, String), Money>, CloudError> {
        let ec2 = self.client(region)?;
        // A start time of now asks for the price in force now, one entry per type and zone.
        let now = aws_sdk_ec2::primitives::DateTime::from_secs(self.clock.now().timestamp());
        let mut prices = BTreeMap::new();
        let mut next: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let out = ec2
                .describe_spot_price_history()
                .set_instance_types(Some(
                    instance_types
                        .iter()
                        .map(|t| InstanceType::from(*t))
                        .collect(),
                ))
                .product_descriptions("Linux/UNIX")
                .start_time(now)
                .max_results(1000)
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| api_error(e, None))?;
            for p in out.spot_price_history() {
                let (Some(t), Some(zone), Some(price)) =
                    (p.instance_type(), p.availability_zone(), p.spot_price())
                else {
                    continue;
                };
                let Ok(price) = price.parse::<Money>() else {
                    continue;
                };
                // Newest first: keep the first price seen per key.
                prices
                    .entry((t.as_str().to_string(), zone.to_string()))
                    .or_insert(price);
            }
            match out.next_token() {
                Some(token) if !token.is_empty() => next = Some(token.to_string()),
                _ => break,
            }
        }
        Ok(prices)
    }
}

/// An EC2 instance state (and state reason) as an [`InstancePhase`]. EC2 cannot see inside the
/// node: a running instance is booting (the last rung EC2 knows of is node acquisition) until
/// `ready_after` has passed since it was (re)started, then ready.
pub fn phase_of(
    state: &str,
    reason: Option<&str>,
    running_for: Duration,
    ready_after: Duration,
) -> InstancePhase {
    let reclaimed = reason == Some(SPOT_TERMINATION);
    match state {
        "running" if running_for >= ready_after => InstancePhase::Ready,
        "running" => InstancePhase::Booting(LadderRung::NodeAcquisition),
        // A spot instance with the stop interruption behaviour is stopped, not terminated.
        "stopping" | "stopped" | "shutting-down" | "terminated" if reclaimed => {
            InstancePhase::Interrupted
        }
        "stopping" | "stopped" => InstancePhase::Stopped,
        "shutting-down" | "terminated" => InstancePhase::Terminated,
        _ => InstancePhase::Pending,
    }
}

/// The instance an EventBridge "EC2 Spot Instance Interruption Warning" event names, if `body`
/// is one.
pub fn warned_instance(body: &str) -> Option<InstanceId> {
    let event: serde_json::Value = serde_json::from_str(body).ok()?;
    if event.get("detail-type")?.as_str()? != "EC2 Spot Instance Interruption Warning" {
        return None;
    }
    let id = event.get("detail")?.get("instance-id")?.as_str()?;
    Some(InstanceId(id.to_string()))
}

pub(crate) fn to_timestamp(t: &aws_sdk_ec2::primitives::DateTime) -> Option<Timestamp> {
    chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())
}

/// A failed SDK call as a [`CloudError`]. `NotFound` codes become [`CloudError::NotFound`] when
/// the call was about one instance.
pub(crate) fn api_error<E>(err: SdkError<E, HttpResponse>, id: Option<&InstanceId>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = err.raw_response().map(|r| r.status().as_u16());
    let (code, class) = match &err {
        SdkError::TimeoutError(_) => ("Timeout".to_string(), ErrorClass::Transient),
        // Connection trouble is transient; a request that could not be sent for another reason
        // (no credentials, a bad endpoint) will not get better by itself.
        SdkError::DispatchFailure(f) if f.is_io() || f.is_timeout() => {
            ("DispatchFailure".to_string(), ErrorClass::Transient)
        }
        SdkError::DispatchFailure(_) => ("DispatchFailure".to_string(), ErrorClass::InvalidRequest),
        SdkError::ConstructionFailure(_) => (
            "ConstructionFailure".to_string(),
            ErrorClass::InvalidRequest,
        ),
        _ => {
            let code = err.code().unwrap_or_default().to_string();
            let class = classify(&code, ErrorSource::Api { status });
            (code, class)
        }
    };
    if let (ErrorClass::NotFound, Some(id)) = (class, id) {
        return CloudError::NotFound(id.clone());
    }
    let message = err
        .message()
        .map(str::to_string)
        .unwrap_or_else(|| aws_sdk_ec2::error::DisplayErrorContext(&err).to_string());
    CloudError::Refused {
        provider: ProviderKind::Aws,
        class,
        code: if code.is_empty() {
            format!("Http{}", status.unwrap_or(0))
        } else {
            code
        },
        message,
    }
}

pub(crate) fn ec2_tag(key: &str, value: &str) -> Tag {
    Tag::builder().key(key).value(value).build()
}

#[async_trait]
impl CloudProvider for AwsProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Aws
    }

    async fn launch(&self, spec: &LaunchSpec) -> Result<Instance, CloudError> {
        let region = spec.offering.region.as_str();
        let ec2 = self.client(region)?;
        // Real EC2 returns the first instance for a repeated ClientToken; moto ignores the token.
        // Looking the token up by tag first makes a repeat safe on both, and costs one read.
        let by_token = Filter::builder()
            .name(format!("tag:{TAG_CLIENT_TOKEN}"))
            .values(&spec.client_token)
            .build();
        if let Some(existing) = self
            .list(region, by_token)
            .await?
            .into_iter()
            .min_by_key(|i| i.launched_at)
        {
            return Ok(existing);
        }
        if let Some(group) = self.settings.group_of(&spec.tags.pool) {
            return self.launch_in_group(spec, group).await;
        }

        let mut tags: Vec<Tag> = spec
            .tags
            .to_map()
            .iter()
            .map(|(k, v)| ec2_tag(k, v))
            .collect();
        tags.push(ec2_tag(TAG_CLIENT_TOKEN, &spec.client_token));
        tags.push(ec2_tag(TAG_OFFERING, spec.offering.id.as_str()));
        let template = self.settings.launch_templates.get(&spec.tags.pool);
        // Fleet overrides cannot carry user data, and a launch template version per node (the
        // user data names the node) would pile up towards EC2's 10,000 versions a template:
        // a node with its own user data is launched by RunInstances from the same template.
        if let (Some(template), Market::OnDemand | Market::Spot, None) =
            (template, spec.offering.market, &spec.user_data)
        {
            return self.launch_fleet(spec, template, tags).await;
        }
        let mut request = ec2
            .run_instances()
            .min_count(1)
            .max_count(1)
            .client_token(&spec.client_token)
            .instance_type(InstanceType::from(spec.offering.instance_type.as_str()))
            .placement(
                Placement::builder()
                    .availability_zone(&spec.offering.zone)
                    .build(),
            )
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Instance)
                    .set_tags(Some(tags.clone()))
                    .build(),
            )
            .set_user_data(spec.user_data.as_deref().map(|u| {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.encode(u)
            }));
        match template {
            Some(template) => {
                request = request.launch_template(
                    LaunchTemplateSpecification::builder()
                        .launch_template_name(template)
                        .version("$Default")
                        .build(),
                );
            }
            None => {
                let Some(image) = &self.settings.image_id else {
                    return Err(CloudError::Refused {
                        provider: ProviderKind::Aws,
                        class: ErrorClass::InvalidRequest,
                        code: "NoImage".to_string(),
                        message: format!(
                            "pool {} has no launch template and aws.image_id is not set",
                            spec.tags.pool
                        ),
                    });
                };
                request = request.image_id(image);
            }
        }
        if let Some(subnet) = self.settings.subnets.get(&spec.offering.zone) {
            request = request.subnet_id(subnet);
        }
        match spec.offering.market {
            Market::Spot => {
                // The offering's price is the most we pay. EC2 stops only spot instances of a
                // persistent request that stops on interruption: pools that keep spot nodes warm
                // need that; the others get a one-time request, terminated on interruption.
                let stoppable = self.settings.stoppable_spot_pools.contains(&spec.tags.pool);
                let (kind, on_interruption) = if stoppable {
                    (
                        SpotInstanceType::Persistent,
                        InstanceInterruptionBehavior::Stop,
                    )
                } else {
                    (
                        SpotInstanceType::OneTime,
                        InstanceInterruptionBehavior::Terminate,
                    )
                };
                // The spot request carries the cluster tag too, so the IAM policy can scope
                // CancelSpotInstanceRequests to this deployment's requests.
                request = request.tag_specifications(
                    TagSpecification::builder()
                        .resource_type(ResourceType::SpotInstancesRequest)
                        .set_tags(Some(tags.clone()))
                        .build(),
                );
                request = request.instance_market_options(
                    InstanceMarketOptionsRequest::builder()
                        .market_type(MarketType::Spot)
                        .spot_options(
                            SpotMarketOptions::builder()
                                .max_price(spec.offering.price_usd_per_hour.to_string())
                                .spot_instance_type(kind)
                                .instance_interruption_behavior(on_interruption)
                                .build(),
                        )
                        .build(),
                );
            }
            Market::Reserved => {
                let offering = spec.offering.id.as_str();
                let mut reservation = CapacityReservationSpecification::builder();
                match self.settings.reservations.get(offering) {
                    Some(id) => {
                        reservation = reservation.capacity_reservation_target(
                            CapacityReservationTarget::builder()
                                .capacity_reservation_id(id)
                                .build(),
                        );
                    }
                    None => {
                        reservation = reservation
                            .capacity_reservation_preference(CapacityReservationPreference::Open);
                    }
                }
                request = request.capacity_reservation_specification(reservation.build());
                if self.settings.capacity_blocks.iter().any(|b| b == offering) {
                    request = request.instance_market_options(
                        InstanceMarketOptionsRequest::builder()
                            .market_type(MarketType::CapacityBlock)
                            .build(),
                    );
                }
            }
            Market::OnDemand => {}
        }
        let out = request.send().await.map_err(|e| api_error(e, None))?;
        let made = out.instances().first().ok_or_else(|| CloudError::Refused {
            provider: ProviderKind::Aws,
            class: ErrorClass::Unknown,
            code: "NoInstance".to_string(),
            message: "RunInstances succeeded without an instance".to_string(),
        })?;
        let instance = self.to_instance(region, made);
        tracing::info!(instance = %instance.id, token = %spec.client_token, offering = %spec.offering.id, "launched");
        Ok(instance)
    }

    async fn start(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        let (region, raw) = self.locate_raw(id).await?;
        let current = self.to_instance(&region, &raw);
        match current.phase {
            InstancePhase::Terminated | InstancePhase::Interrupted => {
                Err(CloudError::NotFound(id.clone()))
            }
            InstancePhase::Stopped => {
                self.refuse_for_group(&raw, "start")?;
                let ec2 = self.client(&region)?;
                ec2.start_instances()
                    .instance_ids(id.0.clone())
                    .send()
                    .await
                    .map_err(|e| api_error(e, Some(id)))?;
                self.describe_in(&region, id).await
            }
            _ => Ok(current),
        }
    }

    async fn stop(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        let (region, raw) = self.locate_raw(id).await?;
        let current = self.to_instance(&region, &raw);
        match current.phase {
            InstancePhase::Terminated | InstancePhase::Interrupted => {
                Err(CloudError::NotFound(id.clone()))
            }
            InstancePhase::Stopped => Ok(current),
            _ => {
                self.refuse_for_group(&raw, "stop")?;
                let ec2 = self.client(&region)?;
                ec2.stop_instances()
                    .instance_ids(id.0.clone())
                    .send()
                    .await
                    .map_err(|e| api_error(e, Some(id)))?;
                self.describe_in(&region, id).await
            }
        }
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), CloudError> {
        let (region, raw) = self.locate_raw(id).await?;
        if let Some(group) = self.configured_group_of(&raw) {
            if self.to_instance(&region, &raw).phase != InstancePhase::Terminated {
                self.terminate_in_group(&region, id, group).await?;
            }
        } else {
            self.terminate_outside_groups(&region, &raw, id).await?;
        }
        self.warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        // Bounded too: a forgotten one reads as interrupted again until EC2 drops it (about an
        // hour), and terminating it again is a no-op.
        if ended.len() >= MAX_REMEMBERED {
            ended.clear();
        }
        ended.insert(id.clone());
        Ok(())
    }

    async fn describe(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        self.locate(id).await.map(|(_, instance)| instance)
    }

    async fn list_owned(&self, cluster: &str) -> Result<Vec<Instance>, CloudError> {
        let filter = Filter::builder()
            .name("tag:headroom-cluster")
            .values(cluster)
            .build();
        let mut owned = Vec::new();
        for region in self.clients.keys() {
            self.read_warnings(region).await;
            owned.extend(
                self.list(region, filter.clone())
                    .await?
                    .into_iter()
                    // Terminated instances stay visible for a while; interrupted ones are kept
                    // so that the engine sees the interruption.
                    .filter(|i| i.phase != InstancePhase::Terminated && i.tags.cluster == cluster),
            );
        }
        Ok(owned)
    }

    /// Spot offerings at the price in force now, from DescribeSpotPriceHistory (one call per
    /// region); on-demand and reserved prices come from the configured catalog.
    async fn current_prices(
        &self,
        offerings: &[Offering],
    ) -> Result<Vec<(OfferingId, Money)>, CloudError> {
        let mut by_region: BTreeMap<&str, Vec<&Offering>> = BTreeMap::new();
        for o in offerings
            .iter()
            .filter(|o| o.provider == ProviderKind::Aws && o.market == Market::Spot)
        {
            by_region.entry(o.region.as_str()).or_default().push(o);
        }
        let mut quotes = Vec::new();
        for (region, spot) in by_region {
            let mut types: Vec<&str> = spot.iter().map(|o| o.instance_type.as_str()).collect();
            types.sort_unstable();
            types.dedup();
            let prices = self.spot_prices(region, &types).await?;
            quotes.extend(spot.iter().filter_map(|o| {
                let key = (o.instance_type.clone(), o.zone.clone());
                Some((o.id.clone(), *prices.get(&key)?))
            }));
        }
        Ok(quotes)
    }

    /// The G/VT and P families' vCPU quotas from Service Quotas, with the vCPUs running in
    /// them (module `quotas`).
    async fn quota_headroom(
        &self,
        region: &str,
        offerings: &[Offering],
    ) -> Result<headroom_cloud::Quotas, CloudError> {
        self.read_quotas(region, offerings).await
    }
}

impl AwsProvider {
    /// TerminateInstances, after cancelling the instance's persistent spot request if it has one.
    async fn terminate_outside_groups(
        &self,
        region: &str,
        raw: &aws_sdk_ec2::types::Instance,
        id: &InstanceId,
    ) -> Result<(), CloudError> {
        let ec2 = self.client(region)?;
        // A persistent spot request (stoppable spot pools) would launch a replacement for the
        // instance we terminate: cancel it first.
        if let Some(request) = raw.spot_instance_request_id() {
            match ec2
                .cancel_spot_instance_requests()
                .spot_instance_request_ids(request)
                .send()
                .await
            {
                Ok(_) => {}
                Err(e) if e.code() == Some("InvalidSpotInstanceRequestID.NotFound") => {}
                Err(e) => return Err(api_error(e, Some(id))),
            }
        }
        ec2.terminate_instances()
            .instance_ids(id.0.clone())
            .send()
            .await
            .map_err(|e| api_error(e, Some(id)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READY_AFTER: Duration = Duration::from_secs(60);

    fn phase(state: &str, reason: Option<&str>, secs: u64) -> InstancePhase {
        phase_of(state, reason, Duration::from_secs(secs), READY_AFTER)
    }

    #[test]
    fn ec2_states_map_to_phases() {
        assert_eq!(phase("pending", None, 0), InstancePhase::Pending);
        assert_eq!(
            phase("running", None, 10),
            InstancePhase::Booting(LadderRung::NodeAcquisition)
        );
        assert_eq!(phase("running", None, 60), InstancePhase::Ready);
        assert_eq!(phase("stopping", None, 0), InstancePhase::Stopped);
        assert_eq!(
            phase("stopped", Some("Client.UserInitiatedShutdown"), 0),
            InstancePhase::Stopped
        );
        assert_eq!(phase("shutting-down", None, 0), InstancePhase::Terminated);
        assert_eq!(
            phase("terminated", Some("Client.UserInitiatedShutdown"), 0),
            InstancePhase::Terminated
        );
    }

    #[test]
    fn the_spot_reason_is_an_interruption_whether_terminated_or_stopped() {
        for state in ["shutting-down", "terminated", "stopping", "stopped"] {
            assert_eq!(
                phase(state, Some(SPOT_TERMINATION), 0),
                InstancePhase::Interrupted,
                "{state}"
            );
        }
    }

    #[test]
    fn an_interruption_warning_names_its_instance() {
        let warning = r#"{"version": "0", "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2", "region": "us-east-1",
            "detail": {"instance-id": "i-1234567890abcdef0", "instance-action": "terminate"}}"#;
        assert_eq!(
            warned_instance(warning),
            Some(InstanceId("i-1234567890abcdef0".to_string()))
        );
        let other = warning.replace(
            "EC2 Spot Instance Interruption Warning",
            "EC2 Instance State-change Notification",
        );
        assert_eq!(warned_instance(&other), None);
        assert_eq!(warned_instance("not json"), None);
    }

    #[test]
    fn with_no_wait_a_running_instance_is_ready_at_once() {
        assert_eq!(
            phase_of("running", None, Duration::ZERO, Duration::ZERO),
            InstancePhase::Ready
        );
    }
}
