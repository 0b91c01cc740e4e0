//! Device attribute names under the [`crate::DRIVER`] domain, as the ResourceSlices carry
//! them and claims' selectors and `matchAttribute` constraints name them. [`PCIE_ROOT`] is
//! the one Kubernetes-defined name graft publishes beside them.

/// What the device is (values: [`crate::types`]).
pub const TYPE: &str = "type";
/// The device's own UUID (a GPU's, a static MIG device's).
pub const UUID: &str = "uuid";
/// A device node's minor: a GPU's (`/dev/nvidia<minor>`), a char device's, a render node's.
pub const MINOR: &str = "minor";
/// A char device's or render node's major.
pub const MAJOR: &str = "major";
/// The host path of a char device, render node or served file.
pub const PATH: &str = "path";
/// A served file's entry name in its directory (the files backend).
pub const ENTRY: &str = "entry";
/// A GPU's NVML index.
pub const INDEX: &str = "index";
/// A GPU's product name as NVML gives it (`NVIDIA H100 80GB HBM3`).
pub const PRODUCT_NAME: &str = "productName";
/// A GPU's brand as NVML gives it.
pub const BRAND: &str = "brand";
/// A GPU's architecture (`Hopper`).
pub const ARCHITECTURE: &str = "architecture";
/// A GPU's CUDA compute capability, as a version (`9.0.0`).
pub const CUDA_COMPUTE_CAPABILITY: &str = "cudaComputeCapability";
/// The node's NVIDIA kernel driver version, as a version.
pub const DRIVER_VERSION: &str = "driverVersion";
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
/// A passthrough (VFIO) function's IOMMU group.
pub const IOMMU_GROUP: &str = "iommuGroup";
/// The other functions of a passthrough function's IOMMU group, which go with it.
pub const IOMMU_GROUP_PEERS: &str = "iommuGroupPeers";
/// A passthrough function's PCI device id, as sysfs writes it (`0x2330`).
pub const PCI_DEVICE_ID: &str = "pciDeviceID";
/// A render node's PCI vendor id (`0x8086`).
pub const VENDOR_ID: &str = "vendorID";
/// A render node's PCI device id (`0x56a0`).
pub const DEVICE_ID: &str = "deviceID";
/// A render node's kernel driver (`i915`, `amdgpu`).
pub const KERNEL_DRIVER: &str = "driver";
/// Kubernetes' standard attribute for the PCIe root complex a device hangs off: qualified,
/// outside graft's domain, so that constraints can match it across drivers.
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";

/// Every name above: what graft publishes, and all that selectors, constraints and the
/// other components may name (api/tests/names_in_use.rs keeps it complete).
pub const ALL: &[&str] = &[
    TYPE,
    UUID,
    MINOR,
    MAJOR,
    PATH,
    ENTRY,
    INDEX,
    PRODUCT_NAME,
    BRAND,
    ARCHITECTURE,
    CUDA_COMPUTE_CAPABILITY,
    DRIVER_VERSION,
    PCI_BUS_ID,
    SHARING,
    DYNAMIC,
    MIG_ENABLED,
    PARENT_UUID,
    PARENT_MINOR,
    PARENT_INDEX,
    PROFILE,
    PROFILE_ID,
    PLACEMENT_START,
    PLACEMENT_SIZE,
    GI_ID,
    CI_ID,
    CUDA_DRIVER_VERSION,
    NUMA_NODE,
    NVLINK_ISLAND,
    NVLINK_ISLAND_SIZE,
    CLIQUE_ID,
    CHANNEL,
    SLOT,
    IOMMU_GROUP,
    IOMMU_GROUP_PEERS,
    PCI_DEVICE_ID,
    VENDOR_ID,
    DEVICE_ID,
    KERNEL_DRIVER,
    PCIE_ROOT,
];

/// `name` qualified with graft's domain (`graft.dev/<name>`), as a claim's `matchAttribute`
/// names it and a ResourceSlice may key it.
pub fn qualified(name: &str) -> String {
    format!("{}/{name}", crate::DRIVER)
}
