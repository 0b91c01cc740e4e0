//! The fake NVML's MIG management through NVML's raw C calls, as graft-driver makes them:
//! profiles and placements, GPU and compute instances created and destroyed under the
//! real placement rules, the MIG devices they make, and the state file that processes
//! share (format in integration/fake-nvml/src/mig/state.rs).
//!
//! Each fake node holds its own copy of the library, hence its own instance in this
//! process: two nodes configured with one state file stand for two processes. No GPU, no
//! root.

use std::path::Path;

use anyhow::Context;
use graft_integration::fake_gpu::{FakeNode, MigInstance, LIB_DIR};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::*;

mod raw;
use raw::{name, Raw};
mod presets;

const NOT_SUPPORTED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const NOT_FOUND: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
const INVALID_ARGUMENT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const INSUFFICIENT_SIZE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
const NO_ROOM: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;
const IN_USE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_IN_USE;
const G1: u32 = NVML_GPU_INSTANCE_PROFILE_1_SLICE;
const G3: u32 = NVML_GPU_INSTANCE_PROFILE_3_SLICE;
const G4: u32 = NVML_GPU_INSTANCE_PROFILE_4_SLICE;
const G7: u32 = NVML_GPU_INSTANCE_PROFILE_7_SLICE;
const C1: u32 = NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE;
const C3: u32 = NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE;
const C4: u32 = NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE;
const C7: u32 = NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE;

/// A fake node whose MIG configuration is `config`, and NVML loaded from it.
fn load(dir: &Path, config: &str) -> anyhow::Result<(FakeNode, Nvml)> {
    let node = FakeNode::create(dir)?;
    node.configure_mig(config)?;
    let lib = node.host.join(&LIB_DIR[1..]).join("libnvidia-ml.so.1");
    let nvml = Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .with_context(|| format!("loading {}", lib.display()))?;
    Ok((node, nvml))
}

/// A GPU instance in the state file: GI id, profile, start, size, CI ids.
type Listed = (u32, u32, u32, u32, Vec<u32>);

/// GPU 5's instances in the state file.
fn on_gpu5(state: &Path) -> anyhow::Result<Vec<Listed>> {
    Ok(FakeNode::mig_instances(state)?
        .into_iter()
        .filter(|m| m.gpu == 5)
        .map(|m: MigInstance| (m.gi, m.profile, m.start, m.size, m.cis))
        .collect())
}

#[test]
fn profiles_and_placements() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_node, nvml) = load(dir.path(), "mig 5 on\n")?;
    let raw = Raw(&nvml);
    // MIG mode does not matter (GPU 0 has it off).
    for gpu in [0, 5] {
        let p = raw
            .gi_profile(gpu, G3)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        assert_eq!(name(&p.name), "MIG 3g.40gb");
        assert_eq!(
            (p.id, p.isP2pSupported, p.sliceCount, p.instanceCount),
            (G3, 0, 3, 2)
        );
        assert_eq!((p.multiprocessorCount, p.memorySizeMB), (60, 40_192));
        let engines = (
            p.copyEngineCount,
            p.decoderCount,
            p.encoderCount,
            p.jpegCount,
            p.ofaCount,
        );
        assert_eq!(engines, (3, 3, 0, 3, 0));
    }
    let me = raw
        .gi_profile(5, NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1)
        .unwrap();
    assert_eq!(
        (name(&me.name), me.instanceCount, me.ofaCount),
        ("MIG 1g.10gb+me".into(), 1, 1)
    );
    let full = raw.gi_profile(5, G7).unwrap();
    assert_eq!(
        (name(&full.name), full.memorySizeMB, full.copyEngineCount),
        ("MIG 7g.80gb".into(), 80_896, 8)
    );
    // Profiles an H100 lacks; indices NVML does not define.
    assert_eq!(
        raw.gi_profile(5, NVML_GPU_INSTANCE_PROFILE_6_SLICE).err(),
        Some(NOT_SUPPORTED)
    );
    assert_eq!(
        raw.gi_profile(5, NVML_GPU_INSTANCE_PROFILE_COUNT).err(),
        Some(INVALID_ARGUMENT)
    );
    // The struct's version must be the v2 one.
    // SAFETY: all-zero is a valid profile info; the GPU handle is live.
    let mut old: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
    old.version = std::mem::size_of_val(&old) as u32 | (1 << 24);
    let code = unsafe {
        nvml.lib()
            .nvmlDeviceGetGpuInstanceProfileInfoV(raw.gpu(5), G3, &mut old)
    };
    assert_eq!(code, nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

    assert_eq!(raw.placements(5, G3, 2), Ok(vec![(0, 4), (4, 4)]));
    assert_eq!(raw.placements(5, G3, 1), Err((INSUFFICIENT_SIZE, 2)));
    assert_eq!(raw.placements(0, G1, 8).map(|p| p.len()), Ok(7));
    assert_eq!(
        raw.placements(5, NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 4),
        Ok(vec![(0, 2), (2, 2), (4, 2), (6, 2)])
    );
    let mut count = 0;
    // SAFETY: a null array asks for the count only; `count` is a live local.
    let code = unsafe {
        nvml.lib().nvmlDeviceGetGpuInstancePossiblePlacements_v2(
            raw.gpu(5),
            G4,
            std::ptr::null_mut(),
            &mut count,
        )
    };
    assert_eq!((code, count), (nvmlReturn_enum_NVML_SUCCESS, 1));
    // A MIG device is no GPU to partition.
    // SAFETY: the handle is used while `nvml` lives.
    let mig = unsafe { nvml.device_by_index(6)?.mig_device_by_index(0)?.handle() };
    let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
    info.version = std::mem::size_of_val(&info) as u32 | (2 << 24);
    // SAFETY: a live handle and a live local.
    let code = unsafe {
        nvml.lib()
            .nvmlDeviceGetGpuInstanceProfileInfoV(mig, G3, &mut info)
    };
    assert_eq!(code, INVALID_ARGUMENT);
    Ok(())
}

#[test]
fn create_use_destroy_and_share() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let state = dir.path().join("mig-state");
    let config = format!("mig 5 on\nstate {}\n", state.display());
    let (_node, nvml) = load(&dir.path().join("a"), &config)?;
    let raw = Raw(&nvml);
    let gpu5 = nvml.device_by_index(5)?;
    assert_eq!(gpu5.mig_mode()?.current, 1);
    assert_eq!(gpu5.mig_device_count()?, 7);
    // Turned on by the configuration: no instances yet.
    assert!(matches!(
        gpu5.mig_device_by_index(0),
        Err(NvmlError::NotFound)
    ));
    assert_eq!(raw.gis(5, G3, 2), Ok(vec![]));

    let g3 = raw.create_gi(5, G3, 4, 4).unwrap();
    let g4 = raw.create_gi(5, G4, 0, 4).unwrap();
    let info = raw.gi_info(g3).unwrap();
    assert_eq!(info.device, raw.gpu(5));
    let placement = (info.placement.start, info.placement.size);
    assert_eq!((info.id, info.profileId, placement), (1, G3, (4, 4)));
    assert_eq!(raw.gi_info(g4).unwrap().id, 2);
    // No room left; a placement the profile lacks; no MIG on GPU 0.
    assert_eq!(raw.create_gi(5, G7, 0, 8).err(), Some(NO_ROOM));
    assert_eq!(raw.create_gi(5, G1, 6, 1).err(), Some(NO_ROOM));
    assert_eq!(raw.create_gi(5, G3, 2, 4).err(), Some(INVALID_ARGUMENT));
    assert_eq!(raw.create_gi(0, G3, 0, 4).err(), Some(NOT_SUPPORTED));
    assert_eq!(raw.gis(5, G3, 2), Ok(vec![g3]));
    assert_eq!(raw.gis(5, G3, 1).err(), Some(INSUFFICIENT_SIZE));
    assert_eq!(raw.gi_by_id(5, 2), Ok(g4));
    assert_eq!(raw.gi_by_id(5, 3).err(), Some(NOT_FOUND));

    // Compute instance profiles of the 3g GI.
    let full = raw.ci_profile(g3, C3).unwrap();
    assert_eq!(
        (name(&full.name), full.sliceCount, full.instanceCount),
        ("MIG 3g.40gb".into(), 3, 1)
    );
    assert_eq!((full.multiprocessorCount, full.sharedDecoderCount), (60, 3));
    let one = raw.ci_profile(g3, C1).unwrap();
    assert_eq!(
        (name(&one.name), one.instanceCount, one.multiprocessorCount),
        ("MIG 1c.3g.40gb".into(), 3, 16)
    );
    assert_eq!(raw.ci_profile(g3, C4).err(), Some(NOT_SUPPORTED));
    assert_eq!(raw.ci_profile(g3, C7).err(), Some(NOT_SUPPORTED));

    let c3 = raw.create_ci(g3, C3).unwrap();
    let c4 = raw.create_ci(g4, C4).unwrap();
    assert_eq!(raw.create_ci(g3, C1).err(), Some(NO_ROOM));
    assert_eq!(raw.cis(g3, C3, 1), Ok(vec![c3]));
    let ci = raw.ci_info(c3).unwrap();
    assert_eq!((ci.device, ci.gpuInstance), (raw.gpu(5), g3));
    let placement = (ci.placement.start, ci.placement.size);
    assert_eq!((ci.id, ci.profileId, placement), (0, C3, (0, 3)));

    // The MIG devices, by GI id: the 4g (GI 2) after the 3g (GI 1).
    let m0 = gpu5.mig_device_by_index(0)?;
    let m1 = gpu5.mig_device_by_index(1)?;
    assert!(matches!(
        gpu5.mig_device_by_index(2),
        Err(NvmlError::NotFound)
    ));
    // SAFETY: the handles are used while `nvml` lives.
    let (h0, h1) = unsafe { (m0.handle(), m1.handle()) };
    assert_eq!((raw.ids(h0), raw.ids(h1)), (Ok((1, 0)), Ok((2, 0))));
    assert!(m0.mig_is_mig_device_handle()?);
    assert_eq!(m0.mig_parent_device()?.uuid()?, gpu5.uuid()?);
    assert_eq!(m0.name()?, "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
    assert_eq!(m1.name()?, "NVIDIA H100 80GB HBM3 MIG 4g.40gb");
    assert_eq!(m1.memory_info()?.total, 40_192 << 20);
    let a = m1.attributes()?;
    assert_eq!(
        (a.gpu_instance_slice_count, a.compute_instance_slice_count),
        (4, 4)
    );
    assert_eq!((a.multiprocessor_count, a.memory_size_mb), (64, 40_192));
    let uuid = m0.uuid()?;
    assert_eq!(uuid, "MIG-0d2b0501-51a0-5b7f-9c3d-7e11f4a00000");
    assert_ne!(uuid, m1.uuid()?);
    assert_eq!(nvml.device_by_uuid(uuid.as_str())?.uuid()?, uuid);

    // Written to the file, which a second library instance (another process) reads.
    let made = vec![(1, G3, 4, 4, vec![0]), (2, G4, 0, 4, vec![0])];
    assert_eq!(on_gpu5(&state)?, made);
    let (_other_node, other) = load(&dir.path().join("b"), &config)?;
    let other_raw = Raw(&other);
    let other5 = other.device_by_index(5)?;
    assert_eq!(other5.mig_device_by_index(0)?.uuid()?, uuid);
    let other_g4 = other_raw.gi_by_id(5, 2).unwrap();

    // A GI with compute instances is in use; compute instances go first.
    assert_eq!(raw.destroy_gi(g3).err(), Some(IN_USE));
    raw.destroy_ci(c3).unwrap();
    assert_eq!(raw.destroy_ci(c3).err(), Some(NOT_FOUND));
    raw.destroy_gi(g3).unwrap();
    assert_eq!(raw.gi_info(g3).err(), Some(NOT_FOUND));
    assert_eq!(raw.destroy_gi(g3).err(), Some(NOT_FOUND));
    // The MIG device's handle stays a handle, of nothing.
    assert!(matches!(m0.uuid(), Err(NvmlError::NotFound)));
    assert!(matches!(
        nvml.device_by_uuid(uuid.as_str()),
        Err(NvmlError::NotFound)
    ));
    assert_eq!(gpu5.mig_device_by_index(0)?.uuid()?, m1.uuid()?);
    // The other instance sees the change, and makes its own.
    assert!(matches!(
        other.device_by_uuid(uuid.as_str()),
        Err(NvmlError::NotFound)
    ));
    assert_eq!(other_raw.destroy_gi(other_g4).err(), Some(IN_USE));
    other_raw
        .destroy_ci(other_raw.cis(other_g4, C4, 1).unwrap()[0])
        .unwrap();
    other_raw.destroy_gi(other_g4).unwrap();
    assert_eq!(raw.destroy_ci(c4).err(), Some(NOT_FOUND));
    let g7 = other_raw.create_gi(5, G7, 0, 8).unwrap();
    assert_eq!(other_raw.gi_info(g7).unwrap().id, 0);
    assert_eq!(on_gpu5(&state)?, vec![(0, G7, 0, 8, vec![])]);
    assert_eq!(
        raw.gi_by_id(5, 0)
            .map(|g| raw.gi_info(g).map(|i| i.profileId)),
        Ok(Ok(G7))
    );
    // The presets of GPUs 6 and 7 were written with the first change, and are untouched.
    let presets: Vec<(usize, u32)> = FakeNode::mig_instances(&state)?
        .into_iter()
        .filter(|m| m.gpu != 5)
        .map(|m| (m.gpu, m.gi))
        .collect();
    assert_eq!(presets, [(6, 1), (6, 2), (7, 1), (7, 5), (7, 13)]);
    Ok(())
}
