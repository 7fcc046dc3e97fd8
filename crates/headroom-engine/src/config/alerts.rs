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
        webhooks: raw.webhooks,
    };
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
