//! MIG: the mode of each GPU, its GPU and compute instances, and the MIG devices (one per
//! compute instance) they make.
//!
//! What is configurable, and how, is in [`config`]; where instances persist in [`state`];
//! where they may go in [`rules`]; the calls that create and destroy them in [`manage`].
//! Every call here reads the configuration and the instances again, so a MIG device exists
//! exactly while its compute instance does, whichever process created it.

use std::ffi::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::*;

use super::*;

pub(crate) mod config;
mod manage;
pub(crate) use manage::{
    nvmlDeviceGetGpuInstanceProfileInfoV, nvmlGpuInstanceGetComputeInstanceProfileInfoV,
};
pub(crate) mod profiles;
mod rules;
pub(crate) mod state;

use config::Config;
use profiles::{CiProfile, GiProfile, Model};
use state::{State, PRESETS};

/// A MIG device that exists now.
pub(crate) struct MigDevice {
    pub(crate) inst: Inst,
    /// Its place among its GPU's MIG devices, as `nvmlDeviceGetMigDeviceHandleByIndex`
    /// numbers them.
    pub(crate) position: usize,
    pub(crate) model: &'static Model,
    pub(crate) gi: &'static GiProfile,
    pub(crate) ci: CiProfile,
}

/// The configuration and the instances now.
pub(crate) fn now() -> Result<(Config, State), nvmlReturn_t> {
    let config = config::load()?;
    let state = state::read(&config)?;
    Ok((config, state))
}

/// The MIG devices of GPU `gpu`, by GI then CI id: none while its MIG mode is off.
pub(crate) fn devices_of(config: &Config, state: &State, gpu: usize) -> Vec<Inst> {
    if !config.mig.get(gpu).copied().unwrap_or(false) {
        return Vec::new();
    }
    state
        .cis
        .iter()
        .filter(|c| c.gpu == gpu)
        .map(|c| Inst {
            gpu,
            gi: c.gi,
            ci: c.id,
        })
        .collect()
}

/// The MIG device `inst`, or `NOT_FOUND` when its compute instance does not exist (or
/// its profiles are not the model's: a state file written for another model).
pub(crate) fn device(inst: Inst) -> Result<MigDevice, nvmlReturn_t> {
    let (config, state) = now()?;
    let position = devices_of(&config, &state, inst.gpu)
        .iter()
        .position(|&i| i == inst)
        .ok_or(NOT_FOUND)?;
    let gi = state.gi(inst.gpu, inst.gi).ok_or(NOT_FOUND)?;
    let ci = state.ci(inst.gpu, inst.gi, inst.ci).ok_or(NOT_FOUND)?;
    let ci = rules::ci_profile(config.model, gi, ci.profile).map_err(|_| NOT_FOUND)?;
    Ok(MigDevice {
        inst,
        position,
        model: config.model,
        gi: rules::gi_profile(config.model, gi.profile).map_err(|_| NOT_FOUND)?,
        ci,
    })
}

/// A MIG device's UUID, a function of (GPU, GI, CI) alone: the presets keep the UUIDs
/// they always had (numbered by their position), any other instance gets one that names
/// its ids, in a form the presets' cannot take (`5b7f` for `5b7e`).
pub(crate) fn mig_uuid(inst: Inst) -> String {
    let Inst { gpu, gi, ci } = inst;
    match PRESETS
        .iter()
        .position(|p| (p.gpu, p.gi, 0) == (gpu, gi, ci))
    {
        Some(i) => format!("MIG-0d2b{i:04x}-51a0-5b7e-9c3d-7e11f4a{i:05x}"),
        None => format!("MIG-0d2b{gpu:02x}{gi:02x}-51a0-5b7f-9c3d-7e11f4a{ci:05x}"),
    }
}

/// The GPU behind a GPU handle, with the configuration (which a broken file makes
/// `UNKNOWN`, as for every MIG call).
fn gpu_config(device: nvmlDevice_t) -> Result<(usize, Config), nvmlReturn_t> {
    let Some(Handle::Gpu(i)) = decode(device) else {
        return Err(INVALID_ARGUMENT);
    };
    Ok((i, config::load()?))
}

/// The return code of a call written with `?`: the `Ok` one is what its last `put` said.
pub(crate) fn code(r: Result<nvmlReturn_t, nvmlReturn_t>) -> nvmlReturn_t {
    r.unwrap_or_else(|rc| rc)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    let (i, config) = match gpu_config(device) {
        Ok(c) => c,
        Err(rc) => return rc,
    };
    let mode = c_uint::from(config.mig[i]);
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
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    match gpu_config(device) {
        Ok((i, config)) if config.mig[i] => put(count, 7),
        Ok(_) => put(count, 0),
        Err(rc) => rc,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    code((|| {
        let (parent, config) = gpu_config(device)?;
        if !config.mig[parent] {
            return Err(NOT_SUPPORTED);
        }
        if index >= 7 {
            return Err(INVALID_ARGUMENT);
        }
        let state = state::read(&config)?;
        match devices_of(&config, &state, parent).get(index as usize) {
            Some(&inst) => Ok(put(mig, handle_of_mig(inst))),
            None => Err(NOT_FOUND),
        }
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: nvmlDevice_t,
    is_mig: *mut c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    if let Err(rc) = config::load() {
        return rc;
    }
    match decode(device) {
        Some(Handle::Gpu(_)) => put(is_mig, 0),
        // Whether or not the instance still exists: the handle says what it is.
        Some(Handle::Mig(_)) => put(is_mig, 1),
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    device: nvmlDevice_t,
    parent: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    match decode(device) {
        Some(Handle::Mig(inst)) => match self::device(inst) {
            Ok(m) => put(parent, handle_of_gpu(m.inst.gpu)),
            Err(rc) => rc,
        },
        _ => INVALID_ARGUMENT,
    }
}

/// A MIG device's GPU or compute instance id; full GPUs have none.
unsafe fn mig_id(device: nvmlDevice_t, id: *mut c_uint, field: fn(&Inst) -> u32) -> nvmlReturn_t {
    match decode(device) {
        Some(Handle::Mig(inst)) => match self::device(inst) {
            Ok(m) => put(id, field(&m.inst)),
            Err(rc) => rc,
        },
        Some(Handle::Gpu(_)) => NOT_SUPPORTED,
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    mig_id(device, id, |i| i.gi)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    mig_id(device, id, |i| i.ci)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetAttributes_v2(
    device: nvmlDevice_t,
    attrs: *mut nvmlDeviceAttributes_t,
) -> nvmlReturn_t {
    if let Err(rc) = crate::health::reachable(device) {
        return rc;
    }
    // A MIG device has its compute instance's SMs, and shares its GPU instance's engines
    // and memory; a full GPU has the model's.
    let a = match decode(device) {
        Some(Handle::Mig(inst)) => match self::device(inst) {
            Ok(MigDevice { gi, ci, .. }) => nvmlDeviceAttributes_t {
                multiprocessorCount: ci.sms,
                sharedCopyEngineCount: gi.copy_engines,
                sharedDecoderCount: gi.decoders,
                sharedEncoderCount: 0,
                sharedJpegCount: gi.jpegs,
                sharedOfaCount: gi.ofas,
                gpuInstanceSliceCount: gi.slices,
                computeInstanceSliceCount: ci.slices,
                memorySizeMB: gi.memory_mb as c_ulonglong,
            },
            Err(rc) => return rc,
        },
        Some(Handle::Gpu(_)) => {
            let m = config::model();
            nvmlDeviceAttributes_t {
                multiprocessorCount: m.sms,
                sharedCopyEngineCount: m.copy_engines,
                sharedDecoderCount: m.decoders,
                sharedEncoderCount: 0,
                sharedJpegCount: m.jpegs,
                sharedOfaCount: m.ofas,
                gpuInstanceSliceCount: profiles::COMPUTE_SLICES,
                computeInstanceSliceCount: profiles::COMPUTE_SLICES,
                memorySizeMB: (m.memory >> 20) as c_ulonglong,
            }
        }
        None => return INVALID_ARGUMENT,
    };
    put(attrs, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids() {
        // The presets' UUIDs, as they were when the instances were static.
        let at = |gpu, gi| mig_uuid(Inst { gpu, gi, ci: 0 });
        assert_eq!(at(6, 1), "MIG-0d2b0000-51a0-5b7e-9c3d-7e11f4a00000");
        assert_eq!(at(7, 13), "MIG-0d2b0004-51a0-5b7e-9c3d-7e11f4a00004");
        let mut all = std::collections::HashSet::new();
        for gpu in 0..8 {
            for gi in 0..state::GI_IDS {
                for ci in 0..state::CI_IDS {
                    let u = mig_uuid(Inst { gpu, gi, ci });
                    assert_eq!(u.len(), 40, "{u}");
                    assert!(all.insert(u));
                }
            }
        }
    }
}
