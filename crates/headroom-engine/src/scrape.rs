//! Signals scraped from Prometheus text endpoints (vLLM's `/metrics`, DCGM's exporter, …).
//!
//! Pure: the page parser and [`Scraper`], which keeps the previous counter readings so
//! that counters (`…_total`) become per-second rates between two scrapes. The selectors and the
//! age aggregations are the configuration's (`headroom_config::scrape`). Reading the pages and
//! the loop that hands each signal to the engine are in `crate::signal_sources`.

use headroom_config::scrape::{
    AgeAggregation, ScrapeSelectors, Selector, is_name_char, parse_labels,
};
use headroom_core::Timestamp;

use crate::views::SignalInput;

/// The values of every series in `text` that `selector` matches.
pub fn matching(text: &str, selector: &Selector) -> Vec<f64> {
    matching_series(text, selector)
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

/// Every series in `text` that `selector` matches: its label set (as written, which names the
/// series) and its value.
fn matching_series(text: &str, selector: &Selector) -> Vec<(String, f64)> {
    let mut values = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
        if line[..name_end] != selector.name {
            continue;
        }
        let rest = &line[name_end..];
        let (labels, value_part) = match rest.strip_prefix('{') {
            Some(inner) => match inner.rfind('}') {
                Some(close) => match parse_labels(&inner[..close]) {
                    Ok(labels) => (labels, &inner[close + 1..]),
                    Err(_) => continue,
                },
                None => continue,
            },
            None => (Vec::new(), rest),
        };
        let all_match = selector
            .labels
            .iter()
            .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v));
        if !all_match {
            continue;
        }
        if let Some(value) = value_part
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            && value.is_finite()
        {
            let mut labels = labels;
            labels.sort();
            let key: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            values.push((key.join(","), value));
        }
    }
    values
}

/// Counters read per scrape: arrivals, departures, errors, token arrivals.
const COUNTERS: usize = 4;

/// One counter's series at one scrape, by label set.
type CounterReading = std::collections::HashMap<String, f64>;

/// Turns successive scrapes of one target into signals.
#[derive(Debug, Default)]
pub struct Scraper {
    previous: Option<(Timestamp, [Option<CounterReading>; COUNTERS])>,
    age: AgeAggregation,
}

/// The per-second rate of one counter between two readings, series by series as Prometheus's
/// `rate()` takes it: a series that went down was reset (a restarted replica) and counts from
/// zero; a series seen only now (a replica that just started) and one that vanished add
/// nothing. A replica coming or going is therefore never a spike or a gap in the sum.
fn counter_rate(before: &CounterReading, now: &CounterReading, seconds: f64) -> Option<f64> {
    let mut increase = 0.0;
    let mut compared = 0;
    for (series, value) in now {
        if let Some(previous) = before.get(series) {
            increase += if value >= previous {
                value - previous
            } else {
                *value
            };
            compared += 1;
        }
    }
    (compared > 0).then(|| increase / seconds)
}

impl Scraper {
    /// A scraper that aggregates the replicas' oldest ages with `age` (the default takes the
    /// maximum).
    pub fn with_age(age: AgeAggregation) -> Scraper {
        Scraper {
            previous: None,
            age,
        }
    }

    /// The signal in one metrics page, scraped at `at`. Counter rates need a previous scrape.
    pub fn signal(
        &mut self,
        selectors: &ScrapeSelectors,
        text: &str,
        at: Timestamp,
    ) -> Result<SignalInput, String> {
        self.fleet_signal(selectors, &[("", text)], at)
    }

    /// The signal of a fleet: one page per replica (`(url, text)`), scraped at `at`. Depth and
    /// tokens are summed across replicas, the oldest age is the maximum, utilisation and
    /// occupancy the mean; counters are taken per series and replica. With more than one page,
    /// each replica's own queue is kept (`replica_queue_depths`) to show skew.
    pub fn fleet_signal(
        &mut self,
        selectors: &ScrapeSelectors,
        pages: &[(&str, &str)],
        at: Timestamp,
    ) -> Result<SignalInput, String> {
        let values = |s: &Selector| -> Vec<f64> {
            pages
                .iter()
                .flat_map(|(_, text)| matching(text, s))
                .collect()
        };
        let sum = |s: &Selector| -> Option<f64> {
            let values = values(s);
            (!values.is_empty()).then(|| values.iter().sum())
        };
        let average = |s: &Selector| -> Option<f64> {
            let values = values(s);
            (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
        };
        let reading = |s: &Option<Selector>| -> Option<CounterReading> {
            let s = s.as_ref()?;
            let series: CounterReading = pages
                .iter()
                .flat_map(|(url, text)| {
                    matching_series(text, s)
                        .into_iter()
                        .map(move |(labels, v)| (format!("{url}|{labels}"), v))
                })
                .collect();
            (!series.is_empty()).then_some(series)
        };
        let queue = sum(&selectors.queue_depth)
            .ok_or_else(|| format!("no series matches queue_depth {}", selectors.queue_depth))?;
        let replica_queue_depths = if pages.len() > 1 {
            pages
                .iter()
                .map(|(_, text)| {
                    let depth: f64 = matching(text, &selectors.queue_depth).iter().sum();
                    depth.max(0.0).round() as u64
                })
                .collect()
        } else {
            Vec::new()
        };
        let counters = [
            reading(&selectors.arrivals_total),
            reading(&selectors.departures_total),
            reading(&selectors.errors_total),
            reading(&selectors.token_arrivals_total),
        ];
        let mut rates = [None; COUNTERS];
        if let Some((then, before)) = &self.previous
            && at > *then
        {
            let seconds = (at - *then).num_milliseconds() as f64 / 1000.0;
            for i in 0..COUNTERS {
                if let (Some(now), Some(before)) = (&counters[i], &before[i]) {
                    rates[i] = counter_rate(before, now, seconds);
                }
            }
        }
        self.previous = Some((at, counters));
        let utilization = selectors
            .gpu_utilization
            .as_ref()
            .and_then(average)
            .or_else(|| {
                selectors
                    .gpu_utilization_percent
                    .as_ref()
                    .and_then(average)
                    .map(|p| p / 100.0)
            });
        Ok(SignalInput {
            queue_depth: queue.max(0.0).round() as u64,
            // The oldest request across every matching series (replica, engine), or a
            // percentile of them.
            oldest_age_s: selectors
                .oldest_age_s
                .as_ref()
                .map(values)
                .and_then(|ages| self.age.aggregate(ages))
                .map(|a| a.max(0.0)),
            arrival_rate_rps: rates[0],
            departure_rate_rps: rates[1],
            error_rate_rps: rates[2],
            batch_occupancy: selectors
                .batch_occupancy
                .as_ref()
                .and_then(average)
                .map(|b| b.clamp(0.0, 1.0)),
            gpu_utilization: utilization.map(|u| u.clamp(0.0, 1.0)),
            oldest_age_by_class_s: Default::default(),
            queue_depth_by_priority: Default::default(),
            arrival_rate_by_priority_rps: Default::default(),
            queued_tokens: selectors
                .queued_tokens
                .as_ref()
                .and_then(sum)
                .map(|t| t.max(0.0)),
            token_arrival_rate_tps: rates[3],
            replica_queue_depths,
        })
    }
}

#[cfg(test)]
mod tests {
    use headroom_config::scrape::{AgeAggregation, ScrapeSelectors, Selector};
    use headroom_core::Timestamp;

    use super::{Scraper, matching};

    /// Selectors for `queue_depth` alone; a test sets the others it reads.
    fn only_queue(queue_depth: &str) -> ScrapeSelectors {
        ScrapeSelectors {
            queue_depth: queue_depth.parse().unwrap(),
            oldest_age_s: None,
            batch_occupancy: None,
            gpu_utilization: None,
            gpu_utilization_percent: None,
            arrivals_total: None,
            departures_total: None,
            errors_total: None,
            queued_tokens: None,
            token_arrivals_total: None,
        }
    }

    const VLLM: &str = r#"
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama-70b"} 7.0
vllm:num_requests_waiting{engine="1",model_name="llama-70b"} 5.0
vllm:num_requests_waiting{engine="0",model_name="mistral-7b"} 100.0
vllm:num_requests_running{engine="0",model_name="llama-70b"} 30.0
vllm:request_success_total{finished_reason="stop",model_name="llama-70b"} 1000
vllm:request_success_total{finished_reason="length",model_name="llama-70b"} 200
DCGM_FI_DEV_GPU_UTIL{gpu="0",label="with \"quote\", comma"} 90
DCGM_FI_DEV_GPU_UTIL{gpu="1"} 70
headroom_oldest_age_seconds{replica="a"} 2.5
headroom_oldest_age_seconds{replica="b"} 9.0
"#;

    #[test]
    fn selectors_parse_and_match_labels() {
        let s: Selector = r#"vllm:num_requests_waiting{model_name="llama-70b"}"#
            .parse()
            .unwrap();
        assert_eq!(matching(VLLM, &s), [7.0, 5.0]);
        let all: Selector = "vllm:num_requests_waiting".parse().unwrap();
        assert_eq!(matching(VLLM, &all).iter().sum::<f64>(), 112.0);
        assert!("bad name{".parse::<Selector>().is_err());
        assert!(
            r#"m{a=b}"#.parse::<Selector>().is_err(),
            "values are quoted"
        );
        let quoted: Selector = r#"DCGM_FI_DEV_GPU_UTIL{label="with \"quote\", comma"}"#
            .parse()
            .unwrap();
        assert_eq!(matching(VLLM, &quoted), [90.0]);
    }

    #[test]
    fn counters_become_rates_between_scrapes() {
        let selectors = ScrapeSelectors {
            queue_depth: r#"vllm:num_requests_waiting{model_name="llama-70b"}"#
                .parse()
                .unwrap(),
            oldest_age_s: Some("headroom_oldest_age_seconds".parse().unwrap()),
            batch_occupancy: None,
            gpu_utilization: None,
            gpu_utilization_percent: Some("DCGM_FI_DEV_GPU_UTIL".parse().unwrap()),
            arrivals_total: None,
            departures_total: Some(
                r#"vllm:request_success_total{model_name="llama-70b"}"#
                    .parse()
                    .unwrap(),
            ),
            errors_total: None,
            queued_tokens: None,
            token_arrivals_total: None,
        };
        let t0: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let mut scraper = Scraper::default();
        let first = scraper.signal(&selectors, VLLM, t0).unwrap();
        assert_eq!(first.queue_depth, 12);
        assert_eq!(first.departure_rate_rps, None, "a rate needs two scrapes");
        assert_eq!(first.gpu_utilization, Some(0.8));
        assert_eq!(
            first.oldest_age_s,
            Some(9.0),
            "the oldest across replicas, not a sum"
        );
        let later = VLLM.replace("} 1000", "} 1050");
        let second = scraper
            .signal(&selectors, &later, t0 + chrono::Duration::seconds(5))
            .unwrap();
        assert_eq!(second.departure_rate_rps, Some(10.0));
        let missing = ScrapeSelectors {
            queue_depth: "nope".parse().unwrap(),
            ..selectors
        };
        assert!(
            scraper
                .signal(&missing, VLLM, t0)
                .unwrap_err()
                .contains("queue_depth")
        );
    }

    #[test]
    fn token_counts_are_scraped_as_a_gauge_and_a_rate() {
        let text = "queue_waiting 3\nqueue_tokens{replica=\"a\"} 1200\nqueue_tokens{replica=\"b\"} 800\ntokens_in_total 10000\n";
        let selectors = ScrapeSelectors {
            queued_tokens: Some("queue_tokens".parse().unwrap()),
            token_arrivals_total: Some("tokens_in_total".parse().unwrap()),
            ..only_queue("queue_waiting")
        };
        let t0: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let mut scraper = Scraper::default();
        let first = scraper.signal(&selectors, text, t0).unwrap();
        assert_eq!(first.queued_tokens, Some(2000.0), "summed over replicas");
        assert_eq!(
            first.token_arrival_rate_tps, None,
            "a rate needs two scrapes"
        );
        let later = text.replace("tokens_in_total 10000", "tokens_in_total 15000");
        let second = scraper
            .signal(&selectors, &later, t0 + chrono::Duration::seconds(10))
            .unwrap();
        assert_eq!(second.token_arrival_rate_tps, Some(500.0));
    }

    #[test]
    fn a_replica_restarting_joining_or_leaving_never_spikes_the_rate() {
        let selectors = ScrapeSelectors {
            arrivals_total: Some("arrived_total".parse().unwrap()),
            ..only_queue("waiting")
        };
        let page = |pods: &[(&str, u64)]| {
            let mut text = String::from("waiting 0\n");
            for (pod, count) in pods {
                text.push_str(&format!("arrived_total{{pod=\"{pod}\"}} {count}\n"));
            }
            text
        };
        let t0: Timestamp = "2026-12-01T09:00:00Z".parse().unwrap();
        let at = |s: i64| t0 + chrono::Duration::seconds(s);
        let mut scraper = Scraper::default();
        let rate = |scraper: &mut Scraper, pods: &[(&str, u64)], s| {
            scraper
                .signal(&selectors, &page(pods), at(s))
                .unwrap()
                .arrival_rate_rps
        };
        assert_eq!(rate(&mut scraper, &[("a", 1000), ("b", 500)], 0), None);
        assert_eq!(
            rate(&mut scraper, &[("a", 1100), ("b", 600)], 10),
            Some(20.0)
        );
        // b restarts (its counter starts again from 0 and reaches 50) and c joins with a
        // counter of 100,000: 100 + 50 arrivals, not a sum that jumps by 98,350.
        assert_eq!(
            rate(&mut scraper, &[("a", 1200), ("b", 50), ("c", 100_000)], 20),
            Some(15.0)
        );
        // c leaves: the sum drops by 100,000 but the rate does not.
        assert_eq!(
            rate(&mut scraper, &[("a", 1300), ("b", 150)], 30),
            Some(20.0)
        );
    }

    #[test]
    fn a_stuck_replica_moves_the_maximum_but_not_a_percentile() {
        let selectors = ScrapeSelectors {
            oldest_age_s: Some("oldest_seconds".parse().unwrap()),
            ..only_queue("waiting")
        };
        let t0: Timestamp = "2026-12-01T09:00:00Z".parse().unwrap();
        // Twenty replicas: nineteen with requests one to two seconds old, one with a request
        // stuck for 600 s.
        let texts: Vec<String> = (0..20)
            .map(|i| {
                let age = if i == 19 {
                    600.0
                } else {
                    1.0 + f64::from(i) / 16.0
                };
                format!("waiting 1\noldest_seconds {age}\n")
            })
            .collect();
        let urls: Vec<String> = (0..20)
            .map(|i| format!("http://10.0.0.{i}/metrics"))
            .collect();
        let pages: Vec<(&str, &str)> = urls
            .iter()
            .map(String::as_str)
            .zip(texts.iter().map(String::as_str))
            .collect();
        let max = Scraper::default()
            .fleet_signal(&selectors, &pages, t0)
            .unwrap();
        assert_eq!(max.oldest_age_s, Some(600.0));
        let p90 = Scraper::with_age(AgeAggregation::Percentile(90))
            .fleet_signal(&selectors, &pages, t0)
            .unwrap();
        let age = p90.oldest_age_s.unwrap();
        // Rank 0.9 × 19 = 17.1: a tenth of the way from 2.0625 to 2.125, the stuck one unseen.
        assert!((age - 2.06875).abs() < 1e-9, "{age}");
    }

    #[test]
    fn a_fleet_is_summed_replica_by_replica() {
        let selectors = ScrapeSelectors {
            oldest_age_s: Some("oldest_seconds".parse().unwrap()),
            arrivals_total: Some("arrived_total".parse().unwrap()),
            ..only_queue("waiting")
        };
        // Every pod exports the same series (no pod label): they are still three series.
        let pod = |waiting: u64, oldest: f64, arrived: u64| {
            format!("waiting {waiting}\noldest_seconds {oldest}\narrived_total {arrived}\n")
        };
        let t0: Timestamp = "2026-12-01T09:00:00Z".parse().unwrap();
        let mut scraper = Scraper::default();
        let urls = ["http://a/metrics", "http://b/metrics", "http://c/metrics"];
        let mut read = |texts: [String; 3], at| {
            let pages: Vec<(&str, &str)> = urls
                .into_iter()
                .zip(texts.iter().map(String::as_str))
                .collect();
            scraper.fleet_signal(&selectors, &pages, at).unwrap()
        };
        let signal = read([pod(30, 12.0, 100), pod(2, 1.5, 100), pod(1, 0.5, 100)], t0);
        assert_eq!(signal.queue_depth, 33);
        assert_eq!(signal.oldest_age_s, Some(12.0), "the oldest of any replica");
        assert_eq!(signal.replica_queue_depths, [30, 2, 1]);
        let later = t0 + chrono::Duration::seconds(10);
        let signal = read(
            [pod(30, 12.0, 150), pod(2, 1.5, 130), pod(1, 0.5, 120)],
            later,
        );
        assert_eq!(signal.arrival_rate_rps, Some(10.0), "(50 + 30 + 20) / 10 s");
        let one = scraper.signal(&selectors, &pod(4, 1.0, 0), t0).unwrap();
        assert!(
            one.replica_queue_depths.is_empty(),
            "one page is not a fleet"
        );
    }
}
