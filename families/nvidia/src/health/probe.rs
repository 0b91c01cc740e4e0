//! One probe of one GPU: whether NVML reaches it and what NVML says needs doing, read at
//! start, at every probe tick and after a recovery-action event.
//!
//! - NVML reaches it by UUID and reads its identity (minor number, PCI address) and
//!   memory: `GPU_IS_LOST` is `gpu-lost`, another error `nvml-error`;
//! - the recovery action (`nvmlDeviceGetFieldValues`, `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`):
//!   anything but `NONE` is its condition (`reset-required`, ...); a driver without the
//!   field says `NOT_SUPPORTED`, and then only a reset clears (see [`super::state`]);
//! - remapped rows (`nvmlDeviceGetRemappedRows`, Ampere and later; not supported on a MIG
//!   GPU with instances): pending or failed is a condition;
//! - retired pages pending (`nvmlDeviceGetRetiredPagesPendingStatus`, the older GPUs' page
//!   retirement; Ampere and later say not supported): pending is a condition.
//!
//! A read the GPU does not support is no finding; one that fails keeps the probe from
//! passing. Raw calls go through the bindings only after checking the symbol (they panic
//! otherwise), as everywhere in graft.

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::field_id::NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlFieldValue_t, nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED, nvmlReturn_enum_NVML_SUCCESS, nvmlReturn_t,
    nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT,
    nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
};

use super::classify::Signal;
use super::state::{Action, Probed};

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Conditions the reads found.
    pub findings: Vec<Signal>,
    /// What the probe says about clearing the GPU's conditions.
    pub probed: Probed,
    /// NVML gave a handle for it (its events can be registered).
    pub reached: bool,
    /// NVML does not know the UUID (a GPU bound to vfio-pci): nothing to say.
    pub unknown: bool,
}

impl Check {
    fn failed(finding: Option<Signal>, reached: bool) -> Self {
        Check {
            findings: finding.into_iter().collect(),
            probed: Probed {
                passes: false,
                action: Action::Failed,
            },
            reached,
            unknown: false,
        }
    }
}

/// An NVML error as a finding: lost, or otherwise unreachable.
fn finding(e: &NvmlError) -> Signal {
    if matches!(e, NvmlError::GpuLost) {
        Signal::Lost
    } else {
        Signal::Unreachable
    }
}

fn raw_finding(rc: nvmlReturn_t) -> Signal {
    if rc == nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST {
        Signal::Lost
    } else {
        Signal::Unreachable
    }
}

/// Probes the GPU `uuid`.
pub fn check(nvml: &Nvml, uuid: &str) -> Check {
    let d = match nvml.device_by_uuid(uuid) {
        Ok(d) => d,
        Err(NvmlError::NotFound) => {
            return Check {
                unknown: true,
                ..Check::failed(None, false)
            }
        }
        Err(e) => {
            tracing::warn!(gpu = uuid, error = %e, "GPU health: NVML cannot reach the GPU");
            return Check::failed(Some(finding(&e)), false);
        }
    };
    let reads = d
        .minor_number()
        .and_then(|_| d.pci_info())
        .and_then(|_| d.memory_info());
    if let Err(e) = reads {
        tracing::warn!(gpu = uuid, error = %e, "GPU health: NVML cannot read the GPU");
        return Check::failed(Some(finding(&e)), true);
    }
    // SAFETY: the handle is valid while `nvml` lives; only passed to NVML calls below.
    let handle = unsafe { d.handle() };
    let mut findings = Vec::new();
    let mut passes = true;
    let action = recovery_action(nvml, handle);
    match action {
        Action::Read(0) | Action::NotSupported => {}
        Action::Read(a) => findings.push(Signal::RecoveryAction(a)),
        Action::Failed => passes = false,
    }
    match remapped_rows(nvml, handle) {
        Ok(Some((pending, failed))) => {
            if failed {
                findings.push(Signal::RowRemapFailed);
            }
            if pending {
                findings.push(Signal::RowRemapPending);
            }
        }
        Ok(None) => {}
        Err(rc) => {
            tracing::warn!(
                gpu = uuid,
                code = rc,
                "GPU health: cannot read the remapped rows"
            );
            if rc == nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST {
                findings.push(raw_finding(rc));
            }
            passes = false;
        }
    }
    match d.are_pages_pending_retired() {
        Ok(true) => findings.push(Signal::PagesPendingRetirement),
        Ok(false) | Err(NvmlError::NotSupported) | Err(NvmlError::FailedToLoadSymbol(_)) => {}
        Err(e) => {
            tracing::warn!(gpu = uuid, error = %e, "GPU health: cannot read the retired pages");
            if matches!(e, NvmlError::GpuLost) {
                findings.push(Signal::Lost);
            }
            passes = false;
        }
    }
    Check {
        probed: Probed {
            passes: passes && findings.is_empty(),
            action,
        },
        findings,
        reached: true,
        unknown: false,
    }
}

/// The GPU's recovery action field.
fn recovery_action(nvml: &Nvml, handle: nvmlDevice_t) -> Action {
    let Ok(f) = nvml.lib().nvmlDeviceGetFieldValues.as_ref() else {
        return Action::NotSupported;
    };
    // SAFETY: an all-zero field value is valid (zero numbers, a zeroed union).
    let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
    v.fieldId = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
    // SAFETY: symbol resolved; a live handle; one value in a live local, count 1.
    let rc = unsafe { f(handle, 1, &mut v) };
    if rc == nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED {
        return Action::NotSupported;
    }
    if rc != nvmlReturn_enum_NVML_SUCCESS {
        return Action::Failed;
    }
    match v.nvmlReturn {
        r if r == nvmlReturn_enum_NVML_SUCCESS => value(&v).map_or(Action::Failed, Action::Read),
        r if r == nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => Action::NotSupported,
        _ => Action::Failed,
    }
}

/// A field value as a number, by its declared type.
fn value(v: &nvmlFieldValue_t) -> Option<u64> {
    // SAFETY: each arm reads the union member the value type names (all plain numbers).
    unsafe {
        match v.valueType {
            t if t == nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT => Some(v.value.uiVal.into()),
            t if t == nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG => Some(v.value.ulVal),
            t if t == nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => Some(v.value.ullVal),
            t if t == nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT => {
                u64::try_from(v.value.siVal).ok()
            }
            t if t == nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG => {
                u64::try_from(v.value.sllVal).ok()
            }
            _ => None,
        }
    }
}

/// (pending, failed); `None` when the GPU does not remap rows (or not now: MIG instances).
fn remapped_rows(nvml: &Nvml, handle: nvmlDevice_t) -> Result<Option<(bool, bool)>, nvmlReturn_t> {
    let Ok(f) = nvml.lib().nvmlDeviceGetRemappedRows.as_ref() else {
        return Ok(None);
    };
    let (mut corrected, mut uncorrected, mut pending, mut failed) = (0, 0, 0, 0);
    // SAFETY: symbol resolved; a live handle; four live out pointers.
    let rc = unsafe {
        f(
            handle,
            &mut corrected,
            &mut uncorrected,
            &mut pending,
            &mut failed,
        )
    };
    match rc {
        r if r == nvmlReturn_enum_NVML_SUCCESS => Ok(Some((pending != 0, failed != 0))),
        r if r == nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => Ok(None),
        r => Err(r),
    }
}
