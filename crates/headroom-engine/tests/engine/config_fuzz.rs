//! The configuration fuzz: every duration, number and amount of a configuration that names
//! every key, set in turn to zero, a nanosecond, its largest value, `u64::MAX` and a negative
//! value. Each variant is either refused in lines that each name a key and a fix, or accepted
//! and run for an hour of manual time against a budget that binds within it, and then the
//! account never spends past its ceiling. The invariant is "spend never passes a ceiling"
//! whatever the configuration says, so no variant may be accepted that breaks it.

use std::time::Duration;

use headroom_cloud::Clock;
use headroom_config::Config;
use headroom_ledger::prelude::*;
use headroom_testkit::Rig;

/// A configuration with every key the fuzz varies. $6/h nodes and ten-minute holds against a
/// $3 day: three launches fit, and renewals are refused within the hour.
const BASE: &str = r#"
cluster_id = "fuzz"
[engine]
tick = "30s"
hold_horizon = "10m"
offering_cooldown = "3m"
provider_timeout = "60s"
global_max_nodes = 100
price_refresh = "5m"
quota_cache_ttl = "5m"
transient_failure_limit = 3
transient_failure_window = "5m"
provider_errors_alert_after = "5m"
[sim]
seed = 7
[api]
requests_per_second = 50
burst = 100
client_requests_per_second = 200
client_burst = 400
request_timeout = "30s"
token_recheck_interval = "10s"
token_outage_grace = "5m"
header_read_timeout = "10s"
idle_timeout = "60s"
max_connections = 10000
max_connections_per_client = 256
[alerts]
repeat_interval = "4h"
resend_interval = "1m"
refusal_window = "10m"
[[offerings]]
id = "spot"
provider = "sim"
region = "us-east-1"
zone = "use1-az1"
instance_type = "g6.xlarge"
market = "spot"
price_usd_per_hour = "6"
gpus = 1
sim_capacity = 8
sim_spot_interruptions_per_hour = 0.0
[offerings.sim_ladder]
node_acquisition = "10s"
image_pull = "10s"
weight_load = "10s"
compile = "0s"
warmup = "0s"
[[offerings]]
id = "od"
provider = "sim"
region = "us-east-1"
zone = "use1-az2"
instance_type = "g6.xlarge"
market = "on-demand"
price_usd_per_hour = "6"
gpus = 1
sim_capacity = 8
[[pools]]
name = "llm"
account = "ml"
offerings = ["spot", "od"]
min_replicas = 0
max_replicas = 6
max_scale_up_per_step = 6
warm_pool_size = 0
[pools.ladder]
node_acquisition = "10s"
image_pull = "10s"
weight_load = "10s"
compile = "0s"
warmup = "0s"
[pools.scaling]
replica_throughput_rps = 5.0
target_queue_per_replica = 2.0
tolerance = 0.1
oldest_age_threshold = "30s"
backlog_drain = "60s"
target_utilization = 0.9
scale_up_breaches = 2
breach_window = "15s"
scale_up_limit = 100
scale_up_period = "60s"
scale_down_stabilization = "10m"
scale_down_fraction = 0.2
scale_down_margin = 0.05
scale_down_period = "0s"
direction_cooldown = "60s"
min_capacity = 0
utilization_high = 0.7
signal_max_age = "30s"
[pools.scaling.shed_deadlines]
low = "3m"
[pools.supply]
on_demand_base = 0
spot_percent_above_base = 50
spot_max_price_usd_per_hour = "8"
max_launches_per_period = 10
launch_period = "60s"
warm_pool_max = 2
warm_history = "24h"
[[budgets]]
account = "ml"
period = "day"
ceiling_usd = "3"
soft_threshold_percent = 80
hard_action = "clamp"
"#;

/// Keys whose value is an amount of money (a decimal string).
const MONEY_KEYS: [&str; 3] = [
    "price_usd_per_hour",
    "ceiling_usd",
    "spot_max_price_usd_per_hour",
];

/// One variant: the key's path in the file, and the TOML text of its new value.
#[derive(Debug)]
struct Variant {
    path: Vec<String>,
    value: String,
}

/// Every variant of every leaf the fuzz varies.
fn variants() -> Vec<Variant> {
    let table: toml::Table = BASE.parse().unwrap();
    let mut out = Vec::new();
    walk(&toml::Value::Table(table), &mut Vec::new(), &mut out);
    out
}

fn walk(value: &toml::Value, path: &mut Vec<String>, out: &mut Vec<Variant>) {
    let leaf = path.last().cloned().unwrap_or_default();
    let values: &[&str] = match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                path.push(k.clone());
                walk(v, path, out);
                path.pop();
            }
            return;
        }
        toml::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                path.push(i.to_string());
                walk(v, path, out);
                path.pop();
            }
            return;
        }
        toml::Value::String(_) if MONEY_KEYS.contains(&leaf.as_str()) => &[
            "\"0\"",
            "\"0.000001\"",
            "\"9223372036854.775807\"",
            "\"18446744073709551615\"",
            "\"-1\"",
        ],
        toml::Value::String(s) if humantime::parse_duration(s).is_ok() => &[
            "\"0s\"",
            "\"1ns\"",
            "\"99999999h\"",
            "\"18446744073709551615s\"",
            "\"-1s\"",
        ],
        toml::Value::Integer(_) => &[
            "0",
            "1",
            "4294967295",
            "9223372036854775807",
            "18446744073709551615",
            "-1",
        ],
        toml::Value::Float(_) => &["0.0", "1e-300", "1.7976931348623157e308", "-1.0", "nan"],
        _ => return,
    };
    for v in values {
        out.push(Variant {
            path: path.clone(),
            value: (*v).to_string(),
        });
    }
}

/// The base text with the variant's value in place (the file re-serialised, which keeps every
/// other value as it was).
fn apply(variant: &Variant) -> String {
    let table: toml::Value = toml::Value::Table(BASE.parse().unwrap());
    let mut at = &table;
    for step in &variant.path[..variant.path.len() - 1] {
        at = match at {
            toml::Value::Table(t) => &t[step],
            toml::Value::Array(a) => &a[step.parse::<usize>().unwrap()],
            _ => unreachable!("a path runs through tables and arrays"),
        };
    }
    let leaf = variant.path.last().unwrap();
    let text = toml::to_string(&table).unwrap();
    // Replace the leaf's value in its serialised line; integers beyond i64 cannot be values of
    // a `toml::Value`, so the text is edited rather than the tree.
    let old = match at {
        toml::Value::Table(t) => {
            toml::to_string(&toml::Table::from_iter([(leaf.clone(), t[leaf].clone())])).unwrap()
        }
        _ => unreachable!("a leaf's parent is a table"),
    };
    let old = old.trim_end();
    let parent = path_header(&variant.path[..variant.path.len() - 1]);
    replace_in_section(&text, &parent, old, &format!("{leaf} = {}", variant.value))
}

/// The section a path's parent table is serialised under, as the header text toml writes
/// (arrays of tables by index: the n-th `[[name]]` header).
fn path_header(path: &[String]) -> Vec<(String, Option<usize>)> {
    let mut out: Vec<(String, Option<usize>)> = Vec::new();
    for step in path {
        match step.parse::<usize>() {
            Ok(i) => {
                if let Some(last) = out.last_mut() {
                    last.1 = Some(i);
                }
            }
            Err(_) => out.push((step.clone(), None)),
        }
    }
    out
}

/// Replaces `old` (a `key = value` line) with `new` inside the section `section` of `text`.
fn replace_in_section(
    text: &str,
    section: &[(String, Option<usize>)],
    old: &str,
    new: &str,
) -> String {
    let name: Vec<&str> = section.iter().map(|(n, _)| n.as_str()).collect();
    let header = name.join(".");
    // The index of the array-of-tables entry each header of this name is, counting the outer
    // array's entries: `[[pools]]` n-th, then its sub-tables follow it.
    let outer = section.first().and_then(|(_, i)| *i);
    let mut seen_outer: Option<usize> = None;
    let mut inside = header.is_empty();
    let mut lines: Vec<String> = Vec::new();
    let mut done = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            let bare = trimmed.trim_matches(|c| c == '[' || c == ']');
            if section
                .first()
                .is_some_and(|(n, _)| trimmed == format!("[[{n}]]"))
            {
                seen_outer = Some(seen_outer.map_or(0, |s| s + 1));
            }
            inside = bare == header && (outer.is_none() || seen_outer == outer);
        }
        if inside && !done && trimmed == old {
            lines.push(new.to_string());
            done = true;
        } else {
            lines.push(line.to_string());
        }
    }
    assert!(done, "{old:?} not found under [{header}] {outer:?}\n{text}");
    lines.join("\n")
}

#[tokio::test]
async fn every_key_at_its_extremes_is_refused_in_one_line_or_keeps_spend_under_the_ceiling() {
    let variants = variants();
    assert!(
        variants.len() > 250,
        "the fuzz reaches every key: {}",
        variants.len()
    );
    // The base itself spends most of its ceiling within the hour: the check below binds.
    let base = Variant {
        path: vec!["base".into()],
        value: String::new(),
    };
    let config = Config::parse(BASE, "fuzz.toml").unwrap();
    let spent = spend_stays_under_the_ceiling(&base, BASE, &config).await;
    assert!(
        spent.micros() * 2 >= config.budgets[0].ceiling.micros(),
        "the base spent only ${spent}"
    );
    let (mut refused, mut ran) = (0, 0);
    let mut unclear = Vec::new();
    for variant in &variants {
        let text = apply(variant);
        let key = variant.path.last().unwrap();
        match Config::parse(&text, "fuzz.toml") {
            Err(errors) => {
                refused += 1;
                let lines = &errors.0;
                let names_key = lines.iter().any(|l| l.contains(key.as_str()));
                let one_line_each = lines
                    .iter()
                    .all(|l| !l.contains('\n') && l.contains("fix:"));
                if !names_key || !one_line_each || lines.len() > 2 {
                    unclear.push(format!("{variant:?}: {lines:#?}"));
                }
            }
            Ok(config) => {
                ran += 1;
                spend_stays_under_the_ceiling(variant, &text, &config).await;
            }
        }
    }
    println!("{refused} variants refused, {ran} accepted and run");
    assert!(
        unclear.is_empty(),
        "refusals that do not name the key in one line each:\n{}",
        unclear.join("\n")
    );
    assert!(refused > 0 && ran > 0);
}

/// An hour of manual time (at most 2,000 ticks) with four replicas asked for: the account's
/// spend never passes its ceiling.
/// Returns what the account spent by the end.
async fn spend_stays_under_the_ceiling(
    variant: &Variant,
    text: &str,
    config: &Config,
) -> headroom_core::Money {
    let rig = Rig::new(text).await;
    let engine = rig.engine(rig.sim_cloud());
    rig.request("llm", 4).await;
    let budget = rig
        .ledger
        .budget(&"ml".parse().unwrap())
        .await
        .unwrap()
        .unwrap_or_else(|| config.budgets[0].clone());
    let tick = config.engine.tick;
    let ticks = (Duration::from_secs(3600).as_millis() / tick.as_millis().max(1)).min(2000);
    for _ in 0..ticks {
        engine.tick().await.unwrap();
        rig.clock.advance(tick);
        let now = rig.clock.now();
        let standing = rig.ledger.budget_standing(&budget, now).await.unwrap();
        assert!(
            standing.spent <= standing.ceiling,
            "{variant:?}: spent ${} of ${} at {now}",
            standing.spent,
            standing.ceiling
        );
    }
    rig.ledger
        .budget_standing(&budget, rig.clock.now())
        .await
        .unwrap()
        .spent
}
