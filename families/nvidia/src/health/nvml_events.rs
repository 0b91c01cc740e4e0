//! NVML's event API for the monitor: one event set for the published GPUs, and one wait.
//!
//! Events are registered on whole GPUs (NVML does not take MIG device handles). A GPU that
//! is lost cannot be registered, and a set holding one may fail every wait with
//! `GPU_IS_LOST`: the monitor then registers a new set of the GPUs NVML still reaches.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{EventSet, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlEventData_t, nvmlEventTypeDoubleBitEccError, nvmlEventTypeGpuRecoveryAction,
    nvmlEventTypeGpuUnavailableError, nvmlEventTypeXidCriticalError,
    nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST, nvmlReturn_enum_NVML_ERROR_TIMEOUT,
    nvmlReturn_enum_NVML_SUCCESS, nvmlReturn_t,
};

use super::classify::Signal;
use graft_driver_core::model::Device;

/// The events graft acts on. Single-bit ECC errors are corrected by the hardware and come
/// in storms; clock and power-state changes say nothing about health.
const WANTED: u64 = (nvmlEventTypeXidCriticalError
    | nvmlEventTypeDoubleBitEccError
    | nvmlEventTypeGpuUnavailableError
    | nvmlEventTypeGpuRecoveryAction) as u64;

/// How long one wait for events blocks: also how soon inventory changes are noticed.
pub const WAIT_MS: u32 = 500;

/// NVML's "no instance" in event data.
const NO_INSTANCE: u32 = u32::MAX;

/// The GPUs registered in one event set, by raw handle.
pub struct Registered<'n> {
    set: EventSet<'n>,
    /// Raw handle to UUID.
    handles: BTreeMap<usize, String>,
}

/// An event set watching `uuids`; a GPU NVML cannot reach or refuses is left out (logged).
pub fn register<'n>(nvml: &'n Nvml, uuids: &BTreeSet<String>) -> Result<Registered<'n>, NvmlError> {
    let set = nvml.create_event_set()?;
    let reg = nvml
        .lib()
        .nvmlDeviceRegisterEvents
        .as_ref()
        .map_err(|_| NvmlError::FailedToLoadSymbol("nvmlDeviceRegisterEvents".into()))?;
    let mut handles = BTreeMap::new();
    for uuid in uuids {
        let d = match nvml.device_by_uuid(uuid.as_str()) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(gpu = uuid, error = %e, "GPU health: no NVML handle; its events are not watched");
                continue;
            }
        };
        let types = supported_types(nvml, &d).unwrap_or(WANTED) & WANTED;
        // SAFETY: the handle and the set are live NVML objects of this library instance;
        // registering does not take ownership of either. Called raw because the wrapper's
        // version consumes the set on failure, which would drop every GPU's registration.
        let rc = unsafe { reg(d.handle(), types, set.handle()) };
        if rc != nvmlReturn_enum_NVML_SUCCESS {
            tracing::warn!(
                gpu = uuid,
                code = rc,
                "GPU health: NVML refused event registration; this GPU is only probed"
            );
            continue;
        }
        // SAFETY: the raw handle is only compared with event data, never dereferenced here.
        handles.insert(unsafe { d.handle() } as usize, uuid.clone());
    }
    tracing::info!(gpus = handles.len(), "GPU health: watching NVML events");
    Ok(Registered { set, handles })
}

/// The event types NVML supports on `d`, raw: the wrapper drops bits it does not know
/// (GPU-unavailable and recovery-action among them).
fn supported_types(nvml: &Nvml, d: &nvml_wrapper::Device<'_>) -> Option<u64> {
    let f = nvml.lib().nvmlDeviceGetSupportedEventTypes.as_ref().ok()?;
    let mut types: u64 = 0;
    // SAFETY: symbol resolved; live handle; valid out pointer.
    let rc = unsafe { f(d.handle(), &mut types) };
    (rc == nvmlReturn_enum_NVML_SUCCESS).then_some(types)
}

/// What one wait for NVML events brought.
pub enum Waited {
    /// A health event of a watched GPU.
    Event {
        /// The GPU's UUID.
        uuid: String,
        /// The GPU's raw handle, for instance lookups.
        device: nvmlDevice_t,
        /// What it reports.
        signal: Signal,
        /// The MIG GPU instance it is about, if any.
        gi: Option<u32>,
        /// The MIG compute instance it is about, if any.
        ci: Option<u32>,
    },
    /// No event of interest within the wait.
    Nothing,
    /// A GPU of the set is lost (NVML's `GPU_IS_LOST`).
    Lost,
}

/// Why waiting for NVML events, or the node check of it, failed.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// The NVML library lacks the event wait.
    #[error("nvmlEventSetWait_v2 is missing")]
    WaitMissing,
    /// The event wait returned an error code.
    #[error("NVML event wait failed with code {0}")]
    Wait(nvmlReturn_t),
    /// The NVML library could not be loaded.
    #[error("loading {path}: {source}")]
    Load {
        /// The library's path.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: NvmlError,
    },
    /// The GPUs could not be registered for events.
    #[error("event set: {0}")]
    Register(#[source] NvmlError),
    /// A GPU of the set is lost.
    #[error("NVML reports a GPU lost")]
    Lost,
}

/// One wait of up to `WAIT_MS`.
pub fn wait(nvml: &Nvml, r: &Registered<'_>) -> Result<Waited, EventsError> {
    let f = nvml
        .lib()
        .nvmlEventSetWait_v2
        .as_ref()
        .map_err(|_| EventsError::WaitMissing)?;
    // SAFETY: zeroed plain C struct, filled by NVML; the set is live for this call.
    let mut data: nvmlEventData_t = unsafe { std::mem::zeroed() };
    let rc = unsafe { f(r.set.handle(), &mut data, WAIT_MS) };
    match rc {
        x if x == nvmlReturn_enum_NVML_SUCCESS => {}
        x if x == nvmlReturn_enum_NVML_ERROR_TIMEOUT => return Ok(Waited::Nothing),
        x if x == nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST => return Ok(Waited::Lost),
        x => return Err(EventsError::Wait(x)),
    }
    let Some(uuid) = r.handles.get(&(data.device as nvmlDevice_t as usize)) else {
        return Ok(Waited::Nothing);
    };
    let t = data.eventType;
    let signal = if t & u64::from(nvmlEventTypeXidCriticalError) != 0 {
        Signal::Xid(data.eventData)
    } else if t & u64::from(nvmlEventTypeDoubleBitEccError) != 0 {
        Signal::DoubleBitEcc
    } else if t & u64::from(nvmlEventTypeGpuUnavailableError) != 0 {
        Signal::Unavailable
    } else if t & u64::from(nvmlEventTypeGpuRecoveryAction) != 0 {
        Signal::RecoveryAction(data.eventData)
    } else {
        return Ok(Waited::Nothing);
    };
    let id = |v: u32| (v != NO_INSTANCE).then_some(v);
    Ok(Waited::Event {
        uuid: uuid.clone(),
        device: data.device,
        signal,
        gi: id(data.gpuInstanceId),
        ci: id(data.computeInstanceId),
    })
}

/// One registration and one wait, for node checks: how many of the devices' GPUs NVML
/// registered for events, out of how many, after a wait of `WAIT_MS` that must end in a
/// timeout or an event. Never injects anything.
pub fn check_events(lib: &Path, devices: &[Device]) -> Result<(usize, usize), EventsError> {
    let nvml = crate::nvml::open(lib).map_err(|source| EventsError::Load {
        path: lib.to_path_buf(),
        source,
    })?;
    let uuids = super::targets::gpu_uuids(devices);
    let r = register(&nvml, &uuids).map_err(EventsError::Register)?;
    match wait(&nvml, &r)? {
        Waited::Lost => Err(EventsError::Lost),
        Waited::Event { .. } | Waited::Nothing => Ok((r.handles.len(), uuids.len())),
    }
}
