//! `[alerts]`: how often a firing alert repeats (to people) and is re-sent (to Alertmanager), how long a refusal keeps one firing, and the
//! webhooks that receive them.

use super::raw::RawAlerts;
use super::{DAY, Problems, Within};

use crate::alerts::AlertSettings;

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
