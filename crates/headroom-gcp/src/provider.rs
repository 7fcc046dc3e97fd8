//! [`GcpProvider`]: the [`CloudProvider`] contract over Compute Engine instances.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use google_cloud_compute_v1::client::{Instances, Regions, ZoneOperations};
use google_cloud_compute_v1::model;
use google_cloud_gax::retry_policy::{Aip194Strict, RetryPolicyExt};
use headroom_cloud::{
    Clock, CloudError, CloudProvider, Instance, InstanceId, InstancePhase, LaunchSpec, Quotas,
};
use headroom_core::{
    ErrorClass, LadderRung, Market, Offering, OfferingId, ProviderKind, QuotaDraw, QuotaHeadroom,
    QuotaUnit, Timestamp,
};

use crate::GcpError;
use crate::errors::{
    ErrorFacts, already_exists, classify, facts_from_client, facts_from_operation, to_cloud_error,
};
use crate::naming::{
    Description, DescriptionBody, instance_id, instance_name, labels, request_id, split_instance_id,
};
use crate::settings::{Credentials, GcpSettings, TerminationAction, WarmMode};

/// Pages of one zone's list read at most (500 instances a page).
const MAX_LIST_PAGES: usize = 20;
/// Names of instances this process deleted, remembered so a second delete is a success.
const MAX_REMEMBERED_DELETIONS: usize = 4096;
/// Calls to `zoneOperations.wait` per operation at most (each returns within a couple of
/// minutes on GCE, or at once when done); the operation timeout bounds them in time too.
const MAX_WAITS: usize = 64;

/// GCE's operation type for a spot VM the cloud reclaimed.
pub const PREEMPTED_OPERATION: &str = "compute.instances.preempted";

/// The GCP provider. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct GcpProvider {
    settings: GcpSettings,
    /// Zones listed for inventory: the offerings' and the configured ones.
    zones: Vec<String>,
    instances: Instances,
    operations: ZoneOperations,
    /// `regions.get`, for the quota preflight.
    regions: Regions,
    clock: Arc<dyn Clock>,
    deleted: Mutex<(VecDeque<String>, HashSet<String>)>,
}

/// Lifecycle timestamps of an instance, as GCE reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Times {
    pub created: Option<Timestamp>,
    pub last_start: Option<Timestamp>,
    pub last_stop: Option<Timestamp>,
    pub last_suspended: Option<Timestamp>,
}

fn parse_time(text: Option<&String>) -> Option<Timestamp> {
    text.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// The phase of an instance from its GCE status. Pure, so every mapping is unit-tested.
///
/// GCE's TERMINATED means *stopped* (the disk stays): it is `Stopped` unless the VM is a spot VM
/// the cloud preempted, which is `Interrupted`. RUNNING is `Booting` for `ready_after` after its
/// last start, then `Ready`; the rung is the first one the VM still has to climb: image pull on a
/// fresh VM, weight load after a start from stopped (disk kept), compile after a resume from
/// suspended (memory kept: the weights are still loaded).
pub fn phase_of(
    status: &str,
    preempted: bool,
    times: Times,
    now: Timestamp,
    ready_after: Duration,
) -> InstancePhase {
    match status {
        "PROVISIONING" | "STAGING" | "PENDING" | "REPAIRING" => InstancePhase::Pending,
        "RUNNING" => {
            let since = times.last_start.or(times.created);
            let elapsed = since
                .and_then(|s| (now - s).to_std().ok())
                .unwrap_or(Duration::MAX);
            if elapsed >= ready_after {
                return InstancePhase::Ready;
            }
            let resumed = match (times.last_suspended, times.last_stop) {
                (Some(suspended), Some(stop)) => suspended > stop,
                (Some(_), None) => true,
                _ => false,
            };
            let rung = if resumed {
                LadderRung::Compile
            } else if times.last_stop.is_some() {
                LadderRung::WeightLoad
            } else {
                LadderRung::ImagePull
            };
            InstancePhase::Booting(rung)
        }
        "STOPPING" | "STOPPED" | "TERMINATED" | "SUSPENDING" | "SUSPENDED" | "PENDING_STOP" => {
            if preempted {
                InstancePhase::Interrupted
            } else {
                InstancePhase::Stopped
            }
        }
        "DEPROVISIONING" => InstancePhase::Terminated,
        // A status newer than this client: not ready, not gone.
        _ => InstancePhase::Pending,
    }
}

fn is_spot(inst: &model::Instance) -> bool {
    inst.scheduling
        .as_ref()
        .and_then(|s| s.provisioning_model.as_ref())
        .and_then(|m| m.name())
        == Some("SPOT")
        || inst
            .scheduling
            .as_ref()
            .and_then(|s| s.preemptible)
            .unwrap_or(false)
}

fn status_name(inst: &model::Instance) -> &str {
    inst.status
        .as_ref()
        .and_then(|s| s.name())
        .unwrap_or("PROVISIONING")
}

fn is_stopped(inst: &model::Instance) -> bool {
    matches!(
        status_name(inst),
        "STOPPING" | "STOPPED" | "TERMINATED" | "SUSPENDING" | "SUSPENDED"
    )
}

fn times_of(inst: &model::Instance) -> Times {
    Times {
        created: parse_time(inst.creation_timestamp.as_ref()),
        last_start: parse_time(inst.last_start_timestamp.as_ref()),
        last_stop: parse_time(inst.last_stop_timestamp.as_ref()),
        last_suspended: parse_time(inst.last_suspended_timestamp.as_ref()),
    }
}

fn not_found_or(err: google_cloud_gax::error::Error, id: &InstanceId) -> CloudError {
    let facts = facts_from_client(&err);
    match classify(&facts) {
        ErrorClass::NotFound => CloudError::NotFound(id.clone()),
        _ => to_cloud_error(&facts),
    }
}

fn transient(code: &str, message: String) -> CloudError {
    CloudError::Refused {
        provider: ProviderKind::Gcp,
        class: ErrorClass::Transient,
        code: code.to_string(),
        message,
    }
}

fn invalid(code: &str, message: String) -> CloudError {
    CloudError::Refused {
        provider: ProviderKind::Gcp,
        class: ErrorClass::InvalidRequest,
        code: code.to_string(),
        message,
    }
}

impl GcpProvider {
    /// Builds the Compute clients. `offering_zones` are the zones of the GCP offerings; the
    /// inventory is listed there and in `settings.zones`.
    pub async fn new(
        settings: GcpSettings,
        offering_zones: impl IntoIterator<Item = String>,
        clock: Arc<dyn Clock>,
    ) -> Result<GcpProvider, GcpError> {
        let zones: BTreeSet<String> = offering_zones
            .into_iter()
            .chain(settings.zones.iter().cloned())
            .collect();
        // One retry at most inside the client, only for what AIP-194 calls safe (503s on
        // idempotent calls); everything else goes back to the engine, which retries on its
        // next tick. Without this the client retries a 503 several times over.
        let retry = || {
            Aip194Strict
                .with_attempt_limit(2)
                .with_time_limit(settings.operation_timeout)
        };
        let mut ib = Instances::builder()
            .with_retry_policy(retry())
            .with_attempt_timeout(settings.operation_timeout);
        let mut ob = ZoneOperations::builder()
            .with_retry_policy(retry())
            .with_attempt_timeout(settings.operation_timeout);
        let mut rb = Regions::builder()
            .with_retry_policy(retry())
            .with_attempt_timeout(settings.operation_timeout);
        if let Some(endpoint) = &settings.endpoint {
            ib = ib.with_endpoint(endpoint.clone());
            ob = ob.with_endpoint(endpoint.clone());
            rb = rb.with_endpoint(endpoint.clone());
        }
        if settings.credentials == Credentials::Adc
            && let Some(federated) = crate::federation::ecs_federated_credentials(
                &crate::federation::process_env,
                clock.clone(),
            )?
        {
            // An external_account file with an AWS source, on ECS: see `federation`.
            ib = ib.with_credentials(federated.clone());
            ob = ob.with_credentials(federated.clone());
            rb = rb.with_credentials(federated);
        } else if settings.credentials == Credentials::Anonymous {
            let anonymous = google_cloud_auth::credentials::anonymous::Builder::new().build();
            ib = ib.with_credentials(anonymous.clone());
            ob = ob.with_credentials(anonymous.clone());
            rb = rb.with_credentials(anonymous);
        }
        // Without an override the builders use Application Default Credentials.
        let instances = ib
            .build()
            .await
            .map_err(|e| GcpError::Client(e.to_string()))?;
        let operations = ob
            .build()
            .await
            .map_err(|e| GcpError::Client(e.to_string()))?;
        let regions = rb
            .build()
            .await
            .map_err(|e| GcpError::Client(e.to_string()))?;
        Ok(GcpProvider {
            regions,
            settings,
            zones: zones.into_iter().collect(),
            instances,
            operations,
            clock,
            deleted: Mutex::new((VecDeque::new(), HashSet::new())),
        })
    }

    pub fn settings(&self) -> &GcpSettings {
        &self.settings
    }

    fn remember_deleted(&self, name: &str) {
        let mut guard = self.deleted.lock().unwrap_or_else(|e| e.into_inner());
        let (order, set) = &mut *guard;
        if set.insert(name.to_string()) {
            order.push_back(name.to_string());
            if order.len() > MAX_REMEMBERED_DELETIONS
                && let Some(oldest) = order.pop_front()
            {
                set.remove(&oldest);
            }
        }
    }

    fn was_deleted(&self, name: &str) -> bool {
        self.deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .contains(name)
    }

    /// The instance body for a launch. With a template, only what the launch decides is set
    /// (GCE overrides the template's fields with the body's); without one, a boot disk from
    /// `boot_image` and a NIC on `network`.
    fn instance_body(&self, spec: &LaunchSpec, name: &str) -> Result<model::Instance, CloudError> {
        let offering = &spec.offering;
        let mut inst = model::Instance::default();
        inst.name = Some(name.to_string());
        inst.machine_type = Some(format!(
            "zones/{}/machineTypes/{}",
            offering.zone, offering.instance_type
        ));
        inst.labels = labels(&spec.tags, &spec.client_token).into_iter().collect();
        inst.labels.insert(
            crate::naming::OFFERING_LABEL.to_string(),
            crate::naming::label_value(offering.id.as_str()),
        );
        inst.description = Some(
            Description {
                headroom: DescriptionBody {
                    client_token: spec.client_token.clone(),
                    offering: offering.id.to_string(),
                    tags: spec.tags.clone(),
                },
            }
            .encode(),
        );
        if let Some(user_data) = &spec.user_data {
            // cloud-init and GKE-style images read the bootstrap from the `user-data` key.
            let mut item = model::metadata::Items::default();
            item.key = Some("user-data".to_string());
            item.value = Some(user_data.clone());
            let mut metadata = model::Metadata::default();
            metadata.items = vec![item];
            inst.metadata = Some(metadata);
        }
        let mut scheduling = model::Scheduling::default();
        // GPU VMs cannot live-migrate.
        scheduling.on_host_maintenance = Some("TERMINATE".into());
        match offering.market {
            Market::Spot => {
                scheduling.provisioning_model = Some("SPOT".into());
                scheduling.automatic_restart = Some(false);
                scheduling.instance_termination_action =
                    Some(match self.settings.spot_termination_action {
                        TerminationAction::Stop => "STOP".into(),
                        TerminationAction::Delete => "DELETE".into(),
                    });
            }
            Market::OnDemand | Market::Reserved => {
                scheduling.provisioning_model = Some("STANDARD".into());
            }
        }
        inst.scheduling = Some(scheduling);
        if offering.market == Market::Reserved {
            let mut affinity = model::ReservationAffinity::default();
            match self.settings.reservations.get(offering.id.as_str()) {
                Some(reservation) => {
                    affinity.consume_reservation_type = Some("SPECIFIC_RESERVATION".into());
                    affinity.key = Some("compute.googleapis.com/reservation-name".into());
                    affinity.values = vec![reservation.clone()];
                }
                None => affinity.consume_reservation_type = Some("ANY_RESERVATION".into()),
            }
            inst.reservation_affinity = Some(affinity);
        }
        if self.settings.template_for(&spec.tags.pool).is_none() {
            let Some(image) = &self.settings.boot_image else {
                return Err(invalid(
                    "NoInstanceTemplate",
                    format!(
                        "no instance template for pool {}: add gcp.instance_templates.{} or gcp.boot_image",
                        spec.tags.pool, spec.tags.pool
                    ),
                ));
            };
            let mut params = model::AttachedDiskInitializeParams::default();
            params.source_image = Some(image.clone());
            params.disk_size_gb = Some(i64::from(self.settings.boot_disk_gb));
            let mut disk = model::AttachedDisk::default();
            disk.boot = Some(true);
            disk.auto_delete = Some(true);
            disk.initialize_params = Some(params);
            inst.disks = vec![disk];
            let mut nic = model::NetworkInterface::default();
            nic.network = Some(self.settings.network.clone());
            inst.network_interfaces = vec![nic];
        }
        Ok(inst)
    }

    /// Waits for a zone operation to finish, within the operation timeout, and maps an error
    /// inside the finished operation.
    async fn wait(&self, zone: &str, op: model::Operation) -> Result<(), CloudError> {
        let bounded = tokio::time::timeout(self.settings.operation_timeout, async {
            let mut op = op;
            for _ in 0..MAX_WAITS {
                if op.status.as_ref().and_then(|s| s.name()) == Some("DONE") {
                    return match facts_from_operation(&op) {
                        None => Ok(()),
                        Some(facts) => Err(facts),
                    };
                }
                let Some(name) = op.name.clone() else {
                    return Err(ErrorFacts {
                        http_status: None,
                        codes: vec!["operation_without_name".into()],
                        message: "GCE returned an unfinished operation without a name".into(),
                    });
                };
                op = self
                    .operations
                    .wait()
                    .set_project(self.settings.project.clone())
                    .set_zone(zone.to_string())
                    .set_operation(name)
                    .send()
                    .await
                    .map_err(|e| facts_from_client(&e))?;
            }
            Err(ErrorFacts {
                http_status: Some(504),
                codes: vec!["operation_not_done".into()],
                message: format!("operation still running after {MAX_WAITS} waits"),
            })
        })
        .await;
        match bounded {
            Ok(Ok(())) => Ok(()),
            Ok(Err(facts)) => Err(to_cloud_error(&facts)),
            Err(_) => Err(transient(
                "operation_timeout",
                format!(
                    "the zone operation did not finish within {:?}; the next activation repeats the call",
                    self.settings.operation_timeout
                ),
            )),
        }
    }

    async fn get_raw(
        &self,
        zone: &str,
        name: &str,
    ) -> Result<model::Instance, google_cloud_gax::error::Error> {
        self.instances
            .get()
            .set_project(self.settings.project.clone())
            .set_zone(zone.to_string())
            .set_instance(name.to_string())
            .send()
            .await
    }

    /// Whether GCE preempted this (stopped, spot) instance after its last start: a
    /// `compute.instances.preempted` operation targets it.
    async fn preempted_in_zone(&self, zone: &str) -> Result<Vec<model::Operation>, CloudError> {
        let list = self
            .operations
            .list()
            .set_project(self.settings.project.clone())
            .set_zone(zone.to_string())
            .set_filter(format!("operationType = \"{PREEMPTED_OPERATION}\""))
            .set_max_results(500_u32)
            .send()
            .await
            .map_err(|e| to_cloud_error(&facts_from_client(&e)))?;
        Ok(list.items)
    }

    fn was_preempted(inst: &model::Instance, preemptions: &[model::Operation]) -> bool {
        if !is_spot(inst) || !is_stopped(inst) {
            return false;
        }
        let Some(name) = inst.name.as_deref() else {
            return false;
        };
        let suffix = format!("/instances/{name}");
        let last_start = times_of(inst).last_start.or(times_of(inst).created);
        preemptions.iter().any(|op| {
            let targets = op
                .target_link
                .as_deref()
                .is_some_and(|l| l.ends_with(&suffix))
                || (op.target_id.is_some() && op.target_id == inst.id);
            let after_start = match (parse_time(op.insert_time.as_ref()), last_start) {
                (Some(at), Some(start)) => at >= start,
                _ => true,
            };
            targets && after_start
        })
    }

    /// Headroom's view of a GCE instance; `None` for instances Headroom did not make. Ownership
    /// is read from the description (exact), else from the labels Headroom writes (lossy, for
    /// a VM whose description was lost or edited) when `cluster` names the cluster asked about.
    fn to_instance(
        &self,
        zone: &str,
        inst: &model::Instance,
        preempted: bool,
        cluster: Option<&str>,
    ) -> Option<Instance> {
        let from_description = inst
            .description
            .as_deref()
            .and_then(Description::decode)
            .map(|d| d.headroom);
        let body = from_description.or_else(|| {
            crate::naming::ownership_from_labels(
                |k| inst.labels.get(k).map(String::as_str),
                cluster?,
            )
        })?;
        let offering = body.offering.parse::<OfferingId>().ok().or_else(|| {
            // A labels-only VM without its offering label: name it by its machine type.
            inst.machine_type
                .as_deref()
                .and_then(|t| t.rsplit('/').next())
                .and_then(|t| t.parse().ok())
        })?;
        let times = times_of(inst);
        let now = self.clock.now();
        Some(Instance {
            id: InstanceId(instance_id(zone, inst.name.as_deref()?)),
            offering,
            client_token: body.client_token,
            tags: body.tags,
            phase: phase_of(
                status_name(inst),
                preempted,
                times,
                now,
                self.settings.ready_after,
            ),
            launched_at: times.created.unwrap_or(now),
            // GCE's 30-second preemption notice reaches the guest (metadata server), not this
            // API; the preemption itself is seen as `Interrupted`.
            interruption_notice: None,
        })
    }

    async fn describe_in(
        &self,
        id: &InstanceId,
        zone: &str,
        name: &str,
    ) -> Result<Instance, CloudError> {
        let inst = self
            .get_raw(zone, name)
            .await
            .map_err(|e| not_found_or(e, id))?;
        let preempted = if is_spot(&inst) && is_stopped(&inst) {
            Self::was_preempted(&inst, &self.preempted_in_zone(zone).await?)
        } else {
            false
        };
        let cluster = inst.labels.get("headroom-cluster").cloned();
        self.to_instance(zone, &inst, preempted, cluster.as_deref())
            .ok_or_else(|| CloudError::NotFound(id.clone()))
    }

    /// Sends one instance verb and waits for it. No requestId: GCE answers a reused one with
    /// the first operation, so a start refused for capacity would stay refused for the whole
    /// idempotency window; repeating a verb is harmless instead (the callers read the status
    /// first, and GCE treats a start of a running VM as a no-op).
    async fn verb(
        &self,
        id: &InstanceId,
        zone: &str,
        name: &str,
        verb: Verb,
    ) -> Result<(), CloudError> {
        let (project, zone_s, name_s) = (
            self.settings.project.clone(),
            zone.to_string(),
            name.to_string(),
        );
        let i = &self.instances;
        let sent = match verb {
            Verb::Start => {
                i.start()
                    .set_project(project)
                    .set_zone(zone_s)
                    .set_instance(name_s)
                    .send()
                    .await
            }
            Verb::Stop => {
                i.stop()
                    .set_project(project)
                    .set_zone(zone_s)
                    .set_instance(name_s)
                    .send()
                    .await
            }
            Verb::Suspend => {
                i.suspend()
                    .set_project(project)
                    .set_zone(zone_s)
                    .set_instance(name_s)
                    .send()
                    .await
            }
            Verb::Resume => {
                i.resume()
                    .set_project(project)
                    .set_zone(zone_s)
                    .set_instance(name_s)
                    .send()
                    .await
            }
        };
        let op = sent.map_err(|e| not_found_or(e, id))?;
        self.wait(zone, op).await
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Start,
    Stop,
    Suspend,
    Resume,
}

fn parse_id(id: &InstanceId) -> Result<(&str, &str), CloudError> {
    split_instance_id(&id.0).ok_or_else(|| CloudError::NotFound(id.clone()))
}

#[async_trait]
impl CloudProvider for GcpProvider {
    /// The region's GPU quotas from `regions.get` (`quotas[]`: metric, limit and the project's
    /// usage), each covering the offerings whose machine type carries that GPU
    /// ([`crate::quotas::gpu_metric`]), a node drawing its `gpus`. A region answered without
    /// quotas (`regions.get` fails open when they are unavailable) is unknown.
    async fn quota_headroom(
        &self,
        region: &str,
        offerings: &[Offering],
    ) -> Result<Quotas, CloudError> {
        let ours: Vec<(&Offering, String)> = offerings
            .iter()
            .filter(|o| o.provider == ProviderKind::Gcp && o.region == region)
            .filter_map(|o| {
                Some((
                    o,
                    crate::quotas::gpu_metric(&o.instance_type, o.market == Market::Spot)?,
                ))
            })
            .collect();
        if ours.is_empty() {
            return Ok(Quotas::Known(Vec::new()));
        }
        let answer = self
            .regions
            .get()
            .set_project(self.settings.project.clone())
            .set_region(region.to_string())
            .send()
            .await
            .map_err(|e| to_cloud_error(&facts_from_client(&e)))?;
        if answer.quotas.is_empty() {
            return Ok(Quotas::Unknown);
        }
        let quotas = answer
            .quotas
            .iter()
            .filter_map(|q| {
                let metric = q.metric.as_ref()?.name()?.to_string();
                let covers: Vec<QuotaDraw> = ours
                    .iter()
                    .filter(|(_, m)| *m == metric)
                    .map(|(o, _)| QuotaDraw {
                        offering: o.id.clone(),
                        per_node: o.gpus_per_node.max(1),
                    })
                    .collect();
                (!covers.is_empty()).then(|| QuotaHeadroom {
                    description: format!("{metric} in {region}"),
                    name: metric,
                    region: region.to_string(),
                    unit: QuotaUnit::Gpu,
                    limit: q.limit.unwrap_or(0.0).max(0.0).floor() as u64,
                    in_use: q.usage.unwrap_or(0.0).max(0.0).ceil() as u64,
                    covers,
                })
            })
            .collect();
        Ok(Quotas::Known(quotas))
    }

    fn kind(&self) -> ProviderKind {
        ProviderKind::Gcp
    }

    async fn launch(&self, spec: &LaunchSpec) -> Result<Instance, CloudError> {
        let zone = spec.offering.zone.clone();
        let name = instance_name(&spec.client_token);
        let id = InstanceId(instance_id(&zone, &name));
        let body = self.instance_body(spec, &name)?;
        let mut insert = self
            .instances
            .insert()
            .set_project(self.settings.project.clone())
            .set_zone(zone.clone())
            .set_request_id(request_id(&spec.client_token))
            .set_body(body);
        if let Some(template) = self.settings.template_for(&spec.tags.pool) {
            insert = insert.set_source_instance_template(template.to_string());
        }
        match insert.send().await {
            Ok(op) => match self.wait(&zone, op).await {
                Ok(()) => {}
                Err(e) => {
                    // A repeated insert whose name exists finished with alreadyExists: the
                    // first one made it, return that VM.
                    if !(e.code().eq_ignore_ascii_case("RESOURCE_ALREADY_EXISTS")
                        || e.code().eq_ignore_ascii_case("alreadyExists"))
                    {
                        return Err(e);
                    }
                    tracing::info!(instance = %id, "insert repeated; the VM exists, adopting it");
                }
            },
            Err(e) => {
                let facts = facts_from_client(&e);
                if !already_exists(&facts) {
                    return Err(to_cloud_error(&facts));
                }
                tracing::info!(instance = %id, "insert repeated; the VM exists, adopting it");
            }
        }
        let found = self.read_back(&id, &zone, &name).await?;
        if found.client_token != spec.client_token {
            // Only a hash collision could get here; never adopt someone else's VM.
            return Err(invalid(
                "NameCollision",
                format!("instance {id} exists with another client token"),
            ));
        }
        Ok(found)
    }

    async fn start(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        let (zone, name) = parse_id(id)?;
        let current = self
            .get_raw(zone, name)
            .await
            .map_err(|e| not_found_or(e, id))?;
        match status_name(&current) {
            "SUSPENDED" => self.verb(id, zone, name, Verb::Resume).await?,
            "TERMINATED" | "STOPPED" => self.verb(id, zone, name, Verb::Start).await?,
            "STOPPING" | "SUSPENDING" => {
                return Err(transient(
                    "instance_stopping",
                    format!("{id} is still stopping; the next activation starts it"),
                ));
            }
            _ => {}
        }
        self.describe_in(id, zone, name).await
    }

    async fn stop(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        let (zone, name) = parse_id(id)?;
        let current = self
            .get_raw(zone, name)
            .await
            .map_err(|e| not_found_or(e, id))?;
        if !is_stopped(&current) {
            let verb = match self.settings.warm_mode {
                WarmMode::Stop => Verb::Stop,
                WarmMode::Suspend => Verb::Suspend,
            };
            self.verb(id, zone, name, verb).await?;
        }
        self.describe_in(id, zone, name).await
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), CloudError> {
        let (zone, name) = parse_id(id)?;
        let sent = self
            .instances
            .delete()
            .set_project(self.settings.project.clone())
            .set_zone(zone.to_string())
            .set_instance(name.to_string())
            // No requestId, as for the verbs: a second delete answers 404, handled below.
            .send()
            .await;
        let result = match sent {
            Ok(op) => self.wait(zone, op).await,
            Err(e) => Err(not_found_or(e, id)),
        };
        match result {
            Ok(()) => {
                self.remember_deleted(name);
                Ok(())
            }
            // GCE forgets deleted VMs: a second delete of one this process deleted succeeds.
            Err(CloudError::NotFound(_)) if self.was_deleted(name) => Ok(()),
            Err(e) if e.class() == ErrorClass::NotFound && self.was_deleted(name) => Ok(()),
            Err(e) if e.class() == ErrorClass::NotFound => Err(CloudError::NotFound(id.clone())),
            Err(e) => Err(e),
        }
    }

    async fn describe(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        let (zone, name) = parse_id(id)?;
        self.describe_in(id, zone, name).await
    }

    async fn list_owned(&self, cluster: &str) -> Result<Vec<Instance>, CloudError> {
        let filter = format!(
            "labels.headroom-cluster = \"{}\"",
            crate::naming::label_value(cluster)
        );
        let mut owned = Vec::new();
        for zone in &self.zones {
            let mut page_token: Option<String> = None;
            let mut found = Vec::new();
            for _ in 0..MAX_LIST_PAGES {
                let mut list = self
                    .instances
                    .list()
                    .set_project(self.settings.project.clone())
                    .set_zone(zone.clone())
                    .set_filter(filter.clone())
                    .set_max_results(500_u32);
                if let Some(token) = page_token.take() {
                    list = list.set_page_token(token);
                }
                let page = list
                    .send()
                    .await
                    .map_err(|e| to_cloud_error(&facts_from_client(&e)))?;
                found.extend(page.items);
                match page.next_page_token.filter(|t| !t.is_empty()) {
                    Some(token) => page_token = Some(token),
                    None => break,
                }
            }
            // One operations query per zone, only when a spot VM is stopped.
            let preemptions = if found.iter().any(|i| is_spot(i) && is_stopped(i)) {
                self.preempted_in_zone(zone).await?
            } else {
                Vec::new()
            };
            for inst in &found {
                let preempted = Self::was_preempted(inst, &preemptions);
                if preempted {
                    tracing::debug!(zone = %zone, instance = ?inst.name, "spot VM preempted by GCE");
                }
                if let Some(i) = self.to_instance(zone, inst, preempted, Some(cluster))
                    // Labels are lossy; the description, when there, holds the exact cluster.
                    && i.tags.cluster == cluster
                    && i.phase != InstancePhase::Terminated
                {
                    owned.push(i);
                }
            }
        }
        Ok(owned)
    }
}

mod read_back;
#[cfg(test)]
mod tests;
