//! The calls nvml-wrapper lacks, through its raw bindings, each only after checking that
//! the symbol was found (the bindings panic otherwise): brand, architecture, GPU and
//! compute instance ids, fabric info.

use std::ffi::c_uint;

use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlGpuFabricInfo_t, nvmlReturn_enum_NVML_SUCCESS,
    NVML_GPU_FABRIC_STATE_COMPLETED,
};

pub enum RawU32 {
    Brand,
    Architecture,
    GpuInstanceId,
    ComputeInstanceId,
}

pub fn raw_u32(nvml: &Nvml, handle: nvmlDevice_t, which: RawU32) -> Option<u32> {
    let lib = nvml.lib();
    let mut v: c_uint = 0;
    // SAFETY: each symbol was resolved (checked with `as_ref().ok()`) and is called with a
    // valid handle and a valid out pointer, as its C signature requires.
    let rc = unsafe {
        match which {
            RawU32::Brand => (lib.nvmlDeviceGetBrand.as_ref().ok()?)(handle, &mut v),
            RawU32::Architecture => (lib.nvmlDeviceGetArchitecture.as_ref().ok()?)(handle, &mut v),
            RawU32::GpuInstanceId => {
                (lib.nvmlDeviceGetGpuInstanceId.as_ref().ok()?)(handle, &mut v)
            }
            RawU32::ComputeInstanceId => {
                (lib.nvmlDeviceGetComputeInstanceId.as_ref().ok()?)(handle, &mut v)
            }
        }
    };
    (rc == nvmlReturn_enum_NVML_SUCCESS).then_some(v)
}

/// The fabric clique, only when registration completed with a non-zero cluster uuid.
pub fn clique(nvml: &Nvml, handle: nvmlDevice_t) -> Option<String> {
    let f = nvml.lib().nvmlDeviceGetGpuFabricInfo.as_ref().ok()?;
    // SAFETY: zeroed plain C struct; symbol resolved; valid handle.
    let mut info: nvmlGpuFabricInfo_t = unsafe { std::mem::zeroed() };
    let rc = unsafe { f(handle, &mut info) };
    if rc != nvmlReturn_enum_NVML_SUCCESS
        || u32::from(info.state) != NVML_GPU_FABRIC_STATE_COMPLETED
        || info.status != nvmlReturn_enum_NVML_SUCCESS
        || info.clusterUuid.iter().all(|&b| b == 0)
    {
        return None;
    }
    let u = info.clusterUuid;
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!(
        "{}-{}-{}-{}-{}.{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32],
        info.cliqueId
    ))
}
