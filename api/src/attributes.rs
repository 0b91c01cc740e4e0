//! Device attribute names under the [`crate::DRIVER`] domain, as the ResourceSlices carry
//! them and claims' selectors and `matchAttribute` constraints name them.

/// What the device is (values: [`crate::types`]).
pub const TYPE: &str = "type";
/// The device's own UUID (a GPU's, a static MIG device's).
pub const UUID: &str = "uuid";
/// A GPU's device-node minor (`/dev/nvidia<minor>`).
pub const MINOR: &str = "minor";
/// The PCI address, in sysfs form (`0000:18:00.0`).
pub const PCI_BUS_ID: &str = "pciBusID";
/// `mps` on a GPU shared through MPS.
pub const SHARING: &str = "sharing";
/// `true` on a dynamic-MIG placement.
pub const DYNAMIC: &str = "dynamic";
/// `true` on a GPU whose MIG mode is on: CUDA then runs only in its MIG devices.
pub const MIG_ENABLED: &str = "migEnabled";
/// A MIG device's GPU.
pub const PARENT_UUID: &str = "parentUUID";
/// A MIG device's GPU's minor.
pub const PARENT_MINOR: &str = "parentMinor";
/// A MIG device's GPU's index.
pub const PARENT_INDEX: &str = "parentIndex";
/// A MIG profile's name (`1g.10gb`).
pub const PROFILE: &str = "profile";
/// A MIG GPU instance profile's id.
pub const PROFILE_ID: &str = "profileID";
/// A dynamic-MIG placement's first memory slice.
pub const PLACEMENT_START: &str = "placementStart";
/// A dynamic-MIG placement's memory slices.
pub const PLACEMENT_SIZE: &str = "placementSize";
/// A static MIG device's GPU instance id.
pub const GI_ID: &str = "giID";
/// A static MIG device's compute instance id.
pub const CI_ID: &str = "ciID";
/// The CUDA driver version the node's driver supports.
pub const CUDA_DRIVER_VERSION: &str = "cudaDriverVersion";
/// The NUMA node the device is attached to.
pub const NUMA_NODE: &str = "numaNode";
/// A whole GPU's NVLink island: the PCI address of the island's first GPU, what a claim
/// names in `matchAttribute` for GPUs NVLink joins.
pub const NVLINK_ISLAND: &str = "nvlinkIsland";
/// How many GPUs the island holds.
pub const NVLINK_ISLAND_SIZE: &str = "nvlinkIslandSize";
/// The NVLink clique (`<cluster uuid>.<clique id>`) of a GPU, an IMEX channel or an IMEX
/// daemon place: what a ComputeDomain is placed in.
pub const CLIQUE_ID: &str = "cliqueID";
/// An IMEX channel's number.
pub const CHANNEL: &str = "channel";
/// An IMEX daemon place's slot number.
pub const SLOT: &str = "slot";
/// A render node's kernel driver (`i915`, `amdgpu`).
pub const KERNEL_DRIVER: &str = "driver";
