use super::*;

fn nodes(slices: &[ResourceSlice], taken: &[(&str, &str)]) -> BTreeMap<String, NodeChannels> {
    let taken = taken
        .iter()
        .map(|(p, d)| (p.to_string(), d.to_string()))
        .collect();
    node_channels(&crate::devices::records(slices), &taken)
}

#[test]
fn picks_the_clique_with_room() {
    let s = [
        channel_slice("a", "u.1", 2),
        channel_slice("b", "u.1", 2),
        channel_slice("c", "u.2", 2),
    ];
    let n = nodes(&s, &[]);
    assert_eq!(n["a"].clique, "u.1");
    assert_eq!(n["c"].free, 2);
    assert_eq!(choose(&n, 2, None).unwrap(), "u.1");
    // One node: the smallest clique that fits.
    assert_eq!(choose(&n, 1, None).unwrap(), "u.2");
}

#[test]
fn full_nodes_do_not_count() {
    let s = [
        channel_slice("a", "u.1", 1),
        channel_slice("b", "u.1", 1),
        channel_slice("c", "u.2", 1),
    ];
    let n = nodes(&s, &[("b", "imex-channel-0")]);
    assert_eq!(n["b"].free, 0);
    assert_eq!(
        choose(&n, 2, None),
        Err(NoClique::TooSmall {
            wanted: 2,
            best: 1,
            clique: "u.1".into()
        })
    );
}

#[test]
fn a_chosen_clique_is_kept() {
    let n = nodes(&[channel_slice("c", "u.2", 1)], &[]);
    assert_eq!(choose(&n, 3, Some("u.1")).unwrap(), "u.1");
    assert_eq!(choose(&BTreeMap::new(), 1, None), Err(NoClique::NoChannels));
}

#[test]
fn other_drivers_and_devices_are_ignored() {
    let mut other = channel_slice("x", "u.9", 2);
    other.spec.driver = "gpu.nvidia.com".into();
    let mut gpu = channel_slice("y", "u.9", 1);
    for d in gpu.spec.devices.iter_mut().flatten() {
        d.attributes.as_mut().unwrap().insert(
            "type".into(),
            k8s_openapi::api::resource::v1::DeviceAttribute {
                string: Some("gpu".into()),
                ..Default::default()
            },
        );
    }
    assert!(nodes(&[other, gpu], &[]).is_empty());
}

/// `count` whole GPUs `gpu-<i>` on `node` (uuid `GPU-<node>-<i>`), and a MIG device of the
/// first, `gpu-0-mig-1-0`, all in fabric clique `clique`, in a slice of their own.
fn gpu_slice(node: &str, clique: &str, count: usize) -> ResourceSlice {
    let mut devices: Vec<serde_json::Value> = (0..count)
        .map(|i| {
            serde_json::json!({"name": format!("gpu-{i}"), "attributes": {
                "type": {"string": "gpu"}, "uuid": {"string": format!("GPU-{node}-{i}")},
                "cliqueID": {"string": clique}}})
        })
        .collect();
    devices.push(serde_json::json!({"name": "gpu-0-mig-1-0", "attributes": {
        "type": {"string": "mig"}, "uuid": {"string": format!("MIG-{node}")},
        "parentUUID": {"string": format!("GPU-{node}-0")}, "cliqueID": {"string": clique}}}));
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{node}-gpus")},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}
    }))
    .unwrap()
}

#[test]
fn nodes_without_a_free_gpu_do_not_count() {
    let s = [
        channel_slice("a", "u.1", 1),
        channel_slice("b", "u.1", 1),
        channel_slice("c", "u.2", 1),
        gpu_slice("a", "u.1", 1),
        gpu_slice("b", "u.1", 2),
        gpu_slice("c", "u.2", 2),
    ];
    // The smallest clique that fits one node is u.2, while c has a free GPU.
    let n = nodes(&s, &[]);
    assert_eq!((n["c"].gpus, n["c"].free_gpus), (2, 2));
    assert_eq!(choose(&n, 1, None).unwrap(), "u.2");
    // c's GPUs busy, one whole and one through its MIG device: u.1 instead.
    let n = nodes(&s, &[("c", "gpu-1"), ("c", "gpu-0-mig-1-0")]);
    assert_eq!((n["c"].free, n["c"].free_gpus), (1, 0));
    assert!(!n["c"].has_room());
    assert_eq!(room_in(&n, "u.2"), 0);
    assert_eq!(choose(&n, 1, None).unwrap(), "u.1");
    // a's only GPU busy: u.1 has one node with room, two are too many.
    let n = nodes(&s, &[("a", "gpu-0"), ("c", "gpu-1"), ("c", "gpu-0")]);
    assert_eq!(room_in(&n, "u.1"), 1);
    let err = choose(&n, 2, None).unwrap_err();
    assert_eq!(
        err,
        NoClique::TooSmall {
            wanted: 2,
            best: 1,
            clique: "u.1".into()
        }
    );
    assert!(err.to_string().contains("a free GPU"), "{err}");
}

#[test]
fn a_node_without_graft_gpus_has_room_with_a_free_channel() {
    let n = nodes(&[channel_slice("a", "u.1", 1)], &[]);
    assert_eq!((n["a"].gpus, n["a"].free_gpus), (0, 0));
    assert!(n["a"].has_room());
    let n = nodes(&[channel_slice("a", "u.1", 1)], &[("a", "imex-channel-0")]);
    assert!(!n["a"].has_room());
}

#[test]
fn an_elastic_domain_asks_for_the_most_room() {
    let s = [
        channel_slice("a", "u.1", 1),
        channel_slice("b", "u.1", 1),
        channel_slice("c", "u.2", 1),
    ];
    let n = nodes(&s, &[]);
    assert_eq!(most_room(&n), 2);
    assert_eq!(choose(&n, most_room(&n), None).unwrap(), "u.1");
    let full = nodes(&s, &[("a", "imex-channel-0"), ("b", "imex-channel-0")]);
    assert_eq!(most_room(&full), 1);
    assert_eq!(choose(&full, most_room(&full), None).unwrap(), "u.2");
    assert_eq!(most_room(&BTreeMap::new()), 0);
}
