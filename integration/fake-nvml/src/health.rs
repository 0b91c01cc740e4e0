//! What the events file says about each GPU's health now, and the calls that read it.
//!
//! The whole file decides, read again on every call; per GPU the last line of each kind
//! wins (format in the `feed` module):
//!
//! - `<i> lost` / `<i> found`: a lost GPU fails every per-device call, on its own handle and
//!   on the handles of its MIG devices, GPU instances and compute instances, with
//!   `NVML_ERROR_GPU_IS_LOST`: the NVML API reference lists that code for each of them,
//!   `nvmlDeviceGetHandleByIndex_v2`, `..ByUUID` and `..ByPciBusId_v2` included ("the target
//!   GPU has fallen off the bus or is otherwise inaccessible"). `nvmlDeviceGetCount_v2` still
//!   counts it: the reference says the `_v2` count takes in every device of the system, even
//!   those whose handle by index then fails, so a caller must expect such indices. An event
//!   set with a lost GPU registered
//!   in it answers `nvmlEventSetWait_v2` with `GPU_IS_LOST` (listed there for "a GPU has
//!   fallen off the bus") once the events already queued are delivered.
//! - `<i> recovery <n>`: besides the event, the GPU's current recovery action, which
//!   `nvmlDeviceGetFieldValues` answers for `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION` (0 =
//!   `NVML_GPU_RECOVERY_ACTION_NONE` until a line says otherwise). Every other field id
//!   gets `NVML_ERROR_NOT_SUPPORTED` in that value's `nvmlReturn`, as the reference says a
//!   caller must check each value's own status.
//! - `<i> remap-pending` / `remap-failed` / `remap-clear`: `nvmlDeviceGetRemappedRows`
//!   ("For Ampere or newer"): a pending remapping ("a reset will be required to actually
//!   remap the row"), a remapping that failed, or neither. On a MIG-enabled GPU with GPU
//!   instances it is `NOT_SUPPORTED`, as the reference notes.
//! - `nvmlDeviceGetRetiredPagesPendingStatus` is `NOT_SUPPORTED` on both modelled GPUs:
//!   NVIDIA's A100 GPU memory error management guide says row remapping replaces the page
//!   retirement of earlier GPUs from Ampere on, and `nvidia-smi -q` shows the retired-page
//!   fields of such GPUs as N/A (not supported).

use std::ffi::{c_int, c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::field_id::NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
use nvml_wrapper_sys::bindings::*;

use super::feed::{self, Line, Remap};
use super::handles::{decode, decode_ci, decode_gi};
use super::*;

pub(crate) const GPU_IS_LOST: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;

/// One GPU after the whole file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct GpuHealth {
    pub(crate) lost: bool,
    pub(crate) recovery_action: c_uint,
    pub(crate) remap: Remap,
}

/// Every GPU's health now.
pub(crate) fn now() -> [GpuHealth; 8] {
    let mut all = [GpuHealth::default(); 8];
    for text in feed::all_lines() {
        match feed::parse(&text) {
            Some(Line::Lost(g)) => all[g].lost = true,
            Some(Line::Found(g)) => all[g].lost = false,
            Some(Line::Remap(g, r)) => all[g].remap = r,
            Some(Line::Event {
                gpu, kind, data, ..
            }) if kind == feed::RECOVERY => {
                all[gpu].recovery_action = c_uint::try_from(data).unwrap_or(c_uint::MAX)
            }
            _ => {}
        }
    }
    all
}

pub(crate) fn lost(gpu: usize) -> bool {
    now().get(gpu).is_some_and(|h| h.lost)
}

/// `GPU_IS_LOST` when a GPU or MIG device handle belongs to a lost GPU. Handles that are
/// none of this library's pass: the call itself says they are invalid.
pub(crate) fn reachable(device: nvmlDevice_t) -> Result<(), nvmlReturn_t> {
    let gpu = match decode(device) {
        Some(Handle::Gpu(i)) => i,
        Some(Handle::Mig(inst)) => inst.gpu,
        None => return Ok(()),
    };
    reachable_gpu(gpu)
}

/// As [`reachable`], for a GPU instance handle.
pub(crate) fn reachable_gi(gi: nvmlGpuInstance_t) -> Result<(), nvmlReturn_t> {
    decode_gi(gi).map_or(Ok(()), |(gpu, _)| reachable_gpu(gpu))
}

/// As [`reachable`], for a compute instance handle.
pub(crate) fn reachable_ci(ci: nvmlComputeInstance_t) -> Result<(), nvmlReturn_t> {
    decode_ci(ci).map_or(Ok(()), |inst| reachable_gpu(inst.gpu))
}

pub(crate) fn reachable_gpu(gpu: usize) -> Result<(), nvmlReturn_t> {
    if lost(gpu) {
        Err(GPU_IS_LOST)
    } else {
        Ok(())
    }
}

/// The GPU behind a whole-GPU handle, reachable; MIG device handles are `NOT_SUPPORTED`
/// for the calls here, which are about the whole GPU.
fn whole_gpu(device: nvmlDevice_t) -> Result<usize, nvmlReturn_t> {
    reachable(device)?;
    match decode(device) {
        Some(Handle::Gpu(i)) => Ok(i),
        Some(Handle::Mig(_)) => Err(NOT_SUPPORTED),
        None => Err(INVALID_ARGUMENT),
    }
}

/// Microseconds since the epoch, as NVML stamps field values.
fn timestamp() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: nvmlDevice_t,
    count: c_int,
    values: *mut nvmlFieldValue_t,
) -> nvmlReturn_t {
    let gpu = match whole_gpu(device) {
        Ok(g) => g,
        Err(rc) => return rc,
    };
    let Ok(count) = usize::try_from(count) else {
        return INVALID_ARGUMENT;
    };
    if values.is_null() {
        return INVALID_ARGUMENT;
    }
    let action = now()[gpu].recovery_action;
    for i in 0..count {
        let v = &mut *values.add(i);
        v.timestamp = timestamp();
        v.latencyUsec = 0;
        if v.fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION {
            v.valueType = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT;
            v.value.uiVal = action;
            v.nvmlReturn = SUCCESS;
        } else {
            v.nvmlReturn = NOT_SUPPORTED;
        }
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: nvmlDevice_t,
    corrected: *mut c_uint,
    uncorrected: *mut c_uint,
    pending: *mut c_uint,
    failed: *mut c_uint,
) -> nvmlReturn_t {
    mig::code((|| {
        let gpu = whole_gpu(device)?;
        let (config, state) = mig::now()?;
        if config.mig[gpu] && state.gis.iter().any(|g| g.gpu == gpu) {
            return Err(NOT_SUPPORTED);
        }
        if [corrected, uncorrected, pending, failed]
            .iter()
            .any(|p| p.is_null())
        {
            return Err(INVALID_ARGUMENT);
        }
        let (unc, is_pending, is_failed) = match now()[gpu].remap {
            Remap::Clear => (0, 0, 0),
            Remap::Pending => (1, 1, 0),
            Remap::Failed => (1, 0, 1),
        };
        *corrected = 0;
        *uncorrected = unc;
        *pending = is_pending;
        Ok(put(failed, is_failed))
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    device: nvmlDevice_t,
    _pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    match whole_gpu(device) {
        // Ampere and later remap rows instead (see the header).
        Ok(_) => NOT_SUPPORTED,
        Err(rc) => rc,
    }
}

/// For the event wait: whether any GPU of `registered` (event types by GPU index) is lost.
pub(crate) fn any_lost(registered: &[c_ulonglong; 8]) -> bool {
    let all = now();
    registered
        .iter()
        .zip(all.iter())
        .any(|(types, h)| *types != 0 && h.lost)
}
