//! The fake NVML's usage figures through nvml-wrapper: utilisation, power, memory used and
//! MPS client processes, as tests set them in the file `fake-nvml-usage` next to the
//! library (format in integration/fake-nvml/src/usage.rs).
//!
//! Each test loads the library from its own fake node: a separate copy of the file, hence a
//! separate instance in this process. No GPU, no root.

use std::path::Path;

use anyhow::Context;
use graft_integration::fake_gpu::{FakeNode, LIB_DIR};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::*;

const MIB: u64 = 1 << 20;
/// What the fake reserves of every GPU and MIG device.
const RESERVED: u64 = 512 * MIB;
/// An H100 80GB's memory, as the fake reports it.
const H100_MEMORY: u64 = 85_520_809_984;
const IDLE_POWER_MW: u32 = 69_000;

/// The fake node and NVML loaded from its driver root, as graft-driver loads it.
fn load(dir: &Path) -> anyhow::Result<(FakeNode, Nvml)> {
    let node = FakeNode::create(dir)?;
    let lib = node.host.join(&LIB_DIR[1..]).join("libnvidia-ml.so.1");
    let nvml = Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .with_context(|| format!("loading {}", lib.display()))?;
    Ok((node, nvml))
}

/// Sets the node's usage figures: `fake-nvml-usage` beside the MIG configuration, written
/// whole (renamed into place) so that the library never reads half of it.
fn set_usage(node: &FakeNode, text: &str) -> anyhow::Result<()> {
    let path = node.mig_config_file().with_file_name("fake-nvml-usage");
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("{}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("{}", path.display()))
}

/// MIG device `index` of GPU `gpu`, with its GPU instance id.
fn mig_device(nvml: &Nvml, gpu: u32, index: u32) -> anyhow::Result<(Device<'_>, u32)> {
    let mig = nvml.device_by_index(gpu)?.mig_device_by_index(index)?;
    let mut gi = 0;
    // SAFETY: the handle is live, borrowed from its wrapper; `gi` is a live local.
    let rc = unsafe { nvml.lib().nvmlDeviceGetGpuInstanceId(mig.handle(), &mut gi) };
    anyhow::ensure!(rc == nvmlReturn_enum_NVML_SUCCESS, "GPU instance id: {rc}");
    Ok((mig, gi))
}

#[test]
fn gpu_figures() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, nvml) = load(dir.path())?;
    set_usage(
        &node,
        "# two busy GPUs\n\ngpu 0 util 42 memory 1024 power 350000\n\
         gpu 3 util 100 memory 90000 power 700000 # more than it has\n",
    )?;
    let gpu0 = nvml.device_by_index(0)?;
    let util = gpu0.utilization_rates()?;
    assert_eq!((util.gpu, util.memory), (42, 0));
    assert_eq!(gpu0.power_usage()?, 350_000);
    let mem = gpu0.memory_info()?;
    assert_eq!((mem.total, mem.reserved), (H100_MEMORY, RESERVED));
    assert_eq!(mem.used, 1024 * MIB);
    assert_eq!(mem.free, H100_MEMORY - RESERVED - 1024 * MIB);

    // Free memory stops at 0.
    let gpu3 = nvml.device_by_index(3)?;
    assert_eq!(gpu3.utilization_rates()?.gpu, 100);
    assert_eq!(gpu3.power_usage()?, 700_000);
    let mem = gpu3.memory_info()?;
    assert_eq!((mem.used, mem.free), (90_000 * MIB, 0));

    // A GPU no line names is idle.
    let gpu1 = nvml.device_by_index(1)?;
    assert_eq!(gpu1.utilization_rates()?.gpu, 0);
    assert_eq!(gpu1.power_usage()?, IDLE_POWER_MW);
    assert_eq!(gpu1.memory_info()?.used, 0);

    // The file is read on every call.
    set_usage(&node, "gpu 0 util 7 memory 2 power 100000\n")?;
    assert_eq!(gpu0.utilization_rates()?.gpu, 7);
    assert_eq!(gpu0.power_usage()?, 100_000);
    assert_eq!(gpu0.memory_info()?.used, 2 * MIB);
    assert_eq!(gpu3.memory_info()?.used, 0);
    Ok(())
}

#[test]
fn mig_device_figures() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, nvml) = load(dir.path())?;
    // GPU 7's preset instances: GI 1 (4g.40gb), GI 5 (2g.20gb), GI 13 (1g.10gb).
    set_usage(
        &node,
        "mig 7 5 memory 2048\nmig 6 5 memory 999\ngpu 7 util 50 memory 4096 power 420000\n",
    )?;
    let (first, gi) = mig_device(&nvml, 7, 0)?;
    assert_eq!(gi, 1);
    assert_eq!(first.memory_info()?.used, 0);
    let (mig, gi) = mig_device(&nvml, 7, 1)?;
    assert_eq!(gi, 5);
    let mem = mig.memory_info()?;
    assert_eq!(mem.total, 19_968 * MIB);
    assert_eq!(mem.used, 2048 * MIB);
    assert_eq!(mem.free, (19_968 - 2048) * MIB - RESERVED);

    // Utilisation is not supported on MIG-enabled GPUs, nor on their MIG devices; power
    // and MPS clients are the whole GPU's.
    assert!(matches!(
        mig.utilization_rates(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(mig.power_usage(), Err(NvmlError::NotSupported)));
    assert!(matches!(
        mig.mps_running_compute_processes(),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(mig.running_compute_processes()?, vec![]);
    let gpu7 = nvml.device_by_index(7)?;
    assert!(matches!(
        gpu7.utilization_rates(),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(gpu7.power_usage()?, 420_000);
    assert_eq!(gpu7.memory_info()?.used, 4096 * MIB);
    Ok(())
}

#[test]
fn mps_clients() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, nvml) = load(dir.path())?;
    set_usage(&node, "mps 2 4242 300\nmps 2 4343 1200\nmps 3 99 1\n")?;
    let gpu2 = nvml.device_by_index(2)?;
    let clients = gpu2.mps_running_compute_processes()?;
    let seen: Vec<_> = clients
        .iter()
        .map(|p| {
            (
                p.pid,
                p.used_gpu_memory.clone(),
                p.gpu_instance_id,
                p.compute_instance_id,
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (4242, UsedGpuMemory::Used(300 * MIB), None, None),
            (4343, UsedGpuMemory::Used(1200 * MIB), None, None),
        ]
    );
    assert_eq!(gpu2.running_compute_processes()?, vec![]);
    assert_eq!(
        nvml.device_by_index(0)?.mps_running_compute_processes()?,
        vec![]
    );

    // The count protocol on the raw call: too little room says how much is needed.
    // SAFETY: all-zero is a valid nvmlProcessInfo_t.
    let mut infos: [nvmlProcessInfo_t; 2] = unsafe { std::mem::zeroed() };
    let mut count = 1;
    // SAFETY: the handle is live; `count` and `infos` are live locals, `infos` with room
    // for `count` entries.
    let rc = unsafe {
        nvml.lib().nvmlDeviceGetMPSComputeRunningProcesses_v3(
            gpu2.handle(),
            &mut count,
            infos.as_mut_ptr(),
        )
    };
    assert_eq!(
        (rc, count),
        (nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE, 2)
    );
    // SAFETY: as above, with room for both.
    let rc = unsafe {
        nvml.lib().nvmlDeviceGetMPSComputeRunningProcesses_v3(
            gpu2.handle(),
            &mut count,
            infos.as_mut_ptr(),
        )
    };
    assert_eq!((rc, count), (nvmlReturn_enum_NVML_SUCCESS, 2));
    assert_eq!(
        (infos[1].pid, infos[1].usedGpuMemory, infos[1].gpuInstanceId),
        (4343, 1200 * MIB, 0xFFFF_FFFF)
    );
    Ok(())
}

#[test]
fn absent_or_malformed_file_is_idle() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, nvml) = load(dir.path())?;
    let idle = |nvml: &Nvml| -> anyhow::Result<()> {
        for index in 0..8 {
            let gpu = nvml.device_by_index(index)?;
            // GPUs 6 and 7 have MIG on.
            match gpu.utilization_rates() {
                Ok(u) => assert!(index < 6 && (u.gpu, u.memory) == (0, 0), "{index}"),
                Err(NvmlError::NotSupported) => assert!(index >= 6, "{index}"),
                Err(e) => return Err(e.into()),
            }
            assert_eq!(gpu.power_usage()?, IDLE_POWER_MW, "{index}");
            let mem = gpu.memory_info()?;
            assert_eq!((mem.used, mem.free), (0, H100_MEMORY - RESERVED), "{index}");
            assert_eq!(gpu.mps_running_compute_processes()?, vec![], "{index}");
        }
        assert_eq!(mig_device(nvml, 7, 1)?.0.memory_info()?.used, 0);
        Ok(())
    };
    idle(&nvml)?;
    // A percent over 100 spoils the whole file.
    set_usage(
        &node,
        "gpu 0 util 42 memory 1024 power 350000\nmps 0 1 1\ngpu 1 util 101 memory 0 power 0\n",
    )?;
    idle(&nvml)?;
    Ok(())
}

#[test]
fn lost_gpu_fails_as_every_call() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, nvml) = load(dir.path())?;
    set_usage(&node, "gpu 1 util 10 memory 1 power 1\nmps 1 7 1\n")?;
    let gpu1 = nvml.device_by_index(1)?;
    node.inject("1 lost")?;
    let lost = |r: Result<(), NvmlError>| matches!(r, Err(NvmlError::GpuLost));
    assert!(lost(gpu1.utilization_rates().map(drop)));
    assert!(lost(gpu1.power_usage().map(drop)));
    assert!(lost(gpu1.memory_info().map(drop)));
    assert!(lost(gpu1.mps_running_compute_processes().map(drop)));
    assert!(lost(gpu1.running_compute_processes().map(drop)));
    Ok(())
}
