//! The CUresult codes the fake returns, with the names and descriptions that
//! cuGetErrorName and cuGetErrorString give for them (values as in the CUDA driver API's
//! CUresult enum).

use std::ffi::{c_char, CStr};

pub type CuResult<T> = Result<T, i32>;

pub const SUCCESS: i32 = 0;
pub const INVALID_VALUE: i32 = 1;
pub const OUT_OF_MEMORY: i32 = 2;
pub const NOT_INITIALIZED: i32 = 3;
pub const NO_DEVICE: i32 = 100;
pub const INVALID_DEVICE: i32 = 101;
pub const INVALID_IMAGE: i32 = 200;
pub const INVALID_CONTEXT: i32 = 201;
pub const INVALID_PTX: i32 = 218;
pub const INVALID_HANDLE: i32 = 400;
pub const NOT_FOUND: i32 = 500;
pub const ILLEGAL_ADDRESS: i32 = 700;
pub const NOT_SUPPORTED: i32 = 801;
pub const MPS_CONNECTION_FAILED: i32 = 805;
pub const UNKNOWN: i32 = 999;

const TABLE: &[(i32, &CStr, &CStr)] = &[
    (SUCCESS, c"CUDA_SUCCESS", c"no error"),
    (
        INVALID_VALUE,
        c"CUDA_ERROR_INVALID_VALUE",
        c"invalid argument",
    ),
    (OUT_OF_MEMORY, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (
        NOT_INITIALIZED,
        c"CUDA_ERROR_NOT_INITIALIZED",
        c"initialization error",
    ),
    (
        NO_DEVICE,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (
        INVALID_DEVICE,
        c"CUDA_ERROR_INVALID_DEVICE",
        c"invalid device ordinal",
    ),
    (
        INVALID_IMAGE,
        c"CUDA_ERROR_INVALID_IMAGE",
        c"device kernel image is invalid (the fake runs only graft's probe PTX)",
    ),
    (
        INVALID_CONTEXT,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        INVALID_PTX,
        c"CUDA_ERROR_INVALID_PTX",
        c"a PTX JIT compilation failed (the fake knows only the graft_vadd kernel)",
    ),
    (
        INVALID_HANDLE,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (
        NOT_FOUND,
        c"CUDA_ERROR_NOT_FOUND",
        c"named symbol not found",
    ),
    (
        ILLEGAL_ADDRESS,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered",
    ),
    (
        NOT_SUPPORTED,
        c"CUDA_ERROR_NOT_SUPPORTED",
        c"operation not supported",
    ),
    (
        MPS_CONNECTION_FAILED,
        c"CUDA_ERROR_MPS_CONNECTION_FAILED",
        c"MPS client failed to connect to the MPS control daemon or the MPS server",
    ),
    (
        UNKNOWN,
        c"CUDA_ERROR_UNKNOWN",
        c"unknown error (the fake fails on purpose: GRAFT_FAKE_CUDA_FAIL is set)",
    ),
];

/// The name and description of `code`, if the fake knows it.
pub fn describe(code: i32) -> Option<(*const c_char, *const c_char)> {
    TABLE
        .iter()
        .find(|(c, _, _)| *c == code)
        .map(|(_, name, text)| (name.as_ptr(), text.as_ptr()))
}

/// A call's outcome as the CUresult it returns.
pub fn code(r: CuResult<()>) -> i32 {
    match r {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}
