//! `vfio-<pci address>`: with passthrough on, every NVIDIA GPU function that has an IOMMU
//! group, offered for binding to vfio-pci when prepared (the setup does that).

use std::collections::BTreeMap;
use std::path::Path;

use super::fields::numa_node;
use super::identity::{PCI_BUS_ID, UUID};
use super::pci::{peers_attribute, PciTree};
use crate::nvml::Inventory;
use graft_api::attributes::{
    IOMMU_GROUP, IOMMU_GROUP_PEERS, NUMA_NODE, PCI_DEVICE_ID, PRODUCT_NAME, TYPE,
};
use graft_driver_core::discovery::pcie::pcie_root;
use graft_driver_core::model::{Attribute, Device, Kind, PCIE_ROOT_ATTRIBUTE};

/// NVIDIA functions with an IOMMU group; the GPU's NVML data when it is bound to nvidia.
pub fn devices(sys_root: &Path, inv: &Inventory) -> Vec<Device> {
    let tree = PciTree::at(sys_root);
    tree.functions()
        .into_iter()
        .filter_map(|f| {
            let group = f.iommu_group?;
            let mut attributes = BTreeMap::new();
            attributes.insert(
                TYPE.into(),
                Attribute::String(graft_api::types::VFIO.into()),
            );
            attributes.insert(PCI_BUS_ID.into(), Attribute::String(f.bdf.clone()));
            attributes.insert(IOMMU_GROUP.into(), Attribute::Int(group.into()));
            attributes.insert(PCI_DEVICE_ID.into(), Attribute::String(f.device_id.clone()));
            // Passed through with it (docs/nvidia.md: VFIO passthrough).
            let peers = peers_attribute(&f.group_peers);
            if !peers.is_empty() {
                attributes.insert(IOMMU_GROUP_PEERS.into(), Attribute::String(peers));
            }
            let dir = tree.device_dir(&f.bdf);
            if let Some(root) = pcie_root(sys_root, &dir) {
                attributes.insert(PCIE_ROOT_ATTRIBUTE.into(), Attribute::String(root));
            }
            if let Some(numa) = numa_node(&dir) {
                attributes.insert(NUMA_NODE.into(), Attribute::Int(numa));
            }
            if let Some(g) = inv.gpus.iter().find(|g| g.pci_bus_id == f.bdf) {
                attributes.insert(UUID.into(), Attribute::String(g.uuid.clone()));
                if let Some(name) = &g.name {
                    attributes.insert(PRODUCT_NAME.into(), Attribute::String(name.clone()));
                }
            }
            Some(Device {
                kind: Kind::Passthrough,
                name: format!("vfio-{}", f.bdf.replace([':', '.'], "-")),
                attributes,
                capacity: BTreeMap::new(),
                // The group node appears when vfio-pci binds: the setup adds it.
                edits: graft_record::ContainerEdits {
                    device_nodes: vec![graft_record::DeviceNode::char(
                        "/dev/vfio/vfio",
                        10,
                        196,
                        0o666,
                    )],
                    ..Default::default()
                },
                optional_edits: Default::default(),
                consumes: None,
                shared: None,
                binding: None,
            })
        })
        .collect()
}
