use serde_json::json;

use super::*;

const ISLAND: &str = "graft.dev/nvlinkIsland";

fn classes() -> Vec<String> {
    vec!["gpu.graft.dev".to_string()]
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [],
            "resourceClaims": [
                {"name": "direct", "resourceClaimName": "shared"},
                {"name": "made", "resourceClaimTemplateName": "t"},
                {"name": "pending", "resourceClaimTemplateName": "t2"},
            ]
        },
        "status": {"resourceClaimStatuses": [{"name": "made", "resourceClaimName": "p-made-x1"}]}
    }))
    .unwrap()
}

fn claim(name: &str, spec: serde_json::Value, allocated: bool) -> ResourceClaim {
    let mut v = json!({"metadata": {"name": name, "namespace": "ns"}, "spec": {"devices": spec}});
    if allocated {
        v["status"] = json!({"allocation": {"devices": {"results": []}}});
    }
    serde_json::from_value(v).unwrap()
}

#[test]
fn names_come_from_the_spec_and_the_status() {
    // The template claim not made yet has no name to look up.
    assert_eq!(claim_names(&pod()), ["shared", "p-made-x1"]);
}

#[test]
fn counts_unallocated_gpu_requests_and_the_island_constraint() {
    let made = claim(
        "p-made-x1",
        json!({
            "requests": [
                {"name": "gpus", "exactly": {"deviceClassName": "gpu.graft.dev", "allocationMode": "ExactCount", "count": 4}},
                {"name": "one", "exactly": {"deviceClassName": "gpu.graft.dev"}},
                {"name": "nic", "exactly": {"deviceClassName": "nic.example.com", "count": 2}},
                {"name": "all", "exactly": {"deviceClassName": "gpu.graft.dev", "allocationMode": "All"}},
            ],
            "constraints": [{"requests": ["gpus"], "matchAttribute": ISLAND}]
        }),
        false,
    );
    // Already allocated: nothing left to place.
    let shared = claim(
        "shared",
        json!({"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.graft.dev", "count": 8}}]}),
        true,
    );
    let d = of_pod(
        &pod(),
        |n| {
            [&made, &shared]
                .into_iter()
                .find(|c| c.metadata.name.as_deref() == Some(n))
        },
        &classes(),
        ISLAND,
    );
    assert_eq!(
        d,
        Demand {
            gpus: 5,
            one_island: 4,
            unknown_claims: 0
        }
    );
}

#[test]
fn a_constraint_without_requests_covers_them_all_and_a_missing_claim_is_counted() {
    let made = claim(
        "p-made-x1",
        json!({
            "requests": [
                {"name": "a", "exactly": {"deviceClassName": "gpu.graft.dev", "count": 2}},
                {"name": "b", "exactly": {"deviceClassName": "gpu.graft.dev"}},
            ],
            "constraints": [{"matchAttribute": ISLAND}]
        }),
        false,
    );
    let d = of_pod(
        &pod(),
        |n| (n == "p-made-x1").then_some(&made),
        &classes(),
        ISLAND,
    );
    assert_eq!(d.gpus, 3);
    assert_eq!(d.one_island, 3);
    assert_eq!(d.unknown_claims, 1, "shared is not in the cache");
}

#[test]
fn an_island_preference_counts_its_gpus_once_and_requires_no_island() {
    // What the chart's policy makes of a request for four GPUs: the same four either way.
    let made = claim(
        "p-made-x1",
        json!({
            "requests": [
                {"name": "gpus", "firstAvailable": [
                    {"name": "island", "deviceClassName": "gpu.graft.dev", "allocationMode": "ExactCount", "count": 4},
                    {"name": "any", "deviceClassName": "gpu.graft.dev", "allocationMode": "ExactCount", "count": 4}]},
                {"name": "either", "firstAvailable": [
                    {"name": "gpu", "deviceClassName": "gpu.graft.dev"},
                    {"name": "nic", "deviceClassName": "nic.example.com"}]},
            ],
            "constraints": [{"requests": ["gpus/island"], "matchAttribute": ISLAND}]
        }),
        false,
    );
    let d = of_pod(
        &pod(),
        |n| (n == "p-made-x1").then_some(&made),
        &classes(),
        ISLAND,
    );
    assert_eq!(
        d,
        Demand {
            gpus: 4,
            one_island: 0,
            unknown_claims: 1
        }
    );
}
