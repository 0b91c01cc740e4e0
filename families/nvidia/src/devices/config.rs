//! The nvidia backend's settings.

use std::path::PathBuf;

use super::hook_edits::HookConfig;
use super::placement_order::PlacementOrder;
use crate::driver_files::Roots;
use crate::nvml::GpuSelection;

/// The backend's settings; paths as documented on each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaConfig {
    /// Where the host and the driver installation are.
    pub roots: Roots,
    /// libnvidia-ml.so.1 as a path inside the driver root; found by search when `None`.
    pub nvml_lib: Option<String>,
    /// The host's /proc as this process sees it.
    pub proc_root: PathBuf,
    /// The host's /sys as this process sees it.
    pub sys_root: PathBuf,
    /// The host's /dev as this process sees it.
    pub dev_root: PathBuf,
    /// Where graft-hook and the tools it runs live on the host.
    pub hook: HookConfig,
    /// Where the driver's prepared directories are kept (`<state>/nvidia/driver`, one path
    /// on the host and here); `None`: each driver file is mounted on its own.
    pub driver_copies: Option<PathBuf>,
    /// How many IMEX channels to offer when the node is in a fabric clique.
    pub imex_channels: u32,
    /// ComputeDomains are on: an IMEX channel is published with binding conditions, so that
    /// the scheduler binds its pod once the domain's IMEX daemon on the node is Ready.
    pub compute_domains: bool,
    /// Offer GPUs for VFIO passthrough.
    pub passthrough: bool,
    /// The MIG-enabled GPUs whose instances graft makes at prepare.
    pub dynamic_mig: GpuSelection,
    /// The GPUs (MIG off) shared through MPS.
    pub mps: GpuSelection,
    /// The GPUs, and the static MIG devices of GPUs, time-sliced among claims.
    pub time_slicing: GpuSelection,
    /// The replicas each of those is offered as.
    pub time_slicing_replicas: u32,
    /// The order dynamic-MIG placements are published in.
    pub placement_order: PlacementOrder,
}
