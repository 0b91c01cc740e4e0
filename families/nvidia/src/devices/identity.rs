//! What the nvidia setups need to know of a device, typed: which GPU it is (UUID, minor,
//! PCI address), whether it is shared through MPS, and which MIG placement it is. The scan
//! writes these as attributes under the names below, and [`Identity::of`] is the one place
//! that reads them back, so that no setup looks up an attribute by name.

use graft_driver_core::model::{Attribute, Device};

// The names are the cluster's contract (graft_api::attributes); an island is computed in
// nvml/topology.rs.
pub use graft_api::attributes::{
    CI_ID, DYNAMIC, GI_ID, MINOR, NVLINK_ISLAND, NVLINK_ISLAND_SIZE, PARENT_MINOR, PARENT_UUID,
    PCI_BUS_ID, PLACEMENT_SIZE, PLACEMENT_START, PROFILE_ID, SHARING, UUID,
};
/// The counter a placement consumes one of per compute slice.
pub const COMPUTE_SLICES: &str = "compute-slices";

/// A dynamic-MIG placement: the instance prepare makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The parent GPU's UUID.
    pub parent_uuid: String,
    /// NVML's GPU instance profile id.
    pub profile: u32,
    /// First memory slice of the placement.
    pub start: u32,
    /// Memory slices the placement spans.
    pub size: u32,
    /// Compute slices: which compute instance profile spans the GPU instance.
    pub slices: u32,
}

/// What a setup needs to know of an nvidia device; each part `None` where the device has
/// none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// The device's own UUID: a GPU's, or a static MIG device's.
    pub uuid: Option<String>,
    /// A GPU's device-node minor (`/dev/nvidia<minor>`).
    pub minor: Option<u32>,
    /// A static MIG device's parent GPU minor, and its GPU and compute instance ids.
    pub mig: Option<(u32, crate::mps::MigIds)>,
    /// sysfs form (`0000:18:00.0`).
    pub pci_bus_id: Option<String>,
    /// Shared through MPS.
    pub mps: bool,
    /// Time-sliced among claims (shares).
    pub time_shared: bool,
    /// A dynamic-MIG placement, complete or not.
    pub dynamic: bool,
    /// The placement when `dynamic` and every part of it was published.
    pub placement: Option<Placement>,
}

impl Identity {
    /// The identity the scan published for `device`.
    pub fn of(device: &Device) -> Identity {
        let text = |k: &str| match device.attributes.get(k) {
            Some(Attribute::String(s)) => Some(s.clone()),
            _ => None,
        };
        let int = |k: &str| device.int_attribute(k).and_then(|v| u32::try_from(v).ok());
        let dynamic = device.attributes.get(DYNAMIC) == Some(&Attribute::Bool(true));
        let placement = || {
            let slices = device
                .consumes
                .as_ref()
                .and_then(|c| c.counters.get(COMPUTE_SLICES))
                .and_then(|&v| u32::try_from(v).ok())?;
            Some(Placement {
                parent_uuid: text(PARENT_UUID)?,
                profile: int(PROFILE_ID)?,
                start: int(PLACEMENT_START)?,
                size: int(PLACEMENT_SIZE)?,
                slices,
            })
        };
        Identity {
            uuid: text(UUID),
            minor: int(MINOR),
            mig: (|| {
                let ids = crate::mps::MigIds {
                    gi: int(GI_ID)?,
                    ci: int(CI_ID)?,
                };
                Some((int(PARENT_MINOR)?, ids))
            })()
            .filter(|_| !dynamic),
            pci_bus_id: text(PCI_BUS_ID),
            mps: device.string_attribute(SHARING) == Some(graft_api::sharing::MPS),
            time_shared: device.string_attribute(SHARING) == Some(graft_api::sharing::TIME_SLICING),
            dynamic,
            placement: if dynamic { placement() } else { None },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::fields::{full_gpu, mps_shared};
    use crate::devices::partitions;
    use crate::nvml::{GiProfile, Gpu, MigLayout};
    use std::collections::{BTreeMap, BTreeSet};

    fn gpu() -> Gpu {
        Gpu {
            index: 2,
            minor: 3,
            uuid: "GPU-a".into(),
            name: None,
            brand: None,
            architecture: None,
            compute_capability: None,
            memory_bytes: Some(80 << 30),
            pci_bus_id: "0000:18:00.0".into(),
            mig_enabled: true,
            migs: vec![],
            mig_layout: None,
            clique: None,
            nvlink_island: None,
        }
    }

    fn shared() -> BTreeMap<String, Attribute> {
        BTreeMap::from([(
            PCI_BUS_ID.to_string(),
            Attribute::String("0000:18:00.0".into()),
        )])
    }

    #[test]
    fn a_gpu_reads_back_as_the_scan_wrote_it() {
        let mut d = full_gpu(&gpu(), &shared(), &Default::default());
        assert_eq!(
            Identity::of(&d),
            Identity {
                uuid: Some("GPU-a".into()),
                minor: Some(3),
                pci_bus_id: Some("0000:18:00.0".into()),
                ..Identity::default()
            }
        );
        mps_shared(&mut d, gpu().memory_bytes);
        assert!(Identity::of(&d).mps);
    }

    #[test]
    fn a_placement_reads_back_as_the_scan_wrote_it() {
        let layout = MigLayout {
            profiles: vec![GiProfile {
                id: 9,
                name: "3g.40gb".into(),
                slices: 3,
                instance_count: 2,
                multiprocessors: 48,
                copy_engines: 3,
                decoders: 0,
                encoders: 0,
                jpeg_engines: 0,
                ofa_engines: 0,
                memory_mib: 40_000,
                placements: vec![(0, 4), (4, 4)],
            }],
            instances: vec![],
        };
        let devices = partitions::devices(
            &gpu(),
            &layout,
            &BTreeSet::new(),
            &shared(),
            &Default::default(),
            Default::default(),
        );
        let placement = devices
            .iter()
            .find(|d| d.name == "gpu-3-mig-3g-40gb-4")
            .expect("the placement at slice 4");
        let id = Identity::of(placement);
        assert!(id.dynamic);
        assert_eq!(
            id.placement,
            Some(Placement {
                parent_uuid: "GPU-a".into(),
                profile: 9,
                start: 4,
                size: 4,
                slices: 3,
            })
        );
    }
}
