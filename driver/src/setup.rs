//! Node-side work that some devices need while they are prepared, and its undo: a GPU
//! rebound to vfio-pci for passthrough, a GPU's time slice changed. The prepare path runs
//! `apply` after `PrepareStarted` is durable and before the record exists, and `undo`
//! before a record goes; the checkpoint keeps each [`Setup`], so a crash in between is
//! undone by the next unprepare or cleanup. Both must be idempotent.

use graft_record::ContainerEdits;
use serde::{Deserialize, Serialize};

use crate::discovery::Device;
use crate::opaque::DeviceConfig;

/// What was (or is about to be) done to a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Setup {
    /// The PCI function was rebound from nvidia to vfio-pci.
    #[serde(rename_all = "camelCase")]
    Vfio { pci_bus_id: String },
    /// The GPU's compute time slice was set (0 Default, 1 Short, 2 Medium, 3 Long).
    #[serde(rename_all = "camelCase")]
    TimeSlice { pci_bus_id: String, interval: u32 },
}

impl Setup {
    pub fn pci_bus_id(&self) -> &str {
        match self {
            Setup::Vfio { pci_bus_id } | Setup::TimeSlice { pci_bus_id, .. } => pci_bus_id,
        }
    }
}

pub trait DeviceSetup: Send + Sync {
    /// What preparing `device` with `config` needs, or why it cannot be done. Called
    /// before anything is written.
    fn plan(&self, device: &Device, config: Option<&DeviceConfig>)
        -> Result<Option<Setup>, String>;
    /// Does it. Returns edits that replace the device's own when only the setup can
    /// know them (a VFIO group node exists once the function is bound).
    fn apply(&self, setup: &Setup) -> Result<Option<ContainerEdits>, String>;
    fn undo(&self, setup: &Setup) -> Result<(), String>;
}

/// Nodes without such devices.
pub struct NoSetup;

impl DeviceSetup for NoSetup {
    fn plan(
        &self,
        device: &Device,
        config: Option<&DeviceConfig>,
    ) -> Result<Option<Setup>, String> {
        if config.is_some_and(|c| c.sharing.is_some()) {
            return Err(format!(
                "device {}: sharing settings apply to NVIDIA GPUs only",
                device.name
            ));
        }
        Ok(None)
    }

    fn apply(&self, _: &Setup) -> Result<Option<ContainerEdits>, String> {
        Err("no backend on this node sets devices up".into())
    }

    fn undo(&self, _: &Setup) -> Result<(), String> {
        Err("no backend on this node sets devices up".into())
    }
}
