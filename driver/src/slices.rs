//! Turning the node's devices into `resource.k8s.io/v1` ResourceSlices: one pool named
//! after the node, split into slices of at most 128 devices, each owned by the Node.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    Device as ApiDevice, DeviceAttribute, DeviceCapacity, ResourcePool, ResourceSlice,
    ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::discovery::{Attribute, Device};
use crate::health::taints::Tainting;
use crate::limits;

/// The Node that owns the slices, so they go when it goes.
#[derive(Debug, Clone)]
pub struct NodeOwner {
    pub name: String,
    pub uid: String,
}

/// Deterministic slice names: `<node>-<driver>-<index>`, cut to the 253-character limit.
pub fn slice_name(node: &str, driver: &str, index: usize) -> String {
    let suffix = format!("-{index}");
    let mut base = format!("{node}-{driver}");
    base.truncate(253 - suffix.len());
    let base = base.trim_end_matches(['-', '.']);
    format!("{base}{suffix}")
}

fn api_attribute(a: &Attribute) -> DeviceAttribute {
    let mut out = DeviceAttribute::default();
    match a {
        Attribute::Bool(b) => out.bool = Some(*b),
        Attribute::Int(i) => out.int = Some(*i),
        Attribute::String(s) => out.string = Some(s.clone()),
        Attribute::Version(v) => out.version = Some(v.clone()),
    }
    out
}

pub fn api_device(d: &Device) -> ApiDevice {
    ApiDevice {
        name: d.name.clone(),
        attributes: (!d.attributes.is_empty()).then(|| {
            d.attributes
                .iter()
                .map(|(k, v)| (k.clone(), api_attribute(v)))
                .collect::<BTreeMap<_, _>>()
        }),
        capacity: (!d.capacity.is_empty()).then(|| {
            d.capacity
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        DeviceCapacity {
                            value: Quantity(v.clone()),
                            ..Default::default()
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>()
        }),
        ..Default::default()
    }
}

/// The devices that can be published, and the ones dropped with the reason.
pub fn publishable(devices: &[Device]) -> (Vec<&Device>, Vec<(String, String)>) {
    let mut ok = Vec::new();
    let mut dropped = Vec::new();
    for d in devices {
        match limits::check_device(d) {
            Ok(()) => ok.push(d),
            Err(r) => dropped.push((d.name.clone(), r)),
        }
    }
    (ok, dropped)
}

/// The desired slices for a pool generation, with each device's health taints. Empty when
/// there are no devices: a pool without devices is simply not published.
pub fn desired_slices(
    driver: &str,
    owner: &NodeOwner,
    devices: &[&Device],
    generation: i64,
    taints: &Tainting,
) -> Vec<ResourceSlice> {
    let chunks: Vec<&[&Device]> = devices.chunks(limits::MAX_DEVICES_PER_SLICE).collect();
    let count = chunks.len() as i64;
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| ResourceSlice {
            metadata: ObjectMeta {
                name: Some(slice_name(&owner.name, driver, i)),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: owner.name.clone(),
                    uid: owner.uid.clone(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: ResourceSliceSpec {
                driver: driver.to_string(),
                node_name: Some(owner.name.clone()),
                pool: ResourcePool {
                    name: owner.name.clone(),
                    generation,
                    resource_slice_count: count,
                },
                devices: Some(
                    chunk
                        .iter()
                        .map(|d| ApiDevice {
                            taints: taints.for_device(&d.name),
                            ..api_device(d)
                        })
                        .collect(),
                ),
                ..Default::default()
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(i: usize) -> Device {
        Device {
            kind: crate::discovery::Kind::Char,
            name: format!("d{i}"),
            attributes: BTreeMap::from([("type".into(), Attribute::String("t".into()))]),
            capacity: BTreeMap::new(),
            edits: Default::default(),
            optional_edits: Default::default(),
        }
    }

    #[test]
    fn chunks_of_128_with_count_and_owner() {
        let devs: Vec<Device> = (0..300).map(dev).collect();
        let refs: Vec<&Device> = devs.iter().collect();
        let owner = NodeOwner {
            name: "node1".into(),
            uid: "u".into(),
        };
        let slices = desired_slices("graft.dev", &owner, &refs, 7, &Tainting::none("graft.dev"));
        assert_eq!(slices.len(), 3);
        let sizes: Vec<usize> = slices
            .iter()
            .map(|s| s.spec.devices.as_ref().unwrap().len())
            .collect();
        assert_eq!(sizes, [128, 128, 44]);
        for s in &slices {
            assert_eq!(s.spec.pool.resource_slice_count, 3);
            assert_eq!(s.spec.pool.generation, 7);
            assert_eq!(s.spec.node_name.as_deref(), Some("node1"));
            let o = &s.metadata.owner_references.as_ref().unwrap()[0];
            assert_eq!((o.kind.as_str(), o.controller), ("Node", Some(true)));
        }
        assert_eq!(
            slices[2].metadata.name.as_deref(),
            Some("node1-graft.dev-2")
        );
    }

    #[test]
    fn invalid_devices_are_dropped_with_a_reason() {
        let mut bad = dev(1);
        bad.attributes
            .insert("x".into(), Attribute::String("y".repeat(65)));
        let devs = [dev(0), bad];
        let (ok, dropped) = publishable(&devs);
        assert_eq!(ok.len(), 1);
        assert!(dropped[0].1.contains("attribute x"), "{:?}", dropped);
    }

    #[test]
    fn long_names_fit() {
        let n = slice_name(&"n".repeat(250), "graft.dev", 12);
        assert!(n.len() <= 253 && n.ends_with("-12"));
    }
}
