//! The nvidia backend's node-side setup and what it holds.

use std::path::PathBuf;

use super::dynamic_mig::MigManager;
use super::mps::MpsManager;
use super::persistence::PersistenceMode;
use super::smi::Smi;
use super::vfio::Vfio;
use crate::domain::GateSlot;

/// The nvidia backend's node-side setup, one per node.
pub struct NvidiaSetup {
    /// Moves functions between nvidia and vfio-pci.
    pub vfio: Vfio,
    /// The host's /dev as this process sees it.
    pub dev_root: PathBuf,
    /// Runs the driver root's nvidia-smi (time-slicing, persistence mode off).
    pub smi: Box<dyn Smi>,
    /// Reads and restores GPUs' persistence mode around passthrough.
    pub persistence: Box<dyn PersistenceMode>,
    /// Asks for a rescan: a GPU back on nvidia may come back with another minor.
    pub rescan: Box<dyn Fn() + Send + Sync>,
    /// Dynamic MIG: makes and removes instances; `None` when no GPU is partitioned by graft.
    pub mig: Option<MigManager>,
    /// MPS: marks the shares graft-mps serves; `None` when no GPU is shared so.
    pub mps: Option<MpsManager>,
    /// ComputeDomains: the gate a workload channel passes (set once the API client is).
    pub domains: GateSlot,
}
