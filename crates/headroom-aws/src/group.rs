//! Auto Scaling group mode: pools whose nodes an EC2 Auto Scaling group launches
//! (`aws.auto_scaling_groups`).
//!
//! The group owns how a node is made (its launch template, subnets and zones, instance type) and
//! may keep a warm pool of its own (PutWarmPool, `aws.group_warm_pools`); Headroom owns how many
//! there are and which node is which. A launch is:
//!
//! 1. the instance already tagged with the launch's client token, if any (a repeat);
//! 2. else an instance of the group that nobody has claimed yet (no `headroom-client-token` tag):
//!    one that an earlier attempt asked for before a crash or a timeout, or one the group brought
//!    in by itself (a health replacement, its min size). Claiming is CreateTags with the ownership
//!    tags, the token and the offering, then reading the tags back;
//! 3. else, only when no scale-out is still in flight (desired capacity above the instances the
//!    group has), SetDesiredCapacity(desired + 1, HonorCooldown = false), then a few short polls
//!    for the new instance, which is then claimed as in 2.
//!
//! A group that has not brought the instance in within the polls answers `Transient`: the engine
//! keeps the intent and repeats the launch next tick with the same token, which then claims
//! (step 2) or waits (step 3 sees the scale-out in flight) instead of raising the capacity again.
//! A crash between any two calls therefore leaves at most one unclaimed instance, which the next
//! launch of the pool claims; nothing is launched twice for one token. Unclaimed instances are
//! the group's, not Headroom's: inventory leaves them out, so reconciliation never takes them for
//! orphans — until `aws.group_unclaimed_after_secs` (15 minutes) has passed with no launch
//! claiming one: then it is listed under its pool as an orphan, and reconciliation terminates it
//! with the group's capacity decremented. Launches and terminations of group pools are serialised in the process (one process
//! owns a pool, and each pool has its own group), because SetDesiredCapacity is absolute.
//!
//! The group must carry `headroom-cluster = <cluster id>` with PropagateAtLaunch: its instances
//! are then ours from their first second, the IAM policy scopes the autoscaling actions to groups
//! with that tag, and claiming does not rewrite the cluster tag (the policy forbids that).
//!
//! Offerings: the group decides zone and subnet, so an offering's zone is nominal for a group pool
//! (the instance reports the zone it is in through EC2). Its instance type must be the one the
//! group launches: an unclaimed instance of another type is not claimed and the launch is refused
//! as an invalid request (the pool halts until the configuration is fixed) rather than raising the
//! capacity again. Only on-demand offerings fit a group (warm pools are on-demand; a group's spot
//! mix is its own business). A group at its max size refuses with `Quota` (`GroupAtMaxSize`), so
//! the planner falls back to another offering.
//!
//! A launch's user data (the node bootstrap `[kube] bootstrap` renders) is not used: the group's
//! launch template carries the bootstrap, and the cluster matches the node by provider ID.
//!
//! Terminate is TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity, so the
//! group does not replace the node; an instance already terminating or gone succeeds, and one no
//! longer in the group (detached) is terminated through EC2. Stop and start are refused for group
//! instances: a stopped InService instance fails its health check and the group replaces it, so
//! Headroom's own warm pool cannot hold them; the group's warm pool is the warm tier of such a
//! pool (keep the pool's `warm_pool_size` at 0).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_autoscaling::types::{AutoScalingGroup, InstanceReusePolicy};
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::Tag;
use headroom_cloud::{CloudError, Instance, InstanceId, LaunchSpec};
use headroom_core::{ErrorClass, Market, ProviderKind};

use crate::provider::{AwsProvider, TAG_CLIENT_TOKEN, TAG_OFFERING, api_error, ec2_tag};

/// The tag EC2 Auto Scaling puts on every instance of a group.
pub const TAG_GROUP_NAME: &str = "aws:autoscaling:groupName";
/// Reads of the group after a scale-out before the launch is left to the next tick. The engine's
/// provider timeout bounds the whole call anyway; this keeps one launch to a few seconds.
const CLAIM_POLLS: usize = 6;
const CLAIM_POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Instance ids per DescribeInstances call when reading the members' tags.
const IDS_PER_CALL: usize = 200;

/// One instance of a group, as DescribeAutoScalingGroups and its EC2 tags show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    pub id: String,
    /// The group's lifecycle state (`Pending`, `InService`, `Terminating`, …).
    pub lifecycle: String,
    pub instance_type: String,
    /// The client token it was claimed with; `None` while it is the group's alone.
    pub claimed_by: Option<String>,
}

/// What a launch needs to know of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub desired: i32,
    pub max: i32,
    pub members: Vec<GroupMember>,
}

/// The next thing a launch in a group does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupStep {
    /// Tag this unclaimed instance as the launch's.
    Claim(String),
    /// A scale-out is in flight: wait for its instance instead of asking for another.
    Wait,
    /// Raise the desired capacity to this.
    ScaleOut { desired: i32 },
    /// The group is at its max size.
    Full,
    /// The group holds an unclaimed instance of another type than the offering's.
    Mismatch { id: String, instance_type: String },
}

/// Lifecycle states that count toward the group's desired capacity: the instances it has or is
/// bringing in. Terminating, detached, standby and warm-pool states do not.
fn counts_toward_capacity(lifecycle: &str) -> bool {
    matches!(
        lifecycle,
        "Pending" | "Pending:Wait" | "Pending:Proceed" | "InService"
    )
}

/// Decides the next step of a launch of `instance_type` in a group (pure).
pub fn next_step(view: &GroupView, instance_type: &str) -> GroupStep {
    let live: Vec<&GroupMember> = view
        .members
        .iter()
        .filter(|m| counts_toward_capacity(&m.lifecycle))
        .collect();
    let mut unclaimed: Vec<&GroupMember> = live
        .iter()
        .copied()
        .filter(|m| m.claimed_by.is_none())
        .collect();
    // In service first, then by id: the choice is the same on every repeat.
    unclaimed.sort_by_key(|m| (m.lifecycle != "InService", m.id.clone()));
    if let Some(m) = unclaimed.iter().find(|m| m.instance_type == instance_type) {
        return GroupStep::Claim(m.id.clone());
    }
    if let Some(m) = unclaimed.first() {
        return GroupStep::Mismatch {
            id: m.id.clone(),
            instance_type: m.instance_type.clone(),
        };
    }
    if view.desired > live.len() as i32 {
        return GroupStep::Wait;
    }
    if view.desired >= view.max {
        return GroupStep::Full;
    }
    GroupStep::ScaleOut {
        desired: view.desired + 1,
    }
}

/// A group's warm pool as DescribeWarmPool reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupWarmPoolStatus {
    pub group: String,
    pub min_size: i32,
    pub max_prepared_capacity: Option<i32>,
    /// `Stopped`, `Running` or `Hibernated`.
    pub pool_state: String,
    /// Instances waiting in the warm pool now.
    pub instances: usize,
}

fn refused(class: ErrorClass, code: &str, message: String) -> CloudError {
    CloudError::Refused {
        provider: ProviderKind::Aws,
        class,
        code: code.to_string(),
        message,
    }
}

impl AwsProvider {
    fn autoscaling(&self, region: &str) -> Result<&aws_sdk_autoscaling::Client, CloudError> {
        self.autoscaling_clients.get(region).ok_or_else(|| {
            refused(
                ErrorClass::InvalidRequest,
                "RegionNotConfigured",
                format!("region {region} is not in aws.regions; add it"),
            )
        })
    }

    /// The group named `group` in `region`, if it exists there.
    async fn find_group(
        &self,
        region: &str,
        group: &str,
    ) -> Result<Option<AutoScalingGroup>, CloudError> {
        let autoscaling = self.autoscaling(region)?;
        let out = autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(group)
            .send()
            .await
            .map_err(|e| api_error(e, None))?;
        Ok(out
            .auto_scaling_groups()
            .iter()
            .find(|g| g.auto_scaling_group_name() == Some(group))
            .cloned())
    }

    async fn group(&self, region: &str, group: &str) -> Result<AutoScalingGroup, CloudError> {
        self.find_group(region, group).await?.ok_or_else(|| {
            refused(
                ErrorClass::InvalidRequest,
                "GroupNotFound",
                format!("Auto Scaling group {group} does not exist in {region}; create it or fix aws.auto_scaling_groups"),
            )
        })
    }

    /// The group's members with their claims, after checking the group propagates our cluster
    /// tag (without it, its instances would not be ours to tag or to list).
    async fn group_view(
        &self,
        region: &str,
        name: &str,
        cluster: &str,
    ) -> Result<GroupView, CloudError> {
        let group = self.group(region, name).await?;
        let tagged = group.tags().iter().any(|t| {
            t.key() == Some("headroom-cluster")
                && t.value() == Some(cluster)
                && t.propagate_at_launch() == Some(true)
        });
        if !tagged {
            return Err(refused(
                ErrorClass::InvalidRequest,
                "GroupNotTagged",
                format!(
                    "Auto Scaling group {name} lacks the tag headroom-cluster = {cluster} with PropagateAtLaunch; add it to the group"
                ),
            ));
        }
        let ids: Vec<String> = group
            .instances()
            .iter()
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect();
        let claims = self.claims_of(region, &ids).await?;
        let members = group
            .instances()
            .iter()
            .filter_map(|i| {
                let id = i.instance_id()?.to_string();
                Some(GroupMember {
                    lifecycle: i
                        .lifecycle_state()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default(),
                    instance_type: i.instance_type().unwrap_or_default().to_string(),
                    claimed_by: claims.get(&id).cloned(),
                    id,
                })
            })
            .collect();
        Ok(GroupView {
            desired: group.desired_capacity().unwrap_or(0),
            max: group.max_size().unwrap_or(0),
            members,
        })
    }

    /// Instance id → the client token it is tagged with, for those of `ids` that have one.
    async fn claims_of(
        &self,
        region: &str,
        ids: &[String],
    ) -> Result<HashMap<String, String>, CloudError> {
        let ec2 = self.client(region)?;
        let mut claims = HashMap::new();
        for chunk in ids.chunks(IDS_PER_CALL) {
            let out = ec2
                .describe_instances()
                .set_instance_ids(Some(chunk.to_vec()))
                .send()
                .await
                .map_err(|e| api_error(e, None))?;
            for i in out.reservations().iter().flat_map(|r| r.instances()) {
                if let (Some(id), Some(token)) = (i.instance_id(), token_tag(i)) {
                    claims.insert(id.to_string(), token.to_string());
                }
            }
        }
        Ok(claims)
    }

    /// Tags `id` as the launch's and reads the tags back: `None` when another claim won.
    async fn claim(
        &self,
        region: &str,
        id: &str,
        spec: &LaunchSpec,
    ) -> Result<Option<Instance>, CloudError> {
        let ec2 = self.client(region)?;
        // The cluster tag came with the instance (PropagateAtLaunch) and is not rewritten.
        let mut tags: Vec<Tag> = spec
            .tags
            .to_map()
            .iter()
            .filter(|(k, _)| k.as_str() != "headroom-cluster")
            .map(|(k, v)| ec2_tag(k, v))
            .collect();
        tags.push(ec2_tag(TAG_CLIENT_TOKEN, &spec.client_token));
        tags.push(ec2_tag(TAG_OFFERING, spec.offering.id.as_str()));
        let instance_id = InstanceId(id.to_string());
        ec2.create_tags()
            .resources(id)
            .set_tags(Some(tags))
            .send()
            .await
            .map_err(|e| api_error(e, Some(&instance_id)))?;
        let raw = self.describe_raw(region, &instance_id).await?;
        if token_tag(&raw) != Some(spec.client_token.as_str()) {
            return Ok(None);
        }
        Ok(Some(self.to_instance(region, &raw)))
    }

    /// [`CloudProvider::launch`](headroom_cloud::CloudProvider::launch) for a pool in group mode,
    /// after the lookup by token found nothing. See the module documentation.
    pub(crate) async fn launch_in_group(
        &self,
        spec: &LaunchSpec,
        group: &str,
    ) -> Result<Instance, CloudError> {
        if spec.offering.market != Market::OnDemand {
            return Err(refused(
                ErrorClass::InvalidRequest,
                "MarketNotInGroup",
                format!(
                    "offering {} is {} but pool {} launches through Auto Scaling group {group}, which takes on-demand offerings only; give the pool an on-demand offering",
                    spec.offering.id, spec.offering.market, spec.tags.pool
                ),
            ));
        }
        let region = spec.offering.region.as_str();
        let _serial = self.group_changes.lock().await;
        let mut scaled_out = false;
        for _ in 0..CLAIM_POLLS {
            let view = self.group_view(region, group, &spec.tags.cluster).await?;
            match next_step(&view, &spec.offering.instance_type) {
                GroupStep::Claim(id) => {
                    if let Some(instance) = self.claim(region, &id, spec).await? {
                        tracing::info!(instance = %instance.id, group, token = %spec.client_token, offering = %spec.offering.id, "claimed from auto scaling group");
                        return Ok(instance);
                    }
                    // Another claim won the instance: look again.
                    continue;
                }
                GroupStep::Mismatch { id, instance_type } => {
                    return Err(refused(
                        ErrorClass::InvalidRequest,
                        "OfferingNotInGroup",
                        format!(
                            "Auto Scaling group {group} launches {instance_type} ({id}) but offering {} is {}; make the pool's offering the group's instance type",
                            spec.offering.id, spec.offering.instance_type
                        ),
                    ));
                }
                GroupStep::Full => {
                    return Err(refused(
                        ErrorClass::Quota,
                        "GroupAtMaxSize",
                        format!(
                            "Auto Scaling group {group} is at its max size {}; raise it to launch more",
                            view.max
                        ),
                    ));
                }
                // One scale-out per call: if its instance went elsewhere, the next tick decides.
                GroupStep::ScaleOut { .. } if scaled_out => break,
                GroupStep::ScaleOut { desired } => {
                    let autoscaling = self.autoscaling(region)?;
                    autoscaling
                        .set_desired_capacity()
                        .auto_scaling_group_name(group)
                        .desired_capacity(desired)
                        .honor_cooldown(false)
                        .send()
                        .await
                        .map_err(|e| api_error(e, None))?;
                    tracing::info!(group, desired, token = %spec.client_token, "raised auto scaling group capacity");
                    scaled_out = true;
                    continue;
                }
                GroupStep::Wait => {}
            }
            tokio::time::sleep(CLAIM_POLL_INTERVAL).await;
        }
        Err(refused(
            ErrorClass::Transient,
            "GroupInstancePending",
            format!(
                "Auto Scaling group {group} has not brought the instance in yet; the next attempt claims it"
            ),
        ))
    }

    /// The configured group `raw` is a member of, if any.
    pub(crate) fn configured_group_of<'a>(
        &'a self,
        raw: &aws_sdk_ec2::types::Instance,
    ) -> Option<&'a str> {
        let group = raw
            .tags()
            .iter()
            .find(|t| t.key() == Some(TAG_GROUP_NAME))?
            .value()?;
        self.settings
            .auto_scaling_groups
            .values()
            .find(|g| g.as_str() == group)
            .map(String::as_str)
    }

    /// An instance of a configured group that no launch has claimed: the group's, not ours.
    pub(crate) fn is_unclaimed_group_member(&self, raw: &aws_sdk_ec2::types::Instance) -> bool {
        token_tag(raw).is_none() && self.configured_group_of(raw).is_some()
    }

    /// The pool of an unclaimed group instance that has waited longer than
    /// `aws.group_unclaimed_after_secs`: no launch is coming for it, so the inventory lists it
    /// under that pool, and reconciliation terminates it as the orphan it now is (decrementing
    /// the group, so the group does not replace it).
    pub(crate) fn abandoned_group_member(
        &self,
        raw: &aws_sdk_ec2::types::Instance,
    ) -> Option<String> {
        if !self.is_unclaimed_group_member(raw) {
            return None;
        }
        let group = self.configured_group_of(raw)?;
        let launched = raw.launch_time().and_then(crate::provider::to_timestamp)?;
        let waited = (self.clock.now() - launched).to_std().unwrap_or_default();
        if waited < self.settings.group_unclaimed_after() {
            return None;
        }
        self.settings
            .auto_scaling_groups
            .iter()
            .find(|(_, g)| g.as_str() == group)
            .map(|(pool, _)| pool.clone())
    }

    /// Refuses Headroom's own stop/start for a group instance (see the module documentation).
    pub(crate) fn refuse_for_group(
        &self,
        raw: &aws_sdk_ec2::types::Instance,
        action: &str,
    ) -> Result<(), CloudError> {
        match self.configured_group_of(raw) {
            None => Ok(()),
            Some(group) => Err(refused(
                ErrorClass::InvalidRequest,
                "GroupManagedInstance",
                format!(
                    "cannot {action} {}: Auto Scaling group {group} would replace it; keep the pool's warm_pool_size at 0 and use aws.group_warm_pools",
                    raw.instance_id().unwrap_or_default()
                ),
            )),
        }
    }

    /// Terminates a group instance without the group replacing it. Idempotent: an instance the
    /// group is already terminating succeeds without decrementing the capacity twice.
    pub(crate) async fn terminate_in_group(
        &self,
        region: &str,
        id: &InstanceId,
        group: &str,
    ) -> Result<(), CloudError> {
        let _serial = self.group_changes.lock().await;
        let member = self
            .group(region, group)
            .await?
            .instances()
            .iter()
            .find(|i| i.instance_id() == Some(id.0.as_str()))
            .map(|i| {
                i.lifecycle_state()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default()
            });
        match member {
            Some(state) if state.starts_with("Terminat") => Ok(()),
            Some(_) => {
                let autoscaling = self.autoscaling(region)?;
                autoscaling
                    .terminate_instance_in_auto_scaling_group()
                    .instance_id(&id.0)
                    .should_decrement_desired_capacity(true)
                    .send()
                    .await
                    .map_err(|e| api_error(e, Some(id)))?;
                tracing::info!(instance = %id, group, "terminated in auto scaling group");
                Ok(())
            }
            // No longer in the group (detached by hand): still ours by its tags.
            None => {
                let ec2 = self.client(region)?;
                match ec2.terminate_instances().instance_ids(&id.0).send().await {
                    Ok(_) => Ok(()),
                    Err(e) if e.code() == Some("InvalidInstanceID.NotFound") => Ok(()),
                    Err(e) => Err(api_error(e, Some(id))),
                }
            }
        }
    }

    /// The region whose client finds `group`.
    async fn region_of_group(&self, group: &str) -> Result<String, CloudError> {
        for region in self.autoscaling_clients.keys() {
            if self.find_group(region, group).await?.is_some() {
                return Ok(region.clone());
            }
        }
        Err(refused(
            ErrorClass::InvalidRequest,
            "GroupNotFound",
            format!(
                "Auto Scaling group {group} exists in none of aws.regions; create it or fix aws.auto_scaling_groups"
            ),
        ))
    }

    /// Puts each configured warm pool (`aws.group_warm_pools`) on its group. PutWarmPool replaces
    /// the configuration, so calling it at every start is idempotent; the binary does.
    pub async fn sync_group_warm_pools(&self) -> Result<(), CloudError> {
        for (pool, warm) in &self.settings.group_warm_pools {
            let Some(group) = self.settings.group_of(pool) else {
                continue;
            };
            let region = self.region_of_group(group).await?;
            let autoscaling = self.autoscaling(&region)?;
            autoscaling
                .put_warm_pool()
                .auto_scaling_group_name(group)
                .min_size(i32::try_from(warm.min_size).unwrap_or(i32::MAX))
                .set_max_group_prepared_capacity(
                    warm.max_prepared_capacity
                        .map(|m| i32::try_from(m).unwrap_or(i32::MAX)),
                )
                .pool_state(aws_sdk_autoscaling::types::WarmPoolState::from(
                    warm.pool_state.as_str(),
                ))
                .instance_reuse_policy(
                    InstanceReusePolicy::builder()
                        .reuse_on_scale_in(warm.reuse_on_scale_in)
                        .build(),
                )
                .send()
                .await
                .map_err(|e| api_error(e, None))?;
            tracing::info!(
                pool,
                group,
                min_size = warm.min_size,
                state = warm.pool_state.as_str(),
                "auto scaling warm pool configured"
            );
        }
        Ok(())
    }

    /// The warm pool of `pool`'s group as AWS reports it; `None` when the pool is not in group
    /// mode or its group has no warm pool.
    pub async fn group_warm_pool(
        &self,
        pool: &str,
    ) -> Result<Option<GroupWarmPoolStatus>, CloudError> {
        let Some(group) = self.settings.group_of(pool) else {
            return Ok(None);
        };
        let region = self.region_of_group(group).await?;
        let autoscaling = self.autoscaling(&region)?;
        let out = autoscaling
            .describe_warm_pool()
            .auto_scaling_group_name(group)
            .send()
            .await
            .map_err(|e| api_error(e, None))?;
        Ok(out
            .warm_pool_configuration()
            .map(|config| GroupWarmPoolStatus {
                group: group.to_string(),
                min_size: config.min_size().unwrap_or(0),
                max_prepared_capacity: config.max_group_prepared_capacity(),
                pool_state: config
                    .pool_state()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                // One page (up to 50 instances) is enough to show that the pool is stocked.
                instances: out.instances().len(),
            }))
    }

    /// Pool → group, for callers that show group mode.
    pub fn auto_scaling_groups(&self) -> &BTreeMap<String, String> {
        &self.settings.auto_scaling_groups
    }
}

fn token_tag(raw: &aws_sdk_ec2::types::Instance) -> Option<&str> {
    raw.tags()
        .iter()
        .find(|t| t.key() == Some(TAG_CLIENT_TOKEN))?
        .value()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, lifecycle: &str, instance_type: &str, claimed: bool) -> GroupMember {
        GroupMember {
            id: id.to_string(),
            lifecycle: lifecycle.to_string(),
            instance_type: instance_type.to_string(),
            claimed_by: claimed.then(|| format!("hr-{id}")),
        }
    }

    fn view(desired: i32, max: i32, members: Vec<GroupMember>) -> GroupView {
        GroupView {
            desired,
            max,
            members,
        }
    }

    #[test]
    fn an_empty_group_scales_out_by_one() {
        assert_eq!(
            next_step(&view(0, 4, vec![]), "g6.xlarge"),
            GroupStep::ScaleOut { desired: 1 }
        );
        let busy = view(
            2,
            4,
            vec![
                member("i-1", "InService", "g6.xlarge", true),
                member("i-2", "InService", "g6.xlarge", true),
            ],
        );
        assert_eq!(
            next_step(&busy, "g6.xlarge"),
            GroupStep::ScaleOut { desired: 3 }
        );
    }

    #[test]
    fn an_unclaimed_instance_is_claimed_before_asking_for_another() {
        let v = view(
            2,
            4,
            vec![
                member("i-1", "InService", "g6.xlarge", true),
                member("i-3", "Pending", "g6.xlarge", false),
                member("i-2", "InService", "g6.xlarge", false),
            ],
        );
        assert_eq!(
            next_step(&v, "g6.xlarge"),
            GroupStep::Claim("i-2".to_string()),
            "in service first"
        );
    }

    #[test]
    fn a_scale_out_in_flight_is_waited_for_not_repeated() {
        // Desired 2, one instance so far: the second is on its way.
        let v = view(2, 4, vec![member("i-1", "InService", "g6.xlarge", true)]);
        assert_eq!(next_step(&v, "g6.xlarge"), GroupStep::Wait);
        // Terminating instances do not count as the group's capacity.
        let v = view(
            1,
            4,
            vec![
                member("i-1", "Terminating", "g6.xlarge", true),
                member("i-2", "InService", "g6.xlarge", true),
            ],
        );
        assert_eq!(
            next_step(&v, "g6.xlarge"),
            GroupStep::ScaleOut { desired: 2 }
        );
    }

    #[test]
    fn a_full_group_and_a_foreign_instance_type_refuse() {
        let full = view(
            2,
            2,
            vec![
                member("i-1", "InService", "g6.xlarge", true),
                member("i-2", "InService", "g6.xlarge", true),
            ],
        );
        assert_eq!(next_step(&full, "g6.xlarge"), GroupStep::Full);
        let foreign = view(1, 4, vec![member("i-9", "InService", "p5.48xlarge", false)]);
        assert_eq!(
            next_step(&foreign, "g6.xlarge"),
            GroupStep::Mismatch {
                id: "i-9".to_string(),
                instance_type: "p5.48xlarge".to_string()
            }
        );
    }
}
