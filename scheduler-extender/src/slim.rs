//! What the claim store keeps of each ResourceClaim: only the fields demand and Events read
//! (the index, [`crate::index`], keeps what scoring needs of slices and allocations).
//! Everything else (managedFields, labels, annotations, opaque driver configuration,
//! device statuses, selectors, other drivers' results) is dropped as the watch brings it,
//! and once a claim is allocated its requests and results go too ([`settled`]), so the
//! store's size follows the claims' count, not whatever else they carry. Measured
//! (`what_the_claim_store_keeps_per_claim`): about 1.0 KiB per claim, allocated or not
//! (two-GPU request), plus about 0.2 KiB each for the store's own index; with the index's
//! share (`crate::index`: 0.6 KiB per two-GPU claim, 1.5 KiB per eight-GPU node), an
//! allocated claim costs about 1.8 KiB. The chart's 128 Mi limit, less 16 MiB of request
//! bodies (`intake::BODY_BUDGET`), holds about 5,000 eight-GPU nodes and 55,000 claims;
//! 100,000 claims need a limit of about 256 Mi.

use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationResult, DeviceClaim, DeviceConstraint, DeviceRequest,
    DeviceRequestAllocationResult, DeviceSubRequest, ExactDeviceRequest, ResourceClaim,
    ResourceClaimConsumerReference, ResourceClaimSpec, ResourceClaimStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

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

fn request(r: DeviceRequest) -> DeviceRequest {
    DeviceRequest {
        name: r.name,
        exactly: r.exactly.map(|x| ExactDeviceRequest {
            allocation_mode: x.allocation_mode,
            count: x.count,
            device_class_name: x.device_class_name,
            ..ExactDeviceRequest::default()
        }),
        // demand counts alternatives by class and count only.
        first_available: r.first_available.map(|alts| {
            alts.into_iter()
                .map(|a| DeviceSubRequest {
                    name: a.name,
                    allocation_mode: a.allocation_mode,
                    count: a.count,
                    device_class_name: a.device_class_name,
                    ..DeviceSubRequest::default()
                })
                .collect()
        }),
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

/// An allocated claim, as the claim store keeps it once the index has what it holds:
/// demand skips an allocated claim (its requests are not read) and the index has its
/// devices, so only its identity, Pod owners, that it is allocated, and the pods it is
/// reserved for (which vouch for a pod, `events::vouched`) are left. A claim not yet
/// allocated is left as [`claim`] made it.
pub fn settled(c: &mut ResourceClaim) {
    let Some(status) = c.status.as_mut() else {
        return;
    };
    if status.allocation.is_none() {
        return;
    }
    status.allocation = Some(AllocationResult::default());
    c.spec = ResourceClaimSpec::default();
}

#[cfg(test)]
pub(crate) mod tests;
