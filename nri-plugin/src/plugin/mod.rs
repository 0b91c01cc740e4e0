//! graft's NRI plugin: injects what the driver recorded, and nothing else.
//!
//! By concern: `create` injects on CreateContainer, `sync` checks the running containers on
//! Synchronize and evicts those without their devices, `leftovers` removes what containers
//! the runtime no longer has left in the state directory.

mod create;
mod leftovers;
mod sync;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use graft_nri_sdk::{Answered, ConnectionState, EventMask, NriPlugin, Request, Runtime};
use graft_proto::nri::{self, Event};
use graft_record::{InjectionPolicy, RecordStore, StatusPublisher};
use tracing::Instrument;
use ttrpc::Code;

#[cfg(feature = "fault-injection")]
use crate::fault::FaultSwitch;
use crate::metrics::{NriMetrics, Refusal, RequestKind};
use crate::reads::Reads;
use crate::refusal;
use sync::PendingEviction;

/// Counters, for logs and tests.
#[derive(Debug, Default)]
pub struct Stats {
    /// Containers given recorded devices.
    pub injected: AtomicU64,
    /// Containers refused.
    pub refused: AtomicU64,
    /// Running containers Synchronize found without what their records grant.
    pub uninjected_found: AtomicU64,
    /// Evictions asked of the runtime.
    pub evictions_requested: AtomicU64,
}

/// graft's NRI plugin (see the module documentation).
pub struct GraftPlugin {
    store: RecordStore,
    /// What a record may ask of a container; graft-driver applies the same rules.
    policy: InjectionPolicy,
    status: Arc<Mutex<StatusPublisher>>,
    pending: Arc<Mutex<HashMap<String, PendingEviction>>>,
    stats: Arc<Stats>,
    metrics: Arc<NriMetrics>,
    /// How long to wait for the runtime to stop an evicted container before saying so.
    eviction_grace: Duration,
    /// Where the host's root is visible (served entries are checked there).
    host_root: PathBuf,
    /// CreateContainer's record reads, with their deadline.
    reads: Reads,
    /// graftctl's container entries not yet written.
    entries: crate::entries::Pending,
    /// What becomes of GPU requests to NVIDIA's container toolkit in containers graft
    /// gives no GPU.
    unclaimed: crate::unclaimed::Mode,
    #[cfg(feature = "fault-injection")]
    fault: FaultSwitch,
}

impl GraftPlugin {
    /// A plugin that injects from `store` what `policy` allows.
    pub fn new(store: RecordStore, status: StatusPublisher, policy: InjectionPolicy) -> Self {
        GraftPlugin {
            policy,
            store,
            status: Arc::new(Mutex::new(status)),
            pending: Arc::new(Mutex::new(HashMap::new())),
            stats: Arc::new(Stats::default()),
            metrics: Arc::new(NriMetrics::default()),
            eviction_grace: Duration::from_secs(5),
            host_root: PathBuf::from("/"),
            reads: Reads::default(),
            entries: Default::default(),
            unclaimed: Default::default(),
            #[cfg(feature = "fault-injection")]
            fault: FaultSwitch::default(),
        }
    }

    /// What becomes of GPU requests to NVIDIA's container toolkit in containers graft
    /// gives no GPU ([`crate::unclaimed`]).
    pub fn with_unclaimed_gpu_requests(mut self, mode: crate::unclaimed::Mode) -> Self {
        self.unclaimed = mode;
        self
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

    /// How long the runtime gets to stop an evicted container before graft says so.
    pub fn with_eviction_grace(mut self, grace: Duration) -> Self {
        self.eviction_grace = grace;
        self
    }

    /// Where the host's root is mounted, when not at `/`.
    pub fn with_host_root(mut self, root: PathBuf) -> Self {
        self.host_root = root;
        self
    }

    /// The counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Counts into `metrics` (registered by the caller) instead of a private set.
    pub fn with_metrics(mut self, metrics: Arc<NriMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The metrics it counts into.
    pub fn metrics(&self) -> Arc<NriMetrics> {
        self.metrics.clone()
    }

    /// Changes the status file graft-driver reads; a failed write is logged.
    fn set_status(&self, change: impl FnOnce(&mut graft_record::NriStatus)) {
        set_status(&self.status, change)
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

#[async_trait]
impl NriPlugin for GraftPlugin {
    fn events(&self) -> EventMask {
        EventMask::of(&[
            Event::CREATE_CONTAINER,
            Event::STOP_CONTAINER,
            Event::REMOVE_CONTAINER,
        ])
    }

    /// graft-nri corrects running containers by eviction, never by an update in its
    /// answer, so the SDK answers Synchronize before decoding it.
    fn synchronize_updates(&self) -> bool {
        false
    }

    fn connection_state(&self, state: ConnectionState) {
        match &state {
            ConnectionState::Configured(info) => {
                self.metrics.configured();
                self.reads.configured(info.request_timeout_ms);
            }
            ConnectionState::Synchronized => self.metrics.synchronized(),
            ConnectionState::Disconnected(_) | ConnectionState::Unsupported(_) => {
                self.metrics.disconnected()
            }
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
            // Never for graft-nri: every runtime with NRI has CreateContainer.
            ConnectionState::Unsupported(info) => self.set_status(|s| {
                s.connected = false;
                s.synchronized = false;
                s.message = Some(format!(
                    "{} {} has no event graft-nri needs",
                    info.name, info.version
                ));
            }),
        }
    }

    fn answered(&self, a: Answered) {
        let kind = match a.request {
            Request::Configure => RequestKind::Configure,
            Request::Synchronize => RequestKind::Synchronize,
            Request::CreateContainer => RequestKind::CreateContainer,
            Request::ValidateContainerAdjustment => RequestKind::Other,
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
        self.synchronize_with(runtime, pods, containers).await
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

    /// A stopped or removed container: a pending eviction is done; a removed one's
    /// leftovers go.
    async fn lifecycle(
        &self,
        event: Event,
        _pod: Option<nri::PodSandbox>,
        ctr: Option<nri::Container>,
    ) -> ttrpc::Result<()> {
        if let (Event::STOP_CONTAINER | Event::REMOVE_CONTAINER, Some(ctr)) = (event, ctr) {
            self.eviction_done(&ctr.id);
            if event == Event::REMOVE_CONTAINER {
                self.container_removed(&ctr);
            }
        }
        Ok(())
    }
}

/// [`GraftPlugin::set_status`], for tasks that hold only the publisher.
fn set_status(status: &Mutex<StatusPublisher>, change: impl FnOnce(&mut graft_record::NriStatus)) {
    let mut publisher = status.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(e) = publisher.update(change) {
        tracing::error!(error = %e, "cannot write the NRI status file");
    }
}
