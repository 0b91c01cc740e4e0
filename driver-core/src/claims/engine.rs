//! The [`Core`] itself: its parts, its construction and the helpers its operations
//! (`plan`, `prepare`, `startup`, `unprepare`, each a sibling module) share.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use graft_record::policy::DEFAULT_HOOK_PATH;
use graft_record::{ClaimRecord, InjectionPolicy, RecordStore};

use super::checkpoint::{Checkpoint, ClaimEntry};
use super::input::{ClaimError, ClaimInput};
use super::keylocks::KeyLocks;
use super::lifecycle::{next, Stage, Step};
use super::seams::{CrashHook, Crashed, NoCrash, NriGate, StatusFile};
use crate::claims::setup_port::{DeviceSetup, NoSetup, SetupError};
use crate::error::{DriverError, Result};
use crate::mapping::{pod_record, ClaimDevice};
use crate::model::ClaimId;
use crate::model::Device;
use crate::opaque::OpaqueFamilies;

/// What stops a whole call: local state that cannot be read or written, or (in tests) a
/// crash point.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// Local state (records, checkpoint) could not be read or written.
    #[error(transparent)]
    Local(#[from] DriverError),
    /// A test's crash point was reached.
    #[error(transparent)]
    Crashed(#[from] Crashed),
}

impl From<graft_record::RecordError> for CoreError {
    fn from(e: graft_record::RecordError) -> Self {
        CoreError::Local(e.into())
    }
}

/// A result of the core.
pub type CoreResult<T> = std::result::Result<T, CoreError>;

/// The span of everything done for one claim: its lines carry `claim` (namespace/name) and
/// `claim_uid`.
pub fn claim_span(namespace: &str, name: &str, uid: &str) -> tracing::Span {
    tracing::info_span!("claim", claim = %format_args!("{namespace}/{name}"), claim_uid = uid)
}

pub(super) fn id_span(id: &ClaimId) -> tracing::Span {
    claim_span(&id.namespace, &id.name, &id.uid)
}

/// The claim state machine run against the node's records and checkpoint: prepares and
/// unprepares claims, and cleans up after a crash.
pub struct Core {
    /// The DRA driver's name (`graft.dev` by default).
    pub driver_name: String,
    /// The node this core runs on.
    pub node_name: String,
    pub(super) store: RecordStore,
    pub(super) checkpoint: Checkpoint,
    /// What a record may ask of a container; graft-nri applies the same rules.
    pub(super) policy: InjectionPolicy,
    pub(super) setup: Arc<dyn DeviceSetup>,
    /// The families' parts of claims' opaque configuration.
    pub(super) opaque: OpaqueFamilies,
    pub(super) gate: Box<dyn NriGate>,
    pub(super) crash: Box<dyn CrashHook>,
    pub(super) inventory: RwLock<Arc<BTreeMap<String, Device>>>,
    /// One operation per claim at a time.
    pub(super) claims: Arc<KeyLocks>,
    /// One claim's setup or undo per device at a time.
    pub(super) devices: Arc<KeyLocks>,
}

impl Core {
    /// A core over `state_dir` (records, checkpoint), for driver `driver_name` on node
    /// `node_name`, in boot `boot_id`. No device setups, the default policy, graft-nri's
    /// status file as the gate: see the `with_*` methods.
    pub fn new(
        driver_name: &str,
        node_name: &str,
        state_dir: PathBuf,
        boot_id: &str,
    ) -> Result<Self> {
        let store = RecordStore::open(&state_dir)?;
        let policy = InjectionPolicy::new(&state_dir, DEFAULT_HOOK_PATH, &[])?;
        let checkpoint = Checkpoint::new(super::checkpoint::default_dir(&state_dir), boot_id)?;
        // Its slots are written in place, unsynced: the write-back check syncs them.
        let slots = checkpoint.paths();
        let dir = slots[0].parent().map(Path::to_path_buf);
        store.writeback().check_always(slots.into_iter().chain(dir));
        Ok(Core {
            driver_name: driver_name.to_string(),
            node_name: node_name.to_string(),
            store,
            checkpoint,
            policy,
            setup: Arc::new(NoSetup),
            opaque: OpaqueFamilies::default(),
            gate: Box::new(StatusFile {
                state_dir,
                boot_id: boot_id.to_string(),
            }),
            crash: Box::new(NoCrash),
            inventory: RwLock::new(Arc::new(BTreeMap::new())),
            claims: KeyLocks::new(),
            devices: KeyLocks::new(),
        })
    }

    /// Who sets devices up on this node (VFIO rebinding, time-slicing).
    pub fn with_setup(mut self, setup: Arc<dyn DeviceSetup>) -> Self {
        self.setup = setup;
        self
    }

    /// The families whose fields and kinds of opaque configuration claims may use (none
    /// by default: the generic fields only).
    pub fn with_opaque(mut self, families: OpaqueFamilies) -> Self {
        self.opaque = families;
        self
    }

    /// The injection policy records must follow (the node's hook path and mount roots).
    pub fn with_policy(mut self, policy: InjectionPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The gate that says whether graft-nri is in place to inject.
    pub fn with_gate(mut self, gate: Box<dyn NriGate>) -> Self {
        self.gate = gate;
        self
    }

    /// Named crash points for tests; none in production.
    pub fn with_crash_hook(mut self, crash: Box<dyn CrashHook>) -> Self {
        self.crash = crash;
        self
    }

    /// The devices now published, which prepares check allocations against.
    pub fn set_inventory(&self, devices: &[Device]) {
        let map = devices
            .iter()
            .map(|d| (d.name.clone(), d.clone()))
            .collect();
        if let Ok(mut inv) = self.inventory.write() {
            *inv = Arc::new(map);
        }
    }

    pub(super) fn inventory(&self) -> Arc<BTreeMap<String, Device>> {
        self.inventory
            .read()
            .map(|i| Arc::clone(&i))
            .unwrap_or_default()
    }

    /// Where a claim stands (tests, and the cleanup pass).
    pub fn stage(&self, uid: &str) -> Result<Stage> {
        let txn = self.checkpoint.begin()?;
        Ok(txn.get(uid).map_or(Stage::Absent, |e| e.state.into()))
    }

    /// Every setup the checkpoint holds (what graft has done to devices, or was about to),
    /// read before start-up settles it: nothing is moved aside or rebuilt here.
    pub fn setups(&self) -> Result<Vec<crate::claims::setup_port::Setup>> {
        Ok(self
            .checkpoint
            .peek()?
            .into_values()
            .flat_map(|e| e.devices.into_iter().filter_map(|d| d.setup))
            .collect())
    }

    /// Claims prepared (the checkpoint's completed entries) and records on disk, for the
    /// metrics: a read of the checkpoint and a directory listing.
    pub fn counts(&self) -> Result<(usize, usize)> {
        let prepared = self
            .checkpoint
            .peek()?
            .values()
            .filter(|e| matches!(e.state, super::lifecycle::ClaimState::PrepareCompleted))
            .count();
        Ok((prepared, self.store.claim_uids()?.len()))
    }

    /// Every claim record on disk (for the usage metrics: who holds which device).
    pub fn records(&self) -> Result<Vec<ClaimRecord>> {
        let mut out = Vec::new();
        for uid in self.store.claim_uids()? {
            out.extend(self.store.get_claim(&uid)?);
        }
        Ok(out)
    }

    /// The record graft-nri would read for a claim.
    pub fn record(&self, uid: &str) -> Result<Option<ClaimRecord>> {
        Ok(self.store.get_claim(uid)?)
    }

    /// The state disk's write-back check (records are not synced; it reports disk errors).
    pub fn writeback(&self) -> Arc<graft_record::durability::WritebackCheck> {
        Arc::clone(self.store.writeback())
    }

    /// Undoes every setup of an entry's devices, last first; the first failure stops it, so
    /// that the entry stays and the next unprepare or cleanup tries again (undo is
    /// idempotent). The caller holds the devices' locks.
    pub(super) fn undo_setups(&self, entry: &ClaimEntry) -> std::result::Result<(), ClaimError> {
        for d in entry.devices.iter().rev() {
            if let Some(s) = &d.setup {
                self.setup.undo(s).map_err(|source| match source {
                    SetupError::Unreadable { .. } => ClaimError::UnreadableSetup {
                        claim: format!("{}/{}", entry.namespace, entry.name),
                        device: d.device.clone(),
                        source: Box::new(source),
                    },
                    source => ClaimError::Setup {
                        device: d.device.clone(),
                        source,
                    },
                })?;
                tracing::info!(device = d.device, setup = ?s, "setup undone");
            }
        }
        Ok(())
    }

    /// Takes the devices of `entry` for an undo, waiting until `deadline`.
    pub(super) fn lock_devices(
        &self,
        claim: &str,
        devices: &[String],
        deadline: Instant,
    ) -> std::result::Result<super::keylocks::KeyGuard, ClaimError> {
        self.devices
            .acquire(devices, deadline)
            .ok_or_else(|| ClaimError::DevicesBusy {
                claim: claim.to_string(),
                devices: devices.to_vec(),
            })
    }

    /// `rec` with the pods of `input` and which of their containers get which device.
    pub(super) fn with_pods(rec: ClaimRecord, input: &ClaimInput) -> ClaimRecord {
        let mut rec = rec;
        let devices: Vec<ClaimDevice<'_>> = rec
            .devices
            .iter()
            .map(|d| ClaimDevice {
                name: &d.name,
                requests: &d.requests,
            })
            .collect();
        let pods = input.pods.iter().map(|p| pod_record(p, &devices)).collect();
        rec.pods = pods;
        rec
    }

    /// Checks a step against the life cycle.
    pub(super) fn step(uid: &str, from: Stage, step: Step) -> Result<Stage> {
        next(from, step).map_err(|source| DriverError::Step {
            claim: PathBuf::from(uid),
            source: Box::new(source),
        })
    }

    pub(super) fn local(id: &ClaimId, e: impl Into<DriverError>) -> ClaimError {
        ClaimError::Local {
            claim: format!("prepare {id}"),
            source: e.into(),
        }
    }
}
