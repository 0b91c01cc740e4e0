//! The calls NVIDIA's container toolkit (`nvidia-ctk cdi generate`, the runtime's CDI modes,
//! through go-nvml) makes beyond graft's: go-nvml binds some entry points unversioned. Each
//! answers as its versioned twin does; NVML's reference gives `nvmlMemory_t` as the v2
//! struct without `version` and `reserved` (memory reserved by the driver counts as used).

use nvml_wrapper_sys::bindings::*;

use super::{nvmlDeviceGetMemoryInfo_v2, INVALID_ARGUMENT};

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    mem: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    if mem.is_null() {
        return INVALID_ARGUMENT;
    }
    let mut v2: nvmlMemory_v2_t = std::mem::zeroed();
    let rc = nvmlDeviceGetMemoryInfo_v2(device, &mut v2);
    if rc == super::SUCCESS {
        (*mem).total = v2.total;
        (*mem).free = v2.free;
        (*mem).used = v2.total - v2.free;
    }
    rc
}

/// NVML's `NVML_STRUCT_VERSION`: the struct's size, and the version in the top byte.
fn version_of<T>(version: u32) -> u32 {
    std::mem::size_of::<T>() as u32 | (version << 24)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    device: nvmlDevice_t,
    profile: std::ffi::c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_t,
) -> nvmlReturn_t {
    if info.is_null() {
        return INVALID_ARGUMENT;
    }
    let mut v2: nvmlGpuInstanceProfileInfo_v2_t = std::mem::zeroed();
    v2.version = version_of::<nvmlGpuInstanceProfileInfo_v2_t>(2);
    let rc = super::mig::nvmlDeviceGetGpuInstanceProfileInfoV(device, profile, &mut v2);
    if rc == super::SUCCESS {
        *info = nvmlGpuInstanceProfileInfo_t {
            id: v2.id,
            isP2pSupported: v2.isP2pSupported,
            sliceCount: v2.sliceCount,
            instanceCount: v2.instanceCount,
            multiprocessorCount: v2.multiprocessorCount,
            copyEngineCount: v2.copyEngineCount,
            decoderCount: v2.decoderCount,
            encoderCount: v2.encoderCount,
            jpegCount: v2.jpegCount,
            ofaCount: v2.ofaCount,
            memorySizeMB: v2.memorySizeMB,
        };
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gi: nvmlGpuInstance_t,
    profile: std::ffi::c_uint,
    eng_profile: std::ffi::c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_t,
) -> nvmlReturn_t {
    if info.is_null() {
        return INVALID_ARGUMENT;
    }
    let mut v2: nvmlComputeInstanceProfileInfo_v2_t = std::mem::zeroed();
    v2.version = version_of::<nvmlComputeInstanceProfileInfo_v2_t>(2);
    let rc = super::mig::nvmlGpuInstanceGetComputeInstanceProfileInfoV(
        gi,
        profile,
        eng_profile,
        &mut v2,
    );
    if rc == super::SUCCESS {
        *info = nvmlComputeInstanceProfileInfo_t {
            id: v2.id,
            sliceCount: v2.sliceCount,
            instanceCount: v2.instanceCount,
            multiprocessorCount: v2.multiprocessorCount,
            sharedCopyEngineCount: v2.sharedCopyEngineCount,
            sharedDecoderCount: v2.sharedDecoderCount,
            sharedEncoderCount: v2.sharedEncoderCount,
            sharedJpegCount: v2.sharedJpegCount,
            sharedOfaCount: v2.sharedOfaCount,
        };
    }
    rc
}
