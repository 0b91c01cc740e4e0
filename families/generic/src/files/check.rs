//! Prepare's second look at a served entry: between publishing and prepare the entry may
//! have gone, or been replaced by a symlink or a device node. Such a claim is refused
//! rather than given whatever the path now leads to. graft-nri looks a third time, when
//! the container is created.

use std::path::PathBuf;
use std::sync::Arc;

use graft_record::nofollow::open_served;
use graft_record::ContainerEdits;

use graft_driver_core::claims::setup_port::{DeviceSetup, PciUse, Setup, SetupError};
use graft_driver_core::model::{Allocated, Device, Kind};
use graft_driver_core::opaque::DeviceConfig;

/// The node's device setup, with served entries checked before the rest is planned.
pub struct ServedEntries {
    /// The setup for everything else.
    pub inner: Arc<dyn DeviceSetup>,
    /// Where the host's root is visible here.
    pub host_root: PathBuf,
}

impl DeviceSetup for ServedEntries {
    fn plan(
        &self,
        device: &Device,
        config: Option<&DeviceConfig>,
        alloc: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        if let Kind::Entry(expected) = device.kind {
            let changed = |reason: String| SetupError::EntryChanged {
                device: device.name.clone(),
                reason,
            };
            let Some(mount) = device.edits.mounts.first() else {
                return Err(changed("it has no mount".into()));
            };
            let source = mount.source.as_str();
            let rw = mount.options.iter().any(|o| o == "rw");
            match open_served(&self.host_root, source, rw) {
                Ok(e) if e.kind == expected => {}
                Ok(e) => {
                    return Err(changed(format!(
                        "{source} was published as a {expected} and is now a {}",
                        e.kind
                    )))
                }
                Err(e) => return Err(changed(e.to_string())),
            }
        }
        self.inner.plan(device, config, alloc)
    }

    fn apply(&self, setup: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        self.inner.apply(setup)
    }

    fn undo(&self, setup: &Setup) -> Result<(), SetupError> {
        self.inner.undo(setup)
    }

    fn for_claim(
        &self,
        setup: Setup,
        namespace: &str,
        claim_uid: &str,
    ) -> Result<Setup, SetupError> {
        self.inner.for_claim(setup, namespace, claim_uid)
    }

    fn excludes(&self, setup: &Setup, held: &Setup) -> Option<SetupError> {
        self.inner.excludes(setup, held)
    }

    fn pci(&self, setup: &Setup) -> Option<PciUse> {
        self.inner.pci(setup)
    }
}
