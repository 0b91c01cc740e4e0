//! NVML's raw MIG calls, each returning the call's code as an error.

use std::ffi::{c_char, CStr};

use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::*;

const OK: nvmlReturn_t = nvmlReturn_enum_NVML_SUCCESS;

pub fn rc<T>(code: nvmlReturn_t, value: T) -> Result<T, nvmlReturn_t> {
    if code == OK {
        Ok(value)
    } else {
        Err(code)
    }
}

pub fn name(raw: &[c_char; 96]) -> String {
    // SAFETY: the fake NUL-terminates names within the array.
    unsafe { CStr::from_ptr(raw.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The raw MIG calls on one NVML instance. Every handle passed in comes from the same
/// instance, and every out pointer is a live local, as the C signatures require.
pub struct Raw<'a>(pub &'a Nvml);

impl Raw<'_> {
    pub fn gpu(&self, index: u32) -> nvmlDevice_t {
        // SAFETY: the handle is used only while `self.0` lives.
        unsafe { self.0.device_by_index(index).expect("GPU").handle() }
    }

    pub fn gi_profile(
        &self,
        gpu: u32,
        profile: u32,
    ) -> Result<nvmlGpuInstanceProfileInfo_v2_t, nvmlReturn_t> {
        // SAFETY: all-zero is a valid profile info (numbers and a name array).
        let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
        info.version = std::mem::size_of_val(&info) as u32 | (2 << 24);
        // SAFETY: see the type's comment.
        let code = unsafe {
            self.0
                .lib()
                .nvmlDeviceGetGpuInstanceProfileInfoV(self.gpu(gpu), profile, &mut info)
        };
        rc(code, info)
    }

    pub fn placements(
        &self,
        gpu: u32,
        profile: u32,
        room: u32,
    ) -> Result<Vec<(u32, u32)>, (nvmlReturn_t, u32)> {
        let mut buf = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; room as usize];
        let mut count = room;
        // SAFETY: `buf` has room for `count` placements.
        let code = unsafe {
            self.0.lib().nvmlDeviceGetGpuInstancePossiblePlacements_v2(
                self.gpu(gpu),
                profile,
                buf.as_mut_ptr(),
                &mut count,
            )
        };
        rc(code, ()).map_err(|e| (e, count))?;
        Ok(buf[..count as usize]
            .iter()
            .map(|p| (p.start, p.size))
            .collect())
    }

    pub fn create_gi(
        &self,
        gpu: u32,
        profile: u32,
        start: u32,
        size: u32,
    ) -> Result<nvmlGpuInstance_t, nvmlReturn_t> {
        let placement = nvmlGpuInstancePlacement_t { start, size };
        let mut gi = std::ptr::null_mut();
        // SAFETY: see the type's comment.
        let code = unsafe {
            self.0.lib().nvmlDeviceCreateGpuInstanceWithPlacement(
                self.gpu(gpu),
                profile,
                &placement,
                &mut gi,
            )
        };
        rc(code, gi)
    }

    pub fn gis(
        &self,
        gpu: u32,
        profile: u32,
        room: u32,
    ) -> Result<Vec<nvmlGpuInstance_t>, nvmlReturn_t> {
        let mut buf = vec![std::ptr::null_mut(); room as usize];
        let mut count = room;
        // SAFETY: `buf` has room for `count` handles.
        let code = unsafe {
            self.0.lib().nvmlDeviceGetGpuInstances(
                self.gpu(gpu),
                profile,
                buf.as_mut_ptr(),
                &mut count,
            )
        };
        buf.truncate(count as usize);
        rc(code, buf)
    }

    pub fn gi_by_id(&self, gpu: u32, id: u32) -> Result<nvmlGpuInstance_t, nvmlReturn_t> {
        let mut gi = std::ptr::null_mut();
        // SAFETY: see the type's comment.
        let code = unsafe {
            self.0
                .lib()
                .nvmlDeviceGetGpuInstanceById(self.gpu(gpu), id, &mut gi)
        };
        rc(code, gi)
    }

    pub fn gi_info(&self, gi: nvmlGpuInstance_t) -> Result<nvmlGpuInstanceInfo_t, nvmlReturn_t> {
        // SAFETY: all-zero is a valid info (a null handle and numbers).
        let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: see the type's comment.
        let code = unsafe { self.0.lib().nvmlGpuInstanceGetInfo(gi, &mut info) };
        rc(code, info)
    }

    pub fn destroy_gi(&self, gi: nvmlGpuInstance_t) -> Result<(), nvmlReturn_t> {
        // SAFETY: see the type's comment.
        rc(unsafe { self.0.lib().nvmlGpuInstanceDestroy(gi) }, ())
    }

    pub fn ci_profile(
        &self,
        gi: nvmlGpuInstance_t,
        profile: u32,
    ) -> Result<nvmlComputeInstanceProfileInfo_v2_t, nvmlReturn_t> {
        // SAFETY: all-zero is a valid profile info (numbers and a name array).
        let mut info: nvmlComputeInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
        info.version = std::mem::size_of_val(&info) as u32 | (2 << 24);
        let shared = NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED;
        // SAFETY: see the type's comment.
        let code = unsafe {
            self.0
                .lib()
                .nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, profile, shared, &mut info)
        };
        rc(code, info)
    }

    pub fn create_ci(
        &self,
        gi: nvmlGpuInstance_t,
        profile: u32,
    ) -> Result<nvmlComputeInstance_t, nvmlReturn_t> {
        let mut ci = std::ptr::null_mut();
        // SAFETY: see the type's comment.
        let code = unsafe {
            self.0
                .lib()
                .nvmlGpuInstanceCreateComputeInstance(gi, profile, &mut ci)
        };
        rc(code, ci)
    }

    pub fn cis(
        &self,
        gi: nvmlGpuInstance_t,
        profile: u32,
        room: u32,
    ) -> Result<Vec<nvmlComputeInstance_t>, nvmlReturn_t> {
        let mut buf = vec![std::ptr::null_mut(); room as usize];
        let mut count = room;
        // SAFETY: `buf` has room for `count` handles.
        let code = unsafe {
            self.0.lib().nvmlGpuInstanceGetComputeInstances(
                gi,
                profile,
                buf.as_mut_ptr(),
                &mut count,
            )
        };
        buf.truncate(count as usize);
        rc(code, buf)
    }

    pub fn ci_info(
        &self,
        ci: nvmlComputeInstance_t,
    ) -> Result<nvmlComputeInstanceInfo_t, nvmlReturn_t> {
        // SAFETY: all-zero is a valid info (null handles and numbers).
        let mut info: nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: see the type's comment.
        let code = unsafe { self.0.lib().nvmlComputeInstanceGetInfo_v2(ci, &mut info) };
        rc(code, info)
    }

    pub fn destroy_ci(&self, ci: nvmlComputeInstance_t) -> Result<(), nvmlReturn_t> {
        // SAFETY: see the type's comment.
        rc(unsafe { self.0.lib().nvmlComputeInstanceDestroy(ci) }, ())
    }

    /// GI and CI id of a MIG device.
    pub fn ids(&self, mig: nvmlDevice_t) -> Result<(u32, u32), nvmlReturn_t> {
        let (mut gi, mut ci) = (0, 0);
        // SAFETY: see the type's comment.
        let code = unsafe { self.0.lib().nvmlDeviceGetGpuInstanceId(mig, &mut gi) };
        rc(code, ())?;
        // SAFETY: see the type's comment.
        let code = unsafe { self.0.lib().nvmlDeviceGetComputeInstanceId(mig, &mut ci) };
        rc(code, (gi, ci))
    }
}
