use super::*;

fn nodes(slices: &[ResourceSlice], taken: &[(&str, &str)]) -> BTreeMap<String, NodeChannels> {
    let taken = taken
        .iter()
        .map(|(p, d)| (p.to_string(), d.to_string()))
        .collect();
    node_channels(slices, &taken)
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
