//! `[alerts]`: how often a firing alert repeats (to people) and is re-sent (to Alertmanager), how long a refusal keeps one firing, and the
//! webhooks that receive them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::raw::RawAlerts;
use super::{DAY, Problems, Within};

/// How a webhook wants its JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// An Alertmanager v2 `POST /api/v2/alerts` body: an array of alerts.
    Alertmanager,
    /// A Slack incoming-webhook message.
    Slack,
    /// Headroom's own shape: `{status, alert}`.
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    pub url: String,
    #[serde(default = "default_format")]
    pub format: WebhookFormat,
}

fn default_format() -> WebhookFormat {
    WebhookFormat::Json
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlertSettings {
    pub webhooks: Vec<Webhook>,
    /// A still-firing alert is sent again to every webhook after this long (people read these).
    pub repeat_interval: Duration,
    /// A still-firing alert is sent again to Alertmanager webhooks after this long, with `endsAt`
    /// `KEEP_ALIVE_RESENDS` of these ahead: Alertmanager resolves an alert whose `endsAt` has
    /// passed, or that was not re-sent within its `resolve_timeout` (5 minutes by default), and
    /// expects clients to re-send every 30 s to 3 minutes.
    pub resend_interval: Duration,
    /// A refusal keeps its alert firing this long after it happened.
    pub refusal_window: Duration,
    /// Fire the `Watchdog` alert for as long as the service runs, to Alertmanager webhooks only: a
    /// dead man's switch, so a receiver notices when Headroom (or its path to Alertmanager)
    /// is gone rather than reading its alerts as resolved.
    pub watchdog: bool,
    /// Labels added to every Alertmanager notification (cluster, region, deployment…), so two
    /// deployments with the same pool names stay apart. `cluster` defaults to the cluster id.
    pub external_labels: BTreeMap<String, String>,
    /// Where `docs/runbooks.md` is served: each notification's `runbook_url` is this with the
    /// alert's anchor.
    pub runbook_base_url: Option<String>,
    /// Headroom's own API address as people reach it: `generatorURL` links to the pool.
    pub generator_base_url: Option<String>,
}

impl Default for AlertSettings {
    fn default() -> Self {
        AlertSettings {
            webhooks: Vec::new(),
            repeat_interval: Duration::from_secs(4 * 3600),
            resend_interval: Duration::from_secs(60),
            refusal_window: Duration::from_secs(600),
            watchdog: true,
            external_labels: BTreeMap::new(),
            runbook_base_url: None,
            generator_base_url: None,
        }
    }
}

pub(super) fn alerts(raw: RawAlerts, p: &mut Problems) -> AlertSettings {
    let defaults = AlertSettings::default();
    let alerts = AlertSettings {
        repeat_interval: match &raw.repeat_interval {
            Some(t) => p.duration("alerts.repeat_interval", t, Within::secs(60, 7 * DAY, "4h")),
            None => defaults.repeat_interval,
        },
        resend_interval: match &raw.resend_interval {
            // Alertmanager expects a firing alert again every 30 s to 3 minutes.
            Some(t) => p.duration("alerts.resend_interval", t, Within::secs(10, 180, "1m")),
            None => defaults.resend_interval,
        },
        refusal_window: match &raw.refusal_window {
            Some(t) => p.duration("alerts.refusal_window", t, Within::secs(60, DAY, "10m")),
            None => defaults.refusal_window,
        },
        watchdog: raw.watchdog.unwrap_or(defaults.watchdog),
        external_labels: raw.external_labels,
        runbook_base_url: raw.runbook_base_url,
        generator_base_url: raw.generator_base_url,
        webhooks: raw.webhooks,
    };
    for (name, value) in &alerts.external_labels {
        let key = format!("alerts.external_labels.{name}");
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with("__");
        if !valid {
            p.add(
                &key,
                "is not a Prometheus label name",
                "use letters, digits and underscores, not starting with a digit or __",
            );
        } else if [
            "alertname",
            "severity",
            "service",
            "pool",
            "account",
            "offering",
        ]
        .contains(&name.as_str())
        {
            p.add(
                &key,
                "would replace a label Headroom's alerts carry themselves",
                "choose another name, e.g. \"deployment\" or \"region\"",
            );
        } else if value.is_empty() || value.len() > 256 {
            p.add(
                &key,
                "must be 1 to 256 characters",
                "give a short value, e.g. \"eu-prod\"",
            );
        }
    }
    for (key, url) in [
        ("alerts.runbook_base_url", &alerts.runbook_base_url),
        ("alerts.generator_base_url", &alerts.generator_base_url),
    ] {
        if let Some(url) = url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            p.add(
                key,
                format!("{url:?} is not an http:// or https:// URL"),
                "give the address people open, e.g. \"https://headroom.internal\"",
            );
        }
    }
    for (i, w) in alerts.webhooks.iter().enumerate() {
        if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
            p.add(
                &format!("alerts.webhooks[{i}].url"),
                format!("{:?} is not an http:// or https:// URL", w.url),
                "give the receiver's address, e.g. \"https://hooks.slack.com/services/…\"",
            );
        }
    }
    alerts
}
