//! NVLink fabric registration, switched on per node by the file `fake-nvml-fabric` next to
//! the library: one line `<32 hex digits>:<clique id>[:<state>]` (the cluster UUID and
//! clique every GPU of the node reports; the state `completed`, the default,
//! `in-progress` or `not-started`, as NVML's `nvmlGpuFabricState_t` has them: the cluster
//! UUID and clique are only valid once registration completed). Per node rather than per
//! process, so that nodes of one test process can sit in different cliques. The fake
//! `nvidia-imex` (integration/fake-nvml/nvidia-imex.c) reads the same file.

use nvml_wrapper_sys::bindings::*;

use super::*;

/// The file's name.
const FILE_NAME: &str = "fake-nvml-fabric";
/// The status NVML gives while registration is still under way.
const NOT_READY: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_READY;

/// The node's fabric, read on every call so that a test can switch it: cluster UUID,
/// clique id and registration state; `None` (no fabric) when the file is absent or
/// malformed.
fn fabric() -> Option<([u8; 16], u32, u32)> {
    let v = std::fs::read_to_string(beside_library(FILE_NAME)?).ok()?;
    let mut fields = v.trim().split(':');
    let (hex, clique) = (fields.next()?, fields.next()?);
    let state = match fields.next() {
        None | Some("completed") => NVML_GPU_FABRIC_STATE_COMPLETED,
        Some("in-progress") => NVML_GPU_FABRIC_STATE_IN_PROGRESS,
        Some("not-started") => NVML_GPU_FABRIC_STATE_NOT_STARTED,
        Some(_) => return None,
    };
    if hex.len() != 32 || fields.next().is_some() {
        return None;
    }
    let mut uuid = [0u8; 16];
    for (i, b) in uuid.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some((uuid, clique.parse().ok()?, state))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfo(
    device: nvmlDevice_t,
    info: *mut nvmlGpuFabricInfo_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    let Some(Handle::Gpu(_)) = decode(device) else {
        return INVALID_ARGUMENT;
    };
    let Some((uuid, clique, state)) = fabric() else {
        return NOT_SUPPORTED;
    };
    let done = state == NVML_GPU_FABRIC_STATE_COMPLETED;
    put(
        info,
        nvmlGpuFabricInfo_t {
            // Before registration completes NVML has no cluster or clique to report, and
            // the status is not yet a result.
            clusterUuid: if done { uuid } else { [0; 16] },
            status: if done { SUCCESS } else { NOT_READY },
            cliqueId: if done { clique } else { 0 },
            state: state as nvmlGpuFabricState_t,
        },
    )
}
