//! The render family's discovery: one device per DRM render node the kernel lists in
//! `<sysfs>/class/drm/renderD<N>`, offered only when `<dev>/dri/renderD<N>` is a character
//! device with the number sysfs gives.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use graft_record::{validate_edits, ContainerEdits, DeviceKind, DeviceNode};
use nix::sys::stat::{major, minor};

use graft_api::attributes as attr;
use graft_driver_core::backend::scan::{Discovery, Unavailable};
use graft_driver_core::discovery::pcie::pcie_root;
use graft_driver_core::error::Result;
use graft_driver_core::limits::{self, LimitError};
use graft_driver_core::model::{Attribute, Device, Kind, PCIE_ROOT_ATTRIBUTE};

/// The value of every render device's `type` attribute (the `render.graft.dev` class).
pub const TYPE: &str = graft_api::types::RENDER;

/// sysfs attribute files are a page at most; anything longer is not what the kernel wrote.
const MAX_SYSFS_FILE: u64 = 4096;

/// Why a render node sysfs lists is not offered.
#[derive(Debug, thiserror::Error)]
pub enum NotOffered {
    /// Its sysfs entry has no readable `major:minor`.
    #[error("sysfs gives no device number")]
    NoNumber,
    /// Its node in /dev cannot be looked at (missing, most often).
    #[error("{path}: {source}")]
    Node {
        /// The node's host path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Its node in /dev is a symlink, a file, or another kind of node.
    #[error("{path} is not a character device")]
    NotChar {
        /// The node's host path.
        path: String,
    },
    /// Its node in /dev has another device number than sysfs gives.
    #[error("{path} is {found}, sysfs says {want}")]
    Swapped {
        /// The node's host path.
        path: String,
        /// `major:minor` of the node.
        found: String,
        /// `major:minor` sysfs gives.
        want: String,
    },
    /// A name or attribute the API would refuse.
    #[error("{what}: {source}")]
    Limit {
        /// Which name or attribute.
        what: String,
        /// The limit it breaks.
        source: LimitError,
    },
    /// Edits graft-nri's policy would refuse.
    #[error(transparent)]
    Edits(#[from] graft_record::InvalidRecord),
}

/// The render nodes of one node.
pub struct RenderDiscovery {
    /// The host's /sys as seen here.
    sysfs: PathBuf,
    /// The host's /dev as seen here.
    dev: PathBuf,
    /// What the last scan could not offer.
    unavailable: Mutex<Vec<Unavailable>>,
}

impl RenderDiscovery {
    /// Render nodes listed below `sysfs` whose nodes are in `dev`.
    pub fn new(sysfs: PathBuf, dev: PathBuf) -> Self {
        RenderDiscovery {
            sysfs,
            dev,
            unavailable: Mutex::new(Vec::new()),
        }
    }

    fn class_dir(&self) -> PathBuf {
        self.sysfs.join("class/drm")
    }

    /// The device for sysfs entry `entry` (`renderD<N>`), or why it is not offered.
    fn device(&self, entry: &str) -> std::result::Result<Device, NotOffered> {
        let sys = self.class_dir().join(entry);
        let (want_major, want_minor) = read_small(&sys.join("dev"))
            .and_then(|n| parse_dev(&n))
            .ok_or(NotOffered::NoNumber)?;
        let host_path = format!("/dev/dri/{entry}");
        let seen = self.dev.join("dri").join(entry);
        let meta = std::fs::symlink_metadata(&seen).map_err(|source| NotOffered::Node {
            path: host_path.clone(),
            source,
        })?;
        if !meta.file_type().is_char_device() {
            return Err(NotOffered::NotChar { path: host_path });
        }
        let (maj, min) = (major(meta.rdev()), minor(meta.rdev()));
        if (maj, min) != (want_major, want_minor) {
            return Err(NotOffered::Swapped {
                path: host_path,
                found: format!("{maj}:{min}"),
                want: format!("{want_major}:{want_minor}"),
            });
        }
        let (maj, min) = (
            i64::try_from(maj).unwrap_or(i64::MAX),
            i64::try_from(min).unwrap_or(i64::MAX),
        );

        let pci = pci_address(&sys.join("device"));
        let name = match &pci {
            Some(bdf) => limits::label_from(&format!("render-{bdf}")),
            None => format!("render-{min}"),
        };
        limits::check_device_name(&name).map_err(|source| NotOffered::Limit {
            what: format!("name {name:?}"),
            source,
        })?;

        let mut attributes = BTreeMap::from([
            (attr::TYPE.to_string(), Attribute::String(TYPE.into())),
            (attr::PATH.to_string(), Attribute::String(host_path.clone())),
            (attr::MAJOR.to_string(), Attribute::Int(maj)),
            (attr::MINOR.to_string(), Attribute::Int(min)),
        ]);
        let device = sys.join("device");
        for (file, key) in [("vendor", attr::VENDOR_ID), ("device", attr::DEVICE_ID)] {
            if let Some(v) = read_small(&device.join(file)).filter(|v| is_hex_id(v)) {
                attributes.insert(key.into(), Attribute::String(v));
            }
        }
        if let Some(driver) = link_name(&device.join("driver")) {
            attributes.insert(attr::KERNEL_DRIVER.into(), Attribute::String(driver));
        }
        if let Some(bdf) = pci {
            attributes.insert(attr::PCI_BUS_ID.into(), Attribute::String(bdf));
        }
        if let Some(root) = pcie_root(&self.sysfs, &device) {
            attributes.insert(PCIE_ROOT_ATTRIBUTE.into(), Attribute::String(root));
        }
        for (k, v) in &attributes {
            limits::check_attribute(k, v).map_err(|source| NotOffered::Limit {
                what: format!("attribute {k}"),
                source,
            })?;
        }
        let edits = ContainerEdits {
            device_nodes: vec![DeviceNode {
                path: host_path.clone(),
                kind: DeviceKind::Char,
                major: maj,
                minor: min,
                file_mode: Some(meta.mode() & 0o777),
                uid: Some(meta.uid()),
                gid: Some(meta.gid()),
            }],
            ..Default::default()
        };
        validate_edits(&host_path, &edits)?;
        Ok(Device {
            attributes,
            edits,
            ..Device::new(name, Kind::Char)
        })
    }
}

impl Discovery for RenderDiscovery {
    fn name(&self) -> &'static str {
        "render"
    }

    fn discover(&self) -> Result<Vec<Device>> {
        let mut entries: Vec<String> = match std::fs::read_dir(self.class_dir()) {
            Ok(dir) => dir
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| is_render_entry(n))
                .collect(),
            // No DRM on this node: nothing to offer, which is no failure.
            Err(_) => Vec::new(),
        };
        entries.sort();
        let mut devices = Vec::new();
        let mut unavailable = Vec::new();
        for entry in entries {
            match self.device(&entry) {
                Ok(d) => devices.push(d),
                Err(why) => unavailable.push(Unavailable {
                    key: format!("render/{entry}"),
                    reason: "RenderNodeUnavailable",
                    message: format!("render node {entry} is not offered: {why}"),
                }),
            }
        }
        *self.unavailable.lock().unwrap_or_else(|p| p.into_inner()) = unavailable;
        Ok(devices)
    }

    fn watch_paths(&self) -> Vec<PathBuf> {
        vec![self.class_dir(), self.dev.join("dri")]
    }

    fn unavailable(&self) -> Vec<Unavailable> {
        self.unavailable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// `renderD<digits>`: the kernel's name for a render node (`card<N>` are the modesetting
/// nodes, which are not offered).
fn is_render_entry(name: &str) -> bool {
    name.strip_prefix("renderD")
        .is_some_and(|n| !n.is_empty() && n.len() <= 10 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `major:minor` as sysfs' `dev` file writes it.
fn parse_dev(text: &str) -> Option<(u64, u64)> {
    let (a, b) = text.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// `0x` and four hex digits, as sysfs writes PCI ids.
fn is_hex_id(v: &str) -> bool {
    v.strip_prefix("0x")
        .is_some_and(|h| h.len() == 4 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The PCI address (`0000:00:02.0`) of a device link, if it resolves to a PCI function.
fn pci_address(device: &Path) -> Option<String> {
    let name = std::fs::canonicalize(device)
        .ok()?
        .file_name()?
        .to_str()?
        .to_string();
    let b = name.as_bytes();
    let shaped = b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && name
            .bytes()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit());
    shaped.then_some(name)
}

/// The last component of a symlink's target (a driver's name).
fn link_name(link: &Path) -> Option<String> {
    let target = std::fs::read_link(link).ok()?;
    let name = target.file_name()?.to_str()?;
    (!name.is_empty() && name.len() <= 64).then(|| name.to_string())
}

/// A small sysfs file's text, trimmed; `None` if it cannot be read or is too long.
fn read_small(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_SYSFS_FILE + 1)
        .read_to_string(&mut text)
        .ok()?;
    (text.len() as u64 <= MAX_SYSFS_FILE).then(|| text.trim().to_string())
}

#[cfg(test)]
mod tests;
