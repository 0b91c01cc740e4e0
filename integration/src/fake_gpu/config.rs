//! graft-driver's nvidia family configured for the fake node in-process (no driver
//! process): what the benchmarks and the fleet's shapes run discovery with.

use std::path::Path;

use graft_driver::discovery::nvidia::devices::HookConfig;
use graft_driver::discovery::nvidia::driver_files::Roots;
use graft_driver::discovery::nvidia::nvml::GpuSelection;
use graft_driver::discovery::nvidia::NvidiaConfig;

use super::FakeNode;

impl FakeNode {
    /// The nvidia family's configuration for this node: graft-hook at its default path, the
    /// per-container params copies under `params_copy`, dynamic MIG on the GPUs
    /// `dynamic_mig` selects ("" for none), and `imex` IMEX channels with ComputeDomains on
    /// when there are any.
    pub fn nvidia_config(
        &self,
        params_copy: &Path,
        dynamic_mig: &str,
        imex: u32,
    ) -> anyhow::Result<NvidiaConfig> {
        Ok(NvidiaConfig {
            roots: Roots {
                host: "/".into(),
                driver: self.host.clone(),
            },
            nvml_lib: None,
            proc_root: self.proc.clone(),
            sys_root: self.sys.clone(),
            dev_root: self.dev.clone(),
            hook: HookConfig {
                path: graft_record::policy::DEFAULT_HOOK_PATH.into(),
                ldconfig: "/sbin/ldconfig".into(),
                params_copy: params_copy.to_string_lossy().into_owned(),
            },
            driver_copies: None,
            imex_channels: imex,
            compute_domains: imex > 0,
            passthrough: false,
            dynamic_mig: GpuSelection::parse(dynamic_mig).map_err(anyhow::Error::msg)?,
            mps: GpuSelection::None,
            time_slicing: GpuSelection::None,
            time_slicing_replicas: 4,
            placement_order: Default::default(),
        })
    }
}
