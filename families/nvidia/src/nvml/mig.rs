//! NVML's MIG management calls, which nvml-wrapper 0.13 does not wrap: GPU instance
//! profiles and their placements, the GPU and compute instances that exist, and creating and
//! destroying them. Every call goes through the raw bindings, only after checking that the
//! symbol was found (the bindings panic otherwise).

use std::ffi::{c_char, c_uint};

use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_v2_t, nvmlComputeInstance_t,
    nvmlDevice_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t,
    nvmlGpuInstanceProfileInfo_v2_t, nvmlGpuInstance_t,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES, nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_IN_USE, nvmlReturn_enum_NVML_ERROR_NOT_FOUND,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED, nvmlReturn_enum_NVML_SUCCESS, nvmlReturn_t,
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, NVML_GPU_INSTANCE_PROFILE_COUNT,
};

use super::layout::{GiInstance, GiProfile, MigLayout};

/// Why an NVML MIG call failed: the call and NVML's code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigCallError {
    /// The library lacks the symbol.
    #[error("this libnvidia-ml has no {0}")]
    Missing(&'static str),
    /// The call returned an error.
    #[error("{call}: {}", describe(*.code))]
    Failed {
        /// The NVML function.
        call: &'static str,
        /// NVML's return code.
        code: u32,
    },
}

impl MigCallError {
    /// Whether NVML returned `code`.
    pub fn is(&self, code: nvmlReturn_t) -> bool {
        matches!(self, MigCallError::Failed { code: c, .. } if *c == code)
    }

    /// The GPU has no room for it: another instance holds the slices or engines.
    pub fn insufficient(&self) -> bool {
        self.is(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES)
    }

    /// NVML said the instance is not there.
    pub fn not_found(&self) -> bool {
        self.is(nvmlReturn_enum_NVML_ERROR_NOT_FOUND)
    }
}

fn describe(code: u32) -> String {
    let what = match code {
        c if c == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES => {
            "insufficient resources (another GPU or compute instance holds the slices or engines)"
        }
        c if c == nvmlReturn_enum_NVML_ERROR_IN_USE => "in use",
        c if c == nvmlReturn_enum_NVML_ERROR_NOT_FOUND => "not found",
        c if c == nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => "not supported",
        c if c == nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT => "invalid argument",
        4 => "no permission",
        _ => "error",
    };
    format!("NVML error {code} ({what})")
}

type Call<T> = Result<T, MigCallError>;

fn check(call: &'static str, rc: nvmlReturn_t) -> Call<()> {
    if rc == nvmlReturn_enum_NVML_SUCCESS {
        Ok(())
    } else {
        Err(MigCallError::Failed { call, code: rc })
    }
}

/// NVML_STRUCT_VERSION: the struct's size with the version in the top byte.
fn struct_version<T>(v: u32) -> u32 {
    (std::mem::size_of::<T>() as u32) | (v << 24)
}

fn c_name(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes)
        .trim_start_matches("MIG ")
        .to_string()
}

macro_rules! sym {
    ($nvml:expr, $name:ident) => {
        $nvml
            .lib()
            .$name
            .as_ref()
            .map_err(|_| MigCallError::Missing(stringify!($name)))?
    };
}

/// The profiles a GPU supports, with their placements, and its GPU instances.
///
/// # Safety
/// `device` must be a GPU handle of `nvml`, valid while `nvml` lives.
pub unsafe fn read_layout(nvml: &Nvml, device: nvmlDevice_t) -> Call<MigLayout> {
    let mut layout = MigLayout::default();
    for index in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
        let info = sym!(nvml, nvmlDeviceGetGpuInstanceProfileInfoV);
        // SAFETY: zeroed plain C struct with its version set; valid handle and pointer.
        let mut p: nvmlGpuInstanceProfileInfo_v2_t = std::mem::zeroed();
        p.version = struct_version::<nvmlGpuInstanceProfileInfo_v2_t>(2);
        let rc = info(device, index, &mut p);
        if rc == nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED
            || rc == nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
            || (rc == nvmlReturn_enum_NVML_SUCCESS && p.instanceCount == 0)
        {
            continue;
        }
        check("nvmlDeviceGetGpuInstanceProfileInfoV", rc)?;
        let placements = placements(nvml, device, p.id)?;
        layout.profiles.push(GiProfile {
            id: p.id,
            name: c_name(&p.name),
            slices: p.sliceCount,
            instance_count: p.instanceCount,
            multiprocessors: p.multiprocessorCount,
            copy_engines: p.copyEngineCount,
            decoders: p.decoderCount,
            encoders: p.encoderCount,
            jpeg_engines: p.jpegCount,
            ofa_engines: p.ofaCount,
            memory_mib: p.memorySizeMB,
            placements,
        });
        for gi in gpu_instances(nvml, device, p.id, p.instanceCount)? {
            layout.instances.push(gi_info(nvml, gi)?.1);
        }
    }
    layout.instances.sort_by_key(|g| (g.start, g.id));
    Ok(layout)
}

unsafe fn placements(nvml: &Nvml, device: nvmlDevice_t, profile: u32) -> Call<Vec<(u32, u32)>> {
    let f = sym!(nvml, nvmlDeviceGetGpuInstancePossiblePlacements_v2);
    // A GPU has 8 memory slices; 16 is room for any profile's placements.
    let mut buf = [nvmlGpuInstancePlacement_t { start: 0, size: 0 }; 16];
    let mut count: c_uint = buf.len() as c_uint;
    check(
        "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
        f(device, profile, buf.as_mut_ptr(), &mut count),
    )?;
    Ok(buf[..(count as usize).min(buf.len())]
        .iter()
        .map(|p| (p.start, p.size))
        .collect())
}

unsafe fn gpu_instances(
    nvml: &Nvml,
    device: nvmlDevice_t,
    profile: u32,
    room: u32,
) -> Call<Vec<nvmlGpuInstance_t>> {
    let f = sym!(nvml, nvmlDeviceGetGpuInstances);
    let mut buf: Vec<nvmlGpuInstance_t> = vec![std::ptr::null_mut(); room.max(1) as usize];
    let mut count: c_uint = buf.len() as c_uint;
    check(
        "nvmlDeviceGetGpuInstances",
        f(device, profile, buf.as_mut_ptr(), &mut count),
    )?;
    buf.truncate(count as usize);
    Ok(buf)
}

unsafe fn gi_info(nvml: &Nvml, gi: nvmlGpuInstance_t) -> Call<(nvmlDevice_t, GiInstance)> {
    let f = sym!(nvml, nvmlGpuInstanceGetInfo);
    let mut info: nvmlGpuInstanceInfo_t = std::mem::zeroed();
    check("nvmlGpuInstanceGetInfo", f(gi, &mut info))?;
    Ok((
        info.device,
        GiInstance {
            id: info.id,
            profile: info.profileId,
            start: info.placement.start,
            size: info.placement.size,
        },
    ))
}

/// The profile id and placement start of GPU instance `id` (what a dynamic-MIG placement
/// device is named by), for the events NVML attributes to an instance.
///
/// # Safety
/// `device` must be a GPU handle of `nvml`, valid while `nvml` lives.
pub unsafe fn gi_placement(nvml: &Nvml, device: nvmlDevice_t, id: u32) -> Call<(u32, u32)> {
    let f = sym!(nvml, nvmlDeviceGetGpuInstanceById);
    let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
    check("nvmlDeviceGetGpuInstanceById", f(device, id, &mut gi))?;
    let (_, info) = gi_info(nvml, gi)?;
    Ok((info.profile, info.start))
}

/// The compute instance profile that spans a whole GPU instance of `slices` slices.
fn full_ci_profile_index(slices: u32) -> Option<u32> {
    use nvml_wrapper_sys::bindings::*;
    Some(match slices {
        1 => NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
        2 => NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
        3 => NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
        4 => NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
        6 => NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
        7 => NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
        8 => NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE,
        _ => return None,
    })
}

/// The GPU instance at exactly this placement with this profile, if there is one.
///
/// # Safety
/// `device` must be a GPU handle of `nvml`, valid while `nvml` lives.
pub unsafe fn find_gi(
    nvml: &Nvml,
    device: nvmlDevice_t,
    profile: u32,
    start: u32,
    room: u32,
) -> Call<Option<(nvmlGpuInstance_t, GiInstance)>> {
    for gi in gpu_instances(nvml, device, profile, room)? {
        let (_, info) = gi_info(nvml, gi)?;
        if info.start == start {
            return Ok(Some((gi, info)));
        }
    }
    Ok(None)
}

/// Creates a GPU instance of `profile` at `(start, size)`.
///
/// # Safety
/// `device` must be a GPU handle of `nvml`, valid while `nvml` lives.
pub unsafe fn create_gi(
    nvml: &Nvml,
    device: nvmlDevice_t,
    profile: u32,
    start: u32,
    size: u32,
) -> Call<(nvmlGpuInstance_t, GiInstance)> {
    let f = sym!(nvml, nvmlDeviceCreateGpuInstanceWithPlacement);
    let placement = nvmlGpuInstancePlacement_t { start, size };
    let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
    check(
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        f(device, profile, &placement, &mut gi),
    )?;
    Ok((gi, gi_info(nvml, gi)?.1))
}

/// The id of the compute instance spanning all of `gi` (`slices` slices), created when it
/// does not exist yet.
///
/// # Safety
/// `gi` must be a GPU instance handle of `nvml` that exists.
pub unsafe fn full_compute_instance(nvml: &Nvml, gi: nvmlGpuInstance_t, slices: u32) -> Call<u32> {
    let index = full_ci_profile_index(slices).ok_or(MigCallError::Failed {
        call: "compute instance profile for the GPU instance's slice count",
        code: nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
    })?;
    let p = ci_profile(nvml, gi, index)?;
    if let Some(&ci) = compute_instances(nvml, gi, &p)?.first() {
        return ci_id(nvml, ci);
    }
    let create = sym!(nvml, nvmlGpuInstanceCreateComputeInstance);
    let mut ci: nvmlComputeInstance_t = std::ptr::null_mut();
    check(
        "nvmlGpuInstanceCreateComputeInstance",
        create(gi, p.id, &mut ci),
    )?;
    ci_id(nvml, ci)
}

unsafe fn ci_id(nvml: &Nvml, ci: nvmlComputeInstance_t) -> Call<u32> {
    let f = sym!(nvml, nvmlComputeInstanceGetInfo_v2);
    let mut info: nvmlComputeInstanceInfo_t = std::mem::zeroed();
    check("nvmlComputeInstanceGetInfo_v2", f(ci, &mut info))?;
    Ok(info.id)
}

/// A compute instance profile of `gi` by NVML index.
unsafe fn ci_profile(
    nvml: &Nvml,
    gi: nvmlGpuInstance_t,
    index: u32,
) -> Call<nvmlComputeInstanceProfileInfo_v2_t> {
    let info = sym!(nvml, nvmlGpuInstanceGetComputeInstanceProfileInfoV);
    let mut p: nvmlComputeInstanceProfileInfo_v2_t = std::mem::zeroed();
    p.version = struct_version::<nvmlComputeInstanceProfileInfo_v2_t>(2);
    check(
        "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
        info(
            gi,
            index,
            NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            &mut p,
        ),
    )?;
    Ok(p)
}

/// The compute instances of `gi` with profile `p`.
unsafe fn compute_instances(
    nvml: &Nvml,
    gi: nvmlGpuInstance_t,
    p: &nvmlComputeInstanceProfileInfo_v2_t,
) -> Call<Vec<nvmlComputeInstance_t>> {
    let list = sym!(nvml, nvmlGpuInstanceGetComputeInstances);
    let mut buf: Vec<nvmlComputeInstance_t> =
        vec![std::ptr::null_mut(); p.instanceCount.max(1) as usize];
    let mut count: c_uint = buf.len() as c_uint;
    check(
        "nvmlGpuInstanceGetComputeInstances",
        list(gi, p.id, buf.as_mut_ptr(), &mut count),
    )?;
    buf.truncate(count as usize);
    Ok(buf)
}

/// Destroys every compute instance of `gi`, then `gi`.
///
/// # Safety
/// `gi` must be a GPU instance handle of `nvml`.
pub unsafe fn destroy_gi(nvml: &Nvml, gi: nvmlGpuInstance_t) -> Call<()> {
    let destroy_ci = sym!(nvml, nvmlComputeInstanceDestroy);
    for index in 0..nvml_wrapper_sys::bindings::NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        // Profiles larger than the GPU instance do not exist for it.
        let Ok(p) = ci_profile(nvml, gi, index) else {
            continue;
        };
        for ci in compute_instances(nvml, gi, &p)? {
            let rc = destroy_ci(ci);
            if rc != nvmlReturn_enum_NVML_ERROR_NOT_FOUND {
                check("nvmlComputeInstanceDestroy", rc)?;
            }
        }
    }
    let destroy = sym!(nvml, nvmlGpuInstanceDestroy);
    check("nvmlGpuInstanceDestroy", destroy(gi))
}
