//! Why a device cannot be set up, or its setup undone ([`super::setup_port`]'s error):
//! each variant names the device and what the kernel, the driver or the configuration said.
//! What only one device family can fail at is that family's own type, carried as
//! [`SetupError::Family`]: the core shows its text and asks it only through
//! [`FamilyError`].

use std::path::PathBuf;
use std::time::Duration;

/// Why a device cannot be set up, or its setup undone.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The configuration asks for something this kind of device cannot do.
    #[error("device {device}: {reason}")]
    NotSupported {
        /// The device's name.
        device: String,
        /// What it cannot do.
        reason: &'static str,
    },
    /// A kernel interface file (sysfs, procfs) could not be read or written.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`read`, `write`).
        op: String,
        /// The file.
        path: PathBuf,
        /// The error the kernel gave.
        #[source]
        source: std::io::Error,
    },
    /// The kernel did not get there in time (a device still in use, a bind not showing).
    #[error("{what} after {after:?}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long it was awaited.
        after: Duration,
    },
    /// The PCI function is not where sysfs should show it.
    #[error("PCI function {pci} is not in {path}")]
    NoPciFunction {
        /// The function, as a PCI bus ID.
        pci: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The function has no IOMMU group, so VFIO cannot hand it out.
    #[error("{pci} has no IOMMU group")]
    NoIommuGroup {
        /// The function, as a PCI bus ID.
        pci: String,
    },
    /// A function of the passed-through function's IOMMU group cannot go along with it.
    #[error(
        "{pci} cannot be passed through: {peer}, in the same IOMMU group {group}, {reason}; \
         VFIO hands out whole groups"
    )]
    GroupPeer {
        /// The function to pass through.
        pci: String,
        /// The IOMMU group.
        group: u32,
        /// The function that cannot go along.
        peer: String,
        /// Why not.
        reason: String,
    },
    /// Another prepared claim holds a device on a function passthrough would take (or
    /// has taken it for its own passthrough).
    #[error(
        "PCI function {function} is held by claim {holder} through device {holder_device}, \
         and passthrough takes a GPU's whole IOMMU group; retried until that claim is gone"
    )]
    FunctionHeld {
        /// The function, as a PCI bus ID.
        function: String,
        /// `namespace/name (uid)`.
        holder: String,
        /// The holder's device on that function.
        holder_device: String,
    },
    /// Where a device node should be, something else is.
    #[error("{path} is not a character device")]
    NotCharDevice {
        /// Where the node should be.
        path: PathBuf,
    },
    /// A served entry is not what was published any more (gone, or now a symlink).
    #[error("device {device} cannot be served: {reason}")]
    EntryChanged {
        /// The device's name.
        device: String,
        /// What changed.
        reason: String,
    },
    /// A device's setup record cannot be made: its family's payload is not a JSON object
    /// with a `kind` (a family's bug).
    #[error("a {family} setup record cannot be written: {reason}")]
    Unwritable {
        /// The family (`unnamed` for a record written without its name).
        family: String,
        /// What was wrong.
        reason: String,
    },
    /// A checkpointed setup record its family cannot read (damaged, or written by a
    /// version of the family that this one does not know), so it cannot be undone.
    #[error("its {family} setup record of kind {kind} cannot be read: {reason}")]
    Unreadable {
        /// The family that tried.
        family: String,
        /// The record's kind.
        kind: String,
        /// What was wrong.
        reason: String,
    },
    /// A setup reached a node with no backend to run it.
    #[error("no backend on this node sets devices up")]
    NoBackend,
    /// A family's own reason, in its own words ([`FamilyError`]).
    #[error("{0}")]
    Family(Box<dyn FamilyError>),
}

/// A device family's own reason a setup failed: the core shows its text as it is and asks
/// it only what the core needs to know.
pub trait FamilyError: std::error::Error + Send + Sync + 'static {
    /// What a claim's author is told instead of the text, when the text may say anything
    /// about the node (a tool's output); the core adds where the rest is. `None`: the text
    /// may be shown.
    fn withheld(&self) -> Option<String> {
        None
    }
}

impl SetupError {
    /// The family's error, when this is one of type `E`.
    pub fn family<E: FamilyError>(&self) -> Option<&E> {
        match self {
            SetupError::Family(e) => {
                let e: &(dyn std::error::Error + 'static) = e.as_ref();
                e.downcast_ref()
            }
            _ => None,
        }
    }
}
