//! The `[gcp]` table of the configuration file.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::GcpError;

/// How a warm node is parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum WarmMode {
    /// `instances.stop`: the disk stays; a start skips node acquisition and image pull.
    #[default]
    Stop,
    /// `instances.suspend`: memory is kept too, so a resume also skips weight load (and, if the
    /// server keeps its compiled graphs in memory, compile).
    Suspend,
}

/// What GCE does to a spot VM it preempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TerminationAction {
    /// The VM stays, TERMINATED: Headroom sees the preemption and deletes it.
    #[default]
    Stop,
    /// GCE deletes the VM: cheaper (no disk left behind), but Headroom only sees it vanish.
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Credentials {
    /// Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud, metadata server).
    #[default]
    Adc,
    /// No credentials: only for a local test server (needs `endpoint`).
    Anonymous,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    project: Option<String>,
    #[serde(default)]
    zones: Vec<String>,
    endpoint: Option<String>,
    #[serde(default)]
    credentials: Credentials,
    instance_template: Option<String>,
    #[serde(default)]
    instance_templates: BTreeMap<String, String>,
    boot_image: Option<String>,
    boot_disk_gb: Option<u32>,
    network: Option<String>,
    #[serde(default)]
    spot_termination_action: TerminationAction,
    #[serde(default)]
    warm_mode: WarmMode,
    #[serde(default)]
    reservations: BTreeMap<String, String>,
    operation_timeout: Option<String>,
    ready_after: Option<String>,
}

/// The parsed `[gcp]` table. See `config/gcp-local.example.toml` for every key.
#[derive(Debug, Clone, PartialEq)]
pub struct GcpSettings {
    pub project: String,
    /// Zones listed for inventory besides the offerings' own (where old offerings lived).
    pub zones: Vec<String>,
    /// Overrides `https://compute.googleapis.com` (a local test server).
    pub endpoint: Option<String>,
    pub credentials: Credentials,
    /// Instance template for pools without their own (`projects/P/global/instanceTemplates/T`
    /// or `global/instanceTemplates/T`).
    pub instance_template: Option<String>,
    /// Pool name → instance template.
    pub instance_templates: BTreeMap<String, String>,
    /// Boot image for pools without a template, e.g. `projects/debian-cloud/global/images/family/debian-12`.
    pub boot_image: Option<String>,
    pub boot_disk_gb: u32,
    /// Network for instances made without a template.
    pub network: String,
    pub spot_termination_action: TerminationAction,
    pub warm_mode: WarmMode,
    /// Offering id → reservation name, for offerings of market `reserved`; those not listed
    /// consume any matching reservation.
    pub reservations: BTreeMap<String, String>,
    /// How long a call waits for its zone operation to finish before reporting a transient error.
    pub operation_timeout: Duration,
    /// How long after its last start a RUNNING instance is reported booting rather than ready
    /// (GCE cannot see inside the node; `0s` reports RUNNING as ready).
    pub ready_after: Duration,
}

fn duration(key: &str, value: Option<String>, default: Duration) -> Result<Duration, GcpError> {
    match value {
        None => Ok(default),
        Some(text) => humantime::parse_duration(&text).map_err(|e| {
            GcpError::Config(format!(
                "gcp.{key}: {text:?} is not a duration ({e}); write e.g. \"30s\" or \"2m\""
            ))
        }),
    }
}

impl GcpSettings {
    /// Parses the raw `[gcp]` table. Every error is one line naming the key and the fix.
    pub fn parse(table: Option<&toml::Table>) -> Result<GcpSettings, GcpError> {
        let Some(table) = table else {
            return Err(GcpError::Config(
                "gcp: offerings name provider \"gcp\" but there is no [gcp] table; add one with at least project = \"my-project\"".into(),
            ));
        };
        let raw = Raw::deserialize(toml::Value::Table(table.clone()))
            .map_err(|e| GcpError::Config(format!("gcp: {}", e.message().replace('\n', " "))))?;
        let project = raw
            .project
            .filter(|p| !p.trim().is_empty())
            .ok_or_else(|| {
                GcpError::Config("gcp.project: missing; add project = \"my-project\"".into())
            })?;
        if raw.credentials == Credentials::Anonymous && raw.endpoint.is_none() {
            return Err(GcpError::Config(
                "gcp.credentials: \"anonymous\" is only for a local test server; set gcp.endpoint too, or remove credentials to use Application Default Credentials".into(),
            ));
        }
        if let Some(endpoint) = &raw.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(GcpError::Config(format!(
                "gcp.endpoint: {endpoint:?} is not a URL; write e.g. \"http://127.0.0.1:8089\""
            )));
        }
        if raw.instance_template.is_none()
            && raw.instance_templates.is_empty()
            && raw.boot_image.is_none()
        {
            return Err(GcpError::Config(
                "gcp: no way to build a VM; set instance_template (or [gcp.instance_templates] per pool) or boot_image".into(),
            ));
        }
        for zone in &raw.zones {
            if zone.is_empty()
                || !zone
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                return Err(GcpError::Config(format!(
                    "gcp.zones: {zone:?} is not a zone name; write e.g. \"us-central1-a\""
                )));
            }
        }
        let operation_timeout = duration(
            "operation_timeout",
            raw.operation_timeout,
            Duration::from_secs(45),
        )?;
        if operation_timeout.is_zero() || operation_timeout > Duration::from_secs(600) {
            return Err(GcpError::Config(
                "gcp.operation_timeout: must be between 1s and 10m (and below engine.provider_timeout)".into(),
            ));
        }
        Ok(GcpSettings {
            project,
            zones: raw.zones,
            endpoint: raw.endpoint,
            credentials: raw.credentials,
            instance_template: raw.instance_template,
            instance_templates: raw.instance_templates,
            boot_image: raw.boot_image,
            boot_disk_gb: raw.boot_disk_gb.unwrap_or(200),
            network: raw
                .network
                .unwrap_or_else(|| "global/networks/default".to_string()),
            spot_termination_action: raw.spot_termination_action,
            warm_mode: raw.warm_mode,
            reservations: raw.reservations,
            operation_timeout,
            ready_after: duration("ready_after", raw.ready_after, Duration::ZERO)?,
        })
    }

    /// Checks that every pool has a way to build its VMs; one line per pool without one.
    pub fn check_pools<'a>(
        &self,
        pools: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), GcpError> {
        if self.instance_template.is_some() || self.boot_image.is_some() {
            return Ok(());
        }
        let missing: Vec<&str> = pools
            .into_iter()
            .filter(|p| !self.instance_templates.contains_key(*p))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(GcpError::Config(format!(
            "gcp.instance_templates: no template for pool(s) {}; add one per pool, or set gcp.instance_template as the default",
            missing.join(", ")
        )))
    }

    /// The template a pool's VMs are made from, if any.
    pub fn template_for(&self, pool: &str) -> Option<&str> {
        self.instance_templates
            .get(pool)
            .or(self.instance_template.as_ref())
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<GcpSettings, GcpError> {
        let table: toml::Table = toml::from_str(text).unwrap();
        GcpSettings::parse(Some(&table))
    }

    #[test]
    fn a_full_table_parses() {
        let s = parse(
            r#"
            project = "p"
            zones = ["us-central1-a"]
            endpoint = "http://127.0.0.1:8089"
            credentials = "anonymous"
            instance_template = "global/instanceTemplates/gpu"
            spot_termination_action = "delete"
            warm_mode = "suspend"
            operation_timeout = "20s"
            ready_after = "3m"
            [instance_templates]
            llm = "global/instanceTemplates/llm"
            [reservations]
            gcp-a3-reserved = "my-reservation"
            "#,
        )
        .unwrap();
        assert_eq!(s.project, "p");
        assert_eq!(s.warm_mode, WarmMode::Suspend);
        assert_eq!(s.spot_termination_action, TerminationAction::Delete);
        assert_eq!(s.operation_timeout, Duration::from_secs(20));
        assert_eq!(s.ready_after, Duration::from_secs(180));
        assert_eq!(s.template_for("llm"), Some("global/instanceTemplates/llm"));
        assert_eq!(
            s.template_for("other"),
            Some("global/instanceTemplates/gpu")
        );
    }

    #[test]
    fn mistakes_are_one_line_naming_the_key() {
        let cases = [
            ("project = \"p\"\nboot_image = \"i\"\nzonez = []", "zonez"),
            ("boot_image = \"i\"", "gcp.project"),
            (
                "project = \"p\"\nboot_image = \"i\"\ncredentials = \"anonymous\"",
                "gcp.credentials",
            ),
            (
                "project = \"p\"\nboot_image = \"i\"\nwarm_mode = \"hibernate\"",
                "hibernate",
            ),
            ("project = \"p\"", "boot_image"),
            (
                "project = \"p\"\nboot_image = \"i\"\noperation_timeout = \"soon\"",
                "gcp.operation_timeout",
            ),
            (
                "project = \"p\"\nboot_image = \"i\"\nendpoint = \"localhost\"",
                "gcp.endpoint",
            ),
        ];
        for (text, key) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(key), "{text:?} gave {err:?}");
            assert!(!err.contains('\n'), "{err:?} is not one line");
        }
        assert!(
            GcpSettings::parse(None)
                .unwrap_err()
                .to_string()
                .contains("[gcp]")
        );
    }

    #[test]
    fn pools_without_a_template_are_named() {
        let s = parse("project = \"p\"\n[instance_templates]\nllm = \"t\"").unwrap();
        assert!(s.check_pools(["llm"]).is_ok());
        let err = s.check_pools(["llm", "chat"]).unwrap_err().to_string();
        assert!(err.contains("chat") && !err.contains("llm,"), "{err}");
    }
}
