//! What the caches keep of each object: only the fields scoring, demand and Events read.
//! Everything else (managedFields, labels, annotations, opaque driver configuration,
//! device statuses, selectors, capacities, other devices' attributes) is dropped as the
//! watch brings it, so the caches' size follows graft's GPUs and the claims' allocations,
//! not whatever else the objects carry. Measured (`what_the_caches_keep_per_object`): about
//! 11.5 KiB per eight-GPU slice and 1.7 KiB per claim with two devices, plus about 0.2 KiB
//! each for the cache's index; so the chart's 128 Mi limit holds about 2,000 eight-GPU
//! nodes and 25,000 claims (about 75 MiB) beside the 16 MiB of request bodies
//! (`intake::BODY_BUDGET`). Bigger clusters need a bigger limit.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    AllocationResult, Device, DeviceAllocationResult, DeviceClaim, DeviceConstraint, DeviceRequest,
    DeviceRequestAllocationResult, ExactDeviceRequest, ResourceClaim,
    ResourceClaimConsumerReference, ResourceClaimSpec, ResourceClaimStatus, ResourceSlice,
    ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::state::ISLAND;
use graft_api::attributes::{MIG_ENABLED, TYPE};

/// The device attributes scoring reads (`state::whole_gpu` and the island).
const ATTRIBUTES: [&str; 3] = [TYPE, MIG_ENABLED, ISLAND];

/// The identity the reflector and the Events need.
fn meta(m: &ObjectMeta, owners: bool) -> ObjectMeta {
    ObjectMeta {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        owner_references: owners.then(|| {
            m.owner_references
                .iter()
                .flatten()
                .filter(|o| o.kind == "Pod")
                .map(|o| OwnerReference {
                    api_version: o.api_version.clone(),
                    kind: o.kind.clone(),
                    name: o.name.clone(),
                    uid: o.uid.clone(),
                    ..OwnerReference::default()
                })
                .collect()
        }),
        ..ObjectMeta::default()
    }
}

/// `s` reduced to its pool, node and GPU devices (`type` gpu) with the attributes read.
pub fn slice(driver: &str, s: &mut ResourceSlice) {
    // Unqualified, or qualified with the driver's domain (as `state` reads them).
    let is = |name: &str, attr: &str| {
        name == attr || name.strip_prefix(driver).and_then(|r| r.strip_prefix('/')) == Some(attr)
    };
    let keep = |name: &str| ATTRIBUTES.iter().any(|a| is(name, a));
    let devices = s.spec.devices.take().map(|ds| {
        ds.into_iter()
            .filter_map(|d| {
                let attrs: BTreeMap<_, _> = d
                    .attributes?
                    .into_iter()
                    .filter(|(k, _)| keep(k.as_str()))
                    .collect();
                let gpu = attrs.iter().any(|(k, v)| {
                    is(k.as_str(), TYPE) && v.string.as_deref() == Some(graft_api::types::GPU)
                });
                gpu.then(|| Device {
                    name: d.name,
                    attributes: Some(attrs),
                    ..Device::default()
                })
            })
            .collect()
    });
    s.metadata = meta(&s.metadata, false);
    s.spec = ResourceSliceSpec {
        devices,
        driver: std::mem::take(&mut s.spec.driver),
        node_name: s.spec.node_name.take(),
        pool: std::mem::take(&mut s.spec.pool),
        ..ResourceSliceSpec::default()
    };
}

fn request(r: DeviceRequest) -> DeviceRequest {
    DeviceRequest {
        name: r.name,
        exactly: r.exactly.map(|x| ExactDeviceRequest {
            allocation_mode: x.allocation_mode,
            count: x.count,
            device_class_name: x.device_class_name,
            ..ExactDeviceRequest::default()
        }),
        // demand counts no firstAvailable request: nothing of it is read.
        first_available: None,
    }
}

/// `c` reduced to its identity, Pod owners, requests and constraints, `driver`'s
/// allocated devices and the pods it is reserved for.
pub fn claim(driver: &str, c: &mut ResourceClaim) {
    c.metadata = meta(&c.metadata, true);
    let devices = c.spec.devices.take().map(|d| DeviceClaim {
        constraints: d.constraints.map(|cs| {
            cs.into_iter()
                .map(|x| DeviceConstraint {
                    match_attribute: x.match_attribute,
                    requests: x.requests,
                    distinct_attribute: None,
                })
                .collect()
        }),
        requests: d.requests.map(|rs| rs.into_iter().map(request).collect()),
        config: None,
    });
    c.spec = ResourceClaimSpec { devices };
    c.status = c.status.take().map(|s| ResourceClaimStatus {
        allocation: s.allocation.map(|a| AllocationResult {
            devices: Some(DeviceAllocationResult {
                results: Some(
                    a.devices
                        .and_then(|d| d.results)
                        .into_iter()
                        .flatten()
                        .filter(|r| r.driver == driver)
                        .map(|r| DeviceRequestAllocationResult {
                            device: r.device,
                            driver: r.driver,
                            pool: r.pool,
                            request: r.request,
                            ..DeviceRequestAllocationResult::default()
                        })
                        .collect(),
                ),
                config: None,
            }),
            ..AllocationResult::default()
        }),
        reserved_for: s.reserved_for.map(|rs| {
            rs.into_iter()
                .filter(|r| r.resource == "pods")
                .map(|r| ResourceClaimConsumerReference {
                    api_group: r.api_group,
                    name: r.name,
                    resource: r.resource,
                    uid: r.uid,
                })
                .collect()
        }),
        devices: None,
    });
}

#[cfg(test)]
pub(crate) mod tests;
