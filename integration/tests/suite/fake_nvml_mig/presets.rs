//! The preset instances, MIG modes, a broken configuration, and the A100 model.

use super::*;

#[test]
fn presets_modes_and_broken_configuration() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, nvml) = load(dir.path(), "# defaults\n")?;
    let raw = Raw(&nvml);
    let gpu6 = nvml.device_by_index(6)?;
    // The presets, with the UUIDs they had when they were static.
    let first = gpu6.mig_device_by_index(0)?;
    assert_eq!(first.uuid()?, "MIG-0d2b0000-51a0-5b7e-9c3d-7e11f4a00000");
    let gi1 = raw.gi_by_id(6, 1).unwrap();
    let info = raw.gi_info(gi1).unwrap();
    assert_eq!(
        (info.profileId, info.placement.start, info.placement.size),
        (G3, 0, 4)
    );
    let gpu7 = nvml.device_by_index(7)?;
    // SAFETY: the handle is used while `nvml` lives.
    let last = unsafe { gpu7.mig_device_by_index(2)?.handle() };
    assert_eq!(raw.ids(last), Ok((13, 0)));
    // In this process's memory: destroy a preset, and GPU 6's list moves up.
    let ci = raw.cis(gi1, C3, 1).unwrap();
    raw.destroy_ci(ci[0]).unwrap();
    raw.destroy_gi(gi1).unwrap();
    // SAFETY: as above.
    let now_first = unsafe { gpu6.mig_device_by_index(0)?.handle() };
    assert_eq!(raw.ids(now_first), Ok((2, 0)));
    assert_eq!(
        raw.create_gi(6, G3, 0, 4)
            .map(|g| raw.gi_info(g).unwrap().id),
        Ok(1)
    );

    // MIG off on GPU 6: no MIG devices, no instances to make.
    node.configure_mig("mig 6 off\n")?;
    assert_eq!(gpu6.mig_mode()?.current, 0);
    assert_eq!(gpu6.mig_device_count()?, 0);
    assert!(matches!(
        gpu6.mig_device_by_index(0),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(first.uuid(), Err(NvmlError::NotFound)));
    assert_eq!(raw.create_gi(6, G3, 4, 4).err(), Some(NOT_SUPPORTED));
    // A line the fake cannot parse fails every MIG call, not the GPU's own.
    node.configure_mig("mig 6 maybe\n")?;
    assert!(matches!(gpu6.mig_mode(), Err(NvmlError::Unknown)));
    assert!(matches!(
        gpu7.mig_device_by_index(0),
        Err(NvmlError::Unknown)
    ));
    assert_eq!(
        raw.gi_profile(0, G3).err(),
        Some(nvmlReturn_enum_NVML_ERROR_UNKNOWN)
    );
    assert_eq!(gpu6.name()?, "NVIDIA H100 80GB HBM3");
    Ok(())
}

#[test]
fn a100_model() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_node, nvml) = load(dir.path(), "model a100-40gb\nmig 0 on\n")?;
    let raw = Raw(&nvml);
    let gpu0 = nvml.device_by_index(0)?;
    assert_eq!(gpu0.name()?, "NVIDIA A100-SXM4-40GB");
    assert_eq!(gpu0.memory_info()?.total, 42_949_672_960);
    let small = raw.gi_profile(0, G1).unwrap();
    assert_eq!(
        (
            name(&small.name),
            small.memorySizeMB,
            small.multiprocessorCount
        ),
        ("MIG 1g.5gb".into(), 4_864, 14)
    );
    let g7 = raw.create_gi(0, G7, 0, 8).unwrap();
    assert_eq!(raw.create_gi(0, G1, 0, 1).err(), Some(NO_ROOM));
    let two = raw
        .ci_profile(g7, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE)
        .unwrap();
    assert_eq!(
        (name(&two.name), two.instanceCount),
        ("MIG 2c.7g.40gb".into(), 3)
    );
    raw.create_ci(g7, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE)
        .unwrap();
    raw.create_ci(g7, C3).unwrap();
    let mig = gpu0.mig_device_by_index(1)?;
    assert_eq!(mig.name()?, "NVIDIA A100-SXM4-40GB MIG 3c.7g.40gb");
    let a = mig.attributes()?;
    assert_eq!(
        (
            a.multiprocessor_count,
            a.gpu_instance_slice_count,
            a.compute_instance_slice_count
        ),
        (42, 7, 3)
    );
    assert_eq!((a.memory_size_mb, a.shared_decoder_count), (40_192, 5));
    // GPUs 6 and 7 keep their presets, in this model's profiles.
    let preset = nvml.device_by_index(6)?.mig_device_by_index(0)?;
    assert_eq!(preset.name()?, "NVIDIA A100-SXM4-40GB MIG 3g.20gb");
    Ok(())
}
