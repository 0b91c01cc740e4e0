//! Why a device cannot be set up, or its setup undone ([`super::setup_port`]'s error):
//! each variant names the device and what the kernel, the driver or the configuration said.

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
    /// The kernel did not get there in time (a GPU still in use, a bind not showing).
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
    /// Another driver than the two graft switches between holds the function.
    #[error("{pci} is bound to {driver}, neither nvidia nor vfio-pci; leaving it alone")]
    ForeignDriver {
        /// The function, as a PCI bus ID.
        pci: String,
        /// The driver bound to it.
        driver: String,
    },
    /// The function has no IOMMU group, so VFIO cannot hand it out.
    #[error("{pci} has no IOMMU group")]
    NoIommuGroup {
        /// The function, as a PCI bus ID.
        pci: String,
    },
    /// A function of the GPU's IOMMU group cannot be passed through with it.
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
    /// Persistence mode could not be read or set.
    #[error("persistence mode of GPU {pci}: {reason}")]
    Persistence {
        /// The GPU, as a PCI bus ID.
        pci: String,
        /// What failed.
        reason: String,
    },
    /// Where a device node should be, something else is.
    #[error("{path} is not a character device")]
    NotCharDevice {
        /// Where the node should be.
        path: PathBuf,
    },
    /// A driver tool (nvidia-smi) failed.
    #[error("{tool} {args} failed ({status}): {stderr}")]
    Tool {
        /// The program.
        tool: String,
        /// Its arguments, joined.
        args: String,
        /// How it exited.
        status: String,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// A served entry is not what was published any more (gone, or now a symlink).
    #[error("device {device} cannot be served: {reason}")]
    EntryChanged {
        /// The device's name.
        device: String,
        /// What changed.
        reason: String,
    },
    /// A MIG instance could not be made or removed.
    #[error("{reason}")]
    Mig {
        /// What failed.
        reason: String,
    },
    /// The GPU's MPS control daemon could not be started or stopped, or a share is invalid.
    #[error("MPS: {reason}")]
    Mps {
        /// What failed.
        reason: String,
    },
    /// A ComputeDomain's channel cannot be handed out (yet): the kubelet retries.
    #[error("ComputeDomain {domain}: {reason}")]
    ComputeDomain {
        /// `namespace/name`.
        domain: String,
        /// Why not.
        reason: String,
    },
    /// A setup reached a node with no backend to run it.
    #[error("no backend on this node sets devices up")]
    NoBackend,
}
