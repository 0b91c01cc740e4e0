//! The values of a device's attributes and capacity, as the API wants them written.

use std::collections::BTreeMap;
use std::path::Path;

use super::edits;
use super::identity::{MINOR, SHARING, UUID};
use crate::discovery::nvidia::nvml::Gpu;
use crate::model::{Attribute, CapacityPolicy, Device, Kind};
use graft_api::{attributes::TYPE, types};

pub fn full_gpu(
    g: &Gpu,
    shared: &BTreeMap<String, Attribute>,
    common: &graft_record::ContainerEdits,
) -> Device {
    let mut attributes = shared.clone();
    attributes.insert(TYPE.into(), Attribute::String(types::GPU.into()));
    attributes.insert(UUID.into(), Attribute::String(g.uuid.clone()));
    attributes.insert("index".into(), Attribute::Int(g.index.into()));
    attributes.insert(MINOR.into(), Attribute::Int(g.minor.into()));
    let mut capacity = BTreeMap::new();
    if let Some(bytes) = g.memory_bytes {
        capacity.insert("memory".into(), mebibytes(bytes));
    }
    Device {
        kind: Kind::Gpu,
        name: format!("gpu-{}", g.minor),
        attributes,
        capacity,
        edits: edits::with_common(vec![edits::gpu_node(g.minor)], common),
        optional_edits: Default::default(),
        consumes: None,
        shared: None,
    }
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

/// A whole GPU offered for sharing through MPS: several claims at once, each consuming a
/// compute percentage and an amount of memory (DRA consumable capacity).
pub fn mps_shared(d: &mut Device, g: &Gpu) {
    d.attributes
        .insert(SHARING.into(), Attribute::String("mps".into()));
    d.capacity.insert("compute".into(), "100".into());
    let mut policies = BTreeMap::new();
    policies.insert(
        "compute".to_string(),
        CapacityPolicy {
            default: "100".into(),
            min: "1".into(),
            max: "100".into(),
            step: "1".into(),
        },
    );
    if let Some(bytes) = g.memory_bytes {
        let all = mebibytes(bytes);
        policies.insert(
            "memory".to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_versions_as_semver() {
        assert_eq!(semver("580.95.05").as_deref(), Some("580.95.5"));
        assert_eq!(semver("550.54").as_deref(), Some("550.54.0"));
        assert_eq!(semver("abc"), None);
    }
}
