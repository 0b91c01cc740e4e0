//! The values of a device's attributes and capacity, as the API wants them written.

use std::collections::BTreeMap;
use std::path::Path;

use super::edits;
use super::nvml::Gpu;
use crate::discovery::{Attribute, Device, Kind};

pub(super) fn full_gpu(
    g: &Gpu,
    shared: &BTreeMap<String, Attribute>,
    common: &graft_record::ContainerEdits,
) -> Device {
    let mut attributes = shared.clone();
    attributes.insert("type".into(), Attribute::String("gpu".into()));
    attributes.insert("uuid".into(), Attribute::String(g.uuid.clone()));
    attributes.insert("index".into(), Attribute::Int(g.index.into()));
    attributes.insert("minor".into(), Attribute::Int(g.minor.into()));
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

pub(super) fn mebibytes(bytes: u64) -> String {
    format!("{}Mi", bytes >> 20)
}

pub(super) fn numa_node(pci_dir: &Path) -> Option<i64> {
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

/// NVML's brand numbers (`nvmlBrandType_t`) as names.
pub(super) fn brand_name(b: u32) -> &'static str {
    match b {
        1 => "Quadro",
        2 => "Tesla",
        3 => "NVS",
        4 => "GRID",
        5 => "GeForce",
        6 => "Titan",
        7 => "NvidiaVApps",
        8 => "NvidiaVPC",
        9 => "NvidiaVCS",
        10 => "NvidiaVWS",
        11 => "NvidiaCloudGaming",
        12 => "QuadroRTX",
        13 => "NvidiaRTX",
        14 => "Nvidia",
        15 => "GeForceRTX",
        16 => "TitanRTX",
        _ => "Unknown",
    }
}

/// NVML's architecture numbers (`nvmlDeviceArchitecture_t`) as names.
pub(super) fn architecture_name(a: u32) -> &'static str {
    match a {
        2 => "Kepler",
        3 => "Maxwell",
        4 => "Pascal",
        5 => "Volta",
        6 => "Turing",
        7 => "Ampere",
        8 => "Ada Lovelace",
        9 => "Hopper",
        10 => "Blackwell",
        _ => "Unknown",
    }
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
