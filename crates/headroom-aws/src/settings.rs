//! The `[aws]` table of Headroom's configuration.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::AwsError;

/// What the AWS provider needs beyond the offerings. Credentials are not here: they come from the
/// standard AWS chain (environment, profile, IMDS, IRSA).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AwsSettings {
    /// One region; `regions` for several. Both may be left out when the offerings name them.
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub regions: Vec<String>,
    /// An endpoint for every EC2 call (a local moto server in tests). `AWS_ENDPOINT_URL` in the
    /// environment does the same when this is not set.
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// The image launched for pools without a launch template (`ami-…` or `resolve:ssm:…`).
    #[serde(default)]
    pub image_id: Option<String>,
    /// Pool name → launch template name (its default version). The offering still decides the
    /// instance type, zone and market.
    #[serde(default)]
    pub launch_templates: BTreeMap<String, String>,
    /// Availability zone → subnet id, for accounts without a default VPC.
    #[serde(default)]
    pub subnets: BTreeMap<String, String>,
    /// Offering id → capacity reservation id (`cr-…`) for offerings with market `reserved`: the
    /// launch targets that reservation. Reserved offerings not listed use any open reservation
    /// that matches.
    #[serde(default)]
    pub reservations: BTreeMap<String, String>,
    /// Offering ids (from `reservations`) whose reservation is a Capacity Block.
    #[serde(default)]
    pub capacity_blocks: Vec<String>,
    /// Pools whose spot nodes may be stopped into the warm pool. Their spot launches are
    /// persistent requests that stop on interruption (EC2 cannot stop one-time spot instances);
    /// terminating such a node cancels its request first.
    #[serde(default)]
    pub stoppable_spot_pools: Vec<String>,
    /// Region → URL of an SQS queue that EventBridge feeds with "EC2 Spot Instance Interruption
    /// Warning" events. A warned instance reports interrupted at once, two minutes before EC2
    /// takes it, so its replacement starts early. Without a queue, interruptions are seen when
    /// the instance's state changes.
    #[serde(default)]
    pub interruption_queues: BTreeMap<String, String>,
    /// Seconds a running instance reports `booting` before it reports `ready`. EC2 cannot see
    /// inside the node; until readiness comes from the cluster this stands in for the ladder.
    #[serde(default)]
    pub ready_after_secs: u64,
    /// Pool → EC2 Auto Scaling group name: the group launches that pool's nodes (its launch
    /// template, zones and instance type), Headroom only sets its desired capacity and claims the
    /// instances it brings in. The group must carry the tag `headroom-cluster = <cluster_id>`
    /// with PropagateAtLaunch, so its instances are ours from their first second.
    #[serde(default)]
    pub auto_scaling_groups: BTreeMap<String, String>,
    /// Pool (of `auto_scaling_groups`) → the group's own warm pool, put on the group at start.
    #[serde(default)]
    pub group_warm_pools: BTreeMap<String, GroupWarmPool>,
    /// Seconds an instance of a group may stay unclaimed (default 900): past that no launch is
    /// coming for it (its demand went away, or a crash lost the intent), so it is listed as an
    /// orphan of its pool and terminated, decrementing the group. Must outlast a launch's
    /// retries, so at least 60.
    #[serde(default)]
    pub group_unclaimed_after_secs: Option<u64>,
}

/// How long a group instance may stay unclaimed when `group_unclaimed_after_secs` is not set.
const GROUP_UNCLAIMED_AFTER: Duration = Duration::from_secs(900);

/// An Auto Scaling warm pool (PutWarmPool): pre-initialised instances the group scales out from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupWarmPool {
    /// Instances kept in the warm pool at least.
    #[serde(default)]
    pub min_size: u32,
    /// Group size plus warm pool at most; left out, the group's max size.
    #[serde(default)]
    pub max_prepared_capacity: Option<u32>,
    /// The state warm instances wait in.
    #[serde(default)]
    pub pool_state: WarmPoolState,
    /// Instances the group scales in go back to the warm pool instead of terminating. Our own
    /// terminations (TerminateInstanceInAutoScalingGroup) still terminate.
    #[serde(default)]
    pub reuse_on_scale_in: bool,
}

/// The state an Auto Scaling warm pool keeps its instances in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum WarmPoolState {
    /// Disk only: no instance charge while waiting.
    #[default]
    Stopped,
    /// Billed as running; joins the group fastest.
    Running,
    /// Memory saved to disk; needs an instance type and image that support hibernation.
    Hibernated,
}

impl WarmPoolState {
    pub fn as_str(self) -> &'static str {
        match self {
            WarmPoolState::Stopped => "Stopped",
            WarmPoolState::Running => "Running",
            WarmPoolState::Hibernated => "Hibernated",
        }
    }
}

fn config_error(key: &str, message: impl Into<String>) -> AwsError {
    AwsError::Config {
        key: format!("aws.{key}"),
        message: message.into(),
    }
}

impl AwsSettings {
    /// Parses the raw `[aws]` table; a missing table is the empty one.
    pub fn from_table(table: Option<&toml::Table>) -> Result<AwsSettings, AwsError> {
        let Some(table) = table else {
            return Ok(AwsSettings::default());
        };
        let parse = |t: &toml::Table| -> Result<AwsSettings, String> {
            toml::Value::Table(t.clone())
                .try_into()
                .map_err(|e: toml::de::Error| e.message().replace('\n', " "))
        };
        let settings = parse(table).map_err(|message| {
            // serde names an unknown key but not a key of the wrong type: find the key that
            // fails on its own.
            let key = table
                .iter()
                .find(|(k, v)| {
                    parse(&toml::Table::from_iter([((*k).clone(), (*v).clone())])).is_err()
                })
                .map(|(k, _)| k.as_str())
                .unwrap_or("");
            config_error(
                key,
                format!("{message}; see config/aws-local.example.toml for the keys"),
            )
        })?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), AwsError> {
        if self.group_unclaimed_after_secs.is_some_and(|s| s < 60) {
            return Err(config_error(
                "group_unclaimed_after_secs",
                "must be at least 60: a launch's retries must be able to claim the instance first; use e.g. 900",
            ));
        }
        for region in self.region.iter().chain(&self.regions) {
            let ok = !region.is_empty()
                && region
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !ok {
                return Err(config_error(
                    "regions",
                    format!("{region:?} is not a region name; write one like \"us-east-1\""),
                ));
            }
        }
        if let Some(url) = &self.endpoint_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(config_error(
                "endpoint_url",
                format!("{url:?} is not an http(s) URL; write one like \"http://127.0.0.1:5000\""),
            ));
        }
        if let Some(image) = &self.image_id
            && !(image.starts_with("ami-") || image.starts_with("resolve:ssm:"))
        {
            return Err(config_error(
                "image_id",
                format!("{image:?} is not an image id; write \"ami-…\" or \"resolve:ssm:/path\""),
            ));
        }
        for (pool, template) in &self.launch_templates {
            if template.trim().is_empty() {
                return Err(config_error(
                    &format!("launch_templates.{pool}"),
                    "is empty; name a launch template or remove the entry",
                ));
            }
        }
        for (offering, reservation) in &self.reservations {
            if !reservation.starts_with("cr-") {
                return Err(config_error(
                    &format!("reservations.{offering}"),
                    format!("{reservation:?} is not a capacity reservation id; write \"cr-…\""),
                ));
            }
        }
        if let Some(block) = self
            .capacity_blocks
            .iter()
            .find(|o| !self.reservations.contains_key(*o))
        {
            return Err(config_error(
                "capacity_blocks",
                format!("{block} has no entry in aws.reservations; add its \"cr-…\" id there"),
            ));
        }
        for (region, url) in &self.interruption_queues {
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return Err(config_error(
                    &format!("interruption_queues.{region}"),
                    format!(
                        "{url:?} is not a queue URL; write \"https://sqs.{region}.amazonaws.com/ACCOUNT/NAME\""
                    ),
                ));
            }
        }
        self.validate_groups()?;
        for (zone, subnet) in &self.subnets {
            if !subnet.starts_with("subnet-") {
                return Err(config_error(
                    &format!("subnets.{zone}"),
                    format!("{subnet:?} is not a subnet id; write \"subnet-…\""),
                ));
            }
        }
        Ok(())
    }

    /// Auto Scaling group mode: one group per pool, nothing else of ours launching that pool.
    fn validate_groups(&self) -> Result<(), AwsError> {
        let mut owner_of: BTreeMap<&str, &str> = BTreeMap::new();
        for (pool, group) in &self.auto_scaling_groups {
            let key = format!("auto_scaling_groups.{pool}");
            // AWS allows 1..=255 characters for a group name.
            if group.trim().is_empty() || group.len() > 255 {
                return Err(config_error(
                    &key,
                    "is not an Auto Scaling group name; name the group (1 to 255 characters) or remove the entry",
                ));
            }
            // Two pools on one group would claim each other's instances.
            if let Some(other) = owner_of.insert(group, pool) {
                return Err(config_error(
                    &key,
                    format!(
                        "group {group:?} is already pool {other}'s; give each pool its own group"
                    ),
                ));
            }
            if self.launch_templates.contains_key(pool) {
                return Err(config_error(
                    &format!("launch_templates.{pool}"),
                    format!(
                        "pool {pool} launches through Auto Scaling group {group:?}; remove the launch template or the group"
                    ),
                ));
            }
            if self.stoppable_spot_pools.contains(pool) {
                return Err(config_error(
                    "stoppable_spot_pools",
                    format!(
                        "pool {pool} launches through Auto Scaling group {group:?}, whose warm pool is aws.group_warm_pools.{pool}; remove it from stoppable_spot_pools"
                    ),
                ));
            }
        }
        for (pool, warm) in &self.group_warm_pools {
            let key = format!("group_warm_pools.{pool}");
            if !self.auto_scaling_groups.contains_key(pool) {
                return Err(config_error(
                    &key,
                    format!(
                        "pool {pool} has no Auto Scaling group; add aws.auto_scaling_groups.{pool} or remove the entry"
                    ),
                ));
            }
            if let Some(max) = warm.max_prepared_capacity
                && max < warm.min_size
            {
                return Err(config_error(
                    &format!("{key}.max_prepared_capacity"),
                    format!(
                        "{max} is below min_size {}; raise it or leave it out",
                        warm.min_size
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The Auto Scaling group that launches `pool`, if it is in group mode.
    pub fn group_of(&self, pool: &str) -> Option<&str> {
        self.auto_scaling_groups.get(pool).map(String::as_str)
    }

    /// Checks the settings against the rest of the configuration: every pool launched on AWS needs
    /// an image, a launch template or an Auto Scaling group, and those name configured pools.
    pub fn check_pools<'a>(
        &self,
        pools: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), AwsError> {
        let pools: Vec<&str> = pools.into_iter().collect();
        if let Some(unknown) = self
            .launch_templates
            .keys()
            .find(|p| !pools.contains(&p.as_str()))
        {
            return Err(config_error(
                &format!("launch_templates.{unknown}"),
                "names no configured pool; use a name from [[pools]] or remove the entry",
            ));
        }
        if let Some(unknown) = self
            .stoppable_spot_pools
            .iter()
            .find(|p| !pools.contains(&p.as_str()))
        {
            return Err(config_error(
                "stoppable_spot_pools",
                format!("{unknown} is no configured pool; use a name from [[pools]]"),
            ));
        }
        if let Some(unknown) = self
            .auto_scaling_groups
            .keys()
            .find(|p| !pools.contains(&p.as_str()))
        {
            return Err(config_error(
                &format!("auto_scaling_groups.{unknown}"),
                "names no configured pool; use a name from [[pools]] or remove the entry",
            ));
        }
        if self.image_id.is_none()
            && let Some(pool) = pools.iter().find(|p| {
                !self.launch_templates.contains_key(**p)
                    && !self.auto_scaling_groups.contains_key(**p)
            })
        {
            return Err(config_error(
                "image_id",
                format!(
                    "pool {pool} has no launch template and there is no image_id; set aws.image_id, aws.launch_templates.{pool} or aws.auto_scaling_groups.{pool}"
                ),
            ));
        }
        Ok(())
    }

    /// How long an instance of a group may stay unclaimed before it is reaped.
    pub fn group_unclaimed_after(&self) -> Duration {
        self.group_unclaimed_after_secs
            .map_or(GROUP_UNCLAIMED_AFTER, Duration::from_secs)
    }

    /// The regions to work in: those configured, else those the offerings name.
    pub fn regions_or<'a>(
        &self,
        offering_regions: impl IntoIterator<Item = &'a str>,
    ) -> Vec<String> {
        let mut regions: Vec<String> = self.region.iter().chain(&self.regions).cloned().collect();
        if regions.is_empty() {
            regions = offering_regions.into_iter().map(str::to_string).collect();
        }
        regions.sort();
        regions.dedup();
        regions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AwsSettings, AwsError> {
        let table: toml::Table = text.parse().unwrap();
        AwsSettings::from_table(Some(&table))
    }

    #[test]
    fn a_full_table_parses() {
        let s = parse(
            r#"
            region = "us-east-1"
            regions = ["us-west-2"]
            endpoint_url = "http://127.0.0.1:5000"
            image_id = "ami-12345678"
            launch_templates = { llm = "llm-nodes" }
            subnets = { "us-east-1a" = "subnet-0abc" }
            reservations = { p5-block = "cr-0abc", p5-odcr = "cr-0def" }
            capacity_blocks = ["p5-block"]
            stoppable_spot_pools = ["batch"]
            ready_after_secs = 120
            auto_scaling_groups = { chat = "headroom-chat" }
            [group_warm_pools.chat]
            min_size = 1
            max_prepared_capacity = 4
            pool_state = "Hibernated"
            reuse_on_scale_in = true
            "#,
        )
        .unwrap();
        assert_eq!(s.regions_or([]), ["us-east-1", "us-west-2"]);
        assert_eq!(s.launch_templates["llm"], "llm-nodes");
        assert_eq!(s.ready_after_secs, 120);
        assert_eq!(s.group_of("chat"), Some("headroom-chat"));
        assert_eq!(s.group_of("llm"), None);
        assert_eq!(
            s.group_warm_pools["chat"],
            GroupWarmPool {
                min_size: 1,
                max_prepared_capacity: Some(4),
                pool_state: WarmPoolState::Hibernated,
                reuse_on_scale_in: true,
            }
        );
        s.check_pools(["llm", "batch", "chat"]).unwrap();
    }

    #[test]
    fn no_table_is_the_defaults_and_regions_come_from_offerings() {
        let s = AwsSettings::from_table(None).unwrap();
        assert_eq!(s.regions_or(["eu-west-1", "eu-west-1"]), ["eu-west-1"]);
    }

    #[test]
    fn an_unknown_key_is_named_on_one_line() {
        let err = parse("regoin = \"us-east-1\"").unwrap_err().to_string();
        assert!(err.starts_with("aws.regoin: unknown field"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn bad_values_name_their_key_and_the_fix() {
        for (text, key) in [
            ("endpoint_url = \"localhost:5000\"", "aws.endpoint_url:"),
            ("image_id = \"ubuntu\"", "aws.image_id:"),
            ("region = \"US East\"", "aws.regions:"),
            ("subnets = { a = \"vpc-1\" }", "aws.subnets.a:"),
            ("reservations = { x = \"r-1\" }", "aws.reservations.x:"),
            (
                "interruption_queues = { us-east-1 = \"queue\" }",
                "aws.interruption_queues.us-east-1:",
            ),
            ("capacity_blocks = [\"x\"]", "aws.capacity_blocks:"),
            ("ready_after_secs = -1", "aws.ready_after_secs:"),
            (
                "group_unclaimed_after_secs = 5",
                "aws.group_unclaimed_after_secs:",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with(key), "{text}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn every_pool_needs_an_image_or_a_template() {
        let s = parse("launch_templates = { llm = \"t\" }").unwrap();
        s.check_pools(["llm"]).unwrap();
        let err = s.check_pools(["llm", "batch"]).unwrap_err().to_string();
        assert!(err.contains("aws.launch_templates.batch"), "{err}");
        let err = s.check_pools(["other"]).unwrap_err().to_string();
        assert!(err.starts_with("aws.launch_templates.llm:"), "{err}");
        let s = parse("image_id = \"ami-1\"\nstoppable_spot_pools = [\"gone\"]").unwrap();
        let err = s.check_pools(["llm"]).unwrap_err().to_string();
        assert!(err.starts_with("aws.stoppable_spot_pools:"), "{err}");
    }

    #[test]
    fn a_group_warm_pool_defaults_to_stopped_instances() {
        let s = parse("auto_scaling_groups = { chat = \"g\" }\n[group_warm_pools.chat]\n").unwrap();
        assert_eq!(s.group_warm_pools["chat"], GroupWarmPool::default());
        assert_eq!(GroupWarmPool::default().pool_state.as_str(), "Stopped");
    }

    #[test]
    fn group_mistakes_name_their_key_and_the_fix() {
        for (text, key, fix) in [
            (
                "auto_scaling_groups = { chat = \" \" }",
                "aws.auto_scaling_groups.chat:",
                "name the group",
            ),
            (
                "auto_scaling_groups = { a = \"g\", b = \"g\" }",
                "aws.auto_scaling_groups.b:",
                "its own group",
            ),
            (
                "auto_scaling_groups = { chat = \"g\" }\nlaunch_templates = { chat = \"t\" }",
                "aws.launch_templates.chat:",
                "remove the launch template or the group",
            ),
            (
                "auto_scaling_groups = { chat = \"g\" }\nstoppable_spot_pools = [\"chat\"]",
                "aws.stoppable_spot_pools:",
                "aws.group_warm_pools.chat",
            ),
            (
                "[group_warm_pools.chat]\nmin_size = 1",
                "aws.group_warm_pools.chat:",
                "add aws.auto_scaling_groups.chat",
            ),
            (
                "auto_scaling_groups = { chat = \"g\" }\n[group_warm_pools.chat]\nmin_size = 3\nmax_prepared_capacity = 2",
                "aws.group_warm_pools.chat.max_prepared_capacity:",
                "raise it",
            ),
            (
                "auto_scaling_groups = { chat = \"g\" }\n[group_warm_pools.chat]\npool_state = \"Frozen\"",
                "aws.group_warm_pools:",
                "unknown variant",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with(key), "{text}: {err}");
            assert!(err.contains(fix), "{text}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn a_pool_in_group_mode_needs_no_image_and_a_group_needs_a_pool() {
        let s = parse("auto_scaling_groups = { chat = \"headroom-chat\" }").unwrap();
        s.check_pools(["chat"]).unwrap();
        let err = s.check_pools(["chat", "batch"]).unwrap_err().to_string();
        assert!(err.starts_with("aws.image_id:"), "{err}");
        assert!(err.contains("aws.auto_scaling_groups.batch"), "{err}");
        let err = s.check_pools(["other"]).unwrap_err().to_string();
        assert!(
            err.starts_with("aws.auto_scaling_groups.chat: names no configured pool"),
            "{err}"
        );
    }
}
