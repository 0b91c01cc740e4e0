//! A GPU's IOMMU group: the functions VFIO hands out with it. vfio-pci makes a group usable
//! only when every function in it is bound to a VFIO driver, or to none (PCI bridges
//! excepted: the kernel lets them stay with their own driver), so passing a GPU through
//! moves its audio or USB-C functions, or a second GPU behind the same switch, with it.
//! graft does that only for NVIDIA's functions: it never rebinds another vendor's device of
//! the host.

use super::{read_trim, Vfio, NVIDIA_VENDOR};
use crate::setup::{SetupError, VfioPeer};

/// PCI class of a PCI-to-PCI bridge (class 0x06, subclass 0x04): it stays where it is.
const BRIDGE_CLASS: &str = "0x0604";
/// DRA attribute strings hold at most 64 bytes.
const ATTRIBUTE_MAX: usize = 64;

impl Vfio {
    /// The functions of IOMMU group `group`, sorted.
    pub fn group_members(&self, group: u32) -> Result<Vec<String>, SetupError> {
        let dir = self
            .sys
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices");
        let entries = std::fs::read_dir(&dir).map_err(|source| SetupError::Io {
            op: "listing IOMMU group".into(),
            path: dir.clone(),
            source,
        })?;
        let mut out: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        out.sort();
        Ok(out)
    }

    pub(super) fn is_bridge(&self, bdf: &str) -> bool {
        read_trim(&self.dev(bdf).join("class")).is_some_and(|c| c.starts_with(BRIDGE_CLASS))
    }

    /// The other functions of `bdf`'s IOMMU group that go to vfio-pci with it, each with
    /// the driver it has now, or why the group cannot be passed through: a function of
    /// another vendor in it, or a group that cannot be read.
    pub fn group_peers(&self, bdf: &str) -> Result<Vec<VfioPeer>, SetupError> {
        let group = self
            .iommu_group(bdf)
            .ok_or_else(|| SetupError::NoIommuGroup {
                pci: bdf.to_string(),
            })?;
        let mut peers = Vec::new();
        for peer in self.group_members(group)? {
            if peer == bdf || self.is_bridge(&peer) {
                continue;
            }
            let refuse = |reason: String| SetupError::GroupPeer {
                pci: bdf.to_string(),
                group,
                peer: peer.clone(),
                reason,
            };
            match read_trim(&self.dev(&peer).join("vendor")) {
                Some(v) if v == NVIDIA_VENDOR => {}
                Some(v) => {
                    return Err(refuse(format!(
                        "is not an NVIDIA function (vendor {v}), and graft rebinds no other \
                         device of the host"
                    )))
                }
                None => return Err(refuse("cannot be read in sysfs".into())),
            }
            peers.push(VfioPeer {
                driver: self.driver(&peer),
                pci_bus_id: peer,
                persistence: false,
            });
        }
        Ok(peers)
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
