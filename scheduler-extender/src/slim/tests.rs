use serde_json::json;

use super::*;
use crate::{demand, state};
use k8s_openapi::api::resource::v1::ResourceSlice;

fn big_slice() -> ResourceSlice {
    let mut devices: Vec<_> = (0..8)
        .map(|i| {
            json!({"name": format!("gpu-{i}"), "attributes": {
                "type": {"string": "gpu"},
                "graft.dev/nvlinkIsland": {"string": if i < 4 { "a" } else { "b" }},
                "migEnabled": {"bool": i == 7},
                "uuid": {"string": "GPU-0123456789abcdef".repeat(8)},
                "productName": {"string": "x".repeat(200)},
            }, "capacity": {"memory": {"value": "80Gi"}}})
        })
        .collect();
    devices.push(json!({"name": "mig-0", "attributes": {"type": {"string": "mig"}}}));
    devices.push(json!({"name": "nic", "attributes": {"type": {"string": "nic"}}}));
    serde_json::from_value(json!({
        "metadata": {"name": "n1-gpus", "resourceVersion": "7",
                     "labels": {"a": "b"}, "annotations": {"big": "y".repeat(4096)},
                     "managedFields": [{"manager": "graft", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"driver": "graft.dev", "nodeName": "n1",
                 "pool": {"name": "n1", "generation": 3, "resourceSliceCount": 1},
                 "devices": devices}
    }))
    .unwrap()
}

fn big_claim() -> ResourceClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "p-gpus", "namespace": "ns", "uid": "c1", "resourceVersion": "9",
                     "annotations": {"big": "z".repeat(4096)},
                     "ownerReferences": [
                         {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1", "controller": true},
                         {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u2"}],
                     "managedFields": [{"manager": "kcm", "operation": "Update", "fieldsV1": {"f:status": {}}}]},
        "spec": {"devices": {
            "requests": [
                {"name": "gpus", "exactly": {"deviceClassName": "gpu.graft.dev", "count": 2,
                 "selectors": [{"cel": {"expression": "true && ".repeat(100) + "true"}}]}},
                {"name": "alt", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.graft.dev"}]}],
            "constraints": [{"requests": ["gpus"], "matchAttribute": "graft.dev/nvlinkIsland"}],
            "config": [{"opaque": {"driver": "graft.dev", "parameters": {"blob": "q".repeat(4096)}}}]}},
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "gpus", "driver": "graft.dev", "pool": "n1", "device": "gpu-0"},
                {"request": "gpus", "driver": "other.dev", "pool": "n1", "device": "nic-0"}],
                "config": [{"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": {}}}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}],
            "devices": [{"driver": "graft.dev", "pool": "n1", "device": "gpu-0", "data": {"x": "w".repeat(4096)}}]}
    }))
    .unwrap()
}

fn size<T: serde::Serialize>(x: &T) -> usize {
    serde_json::to_vec(x).unwrap().len()
}

#[test]
fn a_slim_claim_gives_the_same_demand_use_and_owners() {
    let whole = big_claim();
    let mut slim = whole.clone();
    claim("graft.dev", &mut slim);
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": [], "resourceClaims": [{"name": "g", "resourceClaimName": "p-gpus"}]}
    }))
    .unwrap();
    let mut pending = whole.clone();
    pending.status = None;
    let mut pending_slim = pending.clone();
    claim("graft.dev", &mut pending_slim);
    let classes = ["gpu.graft.dev".to_string()];
    let island = "graft.dev/nvlinkIsland";
    assert_eq!(
        demand::of_pod(&pod, |_| Some(&pending), &classes, island),
        demand::of_pod(&pod, |_| Some(&pending_slim), &classes, island),
    );
    let slices = [big_slice()];
    assert_eq!(
        state::nodes("graft.dev", slices.iter(), [&whole]),
        state::nodes("graft.dev", slices.iter(), [&slim]),
    );
    let owners = slim.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "only the Pod owner: {owners:?}");
    assert_eq!(
        (owners[0].name.as_str(), owners[0].uid.as_str()),
        ("p", "u1")
    );
    let reserved = slim.status.as_ref().and_then(|s| s.reserved_for.clone());
    assert_eq!(reserved.map(|r| r.len()), Some(1));
    assert!(
        size(&slim) * 8 < size(&whole),
        "{} of {}",
        size(&slim),
        size(&whole)
    );
}

/// Bytes allocated on this thread, less those freed: what the objects built here keep.
pub(crate) mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static HELD: Cell<isize> = const { Cell::new(0) };
    }

    struct Counting;

    fn add(n: isize) {
        let _ = HELD.try_with(|h| h.set(h.get() + n));
    }

    // SAFETY: every call is passed on unchanged to the system allocator; the count beside
    // it touches a thread-local Cell that needs no allocation and has no destructor.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            add(l.size() as isize);
            // SAFETY: the caller's contract for `alloc`, passed on.
            unsafe { System.alloc(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            add(-(l.size() as isize));
            // SAFETY: `p` came from `System` with layout `l`, as the caller promises.
            unsafe { System.dealloc(p, l) }
        }
    }

    #[global_allocator]
    static A: Counting = Counting;

    pub fn held() -> isize {
        HELD.with(Cell::get)
    }
}

/// A claim as the resource claim controller makes one from a pod's template, allocated
/// and reserved: what most of the cache holds.
fn typical_claim(i: usize) -> ResourceClaim {
    serde_json::from_value(json!({
        "metadata": {"name": format!("trainer-{i:05}-gpus-x7k2p"), "namespace": "team-a",
                     "uid": "0f9d3c52-2f6e-4d43-9b7e-9a3c7d0e1a2b", "resourceVersion": "123456789",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": format!("trainer-{i:05}"),
                                          "uid": "7c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f", "controller": true}]},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.graft.dev", "count": 2}}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpus", "driver": "graft.dev", "pool": "node-0001", "device": "gpu-0"},
            {"request": "gpus", "driver": "graft.dev", "pool": "node-0001", "device": "gpu-1"}]}},
            "reservedFor": [{"resource": "pods", "name": format!("trainer-{i:05}"), "uid": "7c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f"}]}
    }))
    .unwrap()
}

/// Once allocated, a claim keeps what vouching reads and says it is allocated: demand
/// skips it as it skipped the fuller one.
#[test]
fn a_settled_claim_keeps_owners_reservations_and_allocation() {
    let mut c = big_claim();
    claim("graft.dev", &mut c);
    let mut settled_c = c.clone();
    settled(&mut settled_c);
    assert!(settled_c.spec.devices.is_none());
    let status = settled_c.status.as_ref().unwrap();
    assert_eq!(status.allocation, Some(AllocationResult::default()));
    assert_eq!(status.reserved_for, c.status.as_ref().unwrap().reserved_for);
    assert_eq!(settled_c.metadata, c.metadata);
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": [], "resourceClaims": [{"name": "g", "resourceClaimName": "p-gpus"}]}
    }))
    .unwrap();
    let classes = ["gpu.graft.dev".to_string()];
    let island = "graft.dev/nvlinkIsland";
    assert_eq!(
        demand::of_pod(&pod, |_| Some(&c), &classes, island),
        demand::of_pod(&pod, |_| Some(&settled_c), &classes, island),
    );
    // Not yet allocated: left as it was.
    let mut pending = c.clone();
    pending.status = None;
    let mut pending_settled = pending.clone();
    settled(&mut pending_settled);
    assert_eq!(pending, pending_settled);
}

/// The figures slim.rs and docs/placement.md give: what the claim store keeps of a claim
/// not yet allocated and of an allocated one, measured (copies, as the store holds them).
#[test]
fn what_the_claim_store_keeps_per_claim() {
    const N: usize = 500;
    let slim_claims: Vec<ResourceClaim> = (0..N)
        .map(|i| {
            let mut c = typical_claim(i);
            claim("graft.dev", &mut c);
            c
        })
        .collect();
    let pending: Vec<ResourceClaim> = slim_claims
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c.status = None;
            c
        })
        .collect();
    let allocated: Vec<ResourceClaim> = slim_claims
        .iter()
        .map(|c| {
            let mut c = c.clone();
            settled(&mut c);
            c
        })
        .collect();
    let kept = |cs: &[ResourceClaim]| {
        let before = counting::held();
        let kept: Vec<std::sync::Arc<ResourceClaim>> =
            cs.iter().map(|c| std::sync::Arc::new(c.clone())).collect();
        let per = (counting::held() - before) / N as isize;
        drop(kept);
        per
    };
    let (per_pending, per_allocated) = (kept(&pending), kept(&allocated));
    eprintln!("kept per claim: {per_pending} B not yet allocated; {per_allocated} B allocated");
    assert!(per_pending < 4096, "a pending claim keeps {per_pending} B");
    assert!(
        per_allocated < 2048,
        "an allocated claim keeps {per_allocated} B"
    );
}
