use serde_json::json;

use super::*;

fn slice(name: &str, node: &str, generation: i64, devices: serde_json::Value) -> ResourceSlice {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "driver": "graft.dev",
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        }
    }))
    .unwrap()
}

fn gpu(name: &str, island: Option<&str>) -> serde_json::Value {
    let mut attrs = json!({"type": {"string": "gpu"}});
    if let Some(i) = island {
        attrs["nvlinkIsland"] = json!({"string": i});
    }
    json!({"name": name, "attributes": attrs})
}

fn claim(node: &str, devices: &[&str]) -> ResourceClaim {
    let results: Vec<_> = devices
        .iter()
        .map(|d| json!({"request": "gpus", "driver": "graft.dev", "pool": node, "device": d}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {},
        "status": {"allocation": {"devices": {"results": results}}}
    }))
    .unwrap()
}

#[test]
fn whole_gpus_with_islands_and_use() {
    let slices = vec![
        slice(
            "a-0",
            "a",
            2,
            json!([
                gpu("gpu-0", Some("0000:18:00.0")),
                gpu("gpu-1", Some("0000:18:00.0")),
                gpu("gpu-2", None),
                // A MIG placement and a dynamic-MIG GPU offered whole are not whole GPUs.
                {"name": "gpu-3-mig-1g-10gb-6", "attributes": {"type": {"string": "mig"}}},
                {"name": "gpu-3", "attributes": {"type": {"string": "gpu"}, "migEnabled": {"bool": true}}},
                {"name": "fuse", "attributes": {"type": {"string": "fuse"}}},
            ]),
        ),
        // An older generation of the same pool is ignored.
        slice("a-old", "a", 1, json!([gpu("gpu-9", None)])),
        slice("b-0", "b", 1, json!([gpu("gpu-0", None)])),
    ];
    let claims = vec![claim("a", &["gpu-1"]), claim("b", &["other"])];
    let got = nodes("graft.dev", &slices, &claims);
    let a = &got["a"];
    let names: Vec<&str> = a.gpus.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["gpu-0", "gpu-1", "gpu-2"]);
    assert_eq!(a.free(), 2);
    assert_eq!(a.free_by_island(), BTreeMap::from([("0000:18:00.0", 1)]));
    assert!(a.gpus[1].used);
    assert_eq!(got["b"].free(), 1);
}

#[test]
fn other_drivers_are_not_graft_gpus() {
    let mut s = slice("x", "a", 1, json!([gpu("gpu-0", None)]));
    s.spec.driver = "gpu.nvidia.com".into();
    assert!(nodes("graft.dev", &[s], &[]).is_empty());
}
