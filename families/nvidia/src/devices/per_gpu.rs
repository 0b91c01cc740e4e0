//! One GPU's devices, from its NVML data and what every GPU's devices share.

use std::collections::BTreeMap;

use super::common::{fail, Common};
use super::config::NvidiaConfig;
use super::edits;
use super::fields::{full_gpu, mebibytes, mps_shared, numa_node, nvlink_island, time_shared};
use super::identity::{PARENT_UUID, PCI_BUS_ID, UUID};
use super::ledger::MigLedger;
use super::partitions;
use crate::driver_files::mig_access_cap;
use crate::nvml::{self, Gpu};
use graft_api::attributes::{
    ARCHITECTURE, BRAND, CI_ID, CLIQUE_ID, CUDA_COMPUTE_CAPABILITY, CUDA_DRIVER_VERSION,
    DRIVER_VERSION, GI_ID, NUMA_NODE, PARENT_INDEX, PARENT_MINOR, PRODUCT_NAME, PROFILE, TYPE,
};
use graft_api::capacity;
use graft_driver_core::discovery::pcie::pcie_root;
use graft_driver_core::error::Result;
use graft_driver_core::model::{Attribute, Device, Kind, PCIE_ROOT_ATTRIBUTE};

/// One GPU's devices: the whole GPU, its MIG devices, or its dynamic-MIG placements.
pub fn gpu_devices(
    c: &NvidiaConfig,
    ledger: &MigLedger,
    g: &Gpu,
    common: &Common,
) -> Result<Vec<Device>> {
    // Values NVML could not read are left out (logged by the NVML reader).
    let mut shared = BTreeMap::new();
    for (k, v) in [
        (PRODUCT_NAME, &g.name),
        (BRAND, &g.brand),
        (ARCHITECTURE, &g.architecture),
    ] {
        if let Some(v) = v {
            shared.insert(k.to_string(), Attribute::String(v.clone()));
        }
    }
    if let Some((major, minor)) = g.compute_capability {
        shared.insert(
            CUDA_COMPUTE_CAPABILITY.into(),
            Attribute::Version(format!("{major}.{minor}.0")),
        );
    }
    shared.insert(
        DRIVER_VERSION.into(),
        Attribute::Version(common.driver_version.clone()),
    );
    if let Some(v) = &common.cuda_version {
        shared.insert(CUDA_DRIVER_VERSION.into(), Attribute::Version(v.clone()));
    }
    shared.insert(PCI_BUS_ID.into(), Attribute::String(g.pci_bus_id.clone()));
    let pci_dir = c.sys_root.join("bus/pci/devices").join(&g.pci_bus_id);
    if let Some(root) = pcie_root(&c.sys_root, &pci_dir) {
        shared.insert(PCIE_ROOT_ATTRIBUTE.into(), Attribute::String(root));
    }
    if let Some(numa) = numa_node(&pci_dir) {
        shared.insert(NUMA_NODE.into(), Attribute::Int(numa));
    }
    if let Some(clique) = &g.clique {
        shared.insert(CLIQUE_ID.into(), Attribute::String(clique.clone()));
    }
    let with_optional = |d: Device| Device {
        optional_edits: common.optional.clone(),
        ..d
    };
    let dynamic = c.dynamic_mig.covers(g);
    if dynamic && !g.mig_enabled {
        tracing::warn!(
            gpu = g.uuid,
            index = g.index,
            "listed for dynamic MIG, but its MIG mode is off; offered as a whole GPU. \
             graft never changes the MIG mode: enable it (nvidia-smi -i <index> -mig 1, \
             with the GPU idle) and restart graft-driver"
        );
    }
    if let (true, Some(layout)) = (dynamic && g.mig_enabled, &g.mig_layout) {
        if c.time_slicing.covers(g) {
            tracing::warn!(
                gpu = g.uuid,
                "listed for time-slicing and dynamic MIG: the instances graft makes are not \
                 shared (only static MIG devices are)"
            );
        }
        let owned = ledger.owned(&g.uuid);
        return Ok(partitions::devices(
            g,
            layout,
            &owned,
            &shared,
            &common.edits,
            c.placement_order,
        )
        .into_iter()
        .map(with_optional)
        .collect());
    }
    if dynamic && g.mig_enabled {
        tracing::warn!(gpu = g.uuid, "listed for dynamic MIG, but NVML gave no MIG profiles; offering its existing MIG devices");
    }
    if !g.mig_enabled {
        let mut d = with_optional(full_gpu(g, &shared, &common.edits));
        // Only whole GPUs: in MIG mode a GPU has no GPU-to-GPU P2P.
        if let Some(island) = &g.nvlink_island {
            nvlink_island(&mut d, island);
        }
        if c.mps.covers(g) {
            mps_shared(&mut d, g.memory_bytes);
        } else if c.time_slicing.covers(g) {
            time_shared(&mut d, c.time_slicing_replicas);
        }
        return Ok(vec![d]);
    }
    // MPS runs on a MIG device as on a GPU (a daemon per device): each static MIG device of a
    // listed GPU is shared so; as with whole GPUs, MPS comes before time-slicing.
    let (mps, sliced) = (c.mps.covers(g), c.time_slicing.covers(g));
    g.migs
        .iter()
        .map(|m| {
            let mut d = mig_device(c, g, m, &shared, &common.edits, &common.majors)?;
            if mps {
                mps_shared(&mut d, Some(m.memory_bytes));
            } else if sliced {
                time_shared(&mut d, c.time_slicing_replicas);
            }
            Ok(with_optional(d))
        })
        .collect()
}

fn mig_device(
    c: &NvidiaConfig,
    g: &Gpu,
    m: &nvml::Mig,
    shared: &BTreeMap<String, Attribute>,
    common: &graft_record::ContainerEdits,
    majors: &BTreeMap<String, u32>,
) -> Result<Device> {
    let caps_major = *majors
        .get("nvidia-caps")
        .ok_or_else(|| fail("MIG is enabled but /proc/devices has no nvidia-caps entry"))?;
    let proc = &c.proc_root;
    let gi_cap = mig_access_cap(proc, g.minor, m.gi, None)?;
    let ci_cap = mig_access_cap(proc, g.minor, m.gi, Some(m.ci))?;
    let mut attributes = shared.clone();
    attributes.insert(TYPE.into(), Attribute::String(graft_api::types::MIG.into()));
    attributes.insert(UUID.into(), Attribute::String(m.uuid.clone()));
    attributes.insert(PARENT_UUID.into(), Attribute::String(g.uuid.clone()));
    attributes.insert(PARENT_MINOR.into(), Attribute::Int(g.minor.into()));
    attributes.insert(PARENT_INDEX.into(), Attribute::Int(g.index.into()));
    attributes.insert(PROFILE.into(), Attribute::String(m.profile.clone()));
    attributes.insert(GI_ID.into(), Attribute::Int(m.gi.into()));
    attributes.insert(CI_ID.into(), Attribute::Int(m.ci.into()));
    let mut capacity = BTreeMap::new();
    capacity.insert(capacity::MEMORY.into(), mebibytes(m.memory_bytes));
    for (k, v) in [
        (capacity::MULTIPROCESSORS, m.multiprocessors),
        (capacity::COPY_ENGINES, m.copy_engines),
        (capacity::DECODERS, m.decoders),
        (capacity::ENCODERS, m.encoders),
        (capacity::JPEG_ENGINES, m.jpeg_engines),
        (capacity::OFA_ENGINES, m.ofa_engines),
    ] {
        capacity.insert(k.to_string(), v.to_string());
    }
    Ok(Device {
        kind: Kind::Partition,
        name: format!("gpu-{}-mig-{}-{}", g.minor, m.gi, m.ci),
        attributes,
        capacity,
        edits: edits::with_common(
            vec![
                edits::gpu_node(g.minor),
                edits::cap_node(caps_major, gi_cap),
                edits::cap_node(caps_major, ci_cap),
            ],
            common,
        ),
        optional_edits: Default::default(),
        consumes: None,
        shared: None,
        binding: None,
    })
}
