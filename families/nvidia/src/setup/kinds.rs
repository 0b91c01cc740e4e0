//! The nvidia family's setups as its checkpoint records hold them ([`NvidiaWork`]), and
//! what the core asks of a record through the [`graft_driver_core::claims::setup_port::DeviceSetup`]
//! port: the claim it is for, whether it keeps another out, the PCI functions it uses, and
//! the checkpoint schema it needs.

use serde::{Deserialize, Serialize};

use crate::setup_error::NvidiaSetupError;
use graft_driver_core::claims::setup_port::{PciUse, Setup, SetupError};

/// The family's name. Its records are unnamed (see [`NvidiaWork`]); one that names it is
/// its own too.
pub const FAMILY: &str = "nvidia";

/// What the nvidia family did (or is about to do) to a device: the payload of its
/// checkpointed [`Setup`] records.
///
/// Closed on purpose: this is the family's part of the checkpoint's schema, read back after
/// a restart or an upgrade, so every variant stays readable as written. Its records are
/// unnamed (written as checkpoint schema 5 wrote them: the `kind` tag, camelCase fields), so
/// a variant or field added here must keep to that form (new fields `#[serde(default)]`, and
/// a [`NvidiaWork::schema`] that says which checkpoint schema first held them), and none
/// that a released graft wrote is ever removed or renamed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum NvidiaWork {
    /// The PCI function was rebound from nvidia to vfio-pci, with the other functions of
    /// its IOMMU group (`peers`): VFIO hands out whole groups.
    #[serde(rename_all = "camelCase")]
    Vfio {
        /// The GPU's PCI function.
        pci_bus_id: String,
        /// Its persistence mode was on: turned off before the unbind (nvidia-persistenced
        /// holds an open GPU, which the nvidia driver will not let go) and back on once the
        /// GPU is on nvidia again.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        persistence: bool,
        /// The other functions of the group, moved with it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        peers: Vec<VfioPeer>,
    },
    /// The GPU's compute time slice was set (0 Default, 1 Short, 2 Medium, 3 Long).
    #[serde(rename_all = "camelCase")]
    TimeSlice {
        /// The GPU's PCI function.
        pci_bus_id: String,
        /// The time slice set.
        interval: u32,
    },
    /// A MIG GPU instance of `profile` at memory slices `start..start+size`, with one
    /// compute instance over its `slices` compute slices, made on the GPU for the claim.
    #[serde(rename_all = "camelCase")]
    Mig {
        /// The GPU the instance is on.
        gpu_uuid: String,
        /// The GPU instance profile's id.
        profile: u32,
        /// The first memory slice.
        start: u32,
        /// The memory slices it spans.
        size: u32,
        /// The compute slices of its compute instance.
        slices: u32,
    },
    /// A share of a GPU shared through MPS (crate::mps): graft-mps runs the GPU's
    /// control daemon for one namespace while any of its shares is prepared; `share` is the
    /// allocation's share id (`whole` without one), `compute` the active thread percentage,
    /// `memory_mib` the pinned device memory limit. `namespace` and `claim_uid` are the
    /// claim's (stamped by the core, [`NvidiaWork::for_claim`]; empty in older checkpoints).
    #[serde(rename_all = "camelCase")]
    Mps {
        /// The GPU shared.
        gpu_uuid: String,
        /// Its minor number (`/dev/nvidia<minor>`); of a MIG device, its parent GPU's.
        minor: u32,
        /// Of a static MIG device (`gpu_uuid` is then its own UUID): its instances.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mig: Option<crate::mps::MigIds>,
        /// The allocation's share id (`whole` without one).
        share: String,
        /// The active thread percentage.
        compute: u32,
        /// The pinned device memory limit, in MiB.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory_mib: Option<u64>,
        /// The claim's namespace.
        #[serde(default)]
        namespace: String,
        /// The claim's UID.
        #[serde(default)]
        claim_uid: String,
    },
    /// An IMEX channel of a ComputeDomain's workload: its node labelled for the domain (so
    /// that the domain's IMEX daemon runs there), and the domain Ready on the node before
    /// the channel is handed out. The label stays when this is undone: the domain's
    /// controller removes it once no claim of the domain is allocated on the node.
    #[serde(rename_all = "camelCase")]
    ComputeDomain {
        /// The domain's uid.
        domain_id: String,
        /// The domain's name.
        domain_name: String,
        /// The domain's namespace.
        domain_namespace: String,
        /// The claim's namespace (stamped by the core, [`NvidiaWork::for_claim`]): a claim
        /// joins only a domain of its own namespace.
        #[serde(default)]
        claim_namespace: String,
        /// The channel number allocated (`imex-channel-<n>`): in `Single` mode it must be
        /// the domain's slot. `None` only in checkpoints written before it was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        channel: Option<u32>,
        /// The node's clique as the channel names it (`cliqueID`): the domain's own.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        clique: String,
        /// The claim's configuration asks for every channel (`allocationMode: All`), which
        /// only a domain whose own spec says `All` grants.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        all_channels: bool,
    },
    /// A place for a ComputeDomain's IMEX daemon (`imex-daemon-<n>`): nothing is done on
    /// the node, but while it is prepared no other domain's daemon place is
    /// ([`NvidiaWork::excludes`]): one IMEX daemon per node.
    #[serde(rename_all = "camelCase")]
    ImexDaemon {
        /// The domain's uid.
        domain_id: String,
        /// The domain's name.
        domain_name: String,
        /// The domain's namespace.
        domain_namespace: String,
        /// The clique the domain was placed in, which is the node's.
        clique: String,
        /// The claim's namespace (stamped by the core, [`NvidiaWork::for_claim`]): only graft's
        /// own, where the controller makes the daemons' claims, may hold a daemon place.
        #[serde(default)]
        claim_namespace: String,
    },
}

/// Another function of a passed-through GPU's IOMMU group, moved to vfio-pci with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VfioPeer {
    /// The function, as a PCI bus ID.
    pub pci_bus_id: String,
    /// The driver it was bound to, which unprepare binds it back to; `None`: unbound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// A GPU on nvidia whose persistence mode was on, as for the GPU itself.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub persistence: bool,
}

impl NvidiaWork {
    /// VFIO passthrough of `pci_bus_id` alone: no group peers, persistence mode off.
    pub fn vfio(pci_bus_id: impl Into<String>) -> NvidiaWork {
        NvidiaWork::Vfio {
            pci_bus_id: pci_bus_id.into(),
            persistence: false,
            peers: Vec::new(),
        }
    }

    /// The oldest checkpoint schema that holds this record: 1 for passthrough alone and a
    /// time slice, 2 a MIG instance or an MPS share, 3 passthrough with group peers or
    /// persistence mode to restore, 4 a ComputeDomain channel, 5 a channel's number and an
    /// IMEX daemon place.
    pub fn schema(&self) -> u32 {
        match self {
            NvidiaWork::Vfio {
                persistence, peers, ..
            } if *persistence || !peers.is_empty() => 3,
            NvidiaWork::Vfio { .. } | NvidiaWork::TimeSlice { .. } => 1,
            NvidiaWork::Mig { .. } | NvidiaWork::Mps { .. } => 2,
            NvidiaWork::ComputeDomain { channel: None, .. } => 4,
            NvidiaWork::ComputeDomain { .. } | NvidiaWork::ImexDaemon { .. } => 5,
        }
    }

    /// Its checkpoint record: unnamed, in exactly the form schema 5 wrote.
    pub fn record(&self) -> Result<Setup, SetupError> {
        Setup::new(None, self.schema(), self)
    }

    /// The family's setup a record holds, or why it cannot be read.
    pub fn read(setup: &Setup) -> Result<NvidiaWork, SetupError> {
        if !owns(setup) {
            return Err(SetupError::Unreadable {
                family: FAMILY.into(),
                kind: setup.kind().into(),
                reason: format!("it is the {} family's", setup.family().unwrap_or("unnamed")),
            });
        }
        setup.decode(FAMILY)
    }

    /// The family's setups among the checkpoint's `setups`; one it cannot read is left out,
    /// and logged (its claim's unprepare says so again).
    pub fn own(setups: &[Setup]) -> Vec<NvidiaWork> {
        setups
            .iter()
            .filter(|s| owns(s))
            .filter_map(|s| match NvidiaWork::read(s) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(error = %e, "a checkpointed setup left out");
                    None
                }
            })
            .collect()
    }

    /// The setup as done for the claim `namespace`/`claim_uid`: the family plans from the
    /// device alone, and an MPS share needs its claim's namespace (one per GPU at a time),
    /// as ComputeDomain devices do.
    pub fn for_claim(mut self, namespace: &str, claim_uid: &str) -> NvidiaWork {
        match &mut self {
            NvidiaWork::Mps {
                namespace: ns,
                claim_uid: uid,
                ..
            } => {
                *ns = namespace.to_string();
                *uid = claim_uid.to_string();
            }
            NvidiaWork::ComputeDomain {
                claim_namespace, ..
            }
            | NvidiaWork::ImexDaemon {
                claim_namespace, ..
            } => *claim_namespace = namespace.to_string(),
            _ => {}
        }
        self
    }

    /// The PCI function a setup rebinds or reconfigures; `None` for one that acts inside
    /// the GPU (MIG).
    pub fn pci_bus_id(&self) -> Option<&str> {
        match self {
            NvidiaWork::Vfio { pci_bus_id, .. } | NvidiaWork::TimeSlice { pci_bus_id, .. } => {
                Some(pci_bus_id)
            }
            NvidiaWork::Mig { .. }
            | NvidiaWork::Mps { .. }
            | NvidiaWork::ComputeDomain { .. }
            | NvidiaWork::ImexDaemon { .. } => None,
        }
    }

    /// The PCI functions passthrough takes from the host while it is prepared: the GPU and
    /// its IOMMU group peers. Empty for other setups.
    pub fn passed_through(&self) -> Vec<&str> {
        match self {
            NvidiaWork::Vfio {
                pci_bus_id, peers, ..
            } => std::iter::once(pci_bus_id.as_str())
                .chain(peers.iter().map(|p| p.pci_bus_id.as_str()))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The PCI functions it uses, as the core asks: those passthrough takes, or the one it
    /// reconfigures.
    pub fn pci(&self) -> Option<PciUse> {
        let taken = self.passed_through();
        if !taken.is_empty() {
            return Some(PciUse {
                functions: taken.into_iter().map(String::from).collect(),
                passthrough: true,
            });
        }
        self.pci_bus_id().map(|pci| PciUse {
            functions: vec![pci.to_string()],
            passthrough: false,
        })
    }

    /// Why `self` cannot be prepared while another claim holds `other`, if it cannot: a
    /// second ComputeDomain's IMEX daemon on the node. NVIDIA runs one IMEX daemon per
    /// node, and every channel of the node reaches the memory of the domain that daemon
    /// serves; two daemons side by side are not shown to keep their domains apart.
    pub fn excludes(&self, other: &NvidiaWork) -> Option<SetupError> {
        let (
            NvidiaWork::ImexDaemon {
                domain_id,
                domain_name,
                domain_namespace,
                ..
            },
            NvidiaWork::ImexDaemon {
                domain_id: held, ..
            },
        ) = (self, other)
        else {
            return None;
        };
        // The holder by uid only: it may be another namespace's domain.
        (domain_id != held).then(|| {
            NvidiaSetupError::ComputeDomain {
                domain: format!("{domain_namespace}/{domain_name}"),
                reason: format!(
                    "this node's IMEX daemon place is held by another ComputeDomain's daemon \
                     (domain uid {held}); a node runs one domain's IMEX daemon at a time, so \
                     this one waits until that domain leaves the node"
                ),
            }
            .into()
        })
    }
}

/// Whether a record is the family's: unnamed, or naming it.
fn owns(setup: &Setup) -> bool {
    setup.family().is_none_or(|f| f == FAMILY)
}

#[cfg(test)]
mod tests;
