//! Alerts for on-call: conditions evaluated each tick ([`rules`], a pure function of a snapshot
//! of the tick), grouped and deduplicated by key, repeated on an interval, resolved when they
//! clear ([`AlertBook`]), and delivered to webhooks through a persisted, bounded outbox in the
//! ledger ([`delivery`]), so a webhook that is down loses nothing and never blocks the control
//! loop.

pub mod delivery;
pub mod rules;

use std::collections::BTreeMap;
use std::time::Duration;

pub use delivery::AlertDelivery;
use headroom_config::alerts::{AlertSettings, WebhookFormat};
use headroom_core::Timestamp;
use serde::{Deserialize, Serialize};

/// What a webhook body carries besides the notification: the deployment's identity and links.
#[derive(Debug, Clone, Copy)]
pub struct RenderContext<'a> {
    pub cluster_id: &'a str,
    pub settings: &'a AlertSettings,
}

/// The runbooks, one `## Name` section per alert; a notification's `description` is the first
/// paragraph of its section, so the text lives in one place.
const RUNBOOKS: &str = include_str!("../../../../docs/runbooks.md");

/// The first paragraph of `name`'s runbook section, on one line.
pub fn description(name: &str) -> Option<String> {
    let heading = format!("## {name}\n");
    let start = RUNBOOKS.find(&heading)? + heading.len();
    let paragraph: Vec<&str> = RUNBOOKS[start..]
        .trim_start()
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    (!paragraph.is_empty()).then(|| paragraph.join(" "))
}

/// The always-firing alert's name, as kube-prometheus spells it.
pub const WATCHDOG: &str = "Watchdog";

/// One condition that holds now.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Alert {
    /// `alertname`, e.g. `CapacityRefused`.
    pub name: String,
    pub severity: &'static str,
    /// What makes this alert distinct from others of its name (pool, reason, account, …).
    pub labels: BTreeMap<String, String>,
    /// One sentence for a human woken at 3 a.m.
    pub summary: String,
}

/// An [`Alert`] as the ledger's alert book holds it, its severity one the rules give.
#[derive(Deserialize)]
struct StoredAlert {
    name: String,
    severity: String,
    labels: BTreeMap<String, String>,
    summary: String,
}

// By hand: a derive would ask for `'de: 'static` because of the `&'static str`.
impl<'de> Deserialize<'de> for Alert {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Alert, D::Error> {
        let stored = StoredAlert::deserialize(d)?;
        let severity = ["critical", "warning", "info", "none"]
            .into_iter()
            .find(|s| *s == stored.severity)
            .ok_or_else(|| {
                serde::de::Error::custom(format!("unknown severity {:?}", stored.severity))
            })?;
        Ok(Alert {
            name: stored.name,
            severity,
            labels: stored.labels,
            summary: stored.summary,
        })
    }
}

impl Alert {
    pub fn new(
        name: &str,
        severity: &'static str,
        labels: &[(&str, String)],
        summary: String,
    ) -> Alert {
        Alert {
            name: name.to_string(),
            severity,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            summary,
        }
    }

    /// Alerts with the same key are one alert (deduplicated).
    pub fn key(&self) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("{}{{{}}}", self.name, labels.join(","))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Firing,
    Resolved,
}

/// How many resend intervals ahead a firing alert's `endsAt` is set for Alertmanager (as
/// Prometheus does): three lost or late resends in a row before it would resolve by itself.
pub const KEEP_ALIVE_RESENDS: i32 = 4;

/// A message to send.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notification {
    pub status: Status,
    pub alert: Alert,
    pub starts_at: Timestamp,
    /// When the alert resolved; `None` while it fires.
    pub ends_at: Option<Timestamp>,
    /// While firing: the `endsAt` Alertmanager is given, moved ahead at every resend.
    #[serde(skip)]
    pub firing_until: Option<Timestamp>,
    /// A keep-alive resend for Alertmanager only: people's webhooks (Slack, JSON) skip it.
    #[serde(skip)]
    pub keep_alive: bool,
}

impl Notification {
    fn firing(alert: Alert, starts_at: Timestamp, now: Timestamp, resend: Duration) -> Self {
        let resend = chrono::Duration::from_std(resend).unwrap_or(chrono::Duration::minutes(1));
        Notification {
            status: Status::Firing,
            alert,
            starts_at,
            ends_at: None,
            firing_until: Some(now + resend * KEEP_ALIVE_RESENDS),
            keep_alive: false,
        }
    }

    /// Whether a webhook of `format` is sent this notification.
    pub fn is_for(&self, format: WebhookFormat) -> bool {
        format == WebhookFormat::Alertmanager || !(self.keep_alive || self.alert.name == WATCHDOG)
    }
}

/// An alert that is firing.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActiveAlert {
    pub alert: Alert,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub starts_at: Timestamp,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub last_sent_at: Timestamp,
    /// Last sent to Alertmanager webhooks (a repeat counts).
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub last_resent_at: Timestamp,
}

/// The alerts firing now. Pure: `update` takes the conditions that hold and says what to send.
#[derive(Debug, Default)]
pub struct AlertBook {
    active: BTreeMap<String, ActiveAlert>,
}

impl AlertBook {
    pub fn active(&self) -> Vec<ActiveAlert> {
        self.active.values().cloned().collect()
    }

    /// The alerts firing within `scope`.
    pub fn active_in(&self, scope: impl Fn(&Alert) -> bool) -> Vec<ActiveAlert> {
        self.active
            .values()
            .filter(|a| scope(&a.alert))
            .cloned()
            .collect()
    }

    /// Replaces the alerts within `scope` with `alerts` (read back from the ledger when this
    /// process takes their pool), without notifying: they keep their `starts_at`, and repeats
    /// and keep-alive resends follow their stored times; one that no longer holds resolves at
    /// the next `update` like any other.
    pub fn restore(&mut self, scope: impl Fn(&Alert) -> bool, alerts: Vec<ActiveAlert>) {
        self.active.retain(|_, a| !scope(&a.alert));
        for active in alerts.into_iter().filter(|a| scope(&a.alert)) {
            self.active.insert(active.alert.key(), active);
        }
    }

    /// Folds in the conditions that hold at `now` (within `scope`, the keys this process
    /// evaluates) and returns the notifications to send: new alerts, repeats every `repeat`,
    /// keep-alive resends every `resend` in between, resolutions.
    pub fn update(
        &mut self,
        holding: Vec<Alert>,
        in_scope: impl Fn(&Alert) -> bool,
        now: Timestamp,
        repeat: Duration,
        resend: Duration,
    ) -> Vec<Notification> {
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for alert in holding {
            let key = alert.key();
            seen.insert(key.clone());
            match self.active.get_mut(&key) {
                Some(active) => {
                    let since = |t: Timestamp| (now - t).to_std().unwrap_or_default();
                    let repeat_due = since(active.last_sent_at) >= repeat;
                    let resend_due = since(active.last_resent_at) >= resend;
                    if repeat_due || resend_due {
                        active.last_resent_at = now;
                        if repeat_due {
                            active.last_sent_at = now;
                        }
                        let mut n = Notification::firing(alert, active.starts_at, now, resend);
                        n.keep_alive = !repeat_due;
                        out.push(n);
                    }
                }
                None => {
                    out.push(Notification::firing(alert.clone(), now, now, resend));
                    self.active.insert(
                        key,
                        ActiveAlert {
                            alert,
                            starts_at: now,
                            last_sent_at: now,
                            last_resent_at: now,
                        },
                    );
                }
            }
        }
        let cleared: Vec<String> = self
            .active
            .iter()
            .filter(|(k, a)| !seen.contains(*k) && in_scope(&a.alert))
            .map(|(k, _)| k.clone())
            .collect();
        for key in cleared {
            if let Some(gone) = self.active.remove(&key) {
                out.push(Notification {
                    status: Status::Resolved,
                    alert: gone.alert,
                    starts_at: gone.starts_at,
                    ends_at: Some(now),
                    firing_until: None,
                    keep_alive: false,
                });
            }
        }
        out
    }
}

/// The request body for one notification in a webhook's format.
pub fn render(format: WebhookFormat, n: &Notification, ctx: &RenderContext<'_>) -> String {
    let iso = |t: Timestamp| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let settings = ctx.settings;
    match format {
        WebhookFormat::Alertmanager => {
            let mut labels = n.alert.labels.clone();
            labels.insert("cluster".into(), ctx.cluster_id.to_string());
            // External labels may rename the cluster; configuration refuses those that would
            // replace the alert's own labels.
            labels.extend(settings.external_labels.clone());
            labels.insert("alertname".into(), n.alert.name.clone());
            labels.insert("severity".into(), n.alert.severity.into());
            labels.insert("service".into(), "headroom".into());
            let mut annotations = serde_json::json!({"summary": n.alert.summary});
            if let Some(text) = description(&n.alert.name) {
                annotations["description"] = serde_json::json!(text);
            }
            if let Some(base) = &settings.runbook_base_url {
                annotations["runbook_url"] =
                    serde_json::json!(format!("{base}#{}", n.alert.name.to_lowercase()));
            }
            let mut alert = serde_json::json!({
                "labels": labels,
                "annotations": annotations,
                "startsAt": iso(n.starts_at),
            });
            if let Some(base) = &settings.generator_base_url {
                let base = base.trim_end_matches('/');
                alert["generatorURL"] = serde_json::json!(match n.alert.labels.get("pool") {
                    Some(pool) => format!("{base}/v1/pools/{pool}"),
                    None => format!("{base}/v1/alerts"),
                });
            }
            if let Some(end) = n.ends_at.or(n.firing_until) {
                alert["endsAt"] = serde_json::json!(iso(end));
            }
            serde_json::json!([alert]).to_string()
        }
        WebhookFormat::Slack => {
            let icon = match n.status {
                Status::Firing => ":rotating_light:",
                Status::Resolved => ":white_check_mark:",
            };
            let status = match n.status {
                Status::Firing => "FIRING",
                Status::Resolved => "RESOLVED",
            };
            let cluster = settings
                .external_labels
                .get("cluster")
                .map_or(ctx.cluster_id, String::as_str);
            serde_json::json!({
                "text": format!("{icon} [{status}] {} ({cluster}): {}", n.alert.name, n.alert.summary)
            })
            .to_string()
        }
        WebhookFormat::Json => serde_json::to_string(n).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use headroom_config::alerts::{AlertSettings, WebhookFormat};
    use headroom_core::Timestamp;

    use super::{
        Alert, AlertBook, Notification, RenderContext, Status, WATCHDOG, description, render,
    };

    fn at(s: i64) -> Timestamp {
        "2026-11-30T03:00:00Z".parse::<Timestamp>().unwrap() + chrono::Duration::seconds(s)
    }

    fn refused() -> Alert {
        Alert::new(
            "CapacityRefused",
            "critical",
            &[("pool", "llm".into()), ("reason", "no_offering".into())],
            "x".into(),
        )
    }

    #[test]
    fn alerts_fire_once_repeat_on_interval_and_resolve() {
        let mut book = AlertBook::default();
        let repeat = Duration::from_secs(3600);
        let first = book.update(vec![refused()], |_| true, at(0), repeat, repeat);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].status, Status::Firing);
        assert!(
            book.update(vec![refused(), refused()], |_| true, at(60), repeat, repeat)
                .is_empty(),
            "deduplicated"
        );
        let again = book.update(vec![refused()], |_| true, at(3600), repeat, repeat);
        assert_eq!(
            (again.len(), again[0].starts_at),
            (1, at(0)),
            "repeated with its start"
        );
        let resolved = book.update(vec![], |_| true, at(4000), repeat, repeat);
        assert_eq!(
            (resolved[0].status, resolved[0].ends_at),
            (Status::Resolved, Some(at(4000)))
        );
        assert!(book.active().is_empty());
    }

    #[test]
    fn alertmanager_gets_keep_alives_with_end_s_at_moving_ahead_and_people_do_not() {
        let mut book = AlertBook::default();
        let (repeat, resend) = (Duration::from_secs(3600), Duration::from_secs(60));
        let first = book.update(vec![refused()], |_| true, at(0), repeat, resend);
        assert_eq!(first[0].firing_until, Some(at(240)));
        assert!(first[0].is_for(WebhookFormat::Slack));
        assert!(
            book.update(vec![refused()], |_| true, at(30), repeat, resend)
                .is_empty()
        );
        let again = book.update(vec![refused()], |_| true, at(60), repeat, resend);
        assert_eq!(again.len(), 1);
        assert!(again[0].keep_alive);
        assert!(again[0].is_for(WebhookFormat::Alertmanager));
        assert!(!again[0].is_for(WebhookFormat::Slack) && !again[0].is_for(WebhookFormat::Json));
        assert_eq!(
            (again[0].starts_at, again[0].firing_until),
            (at(0), Some(at(300)))
        );
        let am: serde_json::Value =
            serde_json::from_str(&render(WebhookFormat::Alertmanager, &again[0], &plain()))
                .unwrap();
        assert_eq!(am[0]["endsAt"], "2026-11-30T03:05:00Z");
        assert_eq!(am[0]["startsAt"], "2026-11-30T03:00:00Z");
        let repeated = book.update(vec![refused()], |_| true, at(3600), repeat, resend);
        assert!(
            !repeated[0].keep_alive,
            "the hourly repeat goes to people too"
        );
    }

    fn firing() -> Notification {
        Notification {
            status: Status::Firing,
            alert: refused(),
            starts_at: at(0),
            ends_at: None,
            firing_until: None,
            keep_alive: false,
        }
    }

    fn plain() -> RenderContext<'static> {
        static SETTINGS: std::sync::LazyLock<AlertSettings> =
            std::sync::LazyLock::new(AlertSettings::default);
        RenderContext {
            cluster_id: "prod-a",
            settings: &SETTINGS,
        }
    }

    #[test]
    fn every_alert_has_a_runbook_section_and_a_description() {
        let names = [
            "CapacityRefused",
            "CloudQuotaExhausted",
            "PoolSignalsMissing",
            "ReplicaImbalance",
            "PoolDeparturesStalled",
            "PoolHalted",
            "PoolServedByFallback",
            "PoolShedding",
            "WarmPoolDepleted",
            "BudgetSoftThresholdReached",
            "BudgetStoppedCapacity",
            "ProviderErrors",
            "QuotaBelowMaxReplicas",
            "ReservationIdle",
            "ReservationEnding",
            "OrphanInstances",
            "CloudUnreachable",
            WATCHDOG,
        ];
        for name in names {
            let text = description(name).unwrap_or_else(|| panic!("no runbook for {name}"));
            assert!(text.len() > 40 && !text.contains('\n'), "{name}: {text}");
        }
        assert_eq!(description("NoSuchAlert"), None);
    }

    #[test]
    fn two_deployments_stay_apart_and_each_notification_links_its_runbook_and_pool() {
        let n = firing();
        let settings = AlertSettings {
            external_labels: [("region".to_string(), "eu-west-1".to_string())].into(),
            runbook_base_url: Some("https://git.example/headroom/docs/runbooks.md".into()),
            generator_base_url: Some("https://headroom.example/".into()),
            ..AlertSettings::default()
        };
        let render_for = |cluster_id: &str| {
            let ctx = RenderContext {
                cluster_id,
                settings: &settings,
            };
            serde_json::from_str::<serde_json::Value>(&render(
                WebhookFormat::Alertmanager,
                &n,
                &ctx,
            ))
            .unwrap()
        };
        let (a, b) = (render_for("prod-a"), render_for("prod-b"));
        assert_ne!(a[0]["labels"], b[0]["labels"], "same pool, two deployments");
        assert_eq!(a[0]["labels"]["cluster"], "prod-a");
        assert_eq!(a[0]["labels"]["region"], "eu-west-1");
        assert_eq!(
            a[0]["annotations"]["runbook_url"],
            "https://git.example/headroom/docs/runbooks.md#capacityrefused"
        );
        assert!(
            a[0]["annotations"]["description"]
                .as_str()
                .unwrap()
                .starts_with("The cloud refused capacity")
        );
        assert_eq!(
            a[0]["generatorURL"],
            "https://headroom.example/v1/pools/llm"
        );
    }

    #[test]
    fn formats_render() {
        let n = firing();
        let am: serde_json::Value =
            serde_json::from_str(&render(WebhookFormat::Alertmanager, &n, &plain())).unwrap();
        assert_eq!(am[0]["labels"]["alertname"], "CapacityRefused");
        assert_eq!(am[0]["labels"]["pool"], "llm");
        let slack: serde_json::Value =
            serde_json::from_str(&render(WebhookFormat::Slack, &n, &plain())).unwrap();
        assert!(
            slack["text"]
                .as_str()
                .unwrap()
                .contains("[FIRING] CapacityRefused (prod-a)")
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(WebhookFormat::Json, &n, &plain())).unwrap();
        assert_eq!(json["status"], "firing");
    }
}
