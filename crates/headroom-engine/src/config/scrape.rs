//! `[pools.scrape]`: where a pool's signals are scraped from, and how often.

use std::time::Duration;

use super::Problems;
use super::raw::RawScrape;
use crate::scrape::ScrapeTarget;

pub(super) fn target(key: &str, raw: &RawScrape, p: &mut Problems) -> ScrapeTarget {
    let interval = match &raw.interval {
        Some(text) => p.duration(&format!("{key}.interval"), text),
        None => Duration::from_secs(5),
    };
    let timeout = match &raw.timeout {
        Some(text) => p.duration(&format!("{key}.timeout"), text),
        None => Duration::from_secs(2),
    };
    if !(raw.url.starts_with("http://") || raw.url.starts_with("https://")) {
        p.add(
            &format!("{key}.url"),
            format!("{:?} is not an http:// or https:// URL", raw.url),
            "scrape an endpoint such as \"http://10.0.0.5:8000/metrics\"",
        );
    }
    if interval < Duration::from_secs(1) || interval > Duration::from_secs(300) {
        p.add(
            &format!("{key}.interval"),
            "must be between 1s and 5m",
            "use e.g. \"5s\"",
        );
    }
    if timeout.is_zero() || timeout > interval {
        p.add(
            &format!("{key}.timeout"),
            "must be more than zero and at most the interval",
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
