//! `[alerts]`: how often a firing alert repeats (to people) and is re-sent (to Alertmanager), how long a refusal keeps one firing, and the
//! webhooks that receive them.

use super::Problems;
use super::raw::RawAlerts;
use std::time::Duration;

use crate::alerts::AlertSettings;

pub(super) fn alerts(raw: RawAlerts, p: &mut Problems) -> AlertSettings {
    let defaults = AlertSettings::default();
    let alerts = AlertSettings {
        repeat_interval: match &raw.repeat_interval {
            Some(t) => p.duration("alerts.repeat_interval", t),
            None => defaults.repeat_interval,
        },
        resend_interval: match &raw.resend_interval {
            Some(t) => p.duration("alerts.resend_interval", t),
            None => defaults.resend_interval,
        },
        refusal_window: match &raw.refusal_window {
            Some(t) => p.duration("alerts.refusal_window", t),
            None => defaults.refusal_window,
        },
        webhooks: raw.webhooks,
    };
    let resend = alerts.resend_interval;
    let parsed = raw
        .resend_interval
        .as_deref()
        .is_some_and(|t| humantime::parse_duration(t).is_ok());
    if parsed && (resend < Duration::from_secs(10) || resend > Duration::from_secs(180)) {
        p.add(
            "alerts.resend_interval",
            format!("{resend:?} is outside 10s..3m"),
            "Alertmanager expects a firing alert again every 30 s to 3 minutes; the default is \"1m\"",
        );
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
