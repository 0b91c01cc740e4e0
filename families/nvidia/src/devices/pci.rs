//! NVIDIA's PCI functions as sysfs shows them: vendor, class, driver and IOMMU group. Read
//! by the scan (passthrough devices) and by the VFIO setup, which moves them between
//! drivers. The sysfs root is a parameter, so that tests run against a fake tree.

use std::path::{Path, PathBuf};

/// An NVIDIA display-class PCI function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// sysfs form, `0000:18:00.0`.
    pub bdf: String,
    /// PCI device id, as sysfs writes it (`0x2330`).
    pub device_id: String,
    /// None when the kernel put it in no IOMMU group.
    pub iommu_group: Option<u32>,
    /// The driver bound now.
    pub driver: Option<String>,
    /// The other functions of its IOMMU group that passthrough takes with it (PCI bridges
    /// left out), sorted; empty when the group cannot be read.
    pub group_peers: Vec<String>,
}

/// NVIDIA's PCI vendor id as sysfs writes it.
pub const NVIDIA_VENDOR: &str = "0x10de";
/// PCI class of a PCI-to-PCI bridge (class 0x06, subclass 0x04): it stays where it is.
const BRIDGE_CLASS: &str = "0x0604";
/// DRA attribute strings hold at most 64 bytes.
const ATTRIBUTE_MAX: usize = 64;

/// A sysfs file's content without surrounding whitespace; `None` when it cannot be read.
pub fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The last component of the link at `p` (a driver or IOMMU group link).
fn basename_of_link(p: &Path) -> Option<String> {
    let target = std::fs::read_link(p).ok()?;
    Some(target.file_name()?.to_str()?.to_string())
}

/// The PCI devices of a sysfs tree (`<sys>/bus/pci/devices`, `<sys>/kernel/iommu_groups`).
#[derive(Debug, Clone, Copy)]
pub struct PciTree<'a> {
    sys: &'a Path,
}

impl<'a> PciTree<'a> {
    /// The tree under sysfs root `sys`.
    pub fn at(sys: &'a Path) -> Self {
        PciTree { sys }
    }

    /// `<sys>/bus/pci/devices/<bdf>`.
    pub fn device_dir(&self, bdf: &str) -> PathBuf {
        self.sys.join("bus/pci/devices").join(bdf)
    }

    /// The driver `bdf` is bound to.
    pub fn driver(&self, bdf: &str) -> Option<String> {
        basename_of_link(&self.device_dir(bdf).join("driver"))
    }

    /// The IOMMU group of `bdf`.
    pub fn iommu_group(&self, bdf: &str) -> Option<u32> {
        basename_of_link(&self.device_dir(bdf).join("iommu_group")).and_then(|g| g.parse().ok())
    }

    /// The vendor id of `bdf` (`0x10de`).
    pub fn vendor(&self, bdf: &str) -> Option<String> {
        read_trim(&self.device_dir(bdf).join("vendor"))
    }

    /// Whether `bdf` is a PCI-to-PCI bridge, which stays with its own driver.
    pub fn is_bridge(&self, bdf: &str) -> bool {
        read_trim(&self.device_dir(bdf).join("class")).is_some_and(|c| c.starts_with(BRIDGE_CLASS))
    }

    /// The `<sys>/kernel/iommu_groups/<group>/devices` directory.
    pub fn group_dir(&self, group: u32) -> PathBuf {
        self.sys
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices")
    }

    /// The functions of IOMMU group `group`, sorted.
    pub fn group_members(&self, group: u32) -> std::io::Result<Vec<String>> {
        let mut out: Vec<String> = std::fs::read_dir(self.group_dir(group))?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        out.sort();
        Ok(out)
    }

    /// NVIDIA functions of display class (0x03xxxx), sorted by address.
    pub fn functions(&self) -> Vec<PciFunction> {
        let Ok(entries) = std::fs::read_dir(self.sys.join("bus/pci/devices")) else {
            return Vec::new();
        };
        let mut out: Vec<PciFunction> = entries
            .flatten()
            .filter_map(|e| {
                let bdf = e.file_name().into_string().ok()?;
                let dir = e.path();
                if read_trim(&dir.join("vendor"))? != NVIDIA_VENDOR {
                    return None;
                }
                if !read_trim(&dir.join("class"))?.starts_with("0x03") {
                    return None;
                }
                let iommu_group =
                    basename_of_link(&dir.join("iommu_group")).and_then(|g| g.parse().ok());
                let group_peers = match iommu_group {
                    Some(g) => self.group_members(g).unwrap_or_default(),
                    None => Vec::new(),
                }
                .into_iter()
                .filter(|m| *m != bdf && !self.is_bridge(m))
                .collect();
                Some(PciFunction {
                    device_id: read_trim(&dir.join("device")).unwrap_or_default(),
                    iommu_group,
                    driver: basename_of_link(&dir.join("driver")),
                    group_peers,
                    bdf,
                })
            })
            .collect();
        out.sort_by(|a, b| a.bdf.cmp(&b.bdf));
        out
    }
}

/// The `iommuGroupPeers` attribute: the peers, comma separated, as many as fit in a DRA
/// string attribute, then `+<n>` for the rest.
pub fn peers_attribute(peers: &[String]) -> String {
    let mut out = String::new();
    for (i, p) in peers.iter().enumerate() {
        let rest = format!(",+{}", peers.len() - i);
        let sep = if out.is_empty() { "" } else { "," };
        // Room for this one and, unless it is the last, the count of those after it.
        let after = peers.len() - i - 1;
        let tail = if after == 0 {
            0
        } else {
            format!(",+{after}").len()
        };
        if out.len() + sep.len() + p.len() + tail > ATTRIBUTE_MAX {
            out += if out.is_empty() { &rest[1..] } else { &rest };
            return out;
        }
        out += sep;
        out += p;
    }
    out
}
