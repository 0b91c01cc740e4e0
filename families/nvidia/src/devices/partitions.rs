//! Dynamic MIG as partitionable devices: a GPU whose MIG instances graft makes is published
//! as a counter set (its memory slices, compute slices and engines) and one device per
//! possible placement of each GPU instance profile, each consuming the counters it would
//! hold, plus the whole GPU consuming all of them. The scheduler then only allocates
//! combinations that fit; prepare creates the instance (see the setup's dynamic MIG).
//!
//! Placements go in the order that keeps room for big instances (`placement_order`).
//!
//! Instances graft did not create stay the operator's: every placement that overlaps one
//! is left out, the whole GPU too, and the counter totals lose what they use.

use std::collections::{BTreeMap, BTreeSet};

use super::edits;
use super::fields::{full_gpu, mebibytes};
use super::identity::{
    COMPUTE_SLICES, DYNAMIC, PARENT_UUID, PLACEMENT_SIZE, PLACEMENT_START, PROFILE_ID,
};
use super::placement_order::{self, PlacementOrder};
use crate::nvml::{GiInstance, GiProfile, Gpu, MigLayout};
use graft_api::attributes::{MIG_ENABLED, PARENT_INDEX, PARENT_MINOR, PROFILE, TYPE};
use graft_api::capacity;
use graft_driver_core::model::{Attribute, Consumption, Device, Kind};

/// The memory-slice counter of slice `i`.
fn slice_counter(i: u32) -> String {
    format!("memory-slice-{i}")
}

/// The counter set of a GPU: a DNS label unique in the pool.
pub fn counter_set(minor: u32) -> String {
    format!("gpu-{minor}-mig")
}

/// A placement device's name: `gpu-<minor>-mig-<profile>-<start>`, the profile as a DNS
/// label (`1g.10gb+me` → `1g-10gb-me`).
pub fn placement_name(minor: u32, profile: &str, start: u32) -> String {
    let label: String = profile
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("gpu-{minor}-mig-{}-{start}", label.trim_matches('-'))
}

/// What one instance of `p` at `(start, size)` takes from the GPU.
fn use_of(p: &GiProfile, start: u32, size: u32) -> BTreeMap<String, i64> {
    let mut c: BTreeMap<String, i64> = (start..start + size)
        .map(|i| (slice_counter(i), 1))
        .collect();
    for (k, v) in engines(p) {
        c.insert(k.to_string(), v);
    }
    c
}

fn engines(p: &GiProfile) -> [(&'static str, i64); 6] {
    [
        (COMPUTE_SLICES, p.slices.into()),
        ("copy-engines", p.copy_engines.into()),
        ("decoders", p.decoders.into()),
        ("encoders", p.encoders.into()),
        ("jpeg-engines", p.jpeg_engines.into()),
        ("ofa-engines", p.ofa_engines.into()),
    ]
}

/// The GPU's totals: what its largest profile (the whole GPU as one instance) takes.
fn totals(layout: &MigLayout) -> BTreeMap<String, i64> {
    let Some(whole) = layout
        .profiles
        .iter()
        .max_by_key(|p| (p.slices, p.memory_mib))
    else {
        return BTreeMap::new();
    };
    let slices = layout
        .profiles
        .iter()
        .flat_map(|p| p.placements.iter().map(|(s, n)| s + n))
        .max()
        .unwrap_or(0);
    let mut t = use_of(whole, 0, slices);
    t.retain(|_, v| *v > 0);
    t
}

fn overlaps(a: (u32, u32), b: &GiInstance) -> bool {
    a.0 < b.start + b.size && b.start < a.0 + a.1
}

/// The devices of a dynamic-MIG GPU. `owned` holds the `(profile id, start)` of the
/// instances graft created on it (from its checkpoint); every other instance is foreign.
pub fn devices(
    g: &Gpu,
    layout: &MigLayout,
    owned: &BTreeSet<(u32, u32)>,
    shared: &BTreeMap<String, Attribute>,
    common: &graft_record::ContainerEdits,
    order: PlacementOrder,
) -> Vec<Device> {
    let set = counter_set(g.minor);
    let mut available = totals(layout);
    let foreign: Vec<&GiInstance> = layout
        .instances
        .iter()
        .filter(|i| !owned.contains(&(i.profile, i.start)))
        .collect();
    for f in &foreign {
        if let Some(p) = layout.profiles.iter().find(|p| p.id == f.profile) {
            for (k, v) in engines(p) {
                if let Some(t) = available.get_mut(k) {
                    *t = (*t - v).max(0);
                }
            }
        }
    }
    if !foreign.is_empty() {
        tracing::info!(
            gpu = g.uuid,
            instances = ?foreign.iter().map(|f| (f.id, f.start, f.size)).collect::<Vec<_>>(),
            "GPU instances graft did not create: their placements are not offered"
        );
    }
    let consumption = |counters: BTreeMap<String, i64>| Consumption {
        set: set.clone(),
        counters: counters
            .into_iter()
            .filter(|(k, v)| *v > 0 && available.contains_key(k))
            .collect(),
        totals: available.clone(),
    };
    let mut out = Vec::new();
    if foreign.is_empty() {
        let mut whole = full_gpu(g, shared, common);
        whole
            .attributes
            .insert(MIG_ENABLED.into(), Attribute::Bool(true));
        whole.consumes = Some(consumption(available.clone()));
        out.push(whole);
    }
    for p in &layout.profiles {
        for (start, size) in placement_order::ordered(layout, p, order) {
            if foreign.iter().any(|f| overlaps((start, size), f)) {
                continue;
            }
            let mut attributes = shared.clone();
            attributes.insert(TYPE.into(), Attribute::String(graft_api::types::MIG.into()));
            attributes.insert(DYNAMIC.into(), Attribute::Bool(true));
            attributes.insert(PARENT_UUID.into(), Attribute::String(g.uuid.clone()));
            attributes.insert(PARENT_MINOR.into(), Attribute::Int(g.minor.into()));
            attributes.insert(PARENT_INDEX.into(), Attribute::Int(g.index.into()));
            attributes.insert(PROFILE.into(), Attribute::String(p.name.clone()));
            attributes.insert(PROFILE_ID.into(), Attribute::Int(p.id.into()));
            attributes.insert(PLACEMENT_START.into(), Attribute::Int(start.into()));
            attributes.insert(PLACEMENT_SIZE.into(), Attribute::Int(size.into()));
            let mut capacity = BTreeMap::new();
            capacity.insert(capacity::MEMORY.into(), mebibytes(p.memory_mib << 20));
            for (k, v) in [
                (capacity::MULTIPROCESSORS, p.multiprocessors),
                (capacity::COPY_ENGINES, p.copy_engines),
                (capacity::DECODERS, p.decoders),
                (capacity::ENCODERS, p.encoders),
                (capacity::JPEG_ENGINES, p.jpeg_engines),
                (capacity::OFA_ENGINES, p.ofa_engines),
            ] {
                capacity.insert(k.to_string(), v.to_string());
            }
            out.push(Device {
                kind: Kind::Partition,
                name: placement_name(g.minor, &p.name, start),
                attributes,
                capacity,
                // The capability nodes exist once prepare made the instance; its setup
                // adds them.
                edits: edits::with_common(vec![edits::gpu_node(g.minor)], common),
                optional_edits: Default::default(),
                consumes: Some(consumption(use_of(p, start, size))),
                shared: None,
                binding: None,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(
        id: u32,
        name: &str,
        slices: u32,
        dec: u32,
        ofa: u32,
        placements: &[(u32, u32)],
    ) -> GiProfile {
        GiProfile {
            id,
            name: name.into(),
            slices,
            instance_count: placements.len() as u32,
            multiprocessors: slices * 16,
            copy_engines: slices,
            decoders: dec,
            encoders: 0,
            jpeg_engines: dec,
            ofa_engines: ofa,
            memory_mib: u64::from(slices) * 10_000,
            placements: placements.to_vec(),
        }
    }

    fn h100() -> MigLayout {
        MigLayout {
            profiles: vec![
                profile(
                    0,
                    "1g.10gb",
                    1,
                    1,
                    0,
                    &(0..7).map(|s| (s, 1)).collect::<Vec<_>>(),
                ),
                profile(
                    7,
                    "1g.10gb+me",
                    1,
                    1,
                    1,
                    &(0..7).map(|s| (s, 1)).collect::<Vec<_>>(),
                ),
                profile(2, "3g.40gb", 3, 3, 0, &[(0, 4), (4, 4)]),
                profile(3, "4g.40gb", 4, 4, 0, &[(0, 4)]),
                profile(4, "7g.80gb", 7, 7, 1, &[(0, 8)]),
            ],
            instances: vec![],
        }
    }

    fn gpu() -> Gpu {
        Gpu {
            index: 5,
            minor: 7,
            uuid: "GPU-x".into(),
            name: None,
            brand: None,
            architecture: None,
            compute_capability: None,
            memory_bytes: Some(80 << 30),
            pci_bus_id: "0000:ab:00.0".into(),
            mig_enabled: true,
            migs: vec![],
            mig_layout: None,
            clique: None,
            nvlink_island: None,
        }
    }

    #[test]
    fn every_placement_consumes_its_slices_and_the_whole_gpu_all() {
        let devs = devices(
            &gpu(),
            &h100(),
            &BTreeSet::new(),
            &BTreeMap::new(),
            &Default::default(),
            PlacementOrder::default(),
        );
        let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names.len(), 1 + 7 + 7 + 2 + 1 + 1);
        assert!(names.contains(&"gpu-7-mig-1g-10gb-me-6"), "{names:?}");
        let by = |n: &str| devs.iter().find(|d| d.name == n).unwrap();
        let three = by("gpu-7-mig-3g-40gb-4").consumes.as_ref().unwrap();
        assert_eq!(three.set, "gpu-7-mig");
        let slices: Vec<&String> = three
            .counters
            .keys()
            .filter(|k| k.starts_with("memory-slice"))
            .collect();
        assert_eq!(
            slices,
            [
                "memory-slice-4",
                "memory-slice-5",
                "memory-slice-6",
                "memory-slice-7"
            ]
        );
        assert_eq!(three.counters["compute-slices"], 3);
        assert!(!three.counters.contains_key("ofa-engines"));
        assert_eq!(three.totals["compute-slices"], 7);
        assert_eq!(three.totals["memory-slice-7"], 1);
        assert!(
            !three.totals.contains_key("encoders"),
            "a counter nobody uses is left out"
        );
        let whole = by("gpu-7");
        assert_eq!(whole.consumes.as_ref().unwrap().counters, three.totals);
        assert_eq!(whole.attributes["migEnabled"], Attribute::Bool(true));
    }

    #[test]
    fn foreign_instances_take_their_placements_and_engines_away() {
        let mut layout = h100();
        layout.instances = vec![
            GiInstance {
                id: 1,
                profile: 2,
                start: 0,
                size: 4,
            },
            GiInstance {
                id: 2,
                profile: 7,
                start: 5,
                size: 1,
            },
        ];
        // Graft made the +me one; the 3g one is the operator's.
        let owned = BTreeSet::from([(7, 5)]);
        let devs = devices(
            &gpu(),
            &layout,
            &owned,
            &BTreeMap::new(),
            &Default::default(),
            PlacementOrder::default(),
        );
        let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
        assert!(!names.contains(&"gpu-7"), "{names:?}");
        assert!(!names.contains(&"gpu-7-mig-4g-40gb-0"));
        assert!(!names.contains(&"gpu-7-mig-1g-10gb-3"));
        assert!(names.contains(&"gpu-7-mig-3g-40gb-4"));
        assert!(
            names.contains(&"gpu-7-mig-1g-10gb-me-5"),
            "graft's own stays offered"
        );
        let c = devs[0].consumes.as_ref().unwrap();
        assert_eq!(c.totals["compute-slices"], 4);
        assert_eq!(c.totals["decoders"], 4);
    }

    #[test]
    fn names_are_dns_labels() {
        assert_eq!(placement_name(3, "1g.10gb+me", 6), "gpu-3-mig-1g-10gb-me-6");
        assert_eq!(placement_name(0, "7g.80gb", 0), "gpu-0-mig-7g-80gb-0");
    }
}
