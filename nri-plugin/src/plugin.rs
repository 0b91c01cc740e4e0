//! graft's NRI plugin: injects what the driver recorded, and nothing else.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use graft_proto::nri::{self, Event};
use graft_record::containers::{prune_entries, remove_entry, ContainerEntry};
use graft_record::{params, policy::params_copy_path};
use graft_record::{InjectionPolicy, RecordStore, StatusPublisher};
use tracing::Instrument;
use ttrpc::Code;

use crate::entries;
use crate::events::EventMask;
#[cfg(feature = "fault-injection")]
use crate::fault::FaultSwitch;
use crate::guard::panic_message;
use crate::inject::{plan, Plan};
use crate::metrics::{NriMetrics, Refusal, RequestKind};
use crate::reads::Reads;
use crate::refusal;
use crate::sdk::{Answered, ConnectionState, NriPlugin, Request, Runtime};
use crate::sources::{check_present, check_served};
use crate::verify;

/// Counters, for logs and tests.
#[derive(Debug, Default)]
pub struct Stats {
    pub injected: AtomicU64,
    pub refused: AtomicU64,
    pub uninjected_found: AtomicU64,
    pub evictions_requested: AtomicU64,
}

/// An eviction asked for and not yet seen to happen.
#[derive(Debug, Clone)]
struct PendingEviction {
    reason: String,
}

pub struct GraftPlugin {
    store: RecordStore,
    /// What a record may ask of a container; graft-driver applies the same rules.
    policy: InjectionPolicy,
    status: Mutex<StatusPublisher>,
    pending: Arc<Mutex<HashMap<String, PendingEviction>>>,
    stats: Arc<Stats>,
    metrics: Arc<NriMetrics>,
    /// How long to wait for the runtime to stop an evicted container before saying so.
    eviction_grace: Duration,
    /// Where the host's root is visible (served entries are checked there).
    host_root: PathBuf,
    /// The runtime's registration timeout (Configure), in milliseconds; 0 when unknown.
    registration_timeout_ms: AtomicU64,
    /// CreateContainer's record reads, with their deadline.
    reads: Reads,
    #[cfg(feature = "fault-injection")]
    fault: FaultSwitch,
}

impl GraftPlugin {
    /// A plugin that injects from `store` what `policy` allows.
    pub fn new(store: RecordStore, status: StatusPublisher, policy: InjectionPolicy) -> Self {
        GraftPlugin {
            policy,
            store,
            status: Mutex::new(status),
            pending: Arc::new(Mutex::new(HashMap::new())),
            stats: Arc::new(Stats::default()),
            metrics: Arc::new(NriMetrics::default()),
            eviction_grace: Duration::from_secs(5),
            host_root: PathBuf::from("/"),
            registration_timeout_ms: AtomicU64::new(0),
            reads: Reads::default(),
            #[cfg(feature = "fault-injection")]
            fault: FaultSwitch::default(),
        }
    }

    /// Test builds only: a switch that makes the next CreateContainer handlers sleep or
    /// panic.
    #[cfg(feature = "fault-injection")]
    pub fn fault_switch(&self) -> FaultSwitch {
        self.fault.clone()
    }

    /// The CreateContainer deadline the plugin's SDK options ask for.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.reads = Reads::new(deadline);
        self
    }

    pub fn with_eviction_grace(mut self, grace: Duration) -> Self {
        self.eviction_grace = grace;
        self
    }

    /// Where the host's root is mounted, when not at `/`.
    pub fn with_host_root(mut self, root: PathBuf) -> Self {
        self.host_root = root;
        self
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Counts into `metrics` (registered by the caller) instead of a private set.
    pub fn with_metrics(mut self, metrics: Arc<NriMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn metrics(&self) -> Arc<NriMetrics> {
        self.metrics.clone()
    }

    /// How long Synchronize waits for records: half the runtime's registration timeout
    /// (containerd: 5 s), which Synchronize must answer within.
    fn sync_read_limit(&self) -> Duration {
        match self.registration_timeout_ms.load(Ordering::Relaxed) {
            0 => Duration::from_secs(2),
            ms => Duration::from_millis(ms / 2),
        }
    }

    fn set_status(&self, change: impl FnOnce(&mut graft_record::NriStatus)) {
        let mut publisher = self.status.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = publisher.update(change) {
            tracing::error!(error = %e, "cannot write the NRI status file");
        }
    }

    /// Containers that run without what their records say they must have, reading the
    /// records here (tests and benchmarks; Synchronize reads them with a deadline).
    pub fn find_uninjected(
        &self,
        pods: &[nri::PodSandbox],
        containers: &[nri::Container],
    ) -> Vec<(nri::Container, String)> {
        let claims = verify::read_now(&self.store, &verify::pods_to_check(pods, containers));
        verify::uninjected(pods, containers, &claims, &self.policy)
    }

    /// Sends evictions from a task of its own, after the Synchronize reply has gone out,
    /// and reports the ones the runtime leaves running.
    fn spawn_evictions(&self, runtime: Runtime, evict: Vec<nri::ContainerEviction>) {
        let pending = self.pending.clone();
        let grace = self.eviction_grace;
        tokio::spawn(async move {
            // The runtime holds its NRI lock until our Synchronize reply is in; a call
            // made now would only queue behind it.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let ids: Vec<String> = evict.iter().map(|e| e.container_id.clone()).collect();
            match runtime.update_containers(Vec::new(), evict).await {
                Ok(_) => tracing::info!(containers = ?ids, "asked the runtime to evict containers"),
                Err(e) => {
                    tracing::warn!(containers = ?ids, error = %e, "UpdateContainers(evict) failed")
                }
            }
            tokio::time::sleep(grace).await;
            let still: Vec<String> = {
                let p = pending.lock().unwrap_or_else(|p| p.into_inner());
                ids.into_iter().filter(|id| p.contains_key(id)).collect()
            };
            let mut p = pending.lock().unwrap_or_else(|p| p.into_inner());
            for id in still {
                let reason = p.remove(&id).map(|e| e.reason).unwrap_or_default();
                // containerd up to 2.2 drops the evict list of plugin requests; the
                // container keeps running without its devices until someone stops it.
                tracing::error!(container = %id,
                    "the runtime did not act on the eviction request within {grace:?}; \
                     the container still runs without its devices and must be restarted \
                     by hand: {reason}");
            }
        });
    }

    /// Refuses a container; the message (which the kubelet shows on the pod) names the
    /// pod's graft claims, when they could be read, and the reason.
    fn refuse(
        &self,
        pod: &nri::PodSandbox,
        ctr: &nri::Container,
        claims: &[String],
        kind: Refusal,
        why: String,
    ) -> ttrpc::Error {
        self.stats.refused.fetch_add(1, Ordering::Relaxed);
        self.metrics.refused(kind);
        let msg = refusal::message(pod, &ctr.name, claims, &why);
        tracing::error!("{msg}");
        refusal::journal(self.store.root().to_path_buf(), pod, ctr, claims, &why);
        ttrpc::Error::RpcStatus(ttrpc::get_status(Code::FAILED_PRECONDITION, msg))
    }
}

#[async_trait]
impl NriPlugin for GraftPlugin {
    fn events(&self) -> EventMask {
        EventMask::of(&[
            Event::CREATE_CONTAINER,
            Event::STOP_CONTAINER,
            Event::REMOVE_CONTAINER,
        ])
    }

    fn connection_state(&self, state: ConnectionState) {
        match &state {
            ConnectionState::Configured(info) => {
                self.metrics.configured();
                self.registration_timeout_ms.store(
                    u64::try_from(info.registration_timeout_ms).unwrap_or(0),
                    Ordering::Relaxed,
                );
                self.reads.configured(info.request_timeout_ms);
            }
            ConnectionState::Synchronized => self.metrics.synchronized(),
            ConnectionState::Disconnected(_) => self.metrics.disconnected(),
        }
        match state {
            ConnectionState::Configured(info) => self.set_status(|s| {
                s.connected = true;
                s.synchronized = false;
                s.runtime_name = info.name;
                s.runtime_version = info.version;
                s.message = None;
            }),
            ConnectionState::Synchronized => self.set_status(|s| s.synchronized = true),
            ConnectionState::Disconnected(reason) => self.set_status(|s| {
                s.connected = false;
                s.synchronized = false;
                s.message = Some(reason);
            }),
        }
    }

    fn answered(&self, a: Answered) {
        let kind = match a.request {
            Request::Configure => RequestKind::Configure,
            Request::Synchronize => RequestKind::Synchronize,
            Request::CreateContainer => RequestKind::CreateContainer,
            Request::Lifecycle(Event::STOP_CONTAINER) => RequestKind::StopContainer,
            Request::Lifecycle(Event::REMOVE_CONTAINER) => RequestKind::RemoveContainer,
            Request::Lifecycle(_) => RequestKind::Other,
        };
        self.metrics.observe(kind, a.elapsed, a.deadline_exceeded);
    }

    async fn synchronize(
        &self,
        runtime: Runtime,
        pods: Vec<nri::PodSandbox>,
        containers: Vec<nri::Container>,
    ) -> ttrpc::Result<Vec<nri::ContainerUpdate>> {
        let started = Instant::now();
        let live = containers.iter().map(|c| c.id.clone()).collect();
        let state_dir = self.store.root().to_path_buf();
        tokio::task::spawn_blocking(move || {
            sweep_params_copies(&state_dir, &live);
            if let Err(e) = prune_entries(&state_dir, &live) {
                tracing::warn!(error = %e, "cannot prune graftctl's container entries");
            }
        });
        // Record reads may hang (a stuck filesystem): they run on a blocking thread, and
        // Synchronize answers without the ones that miss the limit.
        let uids = verify::pods_to_check(&pods, &containers);
        let claims = verify::read_within(self.store.clone(), uids, self.sync_read_limit()).await;
        let found = verify::uninjected(&pods, &containers, &claims, &self.policy);
        tracing::info!(
            pods = pods.len(),
            containers = containers.len(),
            uninjected = found.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "synchronized with the runtime"
        );
        if found.is_empty() {
            return Ok(Vec::new());
        }
        self.stats
            .uninjected_found
            .fetch_add(found.len() as u64, Ordering::Relaxed);
        self.metrics.uninjected_found(found.len() as u64);
        self.stats
            .evictions_requested
            .fetch_add(found.len() as u64, Ordering::Relaxed);
        let mut evict = Vec::new();
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            for (ctr, reason) in &found {
                tracing::warn!(container = %ctr.id, "{reason}; evicting it");
                pending.insert(
                    ctr.id.clone(),
                    PendingEviction {
                        reason: reason.clone(),
                    },
                );
                evict.push(nri::ContainerEviction {
                    container_id: ctr.id.clone(),
                    reason: reason.clone(),
                    ..Default::default()
                });
            }
        }
        self.set_status(|s| {
            s.uninjected_found += found.len() as u64;
        });
        self.spawn_evictions(runtime, evict);
        Ok(Vec::new())
    }

    async fn create_container(
        &self,
        pod: nri::PodSandbox,
        ctr: nri::Container,
    ) -> ttrpc::Result<nri::CreateContainerResponse> {
        // Every line about this container carries it (one small allocation per container).
        let span = tracing::info_span!(
            "container",
            pod = %format_args!("{}/{}", pod.namespace, pod.name),
            container = %ctr.name,
            container_id = %ctr.id,
        );
        self.create_in_span(pod, ctr).instrument(span).await
    }

    async fn lifecycle(
        &self,
        event: Event,
        _pod: Option<nri::PodSandbox>,
        ctr: Option<nri::Container>,
    ) -> ttrpc::Result<()> {
        if let (Event::STOP_CONTAINER | Event::REMOVE_CONTAINER, Some(ctr)) = (event, ctr) {
            let removed = self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&ctr.id);
            if removed.is_some() {
                tracing::info!(container = %ctr.id, "evicted container has stopped");
            }
            if event == Event::REMOVE_CONTAINER {
                let (root, id) = (self.store.root().to_path_buf(), ctr.id.clone());
                tokio::task::spawn_blocking(move || {
                    if let Err(e) = remove_entry(&root, &id) {
                        tracing::warn!(container = %id, error = %e, "cannot remove the graftctl entry");
                    }
                });
                // graft-hook unlinks its per-container copies once they are mounted; this
                // removes any a failed hook left behind.
                if let Some(copy) = params_copy_path(self.store.root(), &ctr.id) {
                    tokio::task::spawn_blocking(move || {
                        for suffix in ["", ".mig-config", ".mig-monitor"] {
                            remove_if_present(std::path::Path::new(&format!(
                                "{}{suffix}",
                                copy.display()
                            )));
                        }
                    });
                }
            }
        }
        Ok(())
    }
}

/// Removes params copies (`nvidia/params.<id>` in the state directory) of containers the
/// runtime no longer has.
fn sweep_params_copies(state_dir: &std::path::Path, live: &std::collections::HashSet<String>) {
    let base = params::params_copy_base(state_dir);
    let Some(parent) = base.parent() else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(id) = params::container_of(&name) {
            if !live.contains(id) {
                remove_if_present(&e.path());
            }
        }
    }
}

fn remove_if_present(path: &std::path::Path) {
    match std::fs::remove_file(path) {
        Ok(()) => tracing::info!(path = %path.display(), "removed a leftover params copy"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot remove a params copy"),
    }
}

impl GraftPlugin {
    async fn create_in_span(
        &self,
        pod: nri::PodSandbox,
        ctr: nri::Container,
    ) -> ttrpc::Result<nri::CreateContainerResponse> {
        // Reading and checking records is file I/O: it runs on a blocking thread with a
        // deadline (`reads`), so that a hung read refuses only this pod's containers, and
        // so that a panic in it comes back as an error for this container only.
        let store = self.store.clone();
        let policy = self.policy.clone();
        let host_root = self.host_root.clone();
        let (pod_uid, ctr_name, ctr_env) = (pod.uid.clone(), ctr.name.clone(), ctr.env.clone());
        let (ctr_id, pod_ns, pod_name) = (ctr.id.clone(), pod.namespace.clone(), pod.name.clone());
        #[cfg(feature = "fault-injection")]
        let fault = self.fault.clone();
        let span = tracing::Span::current();
        // Err: why it is refused (the metric's reason), the pod's claims (`namespace/name`,
        // when readable) and the reason in words.
        type Refused = (Refusal, Vec<String>, String);
        // Ok: the plan, with graftctl's entry for it (written after the answer, below).
        let work = self.reads.run(
            &pod.uid,
            self.reads.limit(),
            move || -> Result<Option<(Plan, ContainerEntry)>, Refused> {
                let _span = span.enter();
                #[cfg(feature = "fault-injection")]
                fault.strike();
                let claims = store
                    .pod_claims(&pod_uid)
                    .map_err(|e| (Refusal::RecordUnreadable, Vec::new(), e.to_string()))?;
                if claims.is_empty() {
                    return Ok(None);
                }
                let names = || {
                    claims
                        .iter()
                        .map(|c| format!("{}/{}", c.claim.namespace, c.claim.name))
                        .collect()
                };
                let planned = plan(&claims, &pod_uid, &ctr_name, &policy)
                    .map_err(|e| (Refusal::RecordRejected, names(), e.to_string()))?;
                let Some(p) = planned else { return Ok(None) };
                p.check_container_env(&ctr_env)
                    .map_err(|e| (Refusal::RecordRejected, names(), e.to_string()))?;
                check_served(&p, &policy, &host_root)
                    .map_err(|e| (Refusal::SourceNotServed, names(), e))?;
                crate::published::check(&claims, &pod_uid, &ctr_name, store.root())
                    .map_err(|e| (Refusal::RecordRejected, names(), e))?;
                check_present(&p, store.root()).map_err(|e| (Refusal::DeviceAbsent, names(), e))?;
                let target = entries::Target {
                    container_id: &ctr_id,
                    container: &ctr_name,
                    pod_uid: &pod_uid,
                    pod_namespace: &pod_ns,
                    pod_name: &pod_name,
                };
                let entry = entries::entry(&target, &p, &claims);
                Ok(Some((p, entry)))
            },
        );
        let planned = match work.await {
            Err(e) => {
                let why = e.to_string();
                return Err(self.refuse(&pod, &ctr, &[], Refusal::RecordUnreadable, why));
            }
            Ok(Ok(r)) => {
                r.map_err(|(kind, claims, why)| self.refuse(&pod, &ctr, &claims, kind, why))?
            }
            Ok(Err(e)) if e.is_panic() => {
                let why = format!(
                    "graft-nri failed internally ({}); refused rather than started without \
                     its devices",
                    panic_message(&*e.into_panic())
                );
                return Err(self.refuse(&pod, &ctr, &[], Refusal::Internal, why));
            }
            Ok(Err(e)) => {
                return Err(self.refuse(
                    &pod,
                    &ctr,
                    &[],
                    Refusal::Internal,
                    format!("graft-nri: {e}"),
                ))
            }
        };
        let mut resp = nri::CreateContainerResponse::new();
        let Some((plan, entry)) = planned else {
            self.metrics.skipped();
            return Ok(resp);
        };
        self.stats.injected.fetch_add(1, Ordering::Relaxed);
        self.metrics.injected();
        tracing::info!(
            devices = plan.edits.device_nodes.len(), injected = %plan.annotation(),
            "injecting recorded devices"
        );
        resp.adjust = Some(plan.adjustment()).into();
        // graftctl's entry is diagnostics: written beside the answer, not before it.
        let root = self.store.root().to_path_buf();
        tokio::task::spawn_blocking(move || entries::leave(&root, &entry));
        Ok(resp)
    }

    /// Marks the status file disconnected on a clean stop, so the driver stops preparing
    /// at once rather than when it notices the lock is gone.
    pub fn connection_state_stopped(&self) {
        self.metrics.disconnected();
        self.set_status(|s| {
            s.connected = false;
            s.synchronized = false;
            s.message = Some("graft-nri stopped".into());
        });
    }
}
