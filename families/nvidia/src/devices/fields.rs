//! The values of a device's attributes and capacity, as the API wants them written.

use std::collections::BTreeMap;
use std::path::Path;

use super::edits;
use super::identity::{MINOR, NVLINK_ISLAND, NVLINK_ISLAND_SIZE, SHARING, UUID};
use crate::nvml::{Gpu, Island};
use graft_api::attributes::{INDEX, TYPE};
use graft_api::capacity::{COMPUTE, MEMORY, SHARES};
use graft_api::types;
use graft_driver_core::model::{Attribute, CapacityPolicy, Device, Kind};

pub fn full_gpu(
    g: &Gpu,
    shared: &BTreeMap<String, Attribute>,
    common: &graft_record::ContainerEdits,
) -> Device {
    let mut attributes = shared.clone();
    attributes.insert(TYPE.into(), Attribute::String(types::GPU.into()));
    attributes.insert(UUID.into(), Attribute::String(g.uuid.clone()));
    attributes.insert(INDEX.into(), Attribute::Int(g.index.into()));
    attributes.insert(MINOR.into(), Attribute::Int(g.minor.into()));
    let mut capacity = BTreeMap::new();
    if let Some(bytes) = g.memory_bytes {
        capacity.insert(MEMORY.into(), mebibytes(bytes));
    }
    Device {
        kind: Kind::Whole,
        name: format!("gpu-{}", g.minor),
        attributes,
        capacity,
        edits: edits::with_common(vec![edits::gpu_node(g.minor)], common),
        optional_edits: Default::default(),
        consumes: None,
        shared: None,
        binding: None,
    }
}

/// The NVLink island of a whole GPU, what a multi-GPU claim's `matchAttribute` names.
pub fn nvlink_island(d: &mut Device, island: &Island) {
    d.attributes
        .insert(NVLINK_ISLAND.into(), Attribute::String(island.id.clone()));
    d.attributes.insert(
        NVLINK_ISLAND_SIZE.into(),
        Attribute::Int(island.size.into()),
    );
}

pub fn mebibytes(bytes: u64) -> String {
    format!("{}Mi", bytes >> 20)
}

pub fn numa_node(pci_dir: &Path) -> Option<i64> {
    let n: i64 = std::fs::read_to_string(pci_dir.join("numa_node"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (n >= 0).then_some(n)
}

/// `580.95.05` → `580.95.5`; `550.54` → `550.54.0`: semver has no leading zeros.
pub fn semver(v: &str) -> Option<String> {
    let parts: Vec<u64> = v
        .split('.')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [a] => Some(format!("{a}.0.0")),
        [a, b] => Some(format!("{a}.{b}.0")),
        [a, b, c, ..] => Some(format!("{a}.{b}.{c}")),
        [] => None,
    }
}

/// A whole GPU or a static MIG device (`memory_bytes` its own) offered for sharing through
/// MPS: several claims at once, each consuming a compute percentage and an amount of memory
/// (DRA consumable capacity).
pub fn mps_shared(d: &mut Device, memory_bytes: Option<u64>) {
    d.attributes.insert(
        SHARING.into(),
        Attribute::String(graft_api::sharing::MPS.into()),
    );
    // A MIG device's engines and multiprocessors are not divided (MPS limits only compute
    // and memory): a share consumes none of them.
    let mut policies = undivided(d);
    policies.remove(MEMORY);
    d.capacity.insert(COMPUTE.into(), "100".into());
    policies.insert(
        COMPUTE.to_string(),
        CapacityPolicy {
            default: "100".into(),
            min: "1".into(),
            max: "100".into(),
            step: "1".into(),
        },
    );
    if let Some(bytes) = memory_bytes {
        let all = mebibytes(bytes);
        policies.insert(
            MEMORY.to_string(),
            CapacityPolicy {
                default: all.clone(),
                min: "1Mi".into(),
                max: all,
                step: "1Mi".into(),
            },
        );
    }
    d.shared = Some(policies);
}

/// Policies for each capacity `d` has now under which a claim consumes none of it unless it
/// asks: what several claims of one device do not divide. A capacity of 0 (a MIG device
/// without encoders) gets none: the API server refuses a step larger than the capacity,
/// and without a policy a claim consumes all of nothing.
fn undivided(d: &Device) -> BTreeMap<String, CapacityPolicy> {
    d.capacity
        .iter()
        .filter(|(_, v)| v.trim_end_matches("Mi") != "0")
        .map(|(k, v)| {
            // Memory is written in Mi: a step of 1Mi divides it; counts step by one.
            let step = if v.ends_with("Mi") { "1Mi" } else { "1" };
            let policy = CapacityPolicy {
                default: "0".into(),
                min: "0".into(),
                max: v.clone(),
                step: step.into(),
            };
            (k.clone(), policy)
        })
        .collect()
}

/// A whole GPU or a static MIG device time-sliced among claims: `replicas` shares, one
/// consumed by a claim unless it asks for more. Its other capacity (memory, engines) is
/// not divided: a claim consumes none of it, since nothing would hold it to a part.
pub fn time_shared(d: &mut Device, replicas: u32) {
    d.attributes.insert(
        SHARING.into(),
        Attribute::String(graft_api::sharing::TIME_SLICING.into()),
    );
    let mut policies = undivided(d);
    d.capacity.insert(SHARES.into(), replicas.to_string());
    policies.insert(
        SHARES.to_string(),
        CapacityPolicy {
            default: "1".into(),
            min: "1".into(),
            max: replicas.to_string(),
            step: "1".into(),
        },
    );
    d.shared = Some(policies);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_versions_as_semver() {
        assert_eq!(semver("580.95.05").as_deref(), Some("580.95.5"));
        assert_eq!(semver("550.54").as_deref(), Some("550.54.0"));
        assert_eq!(semver("abc"), None);
    }

    #[test]
    fn the_island_has_the_names_claims_and_the_extender_use() {
        // Literal on purpose: graft-scheduler-extender and users' `matchAttribute:
        // graft.dev/nvlinkIsland` read these names; a rename in graft_api must fail here.
        let mut d = Device::new("gpu-0", Kind::Whole);
        let island = Island {
            id: "0000:18:00.0".into(),
            size: 4,
        };
        nvlink_island(&mut d, &island);
        assert_eq!(
            d.attributes.get("nvlinkIsland"),
            Some(&Attribute::String("0000:18:00.0".into()))
        );
        assert_eq!(
            d.attributes.get("nvlinkIslandSize"),
            Some(&Attribute::Int(4))
        );
    }

    /// A static MIG device's capacity, as the scan publishes it: no encoders on an H100's.
    fn mig_device() -> Device {
        Device {
            kind: Kind::Partition,
            name: "gpu-4-mig-1-0".into(),
            attributes: BTreeMap::new(),
            capacity: [
                (MEMORY.to_string(), "9856Mi".to_string()),
                ("multiprocessors".to_string(), "16".to_string()),
                ("encoders".to_string(), "0".to_string()),
            ]
            .into(),
            edits: Default::default(),
            optional_edits: Default::default(),
            consumes: None,
            shared: None,
            binding: None,
        }
    }

    /// What the API server checks of a policy: its step fits in the capacity.
    fn steps_fit(d: &Device) {
        for (k, p) in d.shared.iter().flatten() {
            let cap = graft_driver_core::quantity::parse(&d.capacity[k]).unwrap();
            let step = graft_driver_core::quantity::parse(&p.step).unwrap();
            assert!(
                step <= cap,
                "{k}: step {} over capacity {}",
                p.step,
                d.capacity[k]
            );
        }
    }

    #[test]
    fn an_mps_mig_device_divides_compute_and_its_own_memory() {
        let mut d = mig_device();
        mps_shared(&mut d, Some(9856 << 20));
        let p = d.shared.as_ref().unwrap();
        assert_eq!(p[COMPUTE].default, "100");
        assert_eq!(
            (p[MEMORY].default.as_str(), p[MEMORY].max.as_str()),
            ("9856Mi", "9856Mi")
        );
        assert_eq!(p["multiprocessors"].default, "0");
        assert!(!p.contains_key("encoders"), "{p:?}");
        steps_fit(&d);
        assert!(crate::devices::Identity::of(&d).mps);
    }

    #[test]
    fn a_time_shared_device_divides_its_shares_and_nothing_else() {
        let mut d = mig_device();
        time_shared(&mut d, 3);
        steps_fit(&d);
        assert!(!d.shared.as_ref().unwrap().contains_key("encoders"));
        assert_eq!(d.capacity[SHARES], "3");
        let p = d.shared.as_ref().unwrap();
        assert_eq!(
            (p[SHARES].default.as_str(), p[SHARES].max.as_str()),
            ("1", "3")
        );
        assert_eq!(
            (p[MEMORY].default.as_str(), p[MEMORY].step.as_str()),
            ("0", "1Mi")
        );
        assert_eq!(p["multiprocessors"].default, "0");
        assert!(crate::devices::Identity::of(&d).time_shared);
        let api = graft_driver_core::slices::api_device(&d);
        assert_eq!(api.allow_multiple_allocations, Some(true));
    }
}
