//! Helpers shared by the test files that run the nvidia backend on the fake node.

#![allow(dead_code)]

use graft_driver::discovery::nvidia::driver_files::Roots;
use graft_driver::discovery::nvidia::dynamic_mig::MigManager;
use graft_driver::discovery::nvidia::hook_edits::HookConfig;
use graft_driver::discovery::nvidia::mps::MpsManager;
use graft_driver::discovery::nvidia::setup::{NvidiaSetup, Smi};
use graft_driver::discovery::nvidia::vfio::Vfio;
use graft_driver::discovery::nvidia::{NvidiaConfig, NvidiaDiscovery};
use graft_driver::setup::SetupError;
use graft_integration::fake_gpu::FakeNode;

/// The fake tree seen as the host's `/` (as the DaemonSet sees the host at /host).
pub fn as_host_root(node: &FakeNode) -> Roots {
    Roots {
        host: node.host.clone(),
        driver: "/".into(),
    }
}

/// The fake tree as a driver root on this host (as with a driver container at
/// /run/nvidia/driver): mount sources are then real host paths.
pub fn as_driver_root(node: &FakeNode) -> Roots {
    Roots {
        host: "/".into(),
        driver: node.host.clone(),
    }
}

/// The nvidia backend's settings for the fake node, with graft-hook at `hook`.
pub fn discovery_config(
    node: &FakeNode,
    roots: Roots,
    imex_channels: u32,
    hook: &str,
) -> NvidiaConfig {
    NvidiaConfig {
        roots,
        nvml_lib: None,
        proc_root: node.proc.clone(),
        sys_root: node.sys.clone(),
        dev_root: node.dev.clone(),
        hook: HookConfig {
            path: hook.to_string(),
            ldconfig: "/sbin/ldconfig".into(),
            params_copy: "/var/lib/graft/nvidia/params".into(),
        },
        imex_channels,
        passthrough: imex_channels > 0,
        dynamic_mig: Default::default(),
        mps: Default::default(),
    }
}

/// The nvidia backend on the fake node, with graft-hook at `hook`.
pub fn discovery(
    node: &FakeNode,
    roots: Roots,
    imex_channels: u32,
    hook: &str,
) -> anyhow::Result<NvidiaDiscovery> {
    Ok(NvidiaDiscovery::new(discovery_config(
        node,
        roots,
        imex_channels,
        hook,
    ))?)
}

/// An nvidia-smi that is never needed (no time-slicing in these tests).
pub struct NoSmi;

impl Smi for NoSmi {
    fn run(&self, _: &[String]) -> Result<(), SetupError> {
        Ok(())
    }
}

/// The nvidia backend's setup on the fake node, with the dynamic MIG and MPS managers given.
pub fn nvidia_setup(
    node: &FakeNode,
    mig: Option<MigManager>,
    mps: Option<MpsManager>,
) -> NvidiaSetup {
    NvidiaSetup {
        vfio: Vfio {
            sys: node.sys.clone(),
            proc: node.proc.clone(),
            timeout: std::time::Duration::ZERO,
        },
        dev_root: node.dev.clone(),
        smi: Box::new(NoSmi),
        persistence: Box::new(graft_driver::discovery::nvidia::vfio::persistence::Untouched),
        rescan: Box::new(|| {}),
        mig,
        mps,
    }
}
