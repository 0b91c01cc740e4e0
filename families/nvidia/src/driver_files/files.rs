//! The driver's user-space files of one version, each with the capability it belongs to.
//! Paths are kept as the container will see them (driver root stripped); a [`DriverFile`]
//! whose container path differs from its place in the driver root (a binary, a manifest
//! reached through a link) carries both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::capabilities::Capability;

/// A link by where it leads: (capability of its target, target as written, link).
pub type Link = (Capability, String, String);

/// One file to mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverFile {
    /// The capability whose containers get it.
    pub capability: Capability,
    /// Where it is, inside the driver root: `Roots::host_path` makes it a mount source.
    pub path: String,
    /// Where the container sees it.
    pub destination: String,
}

/// Files of one driver version. Every path is absolute and relative to the driver root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverFiles {
    /// The driver version, as NVML prints it.
    pub version: String,
    /// Directories holding libcuda or libnvidia-ml of this version.
    pub lib_dirs: Vec<String>,
    /// Every `*.so.<version>` in those directories and their `vdpau/`, and the driver's
    /// libraries versioned on their own (EGL platforms, legacy NVVM); mounted at their path.
    pub libraries: Vec<DriverFile>,
    /// Symlinks next to the libraries that lead to a compute or utility one: (target as
    /// written, link). Recreated in every GPU container.
    pub symlinks: Vec<(String, String)>,
    /// The same for the files of the other capabilities (`libGLX_nvidia.so.0`,
    /// `libglxserver_nvidia.so`), to recreate when the capability is asked for.
    pub optional_symlinks: BTreeMap<Capability, Vec<(String, String)>>,
    /// Found by `binaries::find`; each at `/usr/bin/<name>`.
    pub binaries: Vec<DriverFile>,
    /// Loader manifests and X modules (`config_files`).
    pub configs: Vec<DriverFile>,
    /// GSP firmware; always mounted.
    pub firmware: Vec<String>,
    /// The persistenced and fabricmanager sockets; always mounted.
    pub sockets: Vec<String>,
}

impl DriverFiles {
    /// The libraries, binaries and configs of one capability (not firmware nor sockets).
    pub fn files_of(&self, cap: Capability) -> impl Iterator<Item = &DriverFile> {
        self.libraries
            .iter()
            .chain(&self.binaries)
            .chain(&self.configs)
            .filter(move |f| f.capability == cap)
    }

    /// The capabilities this node's driver has files for.
    pub fn capabilities(&self) -> BTreeSet<Capability> {
        self.libraries
            .iter()
            .chain(&self.binaries)
            .chain(&self.configs)
            .map(|f| f.capability)
            .collect()
    }

    /// The binary `name` (`nvidia-smi`), when one of the running version was found.
    pub fn binary(&self, name: &str) -> Option<&DriverFile> {
        self.binaries
            .iter()
            .find(|b| Path::new(&b.destination).file_name() == Some(name.as_ref()))
    }
}
