//! Helpers shared by the test files that run the nvidia backend on the fake node.

#![allow(dead_code)]

use graft_driver::claims::setup_port::SetupError;
use graft_driver::discovery::nvidia::devices::HookConfig;
use graft_driver::discovery::nvidia::driver_files::Roots;
use graft_driver::discovery::nvidia::setup::MigManager;
use graft_driver::discovery::nvidia::setup::MpsManager;
use graft_driver::discovery::nvidia::setup::Vfio;
use graft_driver::discovery::nvidia::setup::{NvidiaSetup, Smi};
use graft_driver::discovery::nvidia::{NvidiaConfig, NvidiaDiscovery};
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
    // As graft-driver and graft-nri pick it, so graft-nri's policy accepts it.
    let ldconfig =
        graft_record::policy::default_ldconfig(&roots.driver, |p| roots.visible(p).is_file());
    NvidiaConfig {
        roots,
        nvml_lib: None,
        proc_root: node.proc.clone(),
        sys_root: node.sys.clone(),
        dev_root: node.dev.clone(),
        hook: HookConfig {
            path: hook.to_string(),
            ldconfig,
            params_copy: "/var/lib/graft/nvidia/params".into(),
        },
        driver_copies: None,
        imex_channels,
        compute_domains: false,
        passthrough: imex_channels > 0,
        dynamic_mig: Default::default(),
        mps: Default::default(),
        time_slicing: Default::default(),
        time_slicing_replicas: 4,
        placement_order: Default::default(),
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

/// The nvidia backend on the fake node for a graft-nri whose state directory is `state`:
/// graft-hook's `--params-copy` is that directory's, and the driver's files are prepared
/// in one directory below it, as graft-driver's are.
pub fn discovery_in(
    node: &FakeNode,
    roots: Roots,
    hook: &str,
    state: &std::path::Path,
) -> anyhow::Result<NvidiaDiscovery> {
    let mut config = discovery_config(node, roots, 0, hook);
    config.hook.params_copy = format!("{}/{}", state.display(), graft_record::params::PARAMS_COPY);
    config.driver_copies = Some(graft_record::driver_dir::base(state));
    Ok(NvidiaDiscovery::new(config)?)
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
        persistence: Box::new(graft_driver::discovery::nvidia::setup::Untouched),
        rescan: Box::new(|| {}),
        mig,
        mps,
        domains: Default::default(),
    }
}
