//! Device discovery: every backend turns what the node has into [`Device`]s, each with the
//! attributes a DeviceClass or CEL selector matches on and the container edits that make
//! it usable. Backends share one trait so the slice publisher and the prepare path do not
//! care where a device came from.
//!
//! A new device family touches these places, and nothing else:
//! 1. A folder `discovery/<family>/`: its [`Discovery`], and in `backend.rs` its
//!    [`crate::backend::Backend`] (discovery, setup route, start-up work, long-running
//!    tasks) with its flags as a `clap::Args` struct if it has any.
//! 2. [`crate::families::Family`]: a variant, its name and its arm in `Family::open` (and
//!    its flags in `families::Flags`).
//! 3. [`Kind`]: the kinds of its devices (the compiler then asks for their metrics class).
//! 4. Node-side work that must survive a crash: a [`crate::setup::Setup`] variant (the
//!    checkpoint schema; see the note there), named by its route's `setups`.
//! 5. The chart: its DeviceClass, and its name in `backends` (`graft.discovery`).

pub mod char;
pub mod config;
pub mod files;
pub mod inotify;
pub mod inventory;
pub mod nvidia;
pub mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use graft_record::ContainerEdits;

use crate::error::Result;

/// Standard attribute for the PCIe root complex a device hangs off.
pub const PCIE_ROOT_ATTRIBUTE: &str = "resource.kubernetes.io/pcieRoot";

/// A ResourceSlice device attribute value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Attribute {
    Bool(bool),
    Int(i64),
    String(String),
    /// A semantic version (semver 2.0.0).
    Version(String),
}

/// What kind of device it is: what setups and configuration apply to it. (The `type`
/// attribute says the same to DeviceClass selectors; code asks this instead.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A device node from the char backend's list.
    Char,
    /// A whole NVIDIA GPU.
    Gpu,
    /// A MIG device of an NVIDIA GPU.
    Mig,
    /// An NVIDIA IMEX channel.
    ImexChannel,
    /// An NVIDIA GPU's PCI function for VFIO passthrough.
    Vfio,
    /// An entry of a served directory (the files backend), of this type.
    Entry(graft_record::nofollow::EntryType),
}

impl Kind {
    /// NVIDIA GPUs and MIG devices: what driver capabilities and sharing apply to.
    pub fn is_gpu(self) -> bool {
        matches!(self, Kind::Gpu | Kind::Mig)
    }
}

/// One device this node offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// DNS label, unique in the node's pool.
    pub name: String,
    pub kind: Kind,
    pub attributes: BTreeMap<String, Attribute>,
    /// Capacity name to Kubernetes quantity.
    pub capacity: BTreeMap<String, String>,
    /// What a container that is allocated this device receives.
    pub edits: ContainerEdits,
    /// Edits added only when the claim's configuration asks for them by name (the NVIDIA
    /// driver capabilities beyond compute and utility: `graphics`, `video`, `display`).
    pub optional_edits: BTreeMap<String, ContainerEdits>,
    /// Counters it takes from a counter set of the pool while allocated (a partitionable
    /// device: a dynamic MIG placement); `None` for devices that stand alone.
    pub consumes: Option<Consumption>,
    /// Set when several claims may be allocated the device at once, each consuming part of
    /// its capacity (DRA consumable capacity: a GPU shared through MPS): how much of each
    /// capacity a request may take.
    pub shared: Option<BTreeMap<String, CapacityPolicy>>,
}

/// How a request consumes one capacity of a shared device (quantities as the API writes
/// them): `default` when the request names none, otherwise rounded up to `min + n * step`
/// and at most `max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityPolicy {
    pub default: String,
    pub min: String,
    pub max: String,
    pub step: String,
}

/// A partitionable device's use of a shared counter set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumption {
    /// The counter set: a DNS label, unique in the pool.
    pub set: String,
    /// What the set holds in all; the same on every device that names the set.
    pub totals: BTreeMap<String, i64>,
    /// What this device takes from it.
    pub counters: BTreeMap<String, i64>,
}

impl Device {
    /// A device with nothing but its name and kind yet.
    pub fn new(name: impl Into<String>, kind: Kind) -> Self {
        Device {
            name: name.into(),
            kind,
            attributes: BTreeMap::new(),
            capacity: BTreeMap::new(),
            edits: ContainerEdits::default(),
            optional_edits: BTreeMap::new(),
            consumes: None,
            shared: None,
        }
    }

    /// A string attribute's value.
    pub fn string_attribute(&self, key: &str) -> Option<&str> {
        match self.attributes.get(key) {
            Some(Attribute::String(s)) => Some(s),
            _ => None,
        }
    }

    /// An integer attribute's value.
    pub fn int_attribute(&self, key: &str) -> Option<i64> {
        match self.attributes.get(key) {
            Some(Attribute::Int(i)) => Some(*i),
            _ => None,
        }
    }
}

/// A part of the node a backend could not offer as it should at its last scan (a GPU NVML
/// cannot read), reported once when it appears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// Stable while it lasts: the same part on the next scan has the same key.
    pub key: String,
    /// The Event reason, e.g. `GpuUnavailable`.
    pub reason: &'static str,
    /// One line for people: what, why, and what graft does about it.
    pub message: String,
}

/// A discovery backend.
pub trait Discovery: Send + Sync {
    /// Short backend name for logs and errors.
    fn name(&self) -> &'static str;
    /// The devices present now. Called at start and on every rescan. An error means the
    /// whole scan failed: the backend's last devices stay published (see [`inventory`]).
    fn discover(&self) -> Result<Vec<Device>>;
    /// Paths whose changes should trigger a rescan (device directories, config files).
    fn watch_paths(&self) -> Vec<PathBuf> {
        Vec::new()
    }
    /// What the last [`Discovery::discover`] could not offer, though the scan went on.
    fn unavailable(&self) -> Vec<Unavailable> {
        Vec::new()
    }
}

/// The `pci<domain>:<bus>` root of the PCI device behind a sysfs device link, if any:
/// the first path component under `<sysfs>/devices` of the resolved link.
pub fn pcie_root(sysfs: &Path, device_link: &Path) -> Option<String> {
    let resolved = std::fs::canonicalize(device_link).ok()?;
    let devices = std::fs::canonicalize(sysfs.join("devices")).ok()?;
    let rest = resolved.strip_prefix(&devices).ok()?;
    let first = rest.components().next()?.as_os_str().to_str()?;
    first.starts_with("pci").then(|| first.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcie_root_from_a_sysfs_tree() {
        let sys = tempfile::tempdir().unwrap();
        let dev = sys
            .path()
            .join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/tty/ttyUSB0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(sys.path().join("devices/virtual/misc/fuse")).unwrap();
        std::fs::create_dir_all(sys.path().join("dev/char")).unwrap();
        std::os::unix::fs::symlink(&dev, sys.path().join("dev/char/188:0")).unwrap();
        std::os::unix::fs::symlink(
            sys.path().join("devices/virtual/misc/fuse"),
            sys.path().join("dev/char/10:229"),
        )
        .unwrap();
        let root = |link: &str| pcie_root(sys.path(), &sys.path().join(link));
        assert_eq!(root("dev/char/188:0").as_deref(), Some("pci0000:3a"));
        assert_eq!(root("dev/char/10:229"), None);
        assert_eq!(root("dev/char/1:3"), None);
    }
}
