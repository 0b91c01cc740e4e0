//! A fake `libcuda.so.1` for tests on machines without GPUs.
//!
//! It exports the CUDA driver API entry points that graft's GPU probe
//! (integration/gpu/probe.c) calls, by their real symbol names (`_v2` where cuda.h maps the
//! plain name to one), and runs the probe's vector-add kernel on the CPU:
//!
//! - the GPUs are the fake node's 8 x "NVIDIA H100 80GB HBM3 (fake)", of which a process
//!   sees those whose `/dev/nvidia<minor>` it may open, and none without `/dev/nvidiactl`
//!   (so a container graft did not give a GPU sees none, as with the real driver);
//! - `cuModuleLoadData` accepts only PTX text with the probe's `graft_vadd` entry;
//! - under MPS (a control daemon on `$CUDA_MPS_PIPE_DIRECTORY`) cuInit connects as an MPS
//!   client and allocations beyond the pinned memory limit the server gave fail with
//!   CUDA_ERROR_OUT_OF_MEMORY (mps.rs);
//! - `GRAFT_FAKE_CUDA_FAIL` set (non-empty, not `0`) makes `cuInit` fail, so that tests see
//!   a failing probe;
//! - like the real library it needs libpthread, libdl, libm and librt (build.rs).

// Every export is a C entry point that dereferences caller pointers, as libcuda's do.
#![allow(clippy::missing_safety_doc)]

mod devices;
mod err;
mod kernel;
mod mps;
mod state;

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use err::*;

/// The CUDA version this driver reports (13.0), as the fake NVML does.
const CUDA_VERSION: c_int = 13000;

type Handle = *mut c_void;

unsafe fn out<T>(p: *mut T, v: T) -> CuResult<()> {
    if p.is_null() {
        return Err(INVALID_VALUE);
    }
    *p = v;
    Ok(())
}

fn device(s: &state::State, dev: c_int) -> CuResult<usize> {
    let n = s.devices()?.len();
    usize::try_from(dev)
        .ok()
        .filter(|&d| d < n)
        .ok_or(INVALID_DEVICE)
}

fn fail_on_purpose() -> bool {
    std::env::var("GRAFT_FAKE_CUDA_FAIL").is_ok_and(|v| !v.is_empty() && v != "0")
}

#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> c_int {
    if flags != 0 {
        return INVALID_VALUE;
    }
    if fail_on_purpose() {
        return UNKNOWN;
    }
    let found = devices::visible();
    if found.is_empty() {
        return NO_DEVICE;
    }
    // Once per process, as the driver connects to MPS once.
    let connected = state::with(|s| s.devices.is_some());
    let client = if connected {
        None
    } else {
        match mps::connect() {
            Ok(c) => c,
            Err(e) => return e,
        }
    };
    state::with(|s| {
        if s.devices.is_none() {
            s.pinned_limit = client.as_ref().and_then(|c| c.pinned_limit);
            s.mps = client;
        }
        s.devices.get_or_insert(found);
    });
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> c_int {
    code(out(version, CUDA_VERSION))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> c_int {
    code(state::with(|s| out(count, s.devices()?.len() as c_int)))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> c_int {
    code(state::with(|s| out(dev, device(s, ordinal)? as c_int)))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> c_int {
    code(state::with(|s| {
        device(s, dev)?;
        if name.is_null() || len <= 0 {
            return Err(INVALID_VALUE);
        }
        // Truncated to the buffer, always NUL-terminated, as the real call does.
        let bytes = devices::NAME.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), name, n);
        *name.add(n) = 0;
        Ok(())
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> c_int {
    code(state::with(|s| {
        device(s, dev)?;
        out(bytes, devices::TOTAL_MEMORY)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(ctx: *mut Handle, _flags: c_uint, dev: c_int) -> c_int {
    code(state::with(|s| {
        let d = device(s, dev)?;
        if ctx.is_null() {
            return Err(INVALID_VALUE);
        }
        out(ctx, s.create_context(d) as Handle)
    }))
}

#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(ctx: Handle) -> c_int {
    code(state::with(|s| s.destroy_context(ctx as u64)))
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> c_int {
    // Launches run to completion on the calling thread: nothing is ever pending.
    code(state::with(|s| s.ctx().map(|_| ())))
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut Handle, image: *const c_void) -> c_int {
    code(state::with(|s| {
        s.ctx()?;
        if module.is_null() || image.is_null() {
            return Err(INVALID_VALUE);
        }
        let entries = kernel::load(image).map_err(|e| match e {
            kernel::ImageError::NotPtx => INVALID_IMAGE,
            kernel::ImageError::UnknownPtx => INVALID_PTX,
        })?;
        out(module, s.add_module(entries)? as Handle)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    func: *mut Handle,
    module: Handle,
    name: *const c_char,
) -> c_int {
    code(state::with(|s| {
        if func.is_null() || name.is_null() {
            return Err(INVALID_VALUE);
        }
        let name = CStr::from_ptr(name).to_str().map_err(|_| NOT_FOUND)?;
        let f = s.function(module as u64, name)?.ok_or(NOT_FOUND)?;
        out(func, f as Handle)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, size: usize) -> c_int {
    code(state::with(|s| {
        if dptr.is_null() {
            return Err(INVALID_VALUE);
        }
        out(dptr, s.alloc(size)?)
    }))
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(dptr: u64) -> c_int {
    code(state::with(|s| s.free(dptr)))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) -> c_int {
    code(state::with(|s| {
        let to = s.bytes(dst, n)?;
        if n > 0 {
            if src.is_null() {
                return Err(INVALID_VALUE);
            }
            to.copy_from_slice(std::slice::from_raw_parts(src.cast(), n));
        }
        Ok(())
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) -> c_int {
    code(state::with(|s| {
        let from = s.bytes(src, n)?;
        if n > 0 {
            if dst.is_null() {
                return Err(INVALID_VALUE);
            }
            std::slice::from_raw_parts_mut(dst.cast(), n).copy_from_slice(from);
        }
        Ok(())
    }))
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: Handle,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    _shared_mem: c_uint,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> c_int {
    code(state::with(|s| {
        if s.function_name(f as u64)? != kernel::VADD {
            return Err(NOT_FOUND);
        }
        // The probe passes its arguments through kernelParams on the default stream.
        if !extra.is_null() {
            return Err(NOT_SUPPORTED);
        }
        if !stream.is_null() {
            return Err(INVALID_HANDLE);
        }
        if [grid_x, grid_y, grid_z, block_x, block_y, block_z].contains(&0) {
            return Err(INVALID_VALUE);
        }
        let args = kernel::vadd_args(params).ok_or(INVALID_VALUE)?;
        // Thread i = blockIdx.x * blockDim.x + threadIdx.x handles element i < n.
        let threads = u64::from(grid_x) * u64::from(block_x);
        let len = threads.min(u64::from(args.n)) as usize * 4;
        let fault = |_| ILLEGAL_ADDRESS;
        let a = s.bytes(args.a, len).map_err(fault)?.to_vec();
        let b = s.bytes(args.b, len).map_err(fault)?.to_vec();
        kernel::vadd(&a, &b, s.bytes(args.c, len).map_err(fault)?);
        Ok(())
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: c_int, text: *mut *const c_char) -> c_int {
    match describe(error) {
        Some((_, t)) => code(out(text, t)),
        None => {
            let _ = out(text, std::ptr::null());
            INVALID_VALUE
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: c_int, name: *mut *const c_char) -> c_int {
    match describe(error) {
        Some((n, _)) => code(out(name, n)),
        None => {
            let _ = out(name, std::ptr::null());
            INVALID_VALUE
        }
    }
}
