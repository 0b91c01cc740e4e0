//! A container's device nodes against what graft-driver published (`<state>/devices.json`,
//! rule in [`graft_record::policy::published`]). The snapshot is read capped, without
//! following a symlink and without blocking on a FIFO ([`graft_record::devices`]), and kept
//! until the file's identity or modification time changes.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use graft_record::devices::{read_snapshot, DeviceSnapshot};
use graft_record::policy::published::check_nodes;
use graft_record::ClaimRecord;

/// (device, inode, mtime s, mtime ns, size) of the file the cached snapshot was read from.
type Key = (u64, u64, i64, i64, u64);

static CACHE: Mutex<Option<(Key, Option<Arc<DeviceSnapshot>>)>> = Mutex::new(None);

/// The snapshot in `state_dir`; `None` when graft-driver has written none.
fn snapshot(state_dir: &Path) -> Result<Option<Arc<DeviceSnapshot>>, String> {
    let path = state_dir.join("devices.json");
    let key = match std::fs::symlink_metadata(&path) {
        Ok(m) => (m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.size()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((k, snap)) = cache.as_ref() {
        if *k == key {
            return Ok(snap.clone());
        }
    }
    let snap = read_snapshot(state_dir)
        .map_err(|e| format!("the devices graft-driver published: {e}"))?
        .map(Arc::new);
    *cache = Some((key, snap.clone()));
    Ok(snap)
}

/// Every device node `container` of pod `pod_uid` receives from `claims`, each against the
/// nodes published under its device's name. The error names the claim and the rule.
pub fn check(
    claims: &[ClaimRecord],
    pod_uid: &str,
    container: &str,
    state_dir: &Path,
) -> Result<(), String> {
    let devices: Vec<_> = claims
        .iter()
        .flat_map(|c| {
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
        .map_err(|e| {
            format!(
                "claim {}: its record breaks graft's injection policy: {e}",
                rec.claim
            )
        })?;
    }
    Ok(())
}
