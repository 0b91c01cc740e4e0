//! NVLink fabric registration, switched on by the environment.

use nvml_wrapper_sys::bindings::*;

use super::*;

/// `GRAFT_FAKE_NVML_FABRIC=<32 hex>:<clique>`, read on every call so that one test
/// process can switch it.
fn fabric() -> Option<([u8; 16], u32)> {
    let v = std::env::var("GRAFT_FAKE_NVML_FABRIC").ok()?;
    let (hex, clique) = v.split_once(':')?;
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
