//! `headroom`: the real [`Engine`] — controller, planner, governor, executor and a SQLite
//! ledger — ticked on a [`ManualClock`] with signals pushed from the model, exactly as
//! `headroom demo` drives it. Its ids are drawn from the run's seed, so a seed replays the run,
//! node ids included.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use headroom_cloud::{Clock, ManualClock, SimCloud};
use headroom_config::Config;
use headroom_core::{Offering, OfferingId, Timestamp};
use headroom_engine::{Engine, SignalInput};
use headroom_ledger::{EngineMemory, History, IdSource, NodeEvents, SqliteLedger};

use super::driver::{Books, Control, PolicyDriver, cloud_paying, ready_replicas};
use crate::error::SimError;
use crate::model::{Gate, Model, UtilMeter};
use crate::scenario::Scenario;

/// The window exporters' rates are computed over.
const RATE_WINDOW_S: f64 = 10.0;

/// Arrivals (in all and per tier) and departures over a sliding window, as an exporter's
/// `rate()` reports them.
#[derive(Debug, Default)]
struct Rates {
    window: VecDeque<(f64, u64, u64)>,
    tiers: VecDeque<(f64, Vec<u64>)>,
}

impl Rates {
    /// Arrivals per second per tier over the window.
    fn read_tiers(&mut self, t: f64, arrivals: &[u64]) -> Vec<f64> {
        self.tiers.push_back((t, arrivals.to_vec()));
        while self
            .tiers
            .front()
            .is_some_and(|(t0, _)| t - t0 > RATE_WINDOW_S + 1e-9)
        {
            self.tiers.pop_front();
        }
        match self.tiers.front() {
            Some((t0, a0)) if t > *t0 => arrivals
                .iter()
                .zip(a0)
                .map(|(a, b)| (a - b) as f64 / (t - t0))
                .collect(),
            _ => vec![0.0; arrivals.len()],
        }
    }

    fn read(&mut self, t: f64, arrivals: u64, departures: u64) -> (f64, f64) {
        self.window.push_back((t, arrivals, departures));
        while self
            .window
            .front()
            .is_some_and(|(t0, _, _)| t - t0 > RATE_WINDOW_S + 1e-9)
        {
            self.window.pop_front();
        }
        match self.window.front() {
            Some(&(t0, a0, d0)) if t > t0 => (
                (arrivals - a0) as f64 / (t - t0),
                (departures - d0) as f64 / (t - t0),
            ),
            _ => (0.0, 0.0),
        }
    }
}

fn engine_err(e: impl std::fmt::Display) -> SimError {
    SimError::Engine(e.to_string())
}

/// What a pool's exporter remembers between scrapes.
#[derive(Debug, Default)]
struct Exporter {
    meter: UtilMeter,
    rates: Rates,
}

/// The real engine, its ledger (a temporary SQLite file) and the signals it is fed.
pub struct EngineDriver<'s> {
    sc: &'s Scenario,
    engine: Arc<Engine>,
    ledger: Arc<SqliteLedger>,
    cloud: Arc<SimCloud>,
    offerings: HashMap<OfferingId, Offering>,
    /// The ledger's instant of the run's t = 0 (after the pool was filled).
    start: Timestamp,
    _dir: tempfile::TempDir,
    /// Per simulated pool, in the scenario's order.
    exporters: Vec<Exporter>,
}

impl<'s> EngineDriver<'s> {
    /// An engine on `cloud`, its pools filled to their floors and warm pools before the traffic
    /// starts (skipping through the cold-start ladder as `headroom demo` does).
    pub async fn start(
        sc: &'s Scenario,
        config: &Config,
        cloud: Arc<SimCloud>,
        clock: Arc<ManualClock>,
        keep: Option<&std::path::Path>,
    ) -> Result<EngineDriver<'s>, SimError> {
        let dir =
            tempfile::tempdir().map_err(|e| SimError::Io(format!("temporary ledger: {e}")))?;
        let path = keep.map_or_else(|| dir.path().join("sim-ledger.db"), |p| p.to_path_buf());
        let ids = IdSource::seeded(config.sim.seed);
        let ledger = Arc::new(
            SqliteLedger::open_scratch(&path)
                .await
                .map_err(engine_err)?
                .with_ids(ids.clone()),
        );
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let engine = Engine::with_ids(
            Arc::new(config.clone()),
            ledger.clone(),
            cloud.clone(),
            dyn_clock,
            None,
            ids,
        );
        for _ in 0..60 {
            for pool in &sc.pools {
                engine.push_signal(
                    &pool.spec.name,
                    // No traffic yet: the pool is filled to its floor and warm pool, as every
                    // policy starts; what the traffic needs it meets from t = 0.
                    SignalInput {
                        queue_depth: 0,
                        arrival_rate_rps: Some(0.0),
                        ..SignalInput::default()
                    },
                );
            }
            engine.tick().await.map_err(engine_err)?;
            let filled = sc.pools.iter().all(|pool| {
                engine.pool_status(&pool.spec.name).is_some_and(|s| {
                    s.ready >= s.min_replicas
                        && s.warm >= s.warm_pool_size
                        && s.requested + s.starting == 0
                })
            });
            if filled {
                break;
            }
            clock.advance(Duration::from_secs(30));
        }
        Ok(EngineDriver {
            sc,
            engine,
            ledger,
            offerings: super::offerings_of(config),
            cloud,
            start: clock.now(),
            _dir: dir,
            exporters: sc.pools.iter().map(|_| Exporter::default()).collect(),
        })
    }

    /// What pool `i`'s exporter reports now.
    fn signal(&mut self, i: usize, t: f64, model: &Model<'_>) -> SignalInput {
        let exporter = &mut self.exporters[i];
        let (arrivals, departures) =
            exporter
                .rates
                .read(t, model.totals.arrivals, model.totals.departures);
        let utils: Vec<f64> = exporter
            .meter
            .read(model, t)
            .into_iter()
            .flatten()
            .collect();
        let ready = model.ready();
        let tier_rates = exporter.rates.read_tiers(t, model.arrivals_by_tier());
        let priorities = &self.sc.queue.priorities;
        let mut queue_depth_by_priority = BTreeMap::new();
        let mut arrival_rate_by_priority_rps = BTreeMap::new();
        for ((priority, queued), rate) in priorities
            .iter()
            .zip(model.waiting_by_tier())
            .zip(tier_rates)
        {
            *queue_depth_by_priority.entry(*priority).or_insert(0) += queued;
            *arrival_rate_by_priority_rps.entry(*priority).or_insert(0.0) += rate;
        }
        SignalInput {
            queue_depth_by_priority,
            arrival_rate_by_priority_rps,
            queue_depth: model.waiting(),
            oldest_age_s: model.oldest_age_s(t),
            arrival_rate_rps: Some(arrivals),
            departure_rate_rps: (t >= RATE_WINDOW_S).then_some(departures),
            batch_occupancy: (ready > 0)
                .then(|| model.in_service() as f64 / model.slots().max(1) as f64),
            gpu_utilization: (!utils.is_empty())
                .then(|| utils.iter().sum::<f64>() / utils.len() as f64),
            ..SignalInput::default()
        }
    }
}

impl PolicyDriver for EngineDriver<'_> {
    fn sheds(&self) -> bool {
        true
    }

    fn cloud(&self) -> Option<&SimCloud> {
        Some(&self.cloud)
    }

    async fn control(
        &mut self,
        sc: &Scenario,
        t: f64,
        models: &[Model<'_>],
    ) -> Result<Vec<Control>, SimError> {
        for (i, (pool, model)) in sc.pools.iter().zip(models).enumerate() {
            let signal = self.signal(i, t, model);
            self.engine.push_signal(&pool.spec.name, signal);
        }
        self.engine.tick().await.map_err(engine_err)?;
        Ok(sc
            .pools
            .iter()
            .map(|pool| {
                let name = &pool.spec.name;
                let status = self.engine.pool_status(name);
                let ready = ready_replicas(&self.cloud, pool, self.engine.serving_instances(name));
                Control {
                    desired: status.as_ref().map_or(0, |s| s.desired),
                    starting: status.as_ref().map_or(0, |s| s.requested + s.starting),
                    handed_to_fallback: status.as_ref().map_or(0, |s| s.handed_to_fallback),
                    admission: status.map_or_else(Vec::new, |s| {
                        s.admission
                            .iter()
                            .map(|t| Gate {
                                priority: t.priority,
                                admit: t.admit,
                                max_queued: t.max_queued,
                            })
                            .collect()
                    }),
                    ready,
                }
            })
            .collect())
    }

    fn paying(&self, _t: f64) -> Vec<(f64, f64)> {
        self.sc
            .pools
            .iter()
            .map(|pool| cloud_paying(&self.cloud, pool.spec.name.as_str(), &self.offerings))
            .collect()
    }

    /// Refusals by reason from the ledger for the run's window; fallbacks as the planner named
    /// them.
    async fn books(&self, end_s: f64) -> Result<Books, SimError> {
        // The simulated cloud ends with the run: every node still live ends at the run's end, so
        // a kept ledger (`--ledger`) is reported up to there, as `headroom demo`'s is.
        let end = self.start + super::duration(end_s);
        for last in self.ledger.live_nodes().await.map_err(engine_err)? {
            let ended = last.next(
                headroom_core::NodeState::Terminated,
                "simulation_ended",
                end,
            );
            self.ledger
                .append_node_event(&ended)
                .await
                .map_err(engine_err)?;
        }
        let to = end + chrono::Duration::seconds(1);
        let mut refusals = BTreeMap::new();
        for r in self
            .ledger
            .refusals_between(self.start, to)
            .await
            .map_err(engine_err)?
        {
            *refusals.entry(r.reason.code()).or_insert(0) += r.replicas as u64;
        }
        let mut fallbacks = BTreeMap::new();
        for pool in &self.sc.pools {
            for (kind, n) in self.engine.metrics().fallbacks_of(&pool.spec) {
                *fallbacks.entry(kind).or_insert(0) += n;
            }
        }
        Ok(Books {
            refusals,
            fallbacks,
            decisions: self.decisions().await?,
        })
    }
}

impl EngineDriver<'_> {
    /// Every decision of the run, pool by pool, oldest first, each with its `pool` and `t_s`
    /// (seconds into the run; negative while the pools were filled before the traffic): the
    /// ledger's closed entries and the one in force.
    async fn decisions(&self) -> Result<Vec<serde_json::Value>, SimError> {
        let mut out = Vec::new();
        for pool in &self.sc.pools {
            let name = &pool.spec.name;
            let mut log: Vec<serde_json::Value> = self
                .ledger
                .decisions(name, i64::MAX)
                .await
                .map_err(engine_err)?
                .iter()
                .filter_map(|r| serde_json::from_str(r).ok())
                .collect();
            // The entry in force reaches the ledger only once another supersedes it.
            let newest = self.engine.decisions(name).await.map_err(engine_err)?;
            if let Some(open) = newest.into_iter().next().filter(|v| log.first() != Some(v)) {
                log.insert(0, open);
            }
            for mut entry in log.into_iter().rev() {
                let at = entry
                    .get("at")
                    .and_then(|a| serde_json::from_value::<Timestamp>(a.clone()).ok());
                if let Some(fields) = entry.as_object_mut() {
                    fields.insert("pool".into(), name.as_str().into());
                    if let Some(at) = at {
                        let t_s = (at - self.start).num_milliseconds() as f64 / 1000.0;
                        fields.insert("t_s".into(), t_s.into());
                    }
                }
                out.push(entry);
            }
        }
        Ok(out)
    }
}
