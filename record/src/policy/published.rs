//! graft-nri's check of a record's device nodes against what graft-driver published
//! (`devices.json`, [`crate::devices`]): a node must be one published under the record
//! device's own name, by path, type, major and minor, or one a setup adds at prepare (a
//! MIG instance's capability node, a VFIO group node), whose numbers only exist then.
//! A block device is given only when published. A snapshot an older graft-driver wrote
//! (paths, no numbers) matches char nodes by path until the new one rewrites it. Without a snapshot (no graft-driver has run
//! on the node) only the policy's own node rules ([`super::nodes`]) and "no block device"
//! apply: whatever could remove the snapshot could as well write the records.

use crate::devices::{DeviceSnapshot, NodeId};
use crate::error::InvalidRecord;
use crate::format::{DeviceKind, DeviceNode};

/// Whether `n` is a node a setup adds at prepare: `/dev/nvidia-caps/nvidia-cap<N>` with
/// minor N (a MIG instance's capability), or `/dev/vfio/<group>` (vfio-pci's group node).
/// Their major is the kernel's dynamic one for that driver.
fn setup_node(n: &DeviceNode) -> bool {
    let digits = |s: &str| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
    if n.kind != DeviceKind::Char {
        return false;
    }
    if let Some(m) = n.path.strip_prefix("/dev/nvidia-caps/nvidia-cap") {
        return digits(m) && m.parse::<i64>().ok() == Some(n.minor);
    }
    n.path.strip_prefix("/dev/vfio/").is_some_and(digits)
}

/// Each of `nodes`, given by record device `device`, against `snapshot`. `at` names the
/// device's edits in errors.
pub fn check_nodes(
    snapshot: Option<&DeviceSnapshot>,
    at: &str,
    device: &str,
    nodes: &[DeviceNode],
) -> Result<(), InvalidRecord> {
    for (i, n) in nodes.iter().enumerate() {
        let bad = |reason: String| {
            Err(InvalidRecord {
                field: format!("{at}.device_nodes[{i}]"),
                reason,
            })
        };
        let what = format!(
            "device node {:?} ({} {}:{})",
            n.path,
            n.kind.as_str(),
            n.major,
            n.minor
        );
        let Some(snap) = snapshot else {
            if n.kind == DeviceKind::Block {
                return bad(format!(
                    "{what} is a block device, and graft-driver has published none on this node"
                ));
            }
            continue;
        };
        let Some(published) = snap.devices.iter().find(|d| d.name == device) else {
            return bad(format!(
                "{what}: device {device:?} is not one graft-driver publishes on this node"
            ));
        };
        // A snapshot from a graft-driver before `nodes` existed names paths only: matched
        // by path until the new graft-driver rewrites it (at its first publish).
        let old_format = published.nodes.is_empty() && published.device_nodes.contains(&n.path);
        if published.nodes.contains(&NodeId::of(n))
            || (old_format && n.kind == DeviceKind::Char)
            || setup_node(n)
        {
            continue;
        }
        return bad(format!(
            "{what} is not a node graft-driver published for device {device:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::{PublishedDevice, DEVICES_VERSION};

    fn snap() -> DeviceSnapshot {
        let dev = |name: &str, nodes: Vec<DeviceNode>| PublishedDevice {
            name: name.into(),
            pool: "n".into(),
            kind: "x".into(),
            attributes: Default::default(),
            device_nodes: nodes.iter().map(|n| n.path.clone()).collect(),
            nodes: nodes.iter().map(NodeId::of).collect(),
            shared: false,
            health: None,
        };
        let mut disk = DeviceNode::char("/dev/sdb", 8, 16, 0o660);
        disk.kind = DeviceKind::Block;
        DeviceSnapshot {
            version: DEVICES_VERSION,
            driver: "graft.dev".into(),
            node: "n".into(),
            driver_version: "0".into(),
            pid: 1,
            updated_ms: 0,
            devices: vec![
                dev(
                    "gpu-0",
                    vec![DeviceNode::char("/dev/nvidia0", 195, 0, 0o666)],
                ),
                dev("disk", vec![disk]),
            ],
            unpublished: Default::default(),
        }
    }

    #[test]
    fn only_published_nodes_and_setup_nodes_pass() {
        let s = snap();
        let gpu0 = DeviceNode::char("/dev/nvidia0", 195, 0, 0o600);
        let cap = DeviceNode::char("/dev/nvidia-caps/nvidia-cap12", 236, 12, 0o444);
        let group = DeviceNode::char("/dev/vfio/7", 241, 0, 0o666);
        let ok = [gpu0.clone(), cap, group];
        assert!(check_nodes(Some(&s), "e", "gpu-0", &ok).is_ok());
        let mut disk = DeviceNode::char("/dev/sdb", 8, 16, 0o600);
        disk.kind = DeviceKind::Block;
        assert!(check_nodes(Some(&s), "e", "disk", std::slice::from_ref(&disk)).is_ok());
        let mut root_disk = DeviceNode::char("/dev/sda", 8, 0, 0o600);
        root_disk.kind = DeviceKind::Block;
        for (device, n, want) in [
            (
                "gpu-0",
                DeviceNode::char("/dev/nvidia1", 195, 1, 0o666),
                "not a node graft-driver published for device \"gpu-0\"",
            ),
            (
                "gpu-0",
                DeviceNode::char("/dev/nvidia0", 1, 1, 0o666),
                "c 1:1",
            ),
            (
                "gpu-0",
                DeviceNode::char("/dev/nvidia-caps/nvidia-cap12", 236, 13, 0o444),
                "not a node",
            ),
            (
                "gpu-0",
                DeviceNode::char("/dev/vfio/x", 241, 0, 0o444),
                "not a node",
            ),
            ("gpu-0", disk.clone(), "not a node"),
            ("gpu-0", root_disk.clone(), "b 8:0"),
            ("gpu-9", gpu0.clone(), "not one graft-driver publishes"),
        ] {
            let e = check_nodes(Some(&s), "d", device, &[n]).unwrap_err();
            assert!(e.to_string().contains(want), "{e} lacks {want}");
            assert_eq!(e.field, "d.device_nodes[0]");
        }
        // A snapshot without numbers (an older graft-driver's): char nodes by path.
        let mut old = s.clone();
        old.devices[0].nodes.clear();
        assert!(check_nodes(Some(&old), "e", "gpu-0", std::slice::from_ref(&gpu0)).is_ok());
        let other = DeviceNode::char("/dev/nvidia1", 195, 1, 0o666);
        assert!(check_nodes(Some(&old), "e", "gpu-0", &[other]).is_err());
        // Without a snapshot: no block device at all.
        assert!(check_nodes(None, "e", "gpu-9", &[gpu0]).is_ok());
        let e = check_nodes(None, "e", "disk", &[disk]).unwrap_err();
        assert!(e.to_string().contains("block device"), "{e}");
    }
}
