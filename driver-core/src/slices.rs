//! Turning the node's devices into `resource.k8s.io/v1` ResourceSlices: one pool named
//! after the node, split into slices of at most 128 devices (64 once any device has taints
//! or consumes counters), then the counter sets partitionable devices consume, in slices
//! of their own (the API allows devices or counter sets in a slice, not both), at most 8
//! sets each. Every slice is owned by the Node.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Counter, CounterSet, Device as ApiDevice,
    DeviceAttribute, DeviceCapacity, DeviceCounterConsumption, ResourcePool, ResourceSlice,
    ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::health::taints::Tainting;
use crate::limits;
use crate::model::{Attribute, Device};

/// The Node that owns the slices, so they go when it goes.
#[derive(Debug, Clone)]
pub struct NodeOwner {
    /// The Node's name.
    pub name: String,
    /// The Node's UID.
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

/// The API's form of a device.
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
                    let policy = d.shared.as_ref().and_then(|p| p.get(k));
                    (
                        k.clone(),
                        DeviceCapacity {
                            value: Quantity(v.clone()),
                            request_policy: policy.map(|p| CapacityRequestPolicy {
                                default: Some(Quantity(p.default.clone())),
                                valid_range: Some(CapacityRequestPolicyRange {
                                    min: Quantity(p.min.clone()),
                                    max: Some(Quantity(p.max.clone())),
                                    step: Some(Quantity(p.step.clone())),
                                }),
                                ..Default::default()
                            }),
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>()
        }),
        allow_multiple_allocations: d.shared.is_some().then_some(true),
        binding_conditions: d.binding.as_ref().map(|b| b.ready.clone()),
        binding_failure_conditions: d.binding.as_ref().map(|b| b.failed.clone()),
        consumes_counters: d.consumes.as_ref().map(|c| {
            vec![DeviceCounterConsumption {
                counter_set: c.set.clone(),
                counters: counters(&c.counters),
            }]
        }),
        ..Default::default()
    }
}

fn counters(m: &BTreeMap<String, i64>) -> BTreeMap<String, Counter> {
    m.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                Counter {
                    value: Quantity(v.to_string()),
                },
            )
        })
        .collect()
}

/// The counter sets the devices consume, by name.
fn counter_sets(devices: &[&Device]) -> Vec<CounterSet> {
    let mut sets: BTreeMap<&str, &BTreeMap<String, i64>> = BTreeMap::new();
    for c in devices.iter().filter_map(|d| d.consumes.as_ref()) {
        sets.entry(&c.set).or_insert(&c.totals);
    }
    sets.into_iter()
        .map(|(name, totals)| CounterSet {
            name: name.to_string(),
            counters: counters(totals),
        })
        .collect()
}

/// The devices that can be published, and the ones dropped with the reason.
pub fn publishable(devices: &[Device]) -> (Vec<&Device>, Vec<(String, String)>) {
    let mut ok = Vec::new();
    let mut dropped = Vec::new();
    for d in devices {
        match limits::check_device(d) {
            Ok(()) => ok.push(d),
            Err(r) => dropped.push((d.name.clone(), r.to_string())),
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
    let crowded = devices
        .iter()
        .any(|d| d.consumes.is_some() || taints.for_device(&d.name).is_some());
    let per_slice = if crowded {
        limits::MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS
    } else {
        limits::MAX_DEVICES_PER_SLICE
    };
    let device_specs = devices.chunks(per_slice).map(|chunk| ResourceSliceSpec {
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
    });
    let sets = counter_sets(devices);
    let set_specs = sets
        .chunks(limits::MAX_COUNTER_SETS_PER_SLICE)
        .map(|chunk| ResourceSliceSpec {
            shared_counters: Some(chunk.to_vec()),
            ..Default::default()
        });
    let specs: Vec<ResourceSliceSpec> = device_specs.chain(set_specs).collect();
    let count = specs.len() as i64;
    specs
        .into_iter()
        .enumerate()
        .map(|(i, spec)| ResourceSlice {
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
                ..spec
            },
        })
        .collect()
}

/// The device taints a published slice carries.
pub fn count_taints(s: &ResourceSlice) -> usize {
    s.spec
        .devices
        .iter()
        .flatten()
        .map(|d| d.taints.as_ref().map_or(0, Vec::len))
        .sum()
}

/// The devices of a published slice that allow several allocations.
pub fn count_shared(s: &ResourceSlice) -> usize {
    s.spec
        .devices
        .iter()
        .flatten()
        .filter(|d| d.allow_multiple_allocations == Some(true))
        .count()
}

/// The devices of a published slice with binding conditions.
pub fn count_binding(s: &ResourceSlice) -> usize {
    s.spec
        .devices
        .iter()
        .flatten()
        .filter(|d| d.binding_conditions.as_ref().is_some_and(|c| !c.is_empty()))
        .count()
}

/// The counter sets and counter consumptions of a published slice.
pub fn count_counters(s: &ResourceSlice) -> usize {
    s.spec.shared_counters.as_ref().map_or(0, Vec::len)
        + s.spec
            .devices
            .iter()
            .flatten()
            .map(|d| d.consumes_counters.as_ref().map_or(0, Vec::len))
            .sum::<usize>()
}

/// The published slices are the desired ones (names, pool, node, owner, devices, counters).
pub fn up_to_date(existing: &[ResourceSlice], desired: &[ResourceSlice]) -> bool {
    existing.len() == desired.len()
        && desired.iter().all(|d| {
            existing.iter().any(|e| {
                e.metadata.name == d.metadata.name
                    && e.spec.pool == d.spec.pool
                    && e.spec.node_name == d.spec.node_name
                    && e.metadata.owner_references == d.metadata.owner_references
                    && serde_json::to_value(&e.spec.devices).ok()
                        == serde_json::to_value(&d.spec.devices).ok()
                    && serde_json::to_value(&e.spec.shared_counters).ok()
                        == serde_json::to_value(&d.spec.shared_counters).ok()
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(i: usize) -> Device {
        Device {
            attributes: BTreeMap::from([("type".into(), Attribute::String("t".into()))]),
            ..Device::new(format!("d{i}"), crate::model::Kind::Char)
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
    fn a_shared_device_allows_multiple_allocations_with_its_policies() {
        let mut d = dev(0);
        d.capacity.insert("compute".into(), "100".into());
        d.shared = Some(BTreeMap::from([(
            "compute".to_string(),
            crate::model::CapacityPolicy {
                default: "100".into(),
                min: "1".into(),
                max: "100".into(),
                step: "1".into(),
            },
        )]));
        let api = api_device(&d);
        assert_eq!(api.allow_multiple_allocations, Some(true));
        let p = api.capacity.unwrap()["compute"]
            .request_policy
            .clone()
            .unwrap();
        assert_eq!(p.default.unwrap().0, "100");
        let r = p.valid_range.unwrap();
        assert_eq!((r.min.0.as_str(), r.max.unwrap().0.as_str()), ("1", "100"));
        assert_eq!(api_device(&dev(1)).allow_multiple_allocations, None);
    }

    #[test]
    fn counter_sets_go_in_slices_of_their_own() {
        let mut devs: Vec<Device> = (0..100).map(dev).collect();
        for (i, d) in devs.iter_mut().enumerate() {
            d.consumes = Some(crate::model::Consumption {
                set: format!("gpu-{}-mig", i % 10),
                totals: BTreeMap::from([("compute-slices".to_string(), 7)]),
                counters: BTreeMap::from([("compute-slices".to_string(), 1)]),
            });
        }
        let refs: Vec<&Device> = devs.iter().collect();
        let owner = NodeOwner {
            name: "node1".into(),
            uid: "u".into(),
        };
        let slices = desired_slices("graft.dev", &owner, &refs, 1, &Tainting::none("graft.dev"));
        // 100 devices in slices of 64, then 10 counter sets in slices of 8.
        let shape: Vec<(usize, usize)> = slices
            .iter()
            .map(|s| {
                (
                    s.spec.devices.as_ref().map_or(0, Vec::len),
                    s.spec.shared_counters.as_ref().map_or(0, Vec::len),
                )
            })
            .collect();
        assert_eq!(shape, [(64, 0), (36, 0), (0, 8), (0, 2)]);
        assert!(slices.iter().all(|s| s.spec.pool.resource_slice_count == 4));
        let d = &slices[0].spec.devices.as_ref().unwrap()[3];
        let c = &d.consumes_counters.as_ref().unwrap()[0];
        assert_eq!(c.counter_set, "gpu-3-mig");
        assert_eq!(c.counters["compute-slices"].value.0, "1");
        let set = &slices[2].spec.shared_counters.as_ref().unwrap()[0];
        assert_eq!(
            (
                set.name.as_str(),
                set.counters["compute-slices"].value.0.as_str()
            ),
            ("gpu-0-mig", "7")
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
