//! [`NvidiaDiscovery`]: one scan reads the NVML inventory, finds the driver's files, and
//! turns each GPU into its devices; the node's own devices (IMEX channels, passthrough
//! functions) are added, and the GPUs it could not read are settled by [`Unread`].

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use super::common::{fail, Common};
use super::config::NvidiaConfig;
use super::edits;
use super::fields::semver;
use super::imex;
use super::ledger::MigLedger;
use super::passthrough;
use super::per_gpu;
use super::prepared::prepare;
use super::unread::{GpuDevices, Unread};
use crate::driver_files::{self, DriverFiles};
use crate::nvml::{self, FailedGpu, Inventory};
use graft_driver_core::backend::scan::{Discovery, Unavailable};
use graft_driver_core::error::Result;
use graft_driver_core::model::Device;

/// The nvidia backend's discovery.
pub struct NvidiaDiscovery {
    config: NvidiaConfig,
    /// The nvidia-smi the last scan chose, as a path inside the driver root, for the
    /// time-slicing setup (a layout's `/usr/bin/nvidia-smi` may be a wrapper script).
    smi: Arc<RwLock<String>>,
    /// The MIG instances graft made (dynamic MIG), shared with the setup that makes them.
    ledger: MigLedger,
    /// GPUs a scan could not read.
    unread: Unread,
}

/// What a scan made of an inventory, before `Unread` settles the GPUs it could not read.
pub struct Built {
    /// Each GPU read, with its devices.
    pub gpus: Vec<GpuDevices>,
    /// Not of one GPU: IMEX channels, passthrough functions.
    pub node: Vec<Device>,
    /// Those NVML could not read, and those whose devices could not be built.
    pub failed: Vec<FailedGpu>,
}

impl NvidiaDiscovery {
    /// Checks that NVML is there, so that a misconfigured node fails at start.
    pub fn new(config: NvidiaConfig) -> Result<Self> {
        let d = Self::unchecked(config);
        d.nvml_path()?;
        Ok(d)
    }

    /// Without the check: NVML is looked for at each scan, which fails until it is there
    /// (graft-driver reports the backend failing rather than crash-looping).
    pub fn unchecked(config: NvidiaConfig) -> Self {
        NvidiaDiscovery {
            config,
            smi: Arc::new(RwLock::new("/usr/bin/nvidia-smi".into())),
            ledger: MigLedger::default(),
            unread: Unread::default(),
        }
    }

    /// libnvidia-ml.so.1 as this process can load it.
    pub fn nvml_path(&self) -> Result<PathBuf> {
        driver_files::nvml_library(&self.config.roots, self.config.nvml_lib.as_deref())
    }

    /// Shares the record of graft's own MIG instances with the setup that makes them.
    pub fn with_ledger(mut self, ledger: MigLedger) -> Self {
        self.ledger = ledger;
        self
    }

    /// Where the chosen nvidia-smi is (inside the driver root), kept current by each scan.
    pub fn smi_path(&self) -> Arc<RwLock<String>> {
        Arc::clone(&self.smi)
    }

    /// Turns an inventory into devices, each GPU's apart. Separate from NVML so that tests
    /// can feed it.
    pub fn devices_from(&self, inv: &Inventory) -> Result<Built> {
        let c = &self.config;
        let majors = driver_files::read_char_majors(&c.proc_root)?;
        let files: DriverFiles = driver_files::find(&c.roots, &inv.driver_version)?;
        if let (Some(smi), Ok(mut cur)) = (files.binary("nvidia-smi"), self.smi.write()) {
            *cur = smi.path.clone();
        }
        let has_modeset = c.dev_root.join("nvidia-modeset").exists();
        driver_files::warn_outside(&c.roots, &files, &driver_files::extra_roots_from_env());
        let prepared = c.driver_copies.as_deref().and_then(|base| {
            prepare(&c.roots, &files, base)
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "cannot prepare the driver's files in one directory; mounting each on its own")
                })
                .ok()
        });
        let common = Common {
            edits: edits::common(
                &c.roots,
                &files,
                &majors,
                has_modeset,
                &c.hook,
                prepared.as_ref(),
            ),
            optional: edits::optional(&c.roots, &files),
            driver_version: semver(&inv.driver_version)
                .ok_or_else(|| fail(format!("driver version {:?}", inv.driver_version)))?,
            cuda_version: inv
                .cuda_driver_version
                .map(|v| format!("{}.{}.0", v / 1000, (v % 1000) / 10)),
            majors,
        };
        let mut built = Built {
            gpus: Vec::new(),
            node: Vec::new(),
            failed: inv.failed.clone(),
        };
        let islands: Vec<_> = inv.gpus.iter().map(|g| g.nvlink_island.as_ref()).collect();
        for g in crate::nvml::island_order(&islands)
            .into_iter()
            .map(|i| &inv.gpus[i])
        {
            match per_gpu::gpu_devices(c, &self.ledger, g, &common) {
                Ok(devices) => built.gpus.push(GpuDevices {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    devices,
                }),
                Err(e) => built.failed.push(FailedGpu {
                    index: g.index,
                    uuid: Some(g.uuid.clone()),
                    error: e.to_string(),
                    lost: false,
                }),
            }
        }
        built.node.extend(imex::channels(
            inv,
            &common.majors,
            c.imex_channels,
            c.compute_domains,
        ));
        if c.passthrough {
            built.node.extend(passthrough::devices(&c.sys_root, inv));
        }
        Ok(built)
    }
}

impl Discovery for NvidiaDiscovery {
    fn name(&self) -> &'static str {
        "nvidia"
    }

    fn discover(&self) -> Result<Vec<Device>> {
        let nvml = self.nvml_path()?;
        // NVML's own libcuda, beside it (the driver installs them together).
        let libcuda = nvml.with_file_name("libcuda.so.1");
        let inv = nvml::read_inventory(
            &nvml,
            libcuda.exists().then_some(libcuda.as_path()),
            &self.config.dynamic_mig,
        )?;
        let built = self.devices_from(&inv)?;
        let mut devices = self.unread.settle(built.gpus, &built.failed);
        devices.extend(built.node);
        Ok(devices)
    }

    fn unavailable(&self) -> Vec<Unavailable> {
        self.unread.unavailable()
    }
}
