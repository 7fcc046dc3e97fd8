//! Launching by EC2 Fleet (type `instant`, from the pool's launch template), and reading a just
//! created instance back; the trait's `launch` (RunInstances) is in `cloud_provider.rs`.

use std::time::Duration;

use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest, FleetType,
    InstanceType, ResourceType, Tag, TagSpecification, TargetCapacitySpecificationRequest,
};
use headroom_cloud::{CloudError, Instance, InstanceId, InstancePhase, LaunchSpec};
use headroom_core::{ErrorClass, Market, ProviderKind};

use super::AwsProvider;
use super::errors::api_error;
use crate::classify::{ErrorSource, classify};

/// Reads of a just-created instance before it is adopted as created (100 ms doubling: ~1.5 s).
const READ_BACK_ATTEMPTS: u32 = 5;

impl AwsProvider {
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

    /// Launches one instance with an EC2 Fleet of type `instant` from the pool's launch template.
    /// Such a fleet reports a refusal (capacity, price, quota) per instance in `Errors[]` of a
    /// successful call, not as a failed call.
    pub(super) async fn launch_fleet(
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
}

pub(crate) fn ec2_tag(key: &str, value: &str) -> Tag {
    Tag::builder().key(key).value(value).build()
}
