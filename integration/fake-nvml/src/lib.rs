//! A fake `libnvidia-ml.so.1` for tests on machines without GPUs.
//!
//! It implements the subset of the NVML C ABI that graft's discovery calls through
//! nvml-wrapper 0.13 (the exact versioned symbols, `_v2`/`_v3`, and `nvmlShutdown`, which
//! the wrapper's `Drop` needs), shaped like an 8-GPU H100 80GB node:
//!
//! - NVML indices 0..7 in PCI order, minor numbers deliberately different from the indices
//!   (`MINORS`), so that code keyed by the wrong one shows up in tests;
//! - MIG enabled on indices 6 and 7, with static GPU and compute instances;
//! - no NVLink fabric, unless `GRAFT_FAKE_NVML_FABRIC=<32 hex digits>:<clique id>` is set,
//!   in which case every GPU reports a completed fabric registration in that clique;
//! - like the real library, it needs libpthread, libdl, libm and librt (build.rs), and
//!   finds the CUDA driver version by loading `libcuda.so.1` by name;
//! - events (`nvmlEventSetCreate`, `nvmlDeviceRegisterEvents`,
//!   `nvmlDeviceGetSupportedEventTypes`, `nvmlEventSetWait_v2`, `nvmlEventSetFree`) fed by
//!   tests through the file `fake-nvml-events` next to the library, which can also mark a
//!   GPU lost for `nvmlDeviceGetHandleByUUID` (format and limits in the `events` module).
//!
//! Anything else is not exported, which nvml-wrapper reports as a failed symbol load.

// Every export is a C entry point that dereferences caller pointers, as NVML's do.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, CStr};
use std::ptr;

use nvml_wrapper_sys::bindings::*;

mod events;
mod fabric;
mod mig;

use mig::MIGS;

const SUCCESS: nvmlReturn_t = nvmlReturn_enum_NVML_SUCCESS;
const INVALID_ARGUMENT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const NOT_SUPPORTED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const NOT_FOUND: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
const INSUFFICIENT_SIZE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
const UNKNOWN: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNKNOWN;

pub const DRIVER_VERSION: &str = "580.95.05";
const CUDA_DRIVER_VERSION: c_int = 13000;
const GPU_NAME: &str = "NVIDIA H100 80GB HBM3";
const GPU_MEMORY: u64 = 85_520_809_984;
const PCI_BUSES: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];
const MINORS: [u32; 8] = [2, 3, 0, 1, 6, 7, 4, 5];
const MIG_ENABLED: [bool; 8] = [false, false, false, false, false, false, true, true];

/// Handles are addresses inside this table: 0..8 are GPUs, 8.. are MIG devices.
static HANDLES: [u8; 8 + MIGS.len()] = [0; 8 + MIGS.len()];

enum Handle {
    Gpu(usize),
    Mig(usize),
}

fn handle_of_gpu(i: usize) -> nvmlDevice_t {
    ptr::addr_of!(HANDLES[i]) as nvmlDevice_t
}

fn handle_of_mig(i: usize) -> nvmlDevice_t {
    ptr::addr_of!(HANDLES[8 + i]) as nvmlDevice_t
}

fn decode(device: nvmlDevice_t) -> Option<Handle> {
    let base = HANDLES.as_ptr() as usize;
    let at = (device as usize).checked_sub(base)?;
    match at {
        0..=7 => Some(Handle::Gpu(at)),
        n if n < HANDLES.len() => Some(Handle::Mig(n - 8)),
        _ => None,
    }
}

fn gpu_uuid(i: usize) -> String {
    format!("GPU-6a1f{i:04x}-93c1-4d4e-8f7b-0c5e2a9{i:05x}")
}

fn mig_uuid(i: usize) -> String {
    format!("MIG-0d2b{i:04x}-51a0-5b7e-9c3d-7e11f4a{i:05x}")
}

fn bus_id(i: usize) -> String {
    format!("00000000:{:02X}:00.0", PCI_BUSES[i])
}

unsafe fn write_str(s: &str, out: *mut c_char, len: c_uint) -> nvmlReturn_t {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    let bytes = s.as_bytes();
    if bytes.len() + 1 > len as usize {
        return INSUFFICIENT_SIZE;
    }
    ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, out, bytes.len());
    *out.add(bytes.len()) = 0;
    SUCCESS
}

unsafe fn put<T>(out: *mut T, v: T) -> nvmlReturn_t {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    *out = v;
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(_result: nvmlReturn_t) -> *const c_char {
    c"fake NVML error".as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(out: *mut c_char, len: c_uint) -> nvmlReturn_t {
    write_str(DRIVER_VERSION, out, len)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(out: *mut c_char, len: c_uint) -> nvmlReturn_t {
    write_str(&format!("13.{DRIVER_VERSION}"), out, len)
}

/// The CUDA driver version as the real NVML finds it: by loading `libcuda.so.1` by name
/// with the default search, so that a process whose loader cannot find libcuda fails here
/// as it does on a GPU node.
unsafe fn cuda_driver_version(v: *mut c_int) -> nvmlReturn_t {
    if v.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: a NUL-terminated name; the handle is closed below on every path.
    let lib = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW);
    if lib.is_null() {
        return NOT_FOUND;
    }
    // SAFETY: `lib` is a live handle from dlopen.
    let sym = libc::dlsym(lib, c"cuDriverGetVersion".as_ptr());
    let rc = if sym.is_null() {
        put(v, CUDA_DRIVER_VERSION)
    } else {
        // SAFETY: cuDriverGetVersion's C signature is `CUresult (int *)`.
        let get: unsafe extern "C" fn(*mut c_int) -> c_int = std::mem::transmute(sym);
        let mut version: c_int = 0;
        if get(&mut version) == 0 {
            put(v, version)
        } else {
            UNKNOWN
        }
    };
    libc::dlclose(lib);
    rc
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> nvmlReturn_t {
    cuda_driver_version(v)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) -> nvmlReturn_t {
    cuda_driver_version(v)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    put(count, 8)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    if index >= 8 {
        return INVALID_ARGUMENT;
    }
    put(device, handle_of_gpu(index as usize))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    if bus.is_null() {
        return INVALID_ARGUMENT;
    }
    let want = CStr::from_ptr(bus).to_string_lossy().to_ascii_uppercase();
    match (0..8).find(|&i| bus_id(i) == want || bus_id(i)[4..] == want) {
        Some(i) => put(device, handle_of_gpu(i)),
        None => NOT_FOUND,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    match decode(device) {
        Some(Handle::Gpu(i)) => put(index, i as c_uint),
        Some(Handle::Mig(i)) => put(index, i as c_uint),
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    out: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    match decode(device) {
        Some(Handle::Gpu(i)) => write_str(&gpu_uuid(i), out, len),
        Some(Handle::Mig(i)) => write_str(&mig_uuid(i), out, len),
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    out: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    match decode(device) {
        Some(Handle::Gpu(_)) => write_str(GPU_NAME, out, len),
        Some(Handle::Mig(i)) => {
            let m = &MIGS[i];
            let name = format!(
                "{GPU_NAME} MIG {}g.{}gb",
                m.gi_slices,
                profile_gb(m.memory_mb)
            );
            write_str(&name, out, len)
        }
        None => INVALID_ARGUMENT,
    }
}

fn profile_gb(memory_mb: u64) -> u64 {
    let total_gib = GPU_MEMORY.div_ceil(1 << 30);
    let eighths = (memory_mb << 20).saturating_mul(8).div_ceil(GPU_MEMORY);
    (eighths * total_gib + 4) / 8
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetBrand(
    device: nvmlDevice_t,
    brand: *mut nvmlBrandType_t,
) -> nvmlReturn_t {
    match decode(device) {
        Some(_) => put(brand, nvmlBrandType_enum_NVML_BRAND_NVIDIA),
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(
    device: nvmlDevice_t,
    arch: *mut nvmlDeviceArchitecture_t,
) -> nvmlReturn_t {
    match decode(device) {
        Some(_) => put(arch, NVML_DEVICE_ARCH_HOPPER),
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: nvmlDevice_t,
    major: *mut c_int,
    minor: *mut c_int,
) -> nvmlReturn_t {
    if decode(device).is_none() {
        return INVALID_ARGUMENT;
    }
    if put(major, 9) != SUCCESS {
        return INVALID_ARGUMENT;
    }
    put(minor, 0)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: nvmlDevice_t,
    minor: *mut c_uint,
) -> nvmlReturn_t {
    match decode(device) {
        Some(Handle::Gpu(i)) => put(minor, MINORS[i]),
        // MIG devices have no device node of their own.
        Some(Handle::Mig(_)) => NOT_SUPPORTED,
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    let i = match decode(device) {
        Some(Handle::Gpu(i)) => i,
        Some(Handle::Mig(i)) => MIGS[i].parent,
        None => return INVALID_ARGUMENT,
    };
    if pci.is_null() {
        return INVALID_ARGUMENT;
    }
    let mut info: nvmlPciInfo_t = std::mem::zeroed();
    info.domain = 0;
    info.bus = PCI_BUSES[i];
    info.device = 0;
    info.pciDeviceId = 0x2330_10de;
    info.pciSubSystemId = 0x16c1_10de;
    let id = bus_id(i);
    for (dst, b) in info.busId.iter_mut().zip(id.bytes()) {
        *dst = b as c_char;
    }
    for (dst, b) in info.busIdLegacy.iter_mut().zip(id[4..].bytes()).take(15) {
        *dst = b as c_char;
    }
    *pci = info;
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    mem: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    let total = match decode(device) {
        Some(Handle::Gpu(_)) => GPU_MEMORY,
        Some(Handle::Mig(i)) => MIGS[i].memory_mb << 20,
        None => return INVALID_ARGUMENT,
    };
    if mem.is_null() {
        return INVALID_ARGUMENT;
    }
    let reserved = 512 << 20;
    (*mem).total = total;
    (*mem).reserved = reserved;
    (*mem).used = 0;
    (*mem).free = total - reserved;
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumaNodeId(
    _device: nvmlDevice_t,
    _node: *mut c_uint,
) -> nvmlReturn_t {
    // As on PCIe-attached GPUs: the host NUMA node comes from sysfs.
    NOT_SUPPORTED
}
