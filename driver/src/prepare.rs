//! NodePrepareResources and NodeUnprepareResources: what the kubelet asks of a DRA driver,
//! done durably.
//!
//! A call first reads everything it needs from the API server (claims, and the pods they
//! are reserved for), then does the local work under the checkpoint lock: for each claim,
//! `PrepareStarted` is written before the record the NRI plugin reads, and
//! `PrepareCompleted` after it. Unprepare removes the record before the entry, so a crash
//! at any step leaves a state the next call or the cleanup pass resolves.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use graft_record::policy::DEFAULT_HOOK_PATH;
use graft_record::{
    nri_readiness, ClaimRecord, ClaimRef, ContainerEdits, DeviceRecord, EnvVar, InjectionPolicy,
    NriReadiness, RecordStore, FORMAT_VERSION,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::Api;

use crate::checkpoint::{Checkpoint, ClaimEntry, ClaimState, PreparedDevice, Txn};
use crate::discovery::Device;
use crate::error::{DriverError, Result};
use crate::mapping::{base_request, pod_record, ClaimDevice};
use crate::opaque;
use crate::setup::{DeviceSetup, NoSetup, Setup};

/// A claim as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimId {
    pub namespace: String,
    pub uid: String,
    pub name: String,
}

impl std::fmt::Display for ClaimId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Errors that fail a whole NodePrepareResources call, as the reference helper does; the
/// kubelet retries the call.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("retrieve claim {claim}: {source}")]
    Fetch {
        claim: String,
        #[source]
        source: kube::Error,
    },
    #[error("claim {claim} not found")]
    NotFound { claim: String },
    #[error("claim {claim} got replaced (uid {found}, expected {expected})")]
    Replaced {
        claim: String,
        found: String,
        expected: String,
    },
    #[error("claim {claim} not allocated")]
    NotAllocated { claim: String },
    #[error(transparent)]
    Local(#[from] DriverError),
}

/// A claim and its pods, as read from the API server.
pub struct Fetched {
    pub id: ClaimId,
    pub claim: ResourceClaim,
    pub pods: Vec<Pod>,
    /// Pods in `reservedFor` that could not be read; the claim fails if there are any.
    pub pod_errors: Vec<String>,
}

/// Where a test may have the driver kill itself (SIGKILL) in the middle of a prepare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CrashPoint {
    AfterStarted,
    AfterRecord,
    AfterCompleted,
}

pub type ClaimOutcome<T> = std::result::Result<T, String>;

pub struct DriverCore {
    pub driver_name: String,
    pub node_name: String,
    client: kube::Client,
    store: RecordStore,
    checkpoint: Checkpoint,
    state_dir: PathBuf,
    boot_id: String,
    inventory: RwLock<Arc<BTreeMap<String, Device>>>,
    // Serialises this process's calls; the checkpoint flock serialises instances.
    serial: tokio::sync::Mutex<()>,
    crash_at: Option<CrashPoint>,
    setup: Arc<dyn DeviceSetup>,
    /// What a record may ask of a container; graft-nri applies the same rules.
    policy: InjectionPolicy,
}

impl DriverCore {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        driver_name: String,
        node_name: String,
        client: kube::Client,
        state_dir: PathBuf,
        boot_id: String,
        crash_at: Option<CrashPoint>,
    ) -> Result<Self> {
        let store = RecordStore::open(&state_dir)?;
        let policy = InjectionPolicy::new(&state_dir, DEFAULT_HOOK_PATH, &[])?;
        let checkpoint = Checkpoint::new(crate::checkpoint::default_dir(&state_dir), &boot_id)?;
        Ok(DriverCore {
            driver_name,
            node_name,
            client,
            store,
            checkpoint,
            state_dir,
            boot_id,
            inventory: RwLock::new(Arc::new(BTreeMap::new())),
            serial: tokio::sync::Mutex::new(()),
            crash_at,
            setup: Arc::new(NoSetup),
            policy,
        })
    }

    /// The injection policy records must follow (the node's hook path and mount roots).
    pub fn with_policy(mut self, policy: InjectionPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Who sets devices up on this node (VFIO rebinding, time-slicing).
    pub fn with_setup(mut self, setup: Arc<dyn DeviceSetup>) -> Self {
        self.setup = setup;
        self
    }

    /// Undoes every setup of an entry's devices; the first failure stops it, so that the
    /// entry stays and the next unprepare or cleanup tries again.
    fn undo_setups(&self, entry: &ClaimEntry) -> Result<()> {
        for d in entry.devices.iter().rev() {
            if let Some(s) = &d.setup {
                self.setup.undo(s).map_err(|reason| DriverError::Setup {
                    device: d.device.clone(),
                    reason,
                })?;
                tracing::info!(device = d.device, setup = ?s, "setup undone");
            }
        }
        Ok(())
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    pub fn set_inventory(&self, devices: &[Device]) {
        let map = devices
            .iter()
            .map(|d| (d.name.clone(), d.clone()))
            .collect();
        if let Ok(mut inv) = self.inventory.write() {
            *inv = Arc::new(map);
        }
    }

    fn inventory(&self) -> Arc<BTreeMap<String, Device>> {
        self.inventory
            .read()
            .map(|i| Arc::clone(&i))
            .unwrap_or_default()
    }

    fn crash_if(&self, point: CrashPoint) {
        if self.crash_at == Some(point) {
            tracing::warn!(?point, "crash point reached; killing this process");
            // SAFETY: sending a signal to ourselves.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }

    /// Start-up: settle the checkpoint (other boot, corruption) and make the records agree
    /// with it.
    pub async fn startup(&self) -> Result<()> {
        let report = self.checkpoint.open().await?;
        let _serial = self.serial.lock().await;
        let mut txn = self.checkpoint.begin().await?;
        if let Some((boot, claims)) = report.discarded_other_boot {
            tracing::warn!(
                previous_boot = boot,
                claims = claims.len(),
                "checkpoint is from another boot; discarded with its records (the kubelet prepares again)"
            );
            for uid in claims.keys() {
                self.store.remove_claim(uid)?;
            }
        }
        if let Some(q) = report.quarantined {
            if q.from_earlier_boot {
                // Written before this boot: like a checkpoint of another boot, its records
                // go (below, as records the checkpoint does not hold).
                tracing::error!(
                    moved_to = %q.moved_to.display(),
                    reason = q.reason,
                    "checkpoint from an earlier boot failed its checks; discarding it and its records"
                );
            } else {
                tracing::error!(
                    moved_to = %q.moved_to.display(),
                    reason = q.reason,
                    "checkpoint failed its checks; rebuilding it from the claim records"
                );
                for uid in self.store.claim_uids()? {
                    if let Ok(Some(rec)) = self.store.get_claim(&uid) {
                        txn.set(&uid, entry_from_record(&rec));
                    }
                }
                txn.save()?;
            }
        }
        // Records with no checkpoint entry belong to nothing the driver tracks.
        for uid in self.store.claim_uids()? {
            if txn.get(&uid).is_none() {
                tracing::warn!(
                    claim_uid = uid,
                    "removing a record the checkpoint does not hold"
                );
                self.store.remove_claim(&uid)?;
            }
        }
        self.store.repair_index()?;
        drop(txn);
        Ok(())
    }

    /// Reads the claims and their pods. Any claim that is missing, replaced or not
    /// allocated fails the whole call.
    pub async fn fetch(&self, ids: &[ClaimId]) -> std::result::Result<Vec<Fetched>, CallError> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let claims: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &id.namespace);
            let claim = claims
                .get_opt(&id.name)
                .await
                .map_err(|source| CallError::Fetch {
                    claim: id.to_string(),
                    source,
                })?
                .ok_or_else(|| CallError::NotFound {
                    claim: id.to_string(),
                })?;
            let found = claim.metadata.uid.clone().unwrap_or_default();
            if found != id.uid {
                return Err(CallError::Replaced {
                    claim: id.to_string(),
                    found,
                    expected: id.uid.clone(),
                });
            }
            let status = claim.status.as_ref();
            if status.and_then(|s| s.allocation.as_ref()).is_none() {
                return Err(CallError::NotAllocated {
                    claim: id.to_string(),
                });
            }
            let pods_api: Api<Pod> = Api::namespaced(self.client.clone(), &id.namespace);
            let mut pods = Vec::new();
            let mut pod_errors = Vec::new();
            for r in status
                .and_then(|s| s.reserved_for.as_deref())
                .unwrap_or_default()
            {
                if r.resource != "pods" || r.api_group.as_deref().is_some_and(|g| !g.is_empty()) {
                    continue;
                }
                match pods_api.get_opt(&r.name).await {
                    Ok(Some(p)) if p.metadata.uid.as_deref() == Some(r.uid.as_str()) => {
                        pods.push(p)
                    }
                    // Gone or replaced: it will never run a container with this claim.
                    Ok(_) => tracing::debug!(pod = r.name, "reserved pod not found; skipped"),
                    Err(e) => pod_errors.push(format!("pod {}/{}: {e}", id.namespace, r.name)),
                }
            }
            out.push(Fetched {
                id: id.clone(),
                claim,
                pods,
                pod_errors,
            });
        }
        Ok(out)
    }

    /// The local half of prepare: one outcome per claim UID.
    pub async fn prepare_fetched(
        &self,
        fetched: Vec<Fetched>,
    ) -> std::result::Result<BTreeMap<String, ClaimOutcome<Vec<PreparedDevice>>>, CallError> {
        let mut out = BTreeMap::new();
        if fetched.is_empty() {
            return Ok(out);
        }
        // No container may start without its devices: while graft-nri is not there to
        // inject, every claim fails and the kubelet retries.
        match nri_readiness(&self.state_dir, &self.boot_id).map_err(DriverError::from)? {
            NriReadiness::Ready(_) => {}
            NriReadiness::NotReady(reason) => {
                for f in fetched {
                    out.insert(
                        f.id.uid.clone(),
                        Err(format!(
                            "graft-nri is not ready to inject devices: {reason}"
                        )),
                    );
                }
                return Ok(out);
            }
        }
        let _serial = self.serial.lock().await;
        let mut txn = self.checkpoint.begin().await?;
        let inventory = self.inventory();
        let fail = |f: &Fetched, e: PrepareFailure| -> String {
            let msg = match e {
                PrepareFailure::Claim(msg) => msg,
                // Local I/O failed: the claim fails and the kubelet retries.
                PrepareFailure::Local(e) => format!("prepare {}: {e}", f.id),
            };
            tracing::warn!(claim = %f.id, uid = f.id.uid, error = msg, "prepare failed");
            msg
        };

        // Phase 1, per claim: completed claims are refreshed, the rest planned. Nothing
        // is written for a planned claim yet, except rolling back an interrupted one.
        let mut plans: Vec<(&Fetched, Plan)> = Vec::new();
        for f in &fetched {
            match self.plan_one(&mut txn, &inventory, f, &plans) {
                Ok(Planned::Done(devices)) => {
                    out.insert(f.id.uid.clone(), Ok(devices));
                }
                Ok(Planned::New(plan)) => plans.push((f, plan)),
                Err(e) => {
                    out.insert(f.id.uid.clone(), Err(fail(f, e)));
                }
            }
        }
        if plans.is_empty() {
            return Ok(out);
        }

        // Phase 2: PrepareStarted for the whole batch, durable before any record exists.
        for (f, plan) in &plans {
            txn.set(&f.id.uid, plan.entry.clone());
        }
        txn.save()?;
        self.crash_if(CrashPoint::AfterStarted);

        // Phase 2b: node-side setup. A claim whose setup fails is undone and dropped.
        let mut set_up = Vec::new();
        for (f, mut plan) in plans {
            match self.apply_setups(&mut plan) {
                Ok(()) => set_up.push((f, plan)),
                Err(msg) => {
                    txn.unset(&f.id.uid);
                    out.insert(f.id.uid.clone(), Err(fail(f, PrepareFailure::Claim(msg))));
                }
            }
        }
        let plans = set_up;

        // Phase 3: the records graft-nri reads, each checked against the policy graft-nri
        // will apply, so that a violation fails here, on the claim, not at container start.
        let mut written = Vec::new();
        for (f, plan) in plans {
            let put = self
                .policy
                .check_record(&plan.record)
                .map_err(|e| {
                    PrepareFailure::Claim(format!(
                        "the record for claim {} would break graft's injection policy: {e}",
                        f.id
                    ))
                })
                .and_then(|()| self.store.put_claim(&plan.record).map_err(Into::into));
            match put {
                Ok(()) => written.push((f, plan)),
                Err(e) => {
                    // Leave nothing half-done: the entry goes with the failed record.
                    let _ = self.store.remove_claim(&f.id.uid);
                    if let Err(u) = self.undo_setups(&plan.entry) {
                        tracing::error!(claim = %f.id, error = %u, "undoing setup failed");
                    }
                    txn.unset(&f.id.uid);
                    out.insert(f.id.uid.clone(), Err(fail(f, e)));
                }
            }
        }
        self.crash_if(CrashPoint::AfterRecord);

        // Phase 4: PrepareCompleted.
        for (f, plan) in &mut written {
            plan.entry.state = ClaimState::PrepareCompleted;
            txn.set(&f.id.uid, plan.entry.clone());
        }
        txn.save()?;
        self.crash_if(CrashPoint::AfterCompleted);
        for (f, plan) in written {
            tracing::info!(
                claim = %f.id,
                uid = f.id.uid,
                devices = plan.entry.devices.len(),
                pods = plan.record.pods.len(),
                "prepared"
            );
            out.insert(f.id.uid.clone(), Ok(plan.entry.devices));
        }
        Ok(out)
    }

    pub async fn prepare(
        &self,
        ids: &[ClaimId],
    ) -> std::result::Result<BTreeMap<String, ClaimOutcome<Vec<PreparedDevice>>>, CallError> {
        let t0 = std::time::Instant::now();
        let fetched = self.fetch(ids).await?;
        let t1 = std::time::Instant::now();
        let out = self.prepare_fetched(fetched).await?;
        // The API half and the local half (locks, fsyncs), for latency tracking.
        tracing::info!(
            claims = ids.len(),
            failed = out.values().filter(|o| o.is_err()).count(),
            fetch_us = (t1 - t0).as_micros() as u64,
            local_us = t1.elapsed().as_micros() as u64,
            "NodePrepareResources"
        );
        Ok(out)
    }

    /// Decides what preparing one claim takes. `earlier` are the claims planned before it
    /// in the same call, so two claims of one batch cannot take the same device.
    fn plan_one(
        &self,
        txn: &mut Txn,
        inventory: &BTreeMap<String, Device>,
        f: &Fetched,
        earlier: &[(&Fetched, Plan)],
    ) -> std::result::Result<Planned, PrepareFailure> {
        let uid = f.id.uid.as_str();
        if !f.pod_errors.is_empty() {
            return Err(PrepareFailure::Claim(f.pod_errors.join("; ")));
        }
        let alloc = f
            .claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref());
        let results: Vec<_> = alloc
            .map(|d| {
                d.results
                    .iter()
                    .flatten()
                    .filter(|r| r.driver == self.driver_name)
                    .collect()
            })
            .unwrap_or_default();
        let configs = alloc.and_then(|d| d.config.as_deref()).unwrap_or_default();

        if let Some(entry) = txn.get(uid).cloned() {
            match entry.state {
                ClaimState::PrepareCompleted => {
                    if let Some(rec) = self.store.get_claim(uid)? {
                        // Idempotent: same devices; the pod and container mapping is
                        // refreshed, so a shared claim gains its new pods.
                        let rec = self.with_pods(rec, f);
                        self.store.put_claim(&rec)?;
                        return Ok(Planned::Done(entry.devices));
                    }
                    tracing::warn!(claim = %f.id, "completed claim has no record; preparing again");
                }
                ClaimState::PrepareStarted => {
                    tracing::info!(claim = %f.id, "rolling back an interrupted prepare");
                }
            }
            self.undo_setups(&entry)?;
            self.store.remove_claim(uid)?;
            txn.remove(uid)?;
        }

        // Plan the devices: one per distinct device, requests merged.
        let mut planned: Vec<PreparedDevice> = Vec::new();
        let mut records: Vec<DeviceRecord> = Vec::new();
        for r in &results {
            let base = base_request(&r.request).to_string();
            if r.pool != self.node_name {
                return Err(PrepareFailure::Claim(format!(
                    "device {}/{} of request {} is not in this node's pool {}",
                    r.pool, r.device, r.request, self.node_name
                )));
            }
            if let Some(p) = planned
                .iter_mut()
                .find(|p| p.device == r.device && p.pool == r.pool)
            {
                if !p.requests.contains(&base) {
                    p.requests.push(base.clone());
                }
                if let Some(rec) = records.iter_mut().find(|d| d.name == r.device) {
                    if !rec.requests.contains(&base) {
                        rec.requests.push(base);
                    }
                }
                continue;
            }
            let dev = inventory.get(&r.device).ok_or_else(|| {
                PrepareFailure::Claim(format!(
                    "device {} (request {}) is not present on node {}",
                    r.device, r.request, self.node_name
                ))
            })?;
            let config = opaque::resolve(&self.driver_name, configs, &r.request)
                .map_err(|e| PrepareFailure::Claim(e.to_string()))?;
            let setup = self
                .setup
                .plan(dev, config.as_ref())
                .map_err(|e| PrepareFailure::Claim(format!("request {}: {e}", r.request)))?;
            if setup.is_none() && config.as_ref().is_some_and(|c| c.sharing.is_some()) {
                return Err(PrepareFailure::Claim(format!(
                    "request {}: device {} cannot be shared (sharing applies to full NVIDIA GPUs)",
                    r.request, r.device
                )));
            }
            records.push(DeviceRecord {
                name: r.device.clone(),
                pool: r.pool.clone(),
                requests: vec![base.clone()],
                edits: apply_config(dev, config.as_ref()).map_err(|e| {
                    PrepareFailure::Claim(format!(
                        "request {}: device {}: {e}",
                        r.request, r.device
                    ))
                })?,
            });
            planned.push(PreparedDevice {
                pool: r.pool.clone(),
                device: r.device.clone(),
                requests: vec![base],
                share_id: r.share_id.clone(),
                admin_access: r.admin_access.unwrap_or(false),
                setup,
            });
        }

        // The last line of defence against a double assignment.
        let batch = earlier.iter().map(|(f, p)| (&f.id.uid, &p.entry));
        for p in planned.iter().filter(|p| !p.admin_access) {
            for (other_uid, other) in txn.claims().iter().chain(batch.clone()) {
                if other_uid == uid {
                    continue;
                }
                let clash = other.devices.iter().any(|o| {
                    (o.device == p.device
                        && o.pool == p.pool
                        && !o.admin_access
                        && !(o.share_id.is_some() && p.share_id.is_some()))
                        || same_function(inventory, o, p)
                });
                if clash {
                    return Err(PrepareFailure::Claim(format!(
                        "device {} is already prepared for claim {}/{} ({other_uid})",
                        p.device, other.namespace, other.name
                    )));
                }
            }
        }

        let entry = ClaimEntry {
            state: ClaimState::PrepareStarted,
            namespace: f.id.namespace.clone(),
            name: f.id.name.clone(),
            devices: planned,
        };
        let record = ClaimRecord {
            version: FORMAT_VERSION,
            claim: ClaimRef {
                uid: uid.to_string(),
                namespace: f.id.namespace.clone(),
                name: f.id.name.clone(),
            },
            devices: records,
            pods: Vec::new(),
        };
        let record = self.with_pods(record, f);
        Ok(Planned::New(Plan { entry, record }))
    }

    fn with_pods(&self, mut rec: ClaimRecord, f: &Fetched) -> ClaimRecord {
        let devices: Vec<ClaimDevice<'_>> = rec
            .devices
            .iter()
            .map(|d| ClaimDevice {
                name: &d.name,
                requests: &d.requests,
            })
            .collect();
        let pods = f
            .pods
            .iter()
            .filter_map(|p| pod_record(p, &f.id.name, &devices))
            .collect();
        rec.pods = pods;
        rec
    }

    /// Unprepare: one outcome per claim; an unknown claim is success.
    pub async fn unprepare(&self, ids: &[ClaimId]) -> BTreeMap<String, ClaimOutcome<()>> {
        let mut out = BTreeMap::new();
        if ids.is_empty() {
            return out;
        }
        let _serial = self.serial.lock().await;
        let mut txn = match self.checkpoint.begin().await {
            Ok(t) => t,
            Err(e) => {
                for id in ids {
                    out.insert(id.uid.clone(), Err(format!("unprepare {id}: {e}")));
                }
                return out;
            }
        };
        for id in ids {
            let result = self.unprepare_one(&mut txn, &id.uid);
            if let Err(e) = &result {
                tracing::warn!(claim = %id, uid = id.uid, error = %e, "unprepare failed");
            }
            out.insert(
                id.uid.clone(),
                result.map_err(|e| format!("unprepare {id}: {e}")),
            );
        }
        out
    }

    fn unprepare_one(&self, txn: &mut Txn, uid: &str) -> Result<()> {
        let state = txn.get(uid).map(|e| e.state);
        if let Some(entry) = txn.get(uid).cloned() {
            self.undo_setups(&entry)?;
        }
        // Record first, entry second: a crash in between leaves an entry that the next
        // unprepare (or cleanup) finishes.
        self.store.remove_claim(uid)?;
        txn.remove(uid)?;
        match state {
            Some(ClaimState::PrepareCompleted) => tracing::info!(uid, "unprepared"),
            Some(ClaimState::PrepareStarted) => {
                tracing::info!(uid, "rolled back a started prepare")
            }
            None => tracing::debug!(uid, "unprepare of an unknown claim"),
        }
        Ok(())
    }

    /// Rolls back `PrepareStarted` claims whose ResourceClaim is gone or replaced. Run at
    /// start and periodically; completed claims are left for the kubelet to unprepare.
    pub async fn cleanup(&self) -> Result<usize> {
        let started: Vec<(String, ClaimEntry)> = {
            let txn = self.checkpoint.begin().await?;
            txn.claims()
                .iter()
                .filter(|(_, e)| e.state == ClaimState::PrepareStarted)
                .map(|(u, e)| (u.clone(), e.clone()))
                .collect()
        };
        let mut stale = Vec::new();
        for (uid, e) in started {
            let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &e.namespace);
            match api.get_opt(&e.name).await? {
                Some(c) if c.metadata.uid.as_deref() == Some(uid.as_str()) => {}
                _ => stale.push(uid),
            }
        }
        if stale.is_empty() {
            return Ok(0);
        }
        let _serial = self.serial.lock().await;
        let mut txn = self.checkpoint.begin().await?;
        let mut n = 0;
        for uid in stale {
            // Re-checked under the lock: another call may have finished it meanwhile.
            if let Some(entry) = txn
                .get(&uid)
                .filter(|e| e.state == ClaimState::PrepareStarted)
                .cloned()
            {
                self.undo_setups(&entry)?;
                self.store.remove_claim(&uid)?;
                txn.remove(&uid)?;
                tracing::info!(uid, "cleaned up a started prepare whose claim is gone");
                n += 1;
            }
        }
        Ok(n)
    }
}

impl DriverCore {
    /// Applies a planned claim's setups in order; on failure undoes those done.
    fn apply_setups(&self, plan: &mut Plan) -> std::result::Result<(), String> {
        let mut done: Vec<&Setup> = Vec::new();
        for d in &plan.entry.devices {
            let Some(s) = &d.setup else { continue };
            match self.setup.apply(s) {
                Ok(edits) => {
                    tracing::info!(device = d.device, setup = ?s, "set up");
                    if let Some(edits) = edits {
                        if let Some(rec) =
                            plan.record.devices.iter_mut().find(|r| r.name == d.device)
                        {
                            rec.edits = edits;
                        }
                    }
                    done.push(s);
                }
                Err(e) => {
                    // The failed one may be half done (unbound, not yet rebound): undo it
                    // too; undo is idempotent.
                    done.push(s);
                    for s in done.iter().rev() {
                        if let Err(u) = self.setup.undo(s) {
                            tracing::error!(setup = ?s, error = u, "undoing setup failed");
                        }
                    }
                    return Err(format!("device {}: {e}", d.device));
                }
            }
        }
        Ok(())
    }
}

/// Whether two prepared devices use the same PCI function in ways that exclude each other:
/// a function handed over for passthrough is not also a GPU or MIG device.
fn same_function(
    inventory: &BTreeMap<String, Device>,
    a: &PreparedDevice,
    b: &PreparedDevice,
) -> bool {
    let pci = |d: &PreparedDevice| -> Option<String> {
        if let Some(s) = &d.setup {
            return Some(s.pci_bus_id().to_string());
        }
        match inventory.get(&d.device)?.attributes.get("pciBusID")? {
            crate::discovery::Attribute::String(s) => Some(s.clone()),
            _ => None,
        }
    };
    let vfio = |d: &PreparedDevice| matches!(d.setup, Some(Setup::Vfio { .. }));
    a.device != b.device && (vfio(a) || vfio(b)) && pci(a).is_some() && pci(a) == pci(b)
}

/// What one claim of a prepare call needs.
enum Planned {
    /// Already prepared; these are its devices.
    Done(Vec<PreparedDevice>),
    New(Plan),
}

struct Plan {
    entry: ClaimEntry,
    record: ClaimRecord,
}

enum PrepareFailure {
    Claim(String),
    Local(DriverError),
}

impl<E: Into<DriverError>> From<E> for PrepareFailure {
    fn from(e: E) -> Self {
        PrepareFailure::Local(e.into())
    }
}

/// The device's edits with the claim's configuration on top. Configuration may add
/// environment variables but not replace one the device itself sets (its path variable, or
/// graft's own), and may add the device's optional edits it names (NVIDIA driver
/// capabilities).
fn apply_config(
    dev: &Device,
    config: Option<&opaque::DeviceConfig>,
) -> std::result::Result<ContainerEdits, String> {
    let base = &dev.edits;
    let mut edits = base.clone();
    let Some(c) = config else { return Ok(edits) };
    for n in &mut edits.device_nodes {
        if c.file_mode.is_some() {
            n.file_mode = c.file_mode;
        }
        if c.uid.is_some() {
            n.uid = c.uid;
        }
        if c.gid.is_some() {
            n.gid = c.gid;
        }
    }
    for (name, value) in &c.env {
        if base.env.iter().any(|e| &e.name == name) {
            return Err(format!(
                "opaque configuration sets {name}, which the device itself sets; it cannot be \
                 overridden"
            ));
        }
        edits.env.push(EnvVar {
            name: name.clone(),
            value: value.clone(),
        });
    }
    if let Some(caps) = &c.driver_capabilities {
        let is_gpu = matches!(
            dev.attributes.get("type"),
            Some(crate::discovery::Attribute::String(t)) if t == "gpu" || t == "mig"
        );
        if !is_gpu {
            return Err(format!(
                "driverCapabilities apply to NVIDIA GPUs and MIG devices, not to {}",
                dev.name
            ));
        }
        for cap in caps.iter().filter(|c| !c.is_default()) {
            let extra = dev.optional_edits.get(cap.name()).ok_or_else(|| {
                format!(
                    "driver capability {cap} was asked for, but the node's NVIDIA driver has \
                     no {cap} files"
                )
            })?;
            for m in &extra.mounts {
                if !edits.mounts.iter().any(|x| x.destination == m.destination) {
                    edits.mounts.push(m.clone());
                }
            }
        }
    }
    Ok(edits)
}

fn entry_from_record(rec: &ClaimRecord) -> ClaimEntry {
    ClaimEntry {
        state: ClaimState::PrepareCompleted,
        namespace: rec.claim.namespace.clone(),
        name: rec.claim.name.clone(),
        devices: rec
            .devices
            .iter()
            .map(|d| PreparedDevice {
                pool: d.pool.clone(),
                device: d.name.clone(),
                requests: d.requests.clone(),
                share_id: None,
                admin_access: false,
                // Not in the record: a checkpoint rebuilt after corruption cannot undo
                // setups (see README).
                setup: None,
            })
            .collect(),
    }
}
