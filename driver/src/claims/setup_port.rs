//! Node-side work that some devices need while they are prepared, and its undo: a GPU
//! rebound to vfio-pci for passthrough, a GPU's time slice changed. The prepare path runs
//! `apply` after `PrepareStarted` is durable and before the record exists, and `undo`
//! before a record goes; the checkpoint keeps each [`Setup`], so a crash in between is
//! undone by the next unprepare or cleanup. Both must be idempotent.

use graft_record::ContainerEdits;
use serde::{Deserialize, Serialize};

// The IMEX daemon's setup is still one of this closed set, so its refusal is built here in
// its family's words.
use crate::discovery::nvidia::setup::error::NvidiaSetupError;
use crate::model::Allocated;
use crate::model::Device;
use crate::opaque::DeviceConfig;

pub use super::setup_error::SetupError;

/// What was (or is about to be) done to a device.
///
/// Closed on purpose: this is the checkpoint's schema, read back after a restart or an
/// upgrade, so every variant stays readable as written. A family with node-side work adds
/// here one variant (serde `kind` tag, camelCase fields; new fields `#[serde(default)]`),
/// answers for it in its [`crate::backend::router::Route`]'s `setups`, and never removes
/// or renames one that a released graft wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Setup {
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
    /// A share of a GPU shared through MPS (graft_driver::mps): graft-mps runs the GPU's
    /// control daemon for one namespace while any of its shares is prepared; `share` is the
    /// allocation's share id (`whole` without one), `compute` the active thread percentage,
    /// `memory_mib` the pinned device memory limit. `namespace` and `claim_uid` are the
    /// claim's (stamped by the core, [`Setup::for_claim`]; empty in older checkpoints).
    #[serde(rename_all = "camelCase")]
    Mps {
        /// The GPU shared.
        gpu_uuid: String,
        /// Its minor number (`/dev/nvidia<minor>`).
        minor: u32,
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
        /// The claim's namespace (stamped by the core, [`Setup::for_claim`]): a claim
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
    /// ([`Setup::excludes`]): one IMEX daemon per node.
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
        /// The claim's namespace (stamped by the core, [`Setup::for_claim`]): only graft's
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

impl Setup {
    /// VFIO passthrough of `pci_bus_id` alone: no group peers, persistence mode off.
    pub fn vfio(pci_bus_id: impl Into<String>) -> Setup {
        Setup::Vfio {
            pci_bus_id: pci_bus_id.into(),
            persistence: false,
            peers: Vec::new(),
        }
    }

    /// The setup as done for the claim `namespace`/`claim_uid`: backends plan from the
    /// device alone, and an MPS share needs its claim's namespace (one per GPU at a time),
    /// as ComputeDomain devices do.
    pub fn for_claim(mut self, namespace: &str, claim_uid: &str) -> Setup {
        match &mut self {
            Setup::Mps {
                namespace: ns,
                claim_uid: uid,
                ..
            } => {
                *ns = namespace.to_string();
                *uid = claim_uid.to_string();
            }
            Setup::ComputeDomain {
                claim_namespace, ..
            }
            | Setup::ImexDaemon {
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
            Setup::Vfio { pci_bus_id, .. } | Setup::TimeSlice { pci_bus_id, .. } => {
                Some(pci_bus_id)
            }
            Setup::Mig { .. }
            | Setup::Mps { .. }
            | Setup::ComputeDomain { .. }
            | Setup::ImexDaemon { .. } => None,
        }
    }

    /// Why `self` cannot be prepared while another claim holds `other`, if it cannot: a
    /// second ComputeDomain's IMEX daemon on the node. NVIDIA runs one IMEX daemon per
    /// node, and every channel of the node reaches the memory of the domain that daemon
    /// serves; two daemons side by side are not shown to keep their domains apart.
    pub fn excludes(&self, other: &Setup) -> Option<SetupError> {
        let (
            Setup::ImexDaemon {
                domain_id,
                domain_name,
                domain_namespace,
                ..
            },
            Setup::ImexDaemon {
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

    /// The PCI functions passthrough takes from the host while it is prepared: the GPU and
    /// its IOMMU group peers. Empty for other setups.
    pub fn passed_through(&self) -> Vec<&str> {
        match self {
            Setup::Vfio {
                pci_bus_id, peers, ..
            } => std::iter::once(pci_bus_id.as_str())
                .chain(peers.iter().map(|p| p.pci_bus_id.as_str()))
                .collect(),
            _ => Vec::new(),
        }
    }
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
        if config.is_some_and(|c| c.family.asks_sharing()) {
            return Err(SetupError::NotSupported {
                device: device.name.clone(),
                reason: "sharing settings apply to NVIDIA GPUs only",
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
