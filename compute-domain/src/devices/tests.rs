use super::*;
use crate::clique::{channel_slice, node_channels};

/// Node `a`'s slice: three channels of clique u.1, a GPU with a MIG device of it, a second
/// GPU, and a device placement does not read.
fn tray() -> ResourceSlice {
    let mut s = channel_slice("a", "u.1", 3);
    let more: Vec<Device> = serde_json::from_value(serde_json::json!([
        {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-a"},
            "productName": {"string": "x".repeat(100)}}},
        {"name": "gpu-0-mig-1-0", "attributes": {"type": {"string": "mig"},
            "uuid": {"string": "MIG-a"}, "parentUUID": {"string": "GPU-a"}}},
        {"name": "gpu-1", "attributes": {"graft.dev/type": {"string": "gpu"},
            "graft.dev/uuid": {"string": "GPU-b"}}},
        {"name": "imex-daemon-0", "attributes": {"type": {"string": "imex-daemon"}}}]))
    .unwrap();
    s.spec.devices.as_mut().unwrap().extend(more);
    s
}

#[test]
fn a_record_keeps_each_devices_role_and_nothing_else() {
    let r = SliceDevices::of(&tray());
    let roles: Vec<(&str, Role)> = r.devices.iter().map(|(n, r)| (&**n, *r)).collect();
    assert_eq!(
        roles,
        [
            ("imex-channel-0", Role::Channel(0)),
            ("imex-channel-1", Role::Channel(0)),
            ("imex-channel-2", Role::Channel(0)),
            ("gpu-0", Role::Gpu(0)),
            ("gpu-0-mig-1-0", Role::Part(0)),
            ("gpu-1", Role::Gpu(1)),
        ]
    );
    assert_eq!((r.gpu(1), r.clique(0)), ("GPU-b", "u.1"));
    assert_eq!((r.node.as_deref(), &*r.pool), (Some("a"), "a"));
    assert!(r.kept());
}

#[test]
fn placement_reads_the_record_as_it_read_the_slice() {
    let r = [SliceDevices::of(&tray())];
    let free = &node_channels(&r, &Default::default())["a"];
    assert_eq!((free.clique.as_str(), free.free, free.total), ("u.1", 3, 3));
    assert_eq!((free.gpus, free.free_gpus), (2, 2));
    // A MIG device taken makes its GPU busy; a channel taken is no longer free.
    let taken = [
        ("a".to_string(), "gpu-0-mig-1-0".to_string()),
        ("a".to_string(), "imex-channel-2".to_string()),
    ]
    .into();
    let busy = &node_channels(&r, &taken)["a"];
    assert_eq!((busy.free, busy.free_gpus), (2, 1));
}

#[test]
fn a_slice_in_no_clique_or_of_another_driver_keeps_no_devices() {
    let mut gpus_only = tray();
    gpus_only
        .spec
        .devices
        .as_mut()
        .unwrap()
        .retain(|d| !d.name.starts_with("imex-channel"));
    let mut other = tray();
    other.spec.driver = "other.dev".into();
    for s in [gpus_only, other] {
        let r = SliceDevices::of(&s);
        assert!(!r.kept(), "{r:?}");
        assert_eq!(r.node.as_deref(), Some("a"));
        assert!(node_channels([&r], &Default::default()).is_empty());
    }
}

#[test]
fn a_channel_without_a_clique_is_not_one() {
    let mut s = channel_slice("a", "", 2);
    s.spec.devices.as_mut().unwrap()[0] =
        channel_slice("a", "u.1", 1).spec.devices.unwrap()[0].clone();
    let r = SliceDevices::of(&s);
    assert_eq!(r.devices.len(), 1);
    assert_eq!(node_channels([&r], &Default::default())["a"].total, 1);
}

#[test]
fn a_record_costs_far_less_than_the_slice() {
    // A tray's slice as graft-driver publishes it runs to kilobytes of JSON; its record is
    // the names and a few bytes each.
    let r = SliceDevices::of(&tray());
    let names: usize = r.devices.iter().map(|(n, _)| n.len()).sum();
    let table: usize = r.gpus.iter().chain(&r.cliques).map(|s| s.len()).sum();
    let bytes = std::mem::size_of::<SliceDevices>()
        + r.devices.len() * std::mem::size_of::<(Box<str>, Role)>()
        + names
        + table;
    assert!(bytes < 600, "{bytes}");
}

#[test]
fn a_nodes_gpus_in_a_slice_of_their_own_count_when_they_are_in_its_clique() {
    // graft-driver cuts a pool into slices: the GPUs, in the fabric clique, in one; the
    // channels in another.
    let mut gpus = tray();
    gpus.metadata.name = Some("a-gpus".into());
    let devices = gpus.spec.devices.as_mut().unwrap();
    devices.retain(|d| d.name.starts_with("gpu-"));
    for d in devices.iter_mut() {
        let clique = serde_json::from_value(serde_json::json!({"string": "u.1"})).unwrap();
        d.attributes
            .get_or_insert_with(Default::default)
            .insert("cliqueID".into(), clique);
    }
    let r = records(&[channel_slice("a", "u.1", 2), gpus]);
    assert!(r[1].kept());
    let n = &node_channels(&r, &[("a".to_string(), "gpu-1".to_string())].into())["a"];
    assert_eq!((n.total, n.gpus, n.free_gpus), (2, 2, 1));
}
