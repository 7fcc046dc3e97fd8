//! The AWS provider: EC2 instances behind Headroom's [`CloudProvider`] trait.
//!
//! A launch is one instance carrying the ledger intent's client token and the ownership tags:
//! an instant EC2 Fleet (CreateFleet) for pools with a launch template, RunInstances with the
//! configured image otherwise (and for reserved offerings, which target their capacity
//! reservation). The warm pool is our own stopped instances (StartInstances / StopInstances);
//! inventory is DescribeInstances filtered by the cluster tag; spot interruptions are read from
//! the instance's state reason. Error codes are classified by the pure [`classify`] function.
//! Pools in Auto Scaling group mode (`aws.auto_scaling_groups`) are launched by their group
//! instead: SetDesiredCapacity, then the new instance is claimed by tagging it (module `group`);
//! the group's own warm pool is set with PutWarmPool and read with DescribeWarmPool.
//!
//! [`CloudProvider`]: headroom_cloud::CloudProvider

mod classify;
mod group;
mod provider;
mod quotas;
mod settings;

pub use classify::{ErrorSource, classify};
pub use group::{
    GroupMember, GroupStep, GroupView, GroupWarmPoolStatus, TAG_GROUP_NAME, next_step,
};
pub use provider::{AwsProvider, TAG_CLIENT_TOKEN, TAG_OFFERING, phase_of, warned_instance};
pub use quotas::{EC2_GPU_QUOTAS, Ec2Quota, Family, family_of, quota_of};
pub use settings::{AwsSettings, GroupWarmPool, WarmPoolState};

use thiserror::Error;

/// Errors of the AWS provider's own making (configuration). Failed cloud calls are
/// [`headroom_cloud::CloudError`]s.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AwsError {
    /// One line naming the key and the fix.
    #[error("{key}: {message}")]
    Config { key: String, message: String },
}

#[cfg(test)]
mod iam {
    use std::collections::BTreeSet;
    use std::path::Path;

    /// Actions AWS authorises beyond the operation called (see the header of iam-actions.txt).
    const IMPLIED: [&str; 2] = ["ec2:CreateTags", "iam:PassRole"];

    /// Operations IAM authorises under another action's name.
    const ALIASES: [(&str, &str); 2] = [
        ("sqs:DeleteMessageBatch", "sqs:DeleteMessage"),
        (
            "servicequotas:GetAwsDefaultServiceQuota",
            "servicequotas:GetAWSDefaultServiceQuota",
        ),
    ];

    /// `ec2.some_operation(` (or `sqs.…`, `autoscaling.…`, `servicequotas.…`) in source text → `ec2:SomeOperation`, for every such
    /// call on a client bound to the name of its service.
    fn calls_in(text: &str) -> BTreeSet<String> {
        let mut actions = BTreeSet::new();
        for service in ["ec2", "sqs", "autoscaling", "servicequotas"] {
            actions.extend(service_calls_in(text, service));
        }
        actions
            .into_iter()
            .map(|a| {
                ALIASES
                    .iter()
                    .find(|(op, _)| *op == a)
                    .map(|(_, action)| action.to_string())
                    .unwrap_or(a)
            })
            .collect()
    }

    fn service_calls_in(text: &str, service: &str) -> BTreeSet<String> {
        let mut actions = BTreeSet::new();
        for (at, _) in text.match_indices(service) {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest = text[at + service.len()..].trim_start();
            let Some(rest) = rest.strip_prefix('.') else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if name.is_empty() || !rest[name.len()..].starts_with('(') {
                continue;
            }
            let pascal: String = name
                .split('_')
                .map(|w| {
                    let mut c = w.chars();
                    c.next()
                        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                        .unwrap_or_default()
                })
                .collect();
            actions.insert(format!("{service}:{pascal}"));
        }
        actions
    }

    fn sources(dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(std::fs::read_to_string(&path).unwrap());
            }
        }
    }

    #[test]
    fn the_scanner_reads_chained_calls() {
        let text = "let ec2 = c;\nec2\n    .run_instances()\n; aws_sdk_ec2::x(); ec2.describe_spot_price_history().send(); sqs.delete_message_batch(); \"aws:autoscaling:groupName\"; autoscaling\n.set_desired_capacity()";
        let found: Vec<String> = calls_in(text).into_iter().collect();
        assert_eq!(
            found,
            [
                "autoscaling:SetDesiredCapacity",
                "ec2:DescribeSpotPriceHistory",
                "ec2:RunInstances",
                "sqs:DeleteMessage"
            ]
        );
    }

    #[test]
    fn iam_actions_match_the_sdk_calls() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut texts = Vec::new();
        sources(&root.join("src"), &mut texts);
        let mut wanted: BTreeSet<String> = texts.iter().flat_map(|t| calls_in(t)).collect();
        // This test's own examples are not calls.
        wanted.remove("ec2:SomeOperation");
        wanted.extend(IMPLIED.iter().map(|s| s.to_string()));

        let file = std::fs::read_to_string(root.join("iam-actions.txt")).unwrap();
        let listed: Vec<&str> = file
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let mut sorted = listed.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(
            listed, sorted,
            "iam-actions.txt must be sorted, without repeats"
        );
        let listed: BTreeSet<String> = listed.into_iter().map(str::to_string).collect();
        assert_eq!(
            listed, wanted,
            "iam-actions.txt must list exactly the actions the source calls (plus the implied ones)"
        );
    }
}
