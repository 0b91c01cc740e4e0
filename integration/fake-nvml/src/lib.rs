//! A fake `libnvidia-ml.so.1` for tests on machines without GPUs.
//!
//! It implements the subset of the NVML C ABI that graft's discovery calls through
//! nvml-wrapper 0.13 (the exact versioned symbols, `_v2`/`_v3`, and `nvmlShutdown`, which
//! the wrapper's `Drop` needs), shaped like an 8-GPU H100 80GB node:
//!
//! - NVML indices 0..7 in PCI order, minor numbers deliberately different from the indices
//!   (`MINORS`), so that code keyed by the wrong one shows up in tests;
//! - MIG on indices 6 and 7, with preset instances; GPU and compute instances that callers
//!   create and destroy through NVML's calls, under the real placement rules; the file
//!   `fake-nvml-mig` next to the library sets MIG modes, the model (H100 80GB or A100
//!   40GB), and a state file that processes share (see the `mig` module);
//! - no NVLink fabric, unless the file `fake-nvml-fabric` next to the library says
//!   `<32 hex digits>:<clique id>`, in which case every GPU reports a completed fabric
//!   registration in that clique (see the `fabric` module);
//! - no NVLink between the GPUs, unless the file `fake-nvml-nvlink` next to the library
//!   lists NVLink islands, which `nvmlDeviceGetP2PStatus` then reports (see the `nvlink`
//!   module);
//! - like the real library, it needs libpthread, libdl, libm and librt (build.rs), and
//!   finds the CUDA driver version by loading `libcuda.so.1` by name;
//! - events (`nvmlEventSetCreate`, `nvmlDeviceRegisterEvents`,
//!   `nvmlDeviceGetSupportedEventTypes`, `nvmlEventSetWait_v2`, `nvmlEventSetFree`) fed by
//!   tests through the file `fake-nvml-events` next to the library (format in the `feed`
//!   module), which also sets each GPU's health: lost (every per-device call fails with
//!   `GPU_IS_LOST`), its recovery action (`nvmlDeviceGetFieldValues`) and row remapping
//!   (`nvmlDeviceGetRemappedRows`); see the `health` module;
//! - idle GPUs (utilisation 0, no memory used, 69 W, no MPS clients), unless the file
//!   `fake-nvml-usage` next to the library sets each GPU's utilisation, memory used and
//!   power, MIG devices' memory used and the GPUs' MPS client processes
//!   (`nvmlDeviceGetUtilizationRates`, `nvmlDeviceGetPowerUsage`,
//!   `nvmlDeviceGetMemoryInfo_v2`, `nvmlDeviceGetMPSComputeRunningProcesses_v3`); see the
//!   `usage` module.
//!
//! - the unversioned twins that go-nvml binds (NVIDIA's container toolkit), answering as the
//!   versioned calls do; see the `toolkit` module.
//!
//! Anything else is not exported, which nvml-wrapper reports as a failed symbol load (and
//! go-nvml, which binds lazily, as a symbol lookup error when called).

// Every export is a C entry point that dereferences caller pointers, as NVML's do.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::OnceLock;

use nvml_wrapper_sys::bindings::*;

mod events;
mod fabric;
mod feed;
mod handles;
mod health;
mod mig;
mod nvlink;
mod persistence;
mod toolkit;
mod usage;

use handles::{decode, handle_of_gpu, handle_of_mig, Handle, Inst};
use mig::config::model;
use mig::mig_uuid;

const SUCCESS: nvmlReturn_t = nvmlReturn_enum_NVML_SUCCESS;
const INVALID_ARGUMENT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const NOT_SUPPORTED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const NOT_FOUND: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
const INSUFFICIENT_SIZE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
const UNKNOWN: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNKNOWN;

pub const DRIVER_VERSION: &str = "580.95.05";
const CUDA_DRIVER_VERSION: c_int = 13000;
const PCI_BUSES: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];
const MINORS: [u32; 8] = [2, 3, 0, 1, 6, 7, 4, 5];

/// `name` in the directory of this library file, as the loader reports its path (tests
/// put the files that steer the fake next to the `libnvidia-ml.so.1` they load; a relative
/// name is taken against the working directory of the first call). `None` when the loader
/// cannot say.
pub(crate) fn beside_library(name: &str) -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let own = nvmlInit_v2 as extern "C" fn() -> nvmlReturn_t;
        // SAFETY: an all-zero Dl_info is valid (null pointers, zero numbers).
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only looks the address up (a function of this very library) and
        // fills `info`, which is a live local.
        if unsafe { libc::dladdr(own as *const c_void, &mut info) } == 0 || info.dli_fname.is_null()
        {
            return None;
        }
        // SAFETY: dli_fname is the loader's NUL-terminated name of this object, valid while
        // the object is loaded, which it is while this code runs; it is copied at once.
        let name = unsafe { CStr::from_ptr(info.dli_fname) };
        let lib = std::path::absolute(Path::new(OsStr::from_bytes(name.to_bytes()))).ok()?;
        Some(lib.parent()?.to_path_buf())
    });
    Some(dir.as_deref()?.join(name))
}

/// The GPU behind a handle: its own index, or the parent of a MIG device that exists now.
fn gpu_of(device: nvmlDevice_t) -> Result<usize, nvmlReturn_t> {
    match decode(device) {
        Some(Handle::Gpu(i)) => Ok(i),
        Some(Handle::Mig(inst)) => mig::device(inst).map(|m| m.inst.gpu),
        None => Err(INVALID_ARGUMENT),
    }
}

fn gpu_uuid(i: usize) -> String {
    format!("GPU-6a1f{i:04x}-93c1-4d4e-8f7b-0c5e2a9{i:05x}")
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
    if let Err(rc) = health::reachable_gpu(index as usize) {
        return rc;
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
        Some(i) => match health::reachable_gpu(i) {
            Ok(()) => put(device, handle_of_gpu(i)),
            Err(rc) => rc,
        },
        None => NOT_FOUND,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    match decode(device) {
        Some(Handle::Gpu(i)) => put(index, i as c_uint),
        // A MIG device's place among its GPU's.
        Some(Handle::Mig(inst)) => match mig::device(inst) {
            Ok(m) => put(index, m.position as c_uint),
            Err(rc) => rc,
        },
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    out: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    match decode(device) {
        Some(Handle::Gpu(i)) => write_str(&gpu_uuid(i), out, len),
        Some(Handle::Mig(inst)) => match mig::device(inst) {
            Ok(_) => write_str(&mig_uuid(inst), out, len),
            Err(rc) => rc,
        },
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    out: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    match decode(device) {
        Some(Handle::Gpu(_)) => write_str(model().name, out, len),
        // As the real one: the GPU's name, then the compute instance profile's.
        Some(Handle::Mig(inst)) => match mig::device(inst) {
            Ok(m) => write_str(&format!("{} MIG {}", m.model.name, m.ci.name), out, len),
            Err(rc) => rc,
        },
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetBrand(
    device: nvmlDevice_t,
    brand: *mut nvmlBrandType_t,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    match gpu_of(device) {
        Ok(_) => put(brand, nvmlBrandType_enum_NVML_BRAND_NVIDIA),
        Err(rc) => rc,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(
    device: nvmlDevice_t,
    arch: *mut nvmlDeviceArchitecture_t,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    match gpu_of(device) {
        Ok(_) => put(arch, model().architecture),
        Err(rc) => rc,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: nvmlDevice_t,
    major: *mut c_int,
    minor: *mut c_int,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    if let Err(rc) = gpu_of(device) {
        return rc;
    }
    let (cc_major, cc_minor) = model().compute_capability;
    if put(major, cc_major) != SUCCESS {
        return INVALID_ARGUMENT;
    }
    put(minor, cc_minor)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: nvmlDevice_t,
    minor: *mut c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    match decode(device) {
        Some(Handle::Gpu(i)) => put(minor, MINORS[i]),
        // MIG devices have no device node of their own.
        Some(Handle::Mig(inst)) => match mig::device(inst) {
            Ok(_) => NOT_SUPPORTED,
            Err(rc) => rc,
        },
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    let i = match gpu_of(device) {
        Ok(i) => i,
        Err(rc) => return rc,
    };
    if pci.is_null() {
        return INVALID_ARGUMENT;
    }
    let mut info: nvmlPciInfo_t = std::mem::zeroed();
    info.domain = 0;
    info.bus = PCI_BUSES[i];
    info.device = 0;
    info.pciDeviceId = model().pci_device_id;
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
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    // Memory used as the `usage` module's file says, of the GPU or the MIG device.
    let (total, used) = match decode(device) {
        Some(Handle::Gpu(i)) => (model().memory, usage::now().used_bytes(i, None)),
        Some(Handle::Mig(inst)) => match mig::device(inst) {
            Ok(m) => (
                m.gi.memory_mb << 20,
                usage::now().used_bytes(m.inst.gpu, Some(m.inst.gi)),
            ),
            Err(rc) => return rc,
        },
        None => return INVALID_ARGUMENT,
    };
    if mem.is_null() {
        return INVALID_ARGUMENT;
    }
    let reserved = 512 << 20;
    (*mem).total = total;
    (*mem).reserved = reserved;
    (*mem).used = used;
    (*mem).free = total.saturating_sub(reserved).saturating_sub(used);
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumaNodeId(
    _device: nvmlDevice_t,
    _node: *mut c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(_device) {
        return rc;
    }
    // As on PCIe-attached GPUs: the host NUMA node comes from sysfs.
    NOT_SUPPORTED
}
