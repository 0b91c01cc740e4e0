//! NVLink fabric registration, switched on per node by the file `fake-nvml-fabric` next to
//! the library: one line `<32 hex digits>:<clique id>` (the cluster UUID and clique every
//! GPU of the node reports). Per node rather than per process, so that nodes of one
//! test process can sit in different cliques.

use nvml_wrapper_sys::bindings::*;

use super::*;

/// The file's name.
const FILE_NAME: &str = "fake-nvml-fabric";

/// The node's fabric, read on every call so that a test can switch it; `None` (no fabric)
/// when the file is absent or malformed.
fn fabric() -> Option<([u8; 16], u32)> {
    let v = std::fs::read_to_string(beside_library(FILE_NAME)?).ok()?;
    let (hex, clique) = v.trim().split_once(':')?;
    if hex.len() != 32 {
        return None;
    }
    let mut uuid = [0u8; 16];
    for (i, b) in uuid.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some((uuid, clique.parse().ok()?))
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
    let Some((uuid, clique)) = fabric() else {
        return NOT_SUPPORTED;
    };
    put(
        info,
        nvmlGpuFabricInfo_t {
            clusterUuid: uuid,
            status: SUCCESS,
            cliqueId: clique,
            state: NVML_GPU_FABRIC_STATE_COMPLETED as nvmlGpuFabricState_t,
        },
    )
}
