//! `[pools.scrape]`: where a pool's signals are scraped from, and how often.

use std::time::Duration;

use super::raw::RawScrape;
use super::{Problems, Within};
use crate::scrape::ScrapeTarget;

pub(super) fn target(key: &str, raw: &RawScrape, p: &mut Problems) -> ScrapeTarget {
    let interval = match &raw.interval {
        Some(text) => p.duration(&format!("{key}.interval"), text, Within::secs(1, 300, "5s")),
        None => Duration::from_secs(5),
    };
    let timeout = match &raw.timeout {
        Some(text) => p.duration(
            &format!("{key}.timeout"),
            text,
            Within::millis(10, 300_000, "2s"),
        ),
        None => Duration::from_secs(2),
    };
    if !(raw.url.starts_with("http://") || raw.url.starts_with("https://")) {
        p.add(
            &format!("{key}.url"),
            format!("{:?} is not an http:// or https:// URL", raw.url),
            "scrape an endpoint such as \"http://10.0.0.5:8000/metrics\"",
        );
    }
    let (interval_key, timeout_key) = (format!("{key}.interval"), format!("{key}.timeout"));
    if !p.reported(&interval_key) && !p.reported(&timeout_key) && timeout > interval {
        p.add(
            &timeout_key,
            "must be at most the interval",
            "use e.g. \"2s\"",
        );
    }
    ScrapeTarget {
        url: raw.url.clone(),
        interval,
        timeout,
        selectors: raw.series.clone(),
    }
}
