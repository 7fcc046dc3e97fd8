//! The [`CloudProvider`] trait for [`AwsProvider`] (one impl block, so one file): launch by
//! RunInstances, start, stop, terminate, describe, inventory, prices and quotas.

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationSpecification, CapacityReservationTarget,
    Filter, InstanceInterruptionBehavior, InstanceMarketOptionsRequest, InstanceType,
    LaunchTemplateSpecification, MarketType, Placement, ResourceType, SpotInstanceType,
    SpotMarketOptions, Tag, TagSpecification,
};
use headroom_cloud::{CloudError, CloudProvider, Instance, InstanceId, InstancePhase, LaunchSpec};
use headroom_core::{ErrorClass, Market, Money, Offering, OfferingId, ProviderKind};

use super::errors::api_error;
use super::launch::ec2_tag;
use super::{AwsProvider, MAX_REMEMBERED, TAG_CLIENT_TOKEN, TAG_OFFERING};

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
