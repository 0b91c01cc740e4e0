//! The calls that describe, create and destroy GPU and compute instances.
//!
//! Profile ids are the profile indices (see [`super::profiles`]). The listing calls want
//! room for as many handles as the profile's instance count, as the real library's
//! documentation says; `*count` is taken as that room, and a smaller one is
//! `INSUFFICIENT_SIZE` (with the room needed in `*count`), so that a caller that passes
//! too small a buffer finds out here rather than on a GPU.

use std::ffi::{c_char, c_uint};

use nvml_wrapper_sys::bindings::*;

use super::config::Config;
use super::state::{self, Gi, State};
use super::{code, gpu_config, now, rules};
use crate::handles::{decode_ci, decode_gi, handle_of_ci, handle_of_gi, handle_of_gpu, Inst};
use crate::{put, INSUFFICIENT_SIZE, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED};

const VERSION_MISMATCH: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;

/// `NVML_STRUCT_VERSION(<T>, version)`: the struct's size, and the version in the top byte.
fn struct_version<T>(version: u32) -> u32 {
    std::mem::size_of::<T>() as u32 | (version << 24)
}

fn name96(text: &str) -> [c_char; 96] {
    let mut name = [0; 96];
    for (dst, b) in name.iter_mut().zip(text.bytes().take(95)) {
        *dst = b as c_char;
    }
    name
}

/// A GPU whose MIG mode is on, for the calls that change or list its instances.
fn mig_gpu(device: nvmlDevice_t) -> Result<(usize, Config), nvmlReturn_t> {
    let (gpu, config) = gpu_config(device)?;
    if !config.mig[gpu] {
        return Err(NOT_SUPPORTED);
    }
    Ok((gpu, config))
}

/// The GPU instance a handle names, if it exists now (its GPU's MIG mode on).
fn gi_now(handle: nvmlGpuInstance_t) -> Result<(Config, State, Gi), nvmlReturn_t> {
    let (gpu, id) = decode_gi(handle).ok_or(INVALID_ARGUMENT)?;
    let (config, state) = now()?;
    if !config.mig[gpu] {
        return Err(NOT_FOUND);
    }
    let gi = state.gi(gpu, id).ok_or(NOT_FOUND)?.clone();
    Ok((config, state, gi))
}

/// Writes `handles` to a caller's array of room `*count`.
unsafe fn list<T: Copy>(handles: &[T], out: *mut T, count: *mut c_uint, room: u32) -> nvmlReturn_t {
    if out.is_null() || count.is_null() {
        return INVALID_ARGUMENT;
    }
    if *count < room.max(handles.len() as u32) {
        *count = room;
        return INSUFFICIENT_SIZE;
    }
    for (i, &h) in handles.iter().enumerate() {
        *out.add(i) = h;
    }
    put(count, handles.len() as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    code((|| {
        // MIG mode does not matter: the profiles are the GPU's.
        let (_, config) = gpu_config(device)?;
        if info.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        if (*info).version != struct_version::<nvmlGpuInstanceProfileInfo_v2_t>(2) {
            return Err(VERSION_MISMATCH);
        }
        let p = rules::gi_profile(config.model, profile)?;
        Ok(put(
            info,
            nvmlGpuInstanceProfileInfo_v2_t {
                version: (*info).version,
                id: p.index,
                isP2pSupported: 0,
                sliceCount: p.slices,
                instanceCount: p.instances,
                multiprocessorCount: p.sms,
                copyEngineCount: p.copy_engines,
                decoderCount: p.decoders,
                encoderCount: 0,
                jpegCount: p.jpegs,
                ofaCount: p.ofas,
                memorySizeMB: p.memory_mb,
                name: name96(&format!("MIG {}", p.name)),
            },
        ))
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    device: nvmlDevice_t,
    profile: c_uint,
    placements: *mut nvmlGpuInstancePlacement_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    code((|| {
        let (_, config) = gpu_config(device)?;
        let p = rules::gi_profile(config.model, profile)?;
        let all: Vec<_> = p
            .starts
            .iter()
            .map(|&start| nvmlGpuInstancePlacement_t {
                start,
                size: p.size,
            })
            .collect();
        if placements.is_null() {
            return Ok(put(count, all.len() as c_uint));
        }
        Ok(list(&all, placements, count, all.len() as u32))
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstanceWithPlacement(
    device: nvmlDevice_t,
    profile: c_uint,
    placement: *const nvmlGpuInstancePlacement_t,
    gi: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    code((|| {
        let (gpu, config) = mig_gpu(device)?;
        // Checked first: an instance the caller cannot be told of must not be made.
        if placement.is_null() || gi.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let (start, size) = ((*placement).start, (*placement).size);
        let id = state::change(&config, |s| {
            rules::create_gi(s, config.model, gpu, profile, start, size)
        })?;
        Ok(put(gi, handle_of_gi(gpu, id)))
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstances(
    device: nvmlDevice_t,
    profile: c_uint,
    gis: *mut nvmlGpuInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    code((|| {
        let (gpu, config) = mig_gpu(device)?;
        let p = rules::gi_profile(config.model, profile)?;
        let found: Vec<_> = state::read(&config)?
            .gis
            .iter()
            .filter(|g| g.gpu == gpu && g.profile == profile)
            .map(|g| handle_of_gi(gpu, g.id))
            .collect();
        Ok(list(&found, gis, count, p.instances))
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: nvmlDevice_t,
    id: c_uint,
    gi: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    code((|| {
        let (gpu, config) = mig_gpu(device)?;
        state::read(&config)?.gi(gpu, id).ok_or(NOT_FOUND)?;
        Ok(put(gi, handle_of_gi(gpu, id)))
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    gi: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable_gi(gi) {
        return rc;
    }
    code((|| {
        let (_, _, g) = gi_now(gi)?;
        Ok(put(
            info,
            nvmlGpuInstanceInfo_t {
                device: handle_of_gpu(g.gpu),
                id: g.id,
                profileId: g.profile,
                placement: nvmlGpuInstancePlacement_t {
                    start: g.start,
                    size: g.size,
                },
            },
        ))
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceDestroy(gi: nvmlGpuInstance_t) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable_gi(gi) {
        return rc;
    }
    code((|| {
        let (config, _, g) = gi_now(gi)?;
        state::change(&config, |s| rules::destroy_gi(s, g.gpu, g.id))?;
        Ok(crate::SUCCESS)
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    gi: nvmlGpuInstance_t,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable_gi(gi) {
        return rc;
    }
    code((|| {
        let (config, _, g) = gi_now(gi)?;
        if info.is_null() || eng_profile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
            return Err(INVALID_ARGUMENT);
        }
        if (*info).version != struct_version::<nvmlComputeInstanceProfileInfo_v2_t>(2) {
            return Err(VERSION_MISMATCH);
        }
        let gp = rules::gi_profile(config.model, g.profile)?;
        let p = rules::ci_profile(config.model, &g, profile)?;
        Ok(put(
            info,
            nvmlComputeInstanceProfileInfo_v2_t {
                version: (*info).version,
                id: p.index,
                sliceCount: p.slices,
                instanceCount: p.instances,
                multiprocessorCount: p.sms,
                sharedCopyEngineCount: gp.copy_engines,
                sharedDecoderCount: gp.decoders,
                sharedEncoderCount: 0,
                sharedJpegCount: gp.jpegs,
                sharedOfaCount: gp.ofas,
                name: name96(&format!("MIG {}", p.name)),
            },
        ))
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstance(
    gi: nvmlGpuInstance_t,
    profile: c_uint,
    ci: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable_gi(gi) {
        return rc;
    }
    code((|| {
        let (config, _, g) = gi_now(gi)?;
        if ci.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let id = state::change(&config, |s| {
            rules::create_ci(s, config.model, g.gpu, g.id, profile)
        })?;
        Ok(put(
            ci,
            handle_of_ci(Inst {
                gpu: g.gpu,
                gi: g.id,
                ci: id,
            }),
        ))
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstances(
    gi: nvmlGpuInstance_t,
    profile: c_uint,
    cis: *mut nvmlComputeInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable_gi(gi) {
        return rc;
    }
    code((|| {
        let (config, state, g) = gi_now(gi)?;
        let p = rules::ci_profile(config.model, &g, profile)?;
        let found: Vec<_> = state
            .cis
            .iter()
            .filter(|c| c.gpu == g.gpu && c.gi == g.id && c.profile == profile)
            .map(|c| {
                handle_of_ci(Inst {
                    gpu: c.gpu,
                    gi: c.gi,
                    ci: c.id,
                })
            })
            .collect();
        Ok(list(&found, cis, count, p.instances))
    })())
}

/// What go-nvml's MIG walk (NVIDIA's container toolkit) calls for each compute instance.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceById(
    gi: nvmlGpuInstance_t,
    id: c_uint,
    ci: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable_gi(gi) {
        return rc;
    }
    code((|| {
        let (_, state, g) = gi_now(gi)?;
        if ci.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        state
            .cis
            .iter()
            .find(|c| c.gpu == g.gpu && c.gi == g.id && c.id == id)
            .ok_or(NOT_FOUND)?;
        Ok(put(
            ci,
            handle_of_ci(Inst {
                gpu: g.gpu,
                gi: g.id,
                ci: id,
            }),
        ))
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo_v2(
    ci: nvmlComputeInstance_t,
    info: *mut nvmlComputeInstanceInfo_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable_ci(ci) {
        return rc;
    }
    code((|| {
        let inst = decode_ci(ci).ok_or(INVALID_ARGUMENT)?;
        let (config, state, g) = gi_now(handle_of_gi(inst.gpu, inst.gi))?;
        let c = state.ci(inst.gpu, inst.gi, inst.ci).ok_or(NOT_FOUND)?;
        let p = rules::ci_profile(config.model, &g, c.profile)?;
        Ok(put(
            info,
            nvmlComputeInstanceInfo_t {
                device: handle_of_gpu(inst.gpu),
                gpuInstance: handle_of_gi(inst.gpu, inst.gi),
                id: c.id,
                profileId: c.profile,
                placement: nvmlComputeInstancePlacement_t {
                    start: c.start,
                    size: p.slices,
                },
            },
        ))
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceDestroy(ci: nvmlComputeInstance_t) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable_ci(ci) {
        return rc;
    }
    code((|| {
        let inst = decode_ci(ci).ok_or(INVALID_ARGUMENT)?;
        let (config, _, _) = gi_now(handle_of_gi(inst.gpu, inst.gi))?;
        state::change(&config, |s| {
            rules::destroy_ci(s, inst.gpu, inst.gi, inst.ci)
        })?;
        Ok(crate::SUCCESS)
    })())
}
