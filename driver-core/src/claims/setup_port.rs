//! Node-side work that some devices need while they are prepared, and its undo: a GPU
//! rebound to vfio-pci for passthrough, a GPU's time slice changed. The prepare path runs
//! `apply` after `PrepareStarted` is durable and before the record exists, and `undo`
//! before a record goes; the checkpoint keeps each [`Setup`], so a crash in between is
//! undone by the next unprepare or cleanup. Both must be idempotent.
//!
//! A [`Setup`] is its family's record, opaque to the core: what the core needs to know of
//! one (the claim it is for, whether it keeps another out, the PCI functions it uses) it
//! asks the family through [`DeviceSetup`].

use graft_record::ContainerEdits;

use crate::model::Allocated;
use crate::model::Device;
use crate::opaque::DeviceConfig;

pub use super::setup_error::SetupError;
pub use super::setup_record::Setup;

/// The PCI functions a setup uses while it is prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciUse {
    /// The functions, the device's own first.
    pub functions: Vec<String>,
    /// Taken from the host (passthrough, with the rest of its IOMMU group): no other device
    /// may use any of them meanwhile.
    pub passthrough: bool,
}

/// A device's edits with what its setup found at apply time: nodes and env of `add` replace
/// those of the same path or name, the rest go first (a MIG instance's capability nodes, a
/// VFIO group node).
pub fn with_setup_edits(base: ContainerEdits, add: ContainerEdits) -> ContainerEdits {
    let mut out = base;
    out.device_nodes
        .retain(|n| !add.device_nodes.iter().any(|a| a.path == n.path));
    let mut nodes = add.device_nodes;
    nodes.append(&mut out.device_nodes);
    out.device_nodes = nodes;
    out.env
        .retain(|e| !add.env.iter().any(|a| a.name == e.name));
    out.env.extend(add.env);
    out.mounts.extend(add.mounts);
    out.hooks.extend(add.hooks);
    out
}

/// The port through which the core has devices set up and undone; backends implement it.
pub trait DeviceSetup: Send + Sync {
    /// What preparing `device` with `config` for allocation `alloc` needs (a shared device's
    /// setup depends on the share allocated), or why it cannot be done. Called before
    /// anything is written.
    fn plan(
        &self,
        device: &Device,
        config: Option<&DeviceConfig>,
        alloc: &Allocated,
    ) -> Result<Option<Setup>, SetupError>;
    /// Does it. Returns edits to lay over the device's own ([`with_setup_edits`]) when only
    /// the setup can know them (a VFIO group node exists once the function is bound, a MIG
    /// instance's capability nodes once it is made). May take long (a
    /// GPU to be freed): callers run it on a blocking thread, outside any shared lock.
    fn apply(&self, setup: &Setup) -> Result<Option<ContainerEdits>, SetupError>;
    /// Undoes `setup`; nothing to do (already undone) is success.
    fn undo(&self, setup: &Setup) -> Result<(), SetupError>;
    /// `setup` as done for the claim `namespace`/`claim_uid`: families plan from the device
    /// alone, and a setup that must know its claim (its namespace, say) is given it here,
    /// before it is written. Unchanged by default.
    fn for_claim(
        &self,
        setup: Setup,
        namespace: &str,
        claim_uid: &str,
    ) -> Result<Setup, SetupError> {
        let _ = (namespace, claim_uid);
        Ok(setup)
    }
    /// Why `setup` cannot be prepared while another claim holds `held`, if it cannot. By
    /// default, nothing keeps it out.
    fn excludes(&self, setup: &Setup, held: &Setup) -> Option<SetupError> {
        let _ = (setup, held);
        None
    }
    /// The PCI functions `setup` uses: a rebound or reconfigured function, and those that
    /// passthrough takes from the host. `None` (the default) for a setup that acts inside
    /// a device, or one the family cannot read.
    fn pci(&self, setup: &Setup) -> Option<PciUse> {
        let _ = setup;
        None
    }
}

/// Nodes without such devices.
pub struct NoSetup;

impl DeviceSetup for NoSetup {
    fn plan(
        &self,
        device: &Device,
        config: Option<&DeviceConfig>,
        _: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        if config.is_some_and(|c| c.family.asks_sharing().is_some()) {
            return Err(SetupError::NotSupported {
                device: device.name.clone(),
                reason: "the configuration asks to share it, and no device family on this \
                         node shares this device",
            });
        }
        Ok(None)
    }

    fn apply(&self, _: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        Err(SetupError::NoBackend)
    }

    fn undo(&self, _: &Setup) -> Result<(), SetupError> {
        Err(SetupError::NoBackend)
    }
}
