//! The `nvidia` backend: full GPUs, static MIG devices and IMEX channels found through NVML,
//! each with the attributes a DeviceClass or CEL selector needs and the explicit container
//! edits (device nodes, driver files, hooks) that make CUDA and nvidia-smi work without CDI
//! or the NVIDIA container toolkit.
//!
//! - `gpu-<minor>`: a GPU whose MIG mode is off (a GPU with MIG on is only offered as its
//!   MIG devices);
//! - `gpu-<parent minor>-mig-<gi>-<ci>`: a MIG device the node's operator made (static
//!   MIG);
//! - on a GPU graft partitions itself (dynamic MIG, [`partitions`]): one
//!   `gpu-<minor>-mig-<profile>-<start>` per possible placement and the whole GPU, all
//!   consuming the GPU's counter set `gpu-<minor>-mig`;
//! - `imex-channel-<n>`: when the node's GPUs are registered in one NVLink fabric clique
//!   ([`imex`]);
//! - `vfio-<pci address>`: with passthrough on, every NVIDIA GPU function that has an IOMMU
//!   group, bound to vfio-pci when prepared (see [`setup`]).
//!
//! A GPU NVML cannot read, or whose devices cannot be built, is set aside without failing
//! the scan ([`unread`]).

pub mod backend;
pub mod binaries;
pub mod capabilities;
pub mod config_files;
pub mod driver_files;
pub mod dynamic_mig;
pub mod edits;
pub mod elf;
pub mod fields;
pub mod hook_edits;
pub mod imex;
pub mod in_root;
#[cfg(test)]
mod layouts;
pub mod ldcache;
pub mod libraries;
pub mod mig_nvml;
pub mod mount_roots;
pub mod mps;
pub mod nvml;
pub mod partitions;
mod per_gpu;
pub mod procfs;
pub mod selection;
pub mod setup;
pub mod unread;
pub mod vfio;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use super::{pcie_root, Attribute, Device, Discovery, Kind, PCIE_ROOT_ATTRIBUTE};
use crate::error::{DriverError, Result};
use driver_files::{DriverFiles, Roots};
use fields::{numa_node, semver};
use hook_edits::HookConfig;
use nvml::{FailedGpu, Gpu, Inventory};
use per_gpu::Common;
use unread::{GpuDevices, Unread};

/// The backend's settings; paths as documented on each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaConfig {
    pub roots: Roots,
    /// libnvidia-ml.so.1 as a path inside the driver root; found by search when `None`.
    pub nvml_lib: Option<String>,
    /// The host's /proc, /sys and /dev as this process sees them.
    pub proc_root: PathBuf,
    pub sys_root: PathBuf,
    pub dev_root: PathBuf,
    pub hook: HookConfig,
    /// How many IMEX channels to offer when the node is in a fabric clique.
    pub imex_channels: u32,
    /// Offer GPUs for VFIO passthrough.
    pub passthrough: bool,
    /// The MIG-enabled GPUs whose instances graft makes at prepare.
    pub dynamic_mig: selection::GpuSelection,
    /// The GPUs (MIG off) shared through MPS.
    pub mps: selection::GpuSelection,
}

pub struct NvidiaDiscovery {
    config: NvidiaConfig,
    /// The nvidia-smi the last scan chose, as a path inside the driver root, for the
    /// time-slicing setup (a layout's `/usr/bin/nvidia-smi` may be a wrapper script).
    smi: Arc<RwLock<String>>,
    /// The MIG instances graft made (dynamic MIG), shared with the setup that makes them.
    ledger: dynamic_mig::MigLedger,
    /// GPUs a scan could not read.
    unread: Unread,
}

/// What a scan made of an inventory, before [`Unread`] settles the GPUs it could not read.
pub struct Built {
    pub gpus: Vec<GpuDevices>,
    /// Not of one GPU: IMEX channels, passthrough functions.
    pub node: Vec<Device>,
    /// Those NVML could not read, and those whose devices could not be built.
    pub failed: Vec<FailedGpu>,
}

fn fail(reason: impl Into<String>) -> DriverError {
    DriverError::Discovery {
        backend: "nvidia",
        reason: reason.into(),
    }
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
            ledger: dynamic_mig::MigLedger::default(),
            unread: Unread::default(),
        }
    }

    /// libnvidia-ml.so.1 as this process can load it.
    pub fn nvml_path(&self) -> Result<PathBuf> {
        let roots = &self.config.roots;
        if let Some(p) = &self.config.nvml_lib {
            return Ok(roots.driver_visible(p));
        }
        let mut tried = Vec::new();
        for dir in [
            "/usr/lib64",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/lib64",
            "/lib/x86_64-linux-gnu",
            "/lib/aarch64-linux-gnu",
            "/usr/lib",
        ] {
            let p = roots.driver_visible(&format!("{dir}/libnvidia-ml.so.1"));
            if p.exists() {
                return Ok(p);
            }
            tried.push(p);
        }
        if let Ok(data) = std::fs::read(roots.driver_visible("/etc/ld.so.cache")) {
            if let Some(e) = ldcache::parse(&data)
                .unwrap_or_default()
                .into_iter()
                .find(|e| e.name == "libnvidia-ml.so.1")
            {
                return Ok(roots.driver_visible(&e.path));
            }
        }
        Err(fail(format!(
            "libnvidia-ml.so.1 not found under driver root {} (tried {} and ld.so.cache); \
             set --nvidia-nvml-lib",
            roots.driver.display(),
            tried
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }

    /// Shares the record of graft's own MIG instances with the setup that makes them.
    pub fn with_ledger(mut self, ledger: dynamic_mig::MigLedger) -> Self {
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
        let majors = procfs::read_char_majors(&c.proc_root)?;
        let files: DriverFiles = driver_files::find(&c.roots, &inv.driver_version)?;
        if let (Some(smi), Ok(mut cur)) = (files.binary("nvidia-smi"), self.smi.write()) {
            *cur = smi.path.clone();
        }
        let has_modeset = c.dev_root.join("nvidia-modeset").exists();
        mount_roots::warn_outside(&c.roots, &files, &mount_roots::extra_roots_from_env());
        let common = Common {
            edits: edits::common(&c.roots, &files, &majors, has_modeset, &c.hook),
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
        for g in &inv.gpus {
            match self.gpu_devices(g, &common) {
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
        built
            .node
            .extend(imex::channels(inv, &common.majors, c.imex_channels));
        if c.passthrough {
            built.node.extend(self.vfio_devices(inv));
        }
        Ok(built)
    }

    /// NVIDIA functions with an IOMMU group; the GPU's NVML data when it is bound to nvidia.
    fn vfio_devices(&self, inv: &Inventory) -> Vec<Device> {
        let c = &self.config;
        let vfio = vfio::Vfio {
            sys: c.sys_root.clone(),
            proc: c.proc_root.clone(),
            timeout: std::time::Duration::ZERO,
        };
        vfio.functions()
            .into_iter()
            .filter_map(|f| {
                let group = f.iommu_group?;
                let mut attributes = BTreeMap::new();
                attributes.insert("type".into(), Attribute::String("vfio".into()));
                attributes.insert("pciBusID".into(), Attribute::String(f.bdf.clone()));
                attributes.insert("iommuGroup".into(), Attribute::Int(group.into()));
                attributes.insert("pciDeviceID".into(), Attribute::String(f.device_id.clone()));
                // Passed through with it (README: VFIO passthrough).
                let peers = vfio::group::peers_attribute(&f.group_peers);
                if !peers.is_empty() {
                    attributes.insert("iommuGroupPeers".into(), Attribute::String(peers));
                }
                let dir = c.sys_root.join("bus/pci/devices").join(&f.bdf);
                if let Some(root) = pcie_root(&c.sys_root, &dir) {
                    attributes.insert(PCIE_ROOT_ATTRIBUTE.into(), Attribute::String(root));
                }
                if let Some(numa) = numa_node(&dir) {
                    attributes.insert("numaNode".into(), Attribute::Int(numa));
                }
                if let Some(g) = inv.gpus.iter().find(|g| g.pci_bus_id == f.bdf) {
                    attributes.insert("uuid".into(), Attribute::String(g.uuid.clone()));
                    if let Some(name) = &g.name {
                        attributes.insert("productName".into(), Attribute::String(name.clone()));
                    }
                }
                Some(Device {
                    kind: Kind::Vfio,
                    name: format!("vfio-{}", f.bdf.replace([':', '.'], "-")),
                    attributes,
                    capacity: BTreeMap::new(),
                    // The group node appears when vfio-pci binds: the setup adds it.
                    edits: graft_record::ContainerEdits {
                        device_nodes: vec![graft_record::DeviceNode::char(
                            "/dev/vfio/vfio",
                            10,
                            196,
                            0o666,
                        )],
                        ..Default::default()
                    },
                    optional_edits: Default::default(),
                    consumes: None,
                    shared: None,
                })
            })
            .collect()
    }
}

/// A whole GPU offered for sharing through MPS: several claims at once, each consuming a
/// compute percentage and an amount of memory (DRA consumable capacity).
fn mps_shared(d: &mut Device, g: &Gpu) {
    d.attributes
        .insert("sharing".into(), Attribute::String("mps".into()));
    d.capacity.insert("compute".into(), "100".into());
    let mut policies = BTreeMap::new();
    policies.insert(
        "compute".to_string(),
        super::CapacityPolicy {
            default: "100".into(),
            min: "1".into(),
            max: "100".into(),
            step: "1".into(),
        },
    );
    if let Some(bytes) = g.memory_bytes {
        let all = fields::mebibytes(bytes);
        policies.insert(
            "memory".to_string(),
            super::CapacityPolicy {
                default: all.clone(),
                min: "1Mi".into(),
                max: all,
                step: "1Mi".into(),
            },
        );
    }
    d.shared = Some(policies);
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

    fn unavailable(&self) -> Vec<super::Unavailable> {
        self.unread.unavailable()
    }
}
