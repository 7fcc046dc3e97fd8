//! Reading instances back: finding an instance's region, DescribeInstances by id and by filter,
//! and an EC2 instance (state, reason, tags, interruption warning) as Headroom's [`Instance`].

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_ec2::types::{Filter, InstanceStateName};
use headroom_cloud::{CloudError, Instance, InstanceId, InstancePhase, OwnershipTags};
use headroom_core::{LadderRung, OfferingId, Timestamp};

use super::errors::api_error;
use super::{
    AwsProvider, MAX_PAGES, MAX_REMEMBERED, SPOT_TERMINATION, TAG_CLIENT_TOKEN, TAG_OFFERING,
};

impl AwsProvider {
    pub(super) fn remember(&self, id: &InstanceId, region: &str) {
        let mut regions = self.regions_of.lock().unwrap_or_else(|e| e.into_inner());
        // A cache, bounded: an instance it forgot is looked for in each region again.
        if regions.len() >= MAX_REMEMBERED && !regions.contains_key(id) {
            regions.clear();
        }
        regions.insert(id.clone(), region.to_string());
    }

    /// Describes `id`, finding its region: the one it was last seen in, else each in turn.
    pub(super) async fn locate(&self, id: &InstanceId) -> Result<(String, Instance), CloudError> {
        let (region, raw) = self.locate_raw(id).await?;
        let instance = self.to_instance(&region, &raw);
        Ok((region, instance))
    }

    pub(super) async fn locate_raw(
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

    pub(super) async fn describe_in(
        &self,
        region: &str,
        id: &InstanceId,
    ) -> Result<Instance, CloudError> {
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
    pub(super) async fn list(
        &self,
        region: &str,
        filter: Filter,
    ) -> Result<Vec<Instance>, CloudError> {
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

pub(crate) fn to_timestamp(t: &aws_sdk_ec2::primitives::DateTime) -> Option<Timestamp> {
    chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())
}
