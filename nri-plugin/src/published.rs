//! A container's device nodes against what graft-driver published (`<state>/devices.json`,
//! rule in [`graft_record::policy::published`]). The snapshot is read capped, without
//! following a symlink and without blocking on a FIFO ([`graft_record::devices`]), and kept
//! until the file's identity or modification time changes.

use std::borrow::Borrow;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use graft_record::devices::{read_snapshot, DeviceSnapshot};
use graft_record::policy::published::check_nodes;
use graft_record::{ClaimRecord, InvalidRecord, RecordError};

/// (device, inode, mtime s, mtime ns, size) of the file the cached snapshot was read from.
type Key = (u64, u64, i64, i64, u64);

static CACHE: Mutex<Option<(Key, Option<Arc<DeviceSnapshot>>)>> = Mutex::new(None);

/// Why a container's device nodes could not be checked, or failed the check.
#[derive(Debug, thiserror::Error)]
pub enum PublishedError {
    /// The snapshot's file could not be looked at.
    #[error("{}: {source}", path.display())]
    Stat {
        /// The snapshot's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The snapshot could not be read (a symlink, too large, not JSON).
    #[error("the devices graft-driver published: {0}")]
    Read(#[source] RecordError),
    /// A device node of the claim's record is not one graft-driver published.
    #[error("claim {claim}: its record breaks graft's injection policy: {source}")]
    Unpublished {
        /// `namespace/name`.
        claim: String,
        /// Which node, and why.
        source: InvalidRecord,
    },
}

/// The snapshot in `state_dir`; `None` when graft-driver has written none.
fn snapshot(state_dir: &Path) -> Result<Option<Arc<DeviceSnapshot>>, PublishedError> {
    let path = state_dir.join("devices.json");
    let key = match std::fs::symlink_metadata(&path) {
        Ok(m) => (m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.size()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(PublishedError::Stat { path, source }),
    };
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((k, snap)) = cache.as_ref() {
        if *k == key {
            return Ok(snap.clone());
        }
    }
    let snap = read_snapshot(state_dir)
        .map_err(PublishedError::Read)?
        .map(Arc::new);
    *cache = Some((key, snap.clone()));
    Ok(snap)
}

/// Every device node `container` of pod `pod_uid` receives from `claims`, each against the
/// nodes published under its device's name. The error names the claim and the rule.
pub fn check<R: Borrow<ClaimRecord>>(
    claims: &[R],
    pod_uid: &str,
    container: &str,
    state_dir: &Path,
) -> Result<(), PublishedError> {
    let devices: Vec<_> = claims
        .iter()
        .map(Borrow::borrow)
        .flat_map(|c: &ClaimRecord| {
            c.devices_for(pod_uid, container)
                .into_iter()
                .map(move |d| (c, d))
        })
        .filter(|(_, d)| !d.edits.device_nodes.is_empty())
        .collect();
    if devices.is_empty() {
        return Ok(());
    }
    let snap = snapshot(state_dir)?;
    for (rec, dev) in devices {
        check_nodes(
            snap.as_deref(),
            &format!("devices({}).edits", dev.name),
            &dev.name,
            &dev.edits.device_nodes,
        )
        .map_err(|source| PublishedError::Unpublished {
            claim: rec.claim.to_string(),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use graft_record::devices::{write_snapshot, NodeId, PublishedDevice, DEVICES_VERSION};
    use graft_record::DeviceNode;

    fn record(path: &str, major: i64, minor: i64) -> ClaimRecord {
        serde_json::from_value(serde_json::json!({
            "version": graft_record::FORMAT_VERSION,
            "claim": {"uid": "u1", "namespace": "ns", "name": "c"},
            "devices": [{"name": "gpu-0", "edits": {"device_nodes": [
                {"path": path, "type": "c", "major": major, "minor": minor}
            ]}}],
            "pods": [{"uid": "p", "containers": [{"name": "app", "devices": ["gpu-0"]}]}]
        }))
        .unwrap()
    }

    fn publish(dir: &Path, nodes: &[DeviceNode]) {
        let snap = DeviceSnapshot {
            version: DEVICES_VERSION,
            driver: "graft.dev".into(),
            node: "n".into(),
            driver_version: "0".into(),
            pid: 1,
            updated_ms: 0,
            devices: vec![PublishedDevice {
                name: "gpu-0".into(),
                pool: "n".into(),
                kind: "gpu".into(),
                attributes: Default::default(),
                device_nodes: Vec::new(),
                nodes: nodes.iter().map(NodeId::of).collect(),
                shared: false,
                health: None,
            }],
            unpublished: Default::default(),
        };
        write_snapshot(dir, &snap).unwrap();
    }

    #[test]
    fn a_node_passes_while_published_and_not_after() {
        let dir = tempfile::tempdir().unwrap();
        let nvidia0 = DeviceNode::char("/dev/nvidia0", 195, 0, 0o666);
        let recs = [record("/dev/nvidia0", 195, 0)];
        // No snapshot yet: only the policy's own rules.
        assert!(check(&recs, "p", "app", dir.path()).is_ok());
        publish(dir.path(), std::slice::from_ref(&nvidia0));
        assert!(check(&recs, "p", "app", dir.path()).is_ok());
        // Another container of the pod receives nothing: nothing to check.
        assert!(check(&recs, "p", "other", dir.path()).is_ok());
        // Republished without it: the cached snapshot is not used.
        publish(
            dir.path(),
            &[DeviceNode::char("/dev/nvidia1", 195, 1, 0o666)],
        );
        let e = check(&recs, "p", "app", dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("claim ns/c") && e.contains("not a node graft-driver published"),
            "{e}"
        );
        // A symlinked snapshot is refused, not followed.
        std::fs::remove_file(dir.path().join("devices.json")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("devices.json")).unwrap();
        let e = check(&recs, "p", "app", dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("symlink"), "{e}");
    }
}
