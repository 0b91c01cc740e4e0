//! NVLink between the node's GPUs, as `nvmlDeviceGetP2PStatus` reports it, switched on per
//! node by the file `fake-nvml-nvlink` next to the library: one line per NVLink island, the
//! NVML indices of its GPUs separated by commas (`0,2` then `1,3` then `4,5,6,7`), every
//! two GPUs of a line joined by NVLink (as through NVSwitch, or a bridge for a pair). Read on
//! every call, so that a test can change it; absent, empty or malformed, no GPU has NVLink
//! (PCIe cards without bridges).
//!
//! What the call answers, from the NVML API reference (`nvmlDeviceGetP2PStatus`) and the
//! MIG user guide:
//! - `INVALID_ARGUMENT` for a handle that is not a GPU's, an index past
//!   `NVML_P2P_CAPS_INDEX_UNKNOWN` or a null out pointer (the reference's list), and, since
//!   a pair is two GPUs, for a GPU asked about itself;
//! - `GPU_IS_LOST` when either GPU is lost, as every per-device call;
//! - with `SUCCESS`, `NVML_P2P_STATUS_OK` for the NVLink index only between two GPUs of one
//!   island, neither in MIG mode: the MIG user guide says GPU-to-GPU P2P, over PCIe or
//!   NVLink, is not supported in MIG mode. Otherwise `NVML_P2P_STATUS_NOT_SUPPORTED`. The
//!   PCIe indices (read, write, atomics, prop) say OK for any two GPUs without MIG.

use nvml_wrapper_sys::bindings::*;

use super::*;

/// The file's name.
const FILE_NAME: &str = "fake-nvml-nvlink";
const GPUS: usize = PCI_BUSES.len();

/// Each GPU's island (its line in the file), `None` for a GPU on no line; all `None` when
/// the file is absent or malformed (a GPU twice, an index past the node's).
fn islands() -> [Option<usize>; GPUS] {
    let none = [None; GPUS];
    let Some(text) = beside_library(FILE_NAME).and_then(|p| std::fs::read_to_string(p).ok()) else {
        return none;
    };
    let mut of = none;
    for (island, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        for field in line.split(',') {
            match field.trim().parse::<usize>() {
                Ok(i) if i < GPUS && of[i].is_none() => of[i] = Some(island),
                _ => return none,
            }
        }
    }
    of
}

/// Whether GPU `i` is in MIG mode now; a configuration that cannot be read counts as off,
/// as the MIG calls then fail on their own.
pub(crate) fn mig_on(i: usize) -> bool {
    mig::config::load().is_ok_and(|c| c.mig.get(i).copied().unwrap_or(false))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    device1: nvmlDevice_t,
    device2: nvmlDevice_t,
    index: nvmlGpuP2PCapsIndex_t,
    status: *mut nvmlGpuP2PStatus_t,
) -> nvmlReturn_t {
    let (Some(Handle::Gpu(a)), Some(Handle::Gpu(b))) = (decode(device1), decode(device2)) else {
        return INVALID_ARGUMENT;
    };
    if a == b || index >= nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_UNKNOWN || status.is_null() {
        return INVALID_ARGUMENT;
    }
    for gpu in [a, b] {
        if let Err(rc) = crate::health::reachable_gpu(gpu) {
            return rc;
        }
    }
    let ok = !mig_on(a)
        && !mig_on(b)
        && (index != nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_NVLINK || {
            let of = islands();
            of[a].is_some() && of[a] == of[b]
        });
    put(
        status,
        if ok {
            nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_OK
        } else {
            nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_NOT_SUPPORTED
        },
    )
}
