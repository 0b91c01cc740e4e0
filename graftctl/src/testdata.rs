//! Records and snapshots the unit tests render.

use std::collections::BTreeMap;

use graft_record::devices::{DeviceSnapshot, Health, PublishedDevice, DEVICES_VERSION};
use graft_record::*;

/// Claim `demo/fuse-claim` (uid `claim-1`): device `fuse` for container `app` of `demo/web`.
pub fn record() -> ClaimRecord {
    ClaimRecord {
        version: FORMAT_VERSION,
        claim: ClaimRef {
            uid: "claim-1".into(),
            namespace: "demo".into(),
            name: "fuse-claim".into(),
        },
        devices: vec![DeviceRecord {
            name: "fuse".into(),
            pool: "node-a".into(),
            requests: vec!["fuse".into()],
            edits: ContainerEdits {
                device_nodes: vec![DeviceNode::char("/dev/fuse", 10, 229, 0o666)],
                env: vec![EnvVar {
                    name: "FUSE_TOKEN".into(),
                    value: "s3cret".into(),
                }],
                ..Default::default()
            },
        }],
        env: Vec::new(),
        pods: vec![PodRecord {
            uid: "pod-1".into(),
            namespace: "demo".into(),
            name: "web".into(),
            containers: vec![ContainerRecord {
                name: "app".into(),
                devices: vec!["fuse".into()],
            }],
        }],
    }
}

/// Devices `fuse` (held by `record()`) and `gpu-0` (unhealthy, XID 79).
pub fn snapshot() -> DeviceSnapshot {
    let dev = |name: &str, kind: &str, attrs: &[(&str, &str)], nodes: &[&str]| PublishedDevice {
        name: name.into(),
        pool: "node-a".into(),
        kind: kind.into(),
        attributes: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        device_nodes: nodes.iter().map(|n| n.to_string()).collect(),
        nodes: Vec::new(),
        shared: false,
        health: None,
    };
    let mut gpu = dev(
        "gpu-0",
        "gpu",
        &[
            ("type", "gpu"),
            ("uuid", "GPU-1234"),
            ("productName", "H100"),
        ],
        &["/dev/nvidia0"],
    );
    gpu.health = Some(Health {
        condition: "Unhealthy".into(),
        reason: "xid-79".into(),
        message: "GPU has fallen off the bus".into(),
        since_ms: 1,
    });
    DeviceSnapshot {
        version: DEVICES_VERSION,
        driver: "graft.dev".into(),
        node: "node-a".into(),
        driver_version: "0.1.0".into(),
        pid: 42,
        updated_ms: 1,
        devices: vec![
            dev(
                "fuse",
                "fuse",
                &[("type", "fuse"), ("path", "/dev/fuse")],
                &["/dev/fuse"],
            ),
            gpu,
        ],
        unpublished: BTreeMap::new(),
    }
}
