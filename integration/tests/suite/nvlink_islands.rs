//! NVLink islands through the fake NVML: `nvmlDeviceGetP2PStatus` answers per pair as the
//! file `fake-nvml-nvlink` says (integration/fake-nvml/src/nvlink.rs), and graft-driver's
//! discovery publishes each whole GPU's island as `nvlinkIsland` (the PCI address of its
//! first GPU) and `nvlinkIslandSize`, for claims that ask for GPUs of one island.

use std::collections::BTreeMap;

use graft_driver::discovery::Discovery;
use graft_driver::model::{Attribute, Device};
use graft_integration::fake_gpu::FakeNode;

use crate::common::{self, as_host_root};

/// (island, size) of each device that has one, by name.
fn islands(devices: &[Device]) -> BTreeMap<String, (String, i64)> {
    devices
        .iter()
        .filter_map(|d| {
            let island = match d.attributes.get("nvlinkIsland")? {
                Attribute::String(s) => s.clone(),
                other => panic!("{}: nvlinkIsland is {other:?}", d.name),
            };
            let size = match d.attributes.get("nvlinkIslandSize") {
                Some(Attribute::Int(n)) => *n,
                other => panic!("{}: nvlinkIslandSize is {other:?}", d.name),
            };
            Some((d.name.clone(), (island, size)))
        })
        .collect()
}

#[test]
fn nvlink_islands_from_the_fake_topology() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let node = FakeNode::create(dir.path())?;
    let hook = graft_integration::testbed::static_hook()?;
    let d = common::discovery(&node, as_host_root(&node), 0, &hook.to_string_lossy())?;

    // No file: PCIe cards without bridges, no island anywhere.
    assert_eq!(islands(&d.discover()?), BTreeMap::new());

    // Bridged pairs 0-2 and 1-3, and 4..7 through a switch. Names are by minor (index 0 is
    // gpu-2 on bus 0x18, index 2 gpu-0 on 0x3a, ...). Indices 6 and 7 are in MIG mode: no
    // GPU-to-GPU P2P there, so their MIG devices have no island and 4-5 is an island of two.
    node.set_nvlink(&[&[0, 2], &[1, 3], &[4, 5, 6, 7]])?;
    let got = islands(&d.discover()?);
    let want: BTreeMap<String, (String, i64)> = [
        ("gpu-2", "0000:18:00.0"),
        ("gpu-0", "0000:18:00.0"),
        ("gpu-3", "0000:2a:00.0"),
        ("gpu-1", "0000:2a:00.0"),
        ("gpu-6", "0000:9a:00.0"),
        ("gpu-7", "0000:9a:00.0"),
    ]
    .into_iter()
    .map(|(n, i)| (n.to_string(), (i.to_string(), 2)))
    .collect();
    assert_eq!(got, want);

    // A lost GPU (index 2, gpu-0) fails every NVML call, the pair query too: its partner is
    // left alone, and the others keep their islands. The lost GPU itself stays published
    // as last read, for the health monitor to taint (docs/nvidia.md).
    node.inject("2 lost")?;
    let got = islands(&d.discover()?);
    assert!(!got.contains_key("gpu-2"), "{got:?}");
    assert_eq!(got["gpu-3"], ("0000:2a:00.0".to_string(), 2));
    node.inject("2 found")?;

    // One island of every whole GPU.
    node.set_nvlink(&[&[0, 1, 2, 3, 4, 5, 6, 7]])?;
    let got = islands(&d.discover()?);
    assert_eq!(got.len(), 6, "{got:?}");
    assert!(
        got.values().all(|v| v == &("0000:18:00.0".to_string(), 6)),
        "{got:?}"
    );
    Ok(())
}
