//! The simulated cloud: the embedded default, deterministic under a seed.
//!
//! It models what makes GPU capacity hard: per-offering capacity that runs out (and refuses with
//! the capacity class), a GPU quota per region, spot interruptions, prices, and the cold-start
//! ladder per offering. Phases are computed from the injected [`Clock`], so the same simulated
//! cloud runs in real time under `serve`, sped up under `demo` and in virtual time in the
//! simulator. It also records every call and accepts injected faults, for tests.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use headroom_core::pool::ColdStartLadder;
use headroom_core::{
    ErrorClass, LadderRung, Market, Money, Offering, OfferingId, ProviderKind, QuotaDraw,
    QuotaHeadroom, QuotaUnit, Timestamp,
};

use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::provider::{
    CloudError, CloudProvider, Instance, InstanceId, InstancePhase, LaunchSpec, Quotas,
};

/// One offering of the simulated cloud.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOffering {
    pub offering: Offering,
    /// Instances of this offering that can run at once before launches are refused.
    pub capacity: u32,
    pub ladder: ColdStartLadder,
    /// Mean spot interruptions per instance-hour (ignored for other markets).
    pub spot_interruptions_per_hour: f64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SimConfig {
    pub seed: u64,
    pub offerings: Vec<SimOffering>,
    /// GPUs that may run at once per region; regions not listed are unlimited.
    pub gpu_quota_per_region: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum Life {
    /// Running since `since`; `from_stopped` nodes skip acquisition and image pull.
    Running {
        since: Timestamp,
        from_stopped: bool,
    },
    Stopped,
    Terminated,
    Interrupted,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SimInstance {
    instance: Instance,
    life: Life,
    /// When the cloud will reclaim this spot instance, drawn from the seeded RNG at launch.
    interrupt_at: Option<Timestamp>,
    /// The launch's user data, as a cloud keeps it on the instance.
    #[serde(default)]
    user_data: Option<String>,
}

/// What a state file keeps: the cloud's side of the world, which outlives any one process.
#[derive(Debug, Serialize, Deserialize)]
struct Persisted {
    rng_state: u64,
    next_id: u64,
    instances: BTreeMap<InstanceId, SimInstance>,
    by_token: HashMap<String, InstanceId>,
}

#[derive(Debug)]
struct SimState {
    rng: fastrand::Rng,
    next_id: u64,
    /// Instances not terminated: what a refresh may still change and a listing shows.
    instances: BTreeMap<InstanceId, SimInstance>,
    /// Terminated instances, final: kept apart so that a week of launches and terminations
    /// does not make every listing walk (and copy) every instance ever made.
    terminated: BTreeMap<InstanceId, SimInstance>,
    by_token: HashMap<String, InstanceId>,
    /// Offering → (class, remaining count) of injected launch failures.
    faults: HashMap<OfferingId, (ErrorClass, u32)>,
    calls: Vec<String>,
}

/// The simulated cloud. Cheap to clone a handle to via `Arc`.
#[derive(Debug)]
pub struct SimCloud {
    clock: Arc<dyn Clock>,
    offerings: Mutex<HashMap<OfferingId, SimOffering>>,
    gpu_quota_per_region: BTreeMap<String, u32>,
    state: Mutex<SimState>,
    launch_delay: Mutex<std::time::Duration>,
    /// How long a launch takes to answer once the instance exists.
    answer_delay: Mutex<std::time::Duration>,
    /// The spot market's current price per offering, where a test or scenario set one; a spot
    /// launch whose most-we-pay (the offering's price) is below it is refused, as EC2 does.
    spot_prices: Mutex<HashMap<OfferingId, Money>>,
    /// When set, the cloud's state lives in this file, shared by every process that names it
    /// and surviving their crashes (a lock file serialises them).
    state_file: Option<PathBuf>,
    /// The provider kind it answers as: `sim`, or another kind when it stands in for that
    /// cloud's offerings beside a second simulated cloud (see [`SimCloud::standing_in_for`]).
    provider: ProviderKind,
    /// While set, every call answers a transient error, as a cloud API in an outage does.
    outage: std::sync::atomic::AtomicBool,
}

/// The state for one call: the in-process lock, and with a state file, the file lock; the state
/// is loaded when the guard is made and saved when it is dropped.
struct StateGuard<'a> {
    state: MutexGuard<'a, SimState>,
    file: Option<(&'a Path, File)>,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = SimState;
    fn deref(&self) -> &SimState {
        &self.state
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut SimState {
        &mut self.state
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        let Some((path, _lock)) = &self.file else {
            return;
        };
        let persisted = Persisted {
            rng_state: self.state.rng.get_seed(),
            next_id: self.state.next_id,
            instances: self
                .state
                .instances
                .iter()
                .chain(&self.state.terminated)
                .map(|(id, i)| (id.clone(), i.clone()))
                .collect(),
            by_token: self.state.by_token.clone(),
        };
        // Write then rename: a crash mid-write leaves the previous state, never half of one.
        let tmp = path.with_extension("tmp");
        let written = serde_json::to_vec(&persisted)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            eprintln!(
                "simulated cloud: cannot save state to {}: {e}",
                path.display()
            );
        }
    }
}

fn refused(provider: ProviderKind, class: ErrorClass, code: &str, message: String) -> CloudError {
    CloudError::Refused {
        provider,
        class,
        code: code.to_string(),
        message,
    }
}

impl SimCloud {
    pub fn new(config: SimConfig, clock: Arc<dyn Clock>) -> Self {
        SimCloud {
            clock,
            offerings: Mutex::new(
                config
                    .offerings
                    .into_iter()
                    .map(|o| (o.offering.id.clone(), o))
                    .collect(),
            ),
            gpu_quota_per_region: config.gpu_quota_per_region,
            state_file: None,
            provider: ProviderKind::Sim,
            outage: std::sync::atomic::AtomicBool::new(false),
            launch_delay: Mutex::new(std::time::Duration::ZERO),
            answer_delay: Mutex::new(std::time::Duration::ZERO),
            spot_prices: Mutex::new(HashMap::new()),
            state: Mutex::new(SimState {
                rng: fastrand::Rng::with_seed(config.seed),
                next_id: 1,
                instances: BTreeMap::new(),
                terminated: BTreeMap::new(),
                by_token: HashMap::new(),
                faults: HashMap::new(),
                calls: Vec::new(),
            }),
        }
    }

    /// Keeps the cloud's state in `path` (created if missing), so that several processes share
    /// one simulated cloud and a killed process loses nothing.
    pub fn with_state_file(mut self, path: PathBuf) -> Self {
        self.state_file = Some(path);
        self
    }

    /// Answers as `provider` (its kind, its refusals, ids `sim-<provider>-…`): a second
    /// simulated cloud beside a `sim` one, so that a composite of clouds
    /// ([`crate::MultiCloud`]) runs without any cloud's SDK.
    pub fn standing_in_for(mut self, provider: ProviderKind) -> Self {
        self.provider = provider;
        self
    }

    /// Takes the cloud's API down (every call answers a transient `ServiceUnavailable`, nothing
    /// changes) or brings it back.
    pub fn set_outage(&self, down: bool) {
        self.outage
            .store(down, std::sync::atomic::Ordering::Relaxed);
    }

    fn up(&self) -> Result<(), CloudError> {
        if self.outage.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(refused(
                self.provider,
                ErrorClass::Transient,
                "ServiceUnavailable",
                "the simulated cloud's API is down".to_string(),
            ));
        }
        Ok(())
    }

    fn state(&self) -> StateGuard<'_> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(path) = self.state_file.as_deref() else {
            return StateGuard { state, file: None };
        };
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path.with_extension("lock"))
            .and_then(|f| f.lock().map(|()| f));
        let lock = match lock {
            Ok(lock) => lock,
            Err(e) => {
                eprintln!(
                    "simulated cloud: cannot lock {}: {e}; using memory only",
                    path.display()
                );
                return StateGuard { state, file: None };
            }
        };
        match std::fs::read(path) {
            Ok(bytes) => match serde_json::from_slice::<Persisted>(&bytes) {
                Ok(p) => {
                    state.rng = fastrand::Rng::with_seed(p.rng_state);
                    state.next_id = p.next_id;
                    let (terminated, instances) = p
                        .instances
                        .into_iter()
                        .partition(|(_, i)| i.life == Life::Terminated);
                    state.instances = instances;
                    state.terminated = terminated;
                    state.by_token = p.by_token;
                }
                Err(e) => eprintln!(
                    "simulated cloud: {} is not a state file ({e}); starting empty",
                    path.display()
                ),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => eprintln!("simulated cloud: cannot read {}: {e}", path.display()),
        }
        StateGuard {
            state,
            file: Some((path, lock)),
        }
    }

    fn catalog(&self) -> MutexGuard<'_, HashMap<OfferingId, SimOffering>> {
        self.offerings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes every launch take this long before the cloud answers (a slow or hanging API).
    pub fn set_launch_delay(&self, delay: std::time::Duration) {
        *self.launch_delay.lock().unwrap_or_else(|e| e.into_inner()) = delay;
    }

    /// Makes every launch answer this long after the instance exists (and is saved to the
    /// state file): a window in which the caller may die knowing nothing of it, as with a cloud
    /// whose API answers slowly.
    pub fn set_launch_answer_delay(&self, delay: std::time::Duration) {
        *self.answer_delay.lock().unwrap_or_else(|e| e.into_inner()) = delay;
    }

    /// Moves the spot market: `offering`'s price is now `price` per hour, quoted by
    /// `current_prices` and compared with the most a launch will pay (the offering's price). A
    /// market above that maximum also reclaims the offering's running instances, after the usual
    /// notice, as EC2 does with instances whose maximum price the market passes.
    pub fn set_spot_price(&self, offering: &OfferingId, price: Money) {
        self.spot_prices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(offering.clone(), price);
        let max = self
            .catalog()
            .get(offering)
            .map(|o| o.offering.price_usd_per_hour);
        if max.is_some_and(|max| price > max) {
            let reclaim_at = self.clock.now() + chrono::Duration::seconds(INTERRUPTION_NOTICE_S);
            self.interrupt(offering, u32::MAX, reclaim_at);
        }
    }

    /// The spot market's current price for `offering`, if one was set.
    pub fn spot_price(&self, offering: &OfferingId) -> Option<Money> {
        self.spot_prices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(offering)
            .copied()
    }

    /// Makes the next `times` launches of `offering` fail with `class` (tests, chaos drills).
    pub fn inject_launch_fault(&self, offering: &OfferingId, class: ErrorClass, times: u32) {
        self.state().faults.insert(offering.clone(), (class, times));
    }

    /// Ends every injected launch fault.
    pub fn clear_launch_faults(&self) {
        self.state().faults.clear();
    }

    /// Changes how many instances of `offering` may run at once (a stockout is `0`).
    pub fn set_capacity(&self, offering: &OfferingId, capacity: u32) {
        if let Some(o) = self.catalog().get_mut(offering) {
            o.capacity = capacity;
        }
    }

    /// Schedules the reclaim of up to `count` running instances of `offering` at `at` (a wave
    /// of spot interruptions); they get the usual notice before. Returns how many were chosen.
    pub fn interrupt(&self, offering: &OfferingId, count: u32, at: Timestamp) -> u32 {
        let mut state = self.state();
        let mut chosen = 0;
        let mut ids: Vec<InstanceId> = state
            .instances
            .iter()
            .filter(|(_, s)| {
                &s.instance.offering == offering && matches!(s.life, Life::Running { .. })
            })
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        for id in ids.into_iter().take(count as usize) {
            if let Some(sim) = state.instances.get_mut(&id) {
                sim.interrupt_at = Some(sim.interrupt_at.map_or(at, |t| t.min(at)));
                chosen += 1;
            }
        }
        chosen
    }

    /// Every call made so far, as `method target` lines.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    /// The user data an instance was launched with (what EC2's DescribeInstanceAttribute
    /// `userData` or GCE's metadata would show).
    pub fn user_data(&self, id: &InstanceId) -> Option<String> {
        let state = self.state();
        state
            .instances
            .get(id)
            .or_else(|| state.terminated.get(id))
            .and_then(|i| i.user_data.clone())
    }

    /// Forgets every client token, as a cloud does once its idempotency window has passed: a
    /// launch repeated with a token seen before then starts a second instance.
    pub fn forget_client_tokens(&self) {
        self.state().by_token.clear();
    }

    /// Every instance ever created, whatever its phase (for tests), in id order.
    pub fn all_instances(&self) -> Vec<Instance> {
        let mut all = self.instances_in_play();
        all.extend(self.state().terminated.values().map(|i| i.instance.clone()));
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// Every instance not terminated (pending to ready, stopped, interrupted), in id order:
    /// what the simulator reads each tick, at a cost that does not grow with the run.
    pub fn instances_in_play(&self) -> Vec<Instance> {
        let now = self.clock.now();
        let catalog = self.catalog().clone();
        let mut state = self.state();
        let ids: Vec<InstanceId> = state.instances.keys().cloned().collect();
        ids.iter()
            .filter_map(|id| refresh(&mut state, &catalog, id, now))
            .collect()
    }
}

/// Seconds of warning before a spot interruption, as on AWS.
pub const INTERRUPTION_NOTICE_S: i64 = 120;

/// Brings one instance's phase up to `now` and returns its description.
fn refresh(
    state: &mut SimState,
    catalog: &HashMap<OfferingId, SimOffering>,
    id: &InstanceId,
    now: Timestamp,
) -> Option<Instance> {
    let Some(sim) = state.instances.get_mut(id) else {
        return state.terminated.get(id).map(|i| i.instance.clone());
    };
    if let (Life::Running { .. }, Some(at)) = (sim.life, sim.interrupt_at)
        && at <= now
    {
        sim.life = Life::Interrupted;
    }
    // Like AWS, the cloud warns two minutes before it reclaims a running spot instance.
    sim.instance.interruption_notice = match (sim.life, sim.interrupt_at) {
        (Life::Running { .. } | Life::Interrupted, Some(at))
            if now + chrono::Duration::seconds(INTERRUPTION_NOTICE_S) >= at =>
        {
            Some(at)
        }
        _ => None,
    };
    sim.instance.phase = match sim.life {
        Life::Running {
            since,
            from_stopped,
        } => {
            let ladder = catalog.get(&sim.instance.offering).map(|o| o.ladder);
            running_phase(ladder, since, from_stopped, now)
        }
        Life::Stopped => InstancePhase::Stopped,
        Life::Terminated => InstancePhase::Terminated,
        Life::Interrupted => InstancePhase::Interrupted,
    };
    Some(sim.instance.clone())
}

fn running_phase(
    ladder: Option<ColdStartLadder>,
    since: Timestamp,
    from_stopped: bool,
    now: Timestamp,
) -> InstancePhase {
    let Some(ladder) = ladder else {
        return InstancePhase::Ready;
    };
    let rungs: &[LadderRung] = if from_stopped {
        ColdStartLadder::rungs_from_stopped()
    } else {
        &LadderRung::ALL
    };
    let elapsed = (now - since).to_std().unwrap_or_default();
    let mut climbed = std::time::Duration::ZERO;
    for rung in rungs {
        climbed += ladder.rung(*rung);
        if elapsed < climbed {
            // Like EC2, an instance is pending until the node is acquired, then running (the
            // rest of the ladder is the node's own boot).
            if *rung == LadderRung::NodeAcquisition {
                return InstancePhase::Pending;
            }
            return InstancePhase::Booting(*rung);
        }
    }
    InstancePhase::Ready
}

fn holds_capacity(life: Life) -> bool {
    matches!(life, Life::Running { .. })
}

/// GPUs of running (pending or booting included) instances in `region`: what its quota counts.
fn gpus_running(state: &SimState, catalog: &HashMap<OfferingId, SimOffering>, region: &str) -> u32 {
    state
        .instances
        .values()
        .filter(|i| holds_capacity(i.life))
        .filter_map(|i| catalog.get(&i.instance.offering))
        .filter(|o| o.offering.region == region)
        .map(|o| o.offering.gpus_per_node)
        .sum()
}

/// The name of the simulated cloud's one quota a region.
pub const SIM_GPU_QUOTA: &str = "gpus";

impl SimCloud {
    /// Refuses if starting one more instance of `offering` would exceed capacity or quota.
    fn check_room(
        &self,
        state: &SimState,
        catalog: &HashMap<OfferingId, SimOffering>,
        offering: &SimOffering,
    ) -> Result<(), CloudError> {
        let running_here = state
            .instances
            .values()
            .filter(|i| i.instance.offering == offering.offering.id && holds_capacity(i.life))
            .count() as u32;
        if running_here >= offering.capacity {
            return Err(refused(
                self.provider,
                ErrorClass::Capacity,
                "InsufficientCapacity",
                format!(
                    "no {} capacity left in {}",
                    offering.offering.instance_type, offering.offering.zone
                ),
            ));
        }
        let region = &offering.offering.region;
        if let Some(quota) = self.gpu_quota_per_region.get(region) {
            let gpus_running = gpus_running(state, catalog, region);
            if gpus_running + offering.offering.gpus_per_node > *quota {
                return Err(refused(
                    self.provider,
                    ErrorClass::Quota,
                    "GpuQuotaExceeded",
                    format!("GPU quota of {quota} in {region} reached"),
                ));
            }
        }
        Ok(())
    }

    /// A launch as the cloud does it; [`CloudProvider::launch`] adds the answer's delay.
    async fn launch_now(&self, spec: &LaunchSpec) -> Result<Instance, CloudError> {
        // The call is on record as soon as it is made, even if the caller gives up waiting.
        self.state()
            .calls
            .push(format!("launch {} {}", spec.offering.id, spec.client_token));
        let delay = *self.launch_delay.lock().unwrap_or_else(|e| e.into_inner());
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let now = self.clock.now();
        let catalog = self.catalog().clone();
        let mut state = self.state();
        if let Some(existing) = state.by_token.get(&spec.client_token).cloned() {
            return refresh(&mut state, &catalog, &existing, now)
                .ok_or(CloudError::NotFound(existing));
        }
        if let Some(price) = self.spot_price(&spec.offering.id)
            && price > spec.offering.price_usd_per_hour
        {
            return Err(refused(
                self.provider,
                ErrorClass::Price,
                "SpotMaxPriceTooLow",
                format!(
                    "spot price {price} for {} is above the maximum price {}",
                    spec.offering.id, spec.offering.price_usd_per_hour
                ),
            ));
        }
        let Some(offering) = catalog.get(&spec.offering.id) else {
            return Err(refused(
                self.provider,
                ErrorClass::InvalidRequest,
                "UnknownOffering",
                format!("the simulated cloud has no offering {}", spec.offering.id),
            ));
        };
        if let Some((class, left)) = state.faults.get_mut(&offering.offering.id)
            && *left > 0
        {
            *left -= 1;
            let class = *class;
            return Err(refused(
                self.provider,
                class,
                "InjectedFault",
                format!("injected {} fault", class.as_str()),
            ));
        }
        self.check_room(&state, &catalog, offering)?;

        let id = match self.provider {
            ProviderKind::Sim => InstanceId(format!("sim-{:06}", state.next_id)),
            other => InstanceId(format!("sim-{other}-{:06}", state.next_id)),
        };
        state.next_id += 1;
        let interrupt_at = (offering.offering.market == Market::Spot
            && offering.spot_interruptions_per_hour > 0.0)
            .then(|| {
                // Exponential time to interruption; 1 - u keeps ln away from zero.
                let u = 1.0 - state.rng.f64();
                let hours = -u.ln() / offering.spot_interruptions_per_hour;
                now + chrono::Duration::milliseconds((hours * 3_600_000.0).min(1e15) as i64)
            });
        let instance = Instance {
            id: id.clone(),
            offering: offering.offering.id.clone(),
            client_token: spec.client_token.clone(),
            tags: spec.tags.clone(),
            phase: InstancePhase::Pending,
            launched_at: now,
            interruption_notice: None,
        };
        state.instances.insert(
            id.clone(),
            SimInstance {
                instance,
                life: Life::Running {
                    since: now,
                    from_stopped: false,
                },
                interrupt_at,
                user_data: spec.user_data.clone(),
            },
        );
        state.by_token.insert(spec.client_token.clone(), id.clone());
        refresh(&mut state, &catalog, &id, now).ok_or(CloudError::NotFound(id))
    }
}

#[async_trait]
impl CloudProvider for SimCloud {
    fn kind(&self) -> ProviderKind {
        self.provider
    }

    async fn launch(&self, spec: &LaunchSpec) -> Result<Instance, CloudError> {
        self.up()?;
        let answer = self.launch_now(spec).await;
        let delay = *self.answer_delay.lock().unwrap_or_else(|e| e.into_inner());
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        answer
    }

    async fn start(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        self.up()?;
        let now = self.clock.now();
        let catalog = self.catalog().clone();
        let mut state = self.state();
        state.calls.push(format!("start {id}"));
        let current = refresh(&mut state, &catalog, id, now)
            .ok_or_else(|| CloudError::NotFound(id.clone()))?;
        match current.phase {
            InstancePhase::Stopped => {
                let offering = catalog.get(&current.offering).ok_or_else(|| {
                    refused(
                        self.provider,
                        ErrorClass::InvalidRequest,
                        "UnknownOffering",
                        current.offering.to_string(),
                    )
                })?;
                // A stopped instance has no host: starting it can meet a stockout too.
                self.check_room(&state, &catalog, offering)?;
                if let Some(sim) = state.instances.get_mut(id) {
                    sim.life = Life::Running {
                        since: now,
                        from_stopped: true,
                    };
                }
                refresh(&mut state, &catalog, id, now)
                    .ok_or_else(|| CloudError::NotFound(id.clone()))
            }
            InstancePhase::Terminated | InstancePhase::Interrupted => {
                Err(CloudError::NotFound(id.clone()))
            }
            _ => Ok(current),
        }
    }

    async fn stop(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        self.up()?;
        let now = self.clock.now();
        let catalog = self.catalog().clone();
        let mut state = self.state();
        state.calls.push(format!("stop {id}"));
        let current = refresh(&mut state, &catalog, id, now)
            .ok_or_else(|| CloudError::NotFound(id.clone()))?;
        match current.phase {
            InstancePhase::Terminated | InstancePhase::Interrupted => {
                Err(CloudError::NotFound(id.clone()))
            }
            _ => {
                if let Some(sim) = state.instances.get_mut(id) {
                    sim.life = Life::Stopped;
                    sim.interrupt_at = None;
                }
                refresh(&mut state, &catalog, id, now)
                    .ok_or_else(|| CloudError::NotFound(id.clone()))
            }
        }
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), CloudError> {
        self.up()?;
        let mut state = self.state();
        state.calls.push(format!("terminate {id}"));
        if state.terminated.contains_key(id) {
            return Ok(());
        }
        let mut sim = state
            .instances
            .remove(id)
            .ok_or_else(|| CloudError::NotFound(id.clone()))?;
        sim.life = Life::Terminated;
        sim.instance.phase = InstancePhase::Terminated;
        // What a refresh of a terminated instance shows: no notice of a reclaim to come.
        sim.instance.interruption_notice = None;
        state.terminated.insert(id.clone(), sim);
        Ok(())
    }

    async fn describe(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        self.up()?;
        let now = self.clock.now();
        let catalog = self.catalog().clone();
        let mut state = self.state();
        refresh(&mut state, &catalog, id, now).ok_or_else(|| CloudError::NotFound(id.clone()))
    }

    async fn list_owned(&self, cluster: &str) -> Result<Vec<Instance>, CloudError> {
        self.up()?;
        Ok(self
            .instances_in_play()
            .into_iter()
            .filter(|i| i.tags.cluster == cluster)
            .collect())
    }

    /// The region's GPU quota (`sim.gpu_quota_per_region`) with the GPUs running there, the
    /// same count a launch is refused by; a region without one is known to be unlimited.
    async fn quota_headroom(
        &self,
        region: &str,
        offerings: &[Offering],
    ) -> Result<Quotas, CloudError> {
        self.up()?;
        let Some(limit) = self.gpu_quota_per_region.get(region).copied() else {
            return Ok(Quotas::Known(Vec::new()));
        };
        let catalog = self.catalog().clone();
        let mut state = self.state();
        state.calls.push(format!("quota_headroom {region}"));
        let in_use = gpus_running(&state, &catalog, region);
        Ok(Quotas::Known(vec![QuotaHeadroom {
            name: SIM_GPU_QUOTA.to_string(),
            description: "GPUs running at once".to_string(),
            region: region.to_string(),
            unit: QuotaUnit::Gpu,
            limit: u64::from(limit),
            in_use: u64::from(in_use),
            covers: offerings
                .iter()
                .filter(|o| o.region == region)
                .map(|o| QuotaDraw {
                    offering: o.id.clone(),
                    per_node: o.gpus_per_node,
                })
                .collect(),
        }]))
    }

    async fn current_prices(
        &self,
        offerings: &[Offering],
    ) -> Result<Vec<(OfferingId, Money)>, CloudError> {
        self.up()?;
        let prices = self.spot_prices.lock().unwrap_or_else(|e| e.into_inner());
        Ok(offerings
            .iter()
            .filter(|o| o.market == Market::Spot)
            .filter_map(|o| Some((o.id.clone(), *prices.get(&o.id)?)))
            .collect())
    }
}
