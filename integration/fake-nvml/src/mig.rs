//! MIG: the static MIG devices of the two MIG-enabled GPUs, and the calls that describe
//! them (mode, instance ids, per-instance resources).

use std::ffi::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::*;

use super::*;

/// A static MIG device: parent index, GI, CI, GI slices, CI slices, memory MiB, SMs.
pub(crate) struct Mig {
    pub(crate) parent: usize,
    pub(crate) gi: u32,
    pub(crate) ci: u32,
    pub(crate) gi_slices: u32,
    pub(crate) ci_slices: u32,
    pub(crate) memory_mb: u64,
    pub(crate) sms: u32,
}

pub(crate) const MIGS: [Mig; 5] = [
    Mig {
        parent: 6,
        gi: 1,
        ci: 0,
        gi_slices: 3,
        ci_slices: 3,
        memory_mb: 40_192,
        sms: 60,
    },
    Mig {
        parent: 6,
        gi: 2,
        ci: 0,
        gi_slices: 3,
        ci_slices: 3,
        memory_mb: 40_192,
        sms: 60,
    },
    Mig {
        parent: 7,
        gi: 1,
        ci: 0,
        gi_slices: 4,
        ci_slices: 4,
        memory_mb: 40_192,
        sms: 64,
    },
    Mig {
        parent: 7,
        gi: 5,
        ci: 0,
        gi_slices: 2,
        ci_slices: 2,
        memory_mb: 19_968,
        sms: 32,
    },
    Mig {
        parent: 7,
        gi: 13,
        ci: 0,
        gi_slices: 1,
        ci_slices: 1,
        memory_mb: 9_856,
        sms: 16,
    },
];

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    let Some(Handle::Gpu(i)) = decode(device) else {
        return INVALID_ARGUMENT;
    };
    let mode = c_uint::from(MIG_ENABLED[i]);
    if put(current, mode) != SUCCESS {
        return INVALID_ARGUMENT;
    }
    put(pending, mode)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    match decode(device) {
        Some(Handle::Gpu(i)) if MIG_ENABLED[i] => put(count, 7),
        Some(Handle::Gpu(_)) => put(count, 0),
        _ => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    let Some(Handle::Gpu(parent)) = decode(device) else {
        return INVALID_ARGUMENT;
    };
    if !MIG_ENABLED[parent] {
        return NOT_SUPPORTED;
    }
    if index >= 7 {
        return INVALID_ARGUMENT;
    }
    match (0..MIGS.len())
        .filter(|&m| MIGS[m].parent == parent)
        .nth(index as usize)
    {
        Some(m) => put(mig, handle_of_mig(m)),
        None => NOT_FOUND,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: nvmlDevice_t,
    is_mig: *mut c_uint,
) -> nvmlReturn_t {
    match decode(device) {
        Some(Handle::Gpu(_)) => put(is_mig, 0),
        Some(Handle::Mig(_)) => put(is_mig, 1),
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    device: nvmlDevice_t,
    parent: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    match decode(device) {
        Some(Handle::Mig(m)) => put(parent, handle_of_gpu(MIGS[m].parent)),
        _ => INVALID_ARGUMENT,
    }
}

/// A MIG device's GPU or compute instance id; full GPUs have none.
unsafe fn mig_id(device: nvmlDevice_t, id: *mut c_uint, field: fn(&Mig) -> u32) -> nvmlReturn_t {
    match decode(device) {
        Some(Handle::Mig(m)) => put(id, field(&MIGS[m])),
        Some(Handle::Gpu(_)) => NOT_SUPPORTED,
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    mig_id(device, id, |m| m.gi)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    mig_id(device, id, |m| m.ci)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetAttributes_v2(
    device: nvmlDevice_t,
    attrs: *mut nvmlDeviceAttributes_t,
) -> nvmlReturn_t {
    let (sms, gi, ci, mem) = match decode(device) {
        Some(Handle::Mig(m)) => {
            let m = &MIGS[m];
            (m.sms, m.gi_slices, m.ci_slices, m.memory_mb)
        }
        Some(Handle::Gpu(_)) => (132, 7, 7, GPU_MEMORY >> 20),
        None => return INVALID_ARGUMENT,
    };
    if attrs.is_null() {
        return INVALID_ARGUMENT;
    }
    *attrs = nvmlDeviceAttributes_t {
        multiprocessorCount: sms,
        sharedCopyEngineCount: gi,
        sharedDecoderCount: gi.min(7) / 2 + 1,
        sharedEncoderCount: 0,
        sharedJpegCount: gi.min(7) / 2 + 1,
        sharedOfaCount: u32::from(gi == 7),
        gpuInstanceSliceCount: gi,
        computeInstanceSliceCount: ci,
        memorySizeMB: mem as c_ulonglong,
    };
    SUCCESS
}
