//! Device assembly: the nvidia backend's [`NvidiaDiscovery`], which turns the NVML
//! inventory and the driver's files into devices, each with the attributes a DeviceClass or
//! CEL selector needs and the explicit container edits (device nodes, driver files, hooks)
//! that make CUDA and nvidia-smi work without CDI or the NVIDIA container toolkit.
//!
//! - `gpu-<minor>`: a GPU whose MIG mode is off (a GPU with MIG on is only offered as its
//!   MIG devices);
//! - `gpu-<parent minor>-mig-<gi>-<ci>`: a MIG device the node's operator made (static
//!   MIG);
//! - on a GPU graft partitions itself (dynamic MIG, `partitions`): one
//!   `gpu-<minor>-mig-<profile>-<start>` per possible placement and the whole GPU, all
//!   consuming the GPU's counter set `gpu-<minor>-mig`;
//! - `imex-channel-<n>`: when the node's GPUs are registered in one NVLink fabric clique
//!   (`imex`);
//! - `vfio-<pci address>`: with passthrough on, every NVIDIA GPU function that has an IOMMU
//!   group, bound to vfio-pci when prepared (by the setup).
//!
//! A GPU NVML cannot read, or whose devices cannot be built, is set aside without failing
//! the scan (`unread`). Each device's [`Identity`] is what the setups read of it.

mod common;
mod config;
mod edits;
mod fields;
mod hook_edits;
mod identity;
mod imex;
mod ledger;
mod partitions;
mod passthrough;
mod pci;
mod per_gpu;
mod placement_order;
mod prepared;
mod scan;
mod unread;

pub use config::NvidiaConfig;
pub use edits::{cap_node, default_mounts, optional, IPC_MOUNT_OPTIONS};
pub use hook_edits::{HookConfig, SUBCOMMAND};
pub use identity::{Identity, Placement};
pub use ledger::{MigLedger, Placements};
pub use pci::{peers_attribute, read_trim, PciFunction, PciTree, NVIDIA_VENDOR};
pub use placement_order::PlacementOrder;
pub use prepared::{prepare, Prepared};
pub use scan::{Built, NvidiaDiscovery};
pub use unread::GpuDevices;
