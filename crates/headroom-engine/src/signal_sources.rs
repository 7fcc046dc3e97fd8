//! The signal sources' loop: each pool with a `[pools.scrape]` target reads its pages (one
//! endpoint, a target list, or the pool's Ready pods) and each pool with a Prometheus
//! `[pools.signals]` source queries it, on their own intervals, and hands the signal to the
//! engine, or records why there is none. The I/O lives here; what a page or a query answer means
//! is in `crate::scrape` and `crate::prometheus`.

use std::time::Duration;

use crate::scrape::Scraper;

/// Every page of `urls`, read at once (one thread each, each bounded by `timeout`), or which of
/// them failed and why: a fleet's sum is only a sum with every replica in it.
fn scrape_all(urls: &[String], timeout: Duration) -> Result<Vec<String>, String> {
    let results: Vec<Result<String, String>> = std::thread::scope(|scope| {
        let reads: Vec<_> = urls
            .iter()
            .map(|url| scope.spawn(move || crate::http::get_metrics_text(url, timeout)))
            .collect();
        reads
            .into_iter()
            .map(|read| {
                read.join()
                    .unwrap_or_else(|_| Err("the scrape panicked".into()))
            })
            .collect()
    });
    let failed: Vec<String> = urls
        .iter()
        .zip(&results)
        .filter_map(|(url, r)| r.as_ref().err().map(|e| format!("scraping {url}: {e}")))
        .collect();
    if !failed.is_empty() {
        return Err(failed.join("; "));
    }
    Ok(results.into_iter().flatten().collect())
}

/// Reads every pool that has a `[pools.scrape]` target or a `[pools.signals]` Prometheus source,
/// each on its own interval, until `shutdown` resolves, pushing each signal to `engine`. A failed
/// read is recorded on the pool ([`crate::Engine::signal_source_failed`]); with no fresh signal
/// the pool holds and says why.
pub async fn run(
    engine: std::sync::Arc<crate::Engine>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    for (pool, target) in engine.config().scrape.clone() {
        let engine = engine.clone();
        tasks.spawn(async move {
            let mut scraper = Scraper::with_age(target.age);
            loop {
                let urls = match &target.pods {
                    Some(pods) => engine
                        .ready_model_pods(&pool)
                        .iter()
                        .map(|ip| pods.url(ip))
                        .collect(),
                    None => target.urls.clone(),
                };
                let result = if urls.is_empty() {
                    // Nothing to read is not a queue of zero: the pool holds instead.
                    Err(format!(
                        "pool {pool} has no Ready model-server pod to scrape"
                    ))
                } else {
                    let (reading, timeout) = (urls.clone(), target.timeout);
                    let fetched =
                        tokio::task::spawn_blocking(move || scrape_all(&reading, timeout)).await;
                    let at = engine.clock().now();
                    match fetched {
                        Ok(Ok(pages)) => {
                            let pages: Vec<(&str, &str)> = urls
                                .iter()
                                .map(String::as_str)
                                .zip(pages.iter().map(String::as_str))
                                .collect();
                            scraper.fleet_signal(&target.selectors, &pages, at)
                        }
                        Ok(Err(e)) => Err(e),
                        Err(e) => Err(e.to_string()),
                    }
                };
                match result {
                    Ok(signal) => engine.push_signal(&pool, signal),
                    Err(e) => engine.signal_source_failed(&pool, e),
                }
                tokio::time::sleep(target.interval).await;
            }
        });
    }
    for (pool, source) in engine.config().prometheus.clone() {
        let Some(max_age) = engine
            .config()
            .pool(&pool)
            .map(|p| p.scaling.signal_max_age)
        else {
            continue;
        };
        let engine = engine.clone();
        tasks.spawn(async move {
            loop {
                let (reader, source_now) = (engine.clone(), source.clone());
                let read = tokio::task::spawn_blocking(move || {
                    crate::prometheus::read(&source_now, || reader.clock().now(), max_age)
                })
                .await;
                match read {
                    Ok(Ok(signal)) => engine.push_signal(&pool, signal),
                    Ok(Err(e)) => {
                        engine.signal_source_failed(&pool, format!("querying {}: {e}", source.url))
                    }
                    Err(e) => engine.signal_source_failed(&pool, e.to_string()),
                }
                tokio::time::sleep(source.interval).await;
            }
        });
    }
    shutdown.await;
    tasks.abort_all();
}
