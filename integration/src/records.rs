//! Claim records as graft-driver writes them, for the demo, tests and benchmarks.

use graft_record::*;

/// A claim holding one device (`device`, with `edits`) that the listed containers of one
/// pod receive.
pub fn one_device_claim(
    claim_uid: &str,
    claim_name: &str,
    pod_uid: &str,
    containers: &[&str],
    device: &str,
    edits: ContainerEdits,
) -> ClaimRecord {
    ClaimRecord {
        version: FORMAT_VERSION,
        claim: ClaimRef {
            uid: claim_uid.into(),
            namespace: "default".into(),
            name: claim_name.into(),
        },
        devices: vec![DeviceRecord {
            name: device.into(),
            pool: "testbed".into(),
            requests: vec!["dev".into()],
            edits,
        }],
        env: Vec::new(),
        pods: vec![PodRecord {
            uid: pod_uid.into(),
            namespace: "default".into(),
            name: format!("pod-{pod_uid}"),
            containers: containers
                .iter()
                .map(|c| ContainerRecord {
                    name: c.to_string(),
                    devices: vec![device.into()],
                })
                .collect(),
        }],
    }
}

/// A character device node given explicitly, as records carry them.
pub fn char_node(path: &str, major: i64, minor: i64, mode: u32) -> DeviceNode {
    DeviceNode::char(path, major, minor, mode)
}

/// A read-only bind mount of a host file.
pub fn ro_bind(source: &std::path::Path, destination: &str) -> Mount {
    Mount {
        source: source.to_string_lossy().into_owned(),
        destination: destination.into(),
        kind: "bind".into(),
        options: vec!["ro".into(), "nosuid".into(), "nodev".into(), "rbind".into()],
    }
}

/// Writes a record and its pod index entry straight into the state directory `state`, as
/// something other than graft-driver could, bypassing the store's own checks (the attack
/// tests plant what graft-driver would never write).
pub fn plant(state: &std::path::Path, rec: &ClaimRecord) -> anyhow::Result<()> {
    std::fs::write(
        state.join(format!("claims/{}.json", rec.claim.uid)),
        serde_json::to_vec(rec)?,
    )?;
    for pod in &rec.pods {
        std::fs::create_dir_all(state.join(format!("pods/{}", pod.uid)))?;
        std::fs::write(
            state.join(format!("pods/{}/{}", pod.uid, rec.claim.uid)),
            "",
        )?;
    }
    Ok(())
}
