//! Keeps the node's ResourceSlices equal to what discovery found.
//!
//! Reconciling compares the slices in the API with the desired ones; on any difference it
//! writes every slice at the next pool generation (so consumers never mix generations) and
//! deletes the extra ones. It runs when the inventory changes, when a watch on the driver's
//! own slices sees anything (the kubelet deletes them at its start and 30 s after the last
//! driver instance goes away), and periodically.

use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::{watcher, WatchStreamExt};
use tokio::sync::{mpsc, watch};

use crate::error::Result;
use crate::health::taints::{FatalEffect, Tainting};
use crate::health::HealthReport;
use crate::metrics::DriverMetrics;
use crate::model::{Device, FamilyTaints, Holds};
use crate::slices::{desired_slices, publishable, up_to_date, NodeOwner};
use crate::snapshot::{snapshot, SnapshotWriter};

mod kept;
use kept::Kept;

/// Reconciles the node's ResourceSlices with the inventory; see the module's note.
pub struct Publisher {
    client: kube::Client,
    driver: String,
    node: String,
    owner: Option<NodeOwner>,
    last_dropped: Vec<(String, String)>,
    /// The last generation this process wrote: after a wipe nothing in the API remembers
    /// it, and generations must still only grow.
    last_generation: i64,
    started: Instant,
    resync: Duration,
    /// Device health, published as taints.
    health: Option<watch::Receiver<HealthReport>>,
    fatal: FatalEffect,
    /// Since when graft-nri has been away past its grace, published as a taint.
    nri: Option<watch::Receiver<Option<SystemTime>>>,
    /// Whether a device plugin beside graft makes it withhold its GPUs.
    holds: Option<watch::Receiver<Holds>>,
    /// What the families taint their own devices with (NVIDIA: MPS tenants).
    family_taints: Option<watch::Receiver<FamilyTaints>>,
    /// Which gated fields the API server keeps (`kept`).
    kept: Kept,
    metrics: Option<std::sync::Arc<DriverMetrics>>,
    /// Where what was published is left for graftctl, when set.
    snapshot: Option<SnapshotWriter>,
}

impl Publisher {
    /// A publisher for `driver`'s slices of `node`; `started` is when the process began (the
    /// log says how long the first slices took).
    pub fn new(client: kube::Client, driver: String, node: String, started: Instant) -> Self {
        Publisher {
            client,
            driver,
            node,
            owner: None,
            last_dropped: Vec::new(),
            last_generation: 0,
            started,
            resync: Duration::from_secs(60),
            health: None,
            fatal: FatalEffect::NoSchedule,
            nri: None,
            holds: None,
            family_taints: None,
            kept: Kept::default(),
            metrics: None,
            snapshot: None,
        }
    }

    /// Leaves what is published, with health, in `state_dir` for graftctl.
    pub fn with_snapshot(mut self, state_dir: std::path::PathBuf) -> Self {
        self.snapshot = Some(SnapshotWriter::new(state_dir));
        self
    }

    async fn note_published(&mut self, ok: &[&Device]) {
        let report = self
            .health
            .as_ref()
            .map(|h| h.borrow().clone())
            .unwrap_or_default();
        let snap = snapshot(&self.driver, &self.node, ok, &self.last_dropped, &report);
        if let Some(w) = &mut self.snapshot {
            w.published(snap).await;
        }
    }

    /// Counts reconciles (and notes the first success, for readiness) in `metrics`.
    pub fn with_metrics(mut self, metrics: std::sync::Arc<DriverMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Publishes `health` as device taints, unhealthy devices with `fatal`.
    pub fn with_health(
        mut self,
        health: watch::Receiver<HealthReport>,
        fatal: FatalEffect,
    ) -> Self {
        self.health = Some(health);
        self.fatal = fatal;
        self
    }

    /// Taints every device while graft-nri has been away past its grace (`outage`).
    pub fn with_nri(mut self, outage: watch::Receiver<Option<SystemTime>>) -> Self {
        self.nri = Some(outage);
        self
    }

    /// Leaves out the devices the families hold back (NVIDIA's GPUs beside its device
    /// plugin).
    pub fn with_holds(mut self, holds: watch::Receiver<Holds>) -> Self {
        self.holds = Some(holds);
        self
    }

    /// Publishes the taints the families put on their devices.
    pub fn with_family_taints(mut self, taints: watch::Receiver<FamilyTaints>) -> Self {
        self.family_taints = Some(taints);
        self
    }

    fn tainting(&self) -> Tainting {
        if !self.kept.taints {
            return Tainting::none(&self.driver);
        }
        let mut t = Tainting::none(&self.driver);
        if let Some(h) = &self.health {
            t.fatal = self.fatal;
            t.report = h.borrow().clone();
        }
        t.nri_outage = self.nri.as_ref().and_then(|n| *n.borrow());
        if let Some(f) = &self.family_taints {
            t.family = f.borrow().clone();
        }
        t
    }

    fn api(&self) -> Api<ResourceSlice> {
        Api::all(self.client.clone())
    }

    fn selector(&self) -> String {
        format!("spec.driver={},spec.nodeName={}", self.driver, self.node)
    }

    async fn owner(&mut self) -> Result<NodeOwner> {
        if let Some(o) = &self.owner {
            return Ok(o.clone());
        }
        let node = Api::<Node>::all(self.client.clone())
            .get(&self.node)
            .await?;
        let owner = NodeOwner {
            name: self.node.clone(),
            uid: node.metadata.uid.unwrap_or_default(),
        };
        self.owner = Some(owner.clone());
        Ok(owner)
    }

    /// One reconcile pass; true when it wrote anything.
    pub async fn reconcile(&mut self, devices: &[Device]) -> Result<bool> {
        let owner = self.owner().await?;
        // Without what the API server drops (sharing, binding conditions).
        let offered = self.kept.offered(devices);
        let devices = offered.as_ref();
        let (mut ok, dropped) = publishable(devices);
        if !self.kept.counters {
            ok.retain(|d| d.consumes.is_none());
        }
        if dropped != self.last_dropped {
            for (name, reason) in &dropped {
                tracing::warn!(
                    device = name,
                    reason,
                    "device not published: outside the API limits"
                );
            }
            self.last_dropped = dropped;
        }
        let taints = self.tainting();
        let api = self.api();
        let existing = api
            .list(&ListParams::default().fields(&self.selector()))
            .await?
            .items;
        let max_gen = existing
            .iter()
            .map(|s| s.spec.pool.generation)
            .max()
            .unwrap_or(0);
        if up_to_date(
            &existing,
            &desired_slices(&self.driver, &owner, &ok, max_gen, &taints),
        ) {
            self.note_published(&ok).await;
            return Ok(false);
        }

        let generation = max_gen.max(self.last_generation) + 1;
        let desired = desired_slices(&self.driver, &owner, &ok, generation, &taints);
        for mut slice in desired.iter().cloned() {
            let name = slice.metadata.name.clone().unwrap_or_default();
            let written = match existing
                .iter()
                .find(|e| e.metadata.name.as_deref() == Some(&name))
            {
                Some(e) => {
                    slice.metadata.resource_version = e.metadata.resource_version.clone();
                    api.replace(&name, &PostParams::default(), &slice).await?
                }
                None => api.create(&PostParams::default(), &slice).await?,
            };
            self.kept.note(&slice, &written);
        }
        for e in &existing {
            let name = e.metadata.name.clone().unwrap_or_default();
            if desired
                .iter()
                .any(|d| d.metadata.name.as_deref() == Some(&name))
            {
                continue;
            }
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: e.metadata.uid.clone(),
                    resource_version: e.metadata.resource_version.clone(),
                }),
                ..Default::default()
            };
            match api.delete(&name, &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.last_generation = generation;
        self.note_published(&ok).await;
        tracing::info!(
            generation,
            slices = desired.len(),
            devices = ok.len(),
            "published ResourceSlices"
        );
        Ok(true)
    }

    /// Runs until the task is dropped.
    pub async fn run(mut self, mut inventory: watch::Receiver<Vec<Device>>) {
        let mut health = self.health.clone();
        let mut nri = self.nri.clone();
        let mut holds = self.holds.clone();
        let mut family_taints = self.family_taints.clone();
        let (tx, mut events) = mpsc::channel::<()>(1);
        let api = self.api();
        let cfg = watcher::Config::default().fields(&self.selector());
        tokio::spawn(async move {
            let mut stream = watcher(api, cfg).default_backoff().boxed();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                    Ok(_) => {
                        let _ = tx.try_send(());
                    }
                    Err(e) => tracing::debug!(error = %e, "slice watch error"),
                }
                if tx.is_closed() {
                    break;
                }
            }
        });

        let mut first = true;
        let mut backoff = Duration::from_millis(200);
        loop {
            let mut devices = inventory.borrow_and_update().clone();
            if let Some(h) = holds.as_mut() {
                let h = h.borrow_and_update().clone();
                devices.retain(|d| h.publishes(d));
            }
            let result = self.reconcile(&devices).await;
            drop(devices);
            if let Some(m) = &self.metrics {
                m.reconciled(result.as_ref().map(|w| *w).map_err(|_| ()));
            }
            // A reconcile parses and builds every slice; hand those transient buffers back
            // to the OS rather than keep them as the daemon's idle footprint.
            // SAFETY: malloc_trim only releases free heap memory.
            unsafe {
                libc::malloc_trim(0);
            }
            match result {
                Ok(_) => {
                    if first {
                        tracing::info!(
                            elapsed_ms = self.started.elapsed().as_millis() as u64,
                            "slices in place after start"
                        );
                        first = false;
                    }
                    backoff = Duration::from_millis(200);
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "publishing ResourceSlices failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            }
            tokio::select! {
                r = inventory.changed() => if r.is_err() { return },
                Ok(()) = changed(&mut health) => {}
                Ok(()) = changed(&mut nri) => {}
                Ok(()) = changed(&mut holds) => {}
                Ok(()) = changed(&mut family_taints) => {}
                _ = events.recv() => {
                    // Let a burst of events (a wipe deletes several slices) settle.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    while events.try_recv().is_ok() {}
                }
                _ = tokio::time::sleep(self.resync) => {}
            }
        }
    }
}

/// Resolves when the watched value changes; never when there is none (or it is gone).
async fn changed<T>(w: &mut Option<watch::Receiver<T>>) -> std::result::Result<(), ()> {
    match w {
        Some(h) => match h.changed().await {
            Ok(()) => Ok(()),
            Err(_) => {
                *w = None;
                Err(())
            }
        },
        None => std::future::pending().await,
    }
}
