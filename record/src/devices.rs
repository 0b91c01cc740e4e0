//! What graft-driver last published on this node, with each device's health, for graftctl:
//!
//! ```text
//! <root>/devices.json   DeviceSnapshot (atomic replace), rewritten when it changes
//! ```
//!
//! graftctl shows it; graft-nri reads each published device's [`PublishedDevice::nodes`]
//! back: a record may give a container only nodes published under the device's name (see
//! [`crate::policy::published`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic;
use crate::error::{RecordError, Result};
use crate::format::{DeviceKind, DeviceNode};
use crate::read::{read_state_file, LARGE_FILE_CAP};

/// Version of the snapshot format.
pub const DEVICES_VERSION: u32 = 1;
const FILE: &str = "devices.json";

/// What graft-driver published on this node (`devices.json`), for graftctl.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSnapshot {
    /// [`DEVICES_VERSION`] when written.
    pub version: u32,
    /// The DRA driver name (`graft.dev`).
    pub driver: String,
    /// The node's name.
    pub node: String,
    /// graft-driver's version and process id.
    pub driver_version: String,
    /// graft-driver's process id.
    pub pid: u32,
    /// When this snapshot was written (milliseconds since the epoch).
    pub updated_ms: u64,
    /// The devices in the node's ResourceSlices, by name.
    pub devices: Vec<PublishedDevice>,
    /// Devices found but not published (outside the API's limits), with why.
    #[serde(default)]
    pub unpublished: BTreeMap<String, String>,
}

/// One device of the node's ResourceSlices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishedDevice {
    /// The device's name in the slice.
    pub name: String,
    /// The pool (the node's name).
    pub pool: String,
    /// The `type` attribute: the shipped DeviceClass `<type>.graft.dev` selects on it.
    #[serde(rename = "type")]
    pub kind: String,
    /// Every attribute, as text.
    pub attributes: BTreeMap<String, String>,
    /// Device nodes a container receives (`/dev/fuse`, `/dev/nvidia0`).
    #[serde(default)]
    pub device_nodes: Vec<String>,
    /// The same nodes and those of the device's optional edits, with their type and
    /// numbers: what graft-nri lets a record of this device give a container.
    #[serde(default)]
    pub nodes: Vec<NodeId>,
    /// Several claims may hold it at once (a shared GPU).
    #[serde(default)]
    pub shared: bool,
    /// `None` when healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
}

/// What makes a device node the one it is: where it appears, and what the kernel sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeId {
    /// Path inside the container.
    pub path: String,
    /// Character or block device.
    #[serde(rename = "type")]
    pub kind: DeviceKind,
    /// The device's major number.
    pub major: i64,
    /// The device's minor number.
    pub minor: i64,
}

impl NodeId {
    /// The identity of a record's device node.
    pub fn of(n: &DeviceNode) -> Self {
        NodeId {
            path: n.path.clone(),
            kind: n.kind,
            major: n.major,
            minor: n.minor,
        }
    }
}

/// Why a device is not healthy, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `Unhealthy` or `Degraded`.
    pub condition: String,
    /// A short machine-readable cause (`xid-79`).
    pub reason: String,
    /// The cause in words.
    pub message: String,
    /// When it was first seen (milliseconds since the epoch).
    pub since_ms: u64,
}

fn path(root: &Path) -> PathBuf {
    root.join(FILE)
}

/// Replaces the snapshot (graft-driver). Durable is not needed, atomic is.
pub fn write_snapshot(root: &Path, snapshot: &DeviceSnapshot) -> Result<()> {
    let data = serde_json::to_vec_pretty(snapshot).map_err(|e| RecordError::Corrupt {
        path: path(root),
        reason: format!("cannot encode: {e}"),
    })?;
    atomic::replace_file(&path(root), &data)
}

/// Reads the snapshot; `None` when graft-driver has not written one.
pub fn read_snapshot(root: &Path) -> Result<Option<DeviceSnapshot>> {
    let p = path(root);
    let Some(data) = read_state_file(&p, LARGE_FILE_CAP)? else {
        return Ok(None);
    };
    let snap: DeviceSnapshot = serde_json::from_slice(&data).map_err(|e| {
        // A snapshot of another version is said to be one, not corrupt.
        match serde_json::from_slice::<serde_json::Value>(&data)
            .ok()
            .and_then(|v| v.get("version").and_then(|v| v.as_u64()))
        {
            Some(v) if v != DEVICES_VERSION as u64 => RecordError::UnknownVersion {
                path: p.clone(),
                version: v,
                supported: DEVICES_VERSION,
            },
            _ => RecordError::Corrupt {
                path: p.clone(),
                reason: e.to_string(),
            },
        }
    })?;
    if snap.version != DEVICES_VERSION {
        return Err(RecordError::UnknownVersion {
            path: p,
            version: snap.version as u64,
            supported: DEVICES_VERSION,
        });
    }
    Ok(Some(snap))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_versions() {
        let d = tempfile::tempdir().unwrap();
        assert!(read_snapshot(d.path()).unwrap().is_none());
        let snap = DeviceSnapshot {
            version: DEVICES_VERSION,
            driver: "graft.dev".into(),
            node: "n".into(),
            driver_version: "0.1.0".into(),
            pid: 7,
            updated_ms: 1,
            devices: vec![PublishedDevice {
                name: "fuse".into(),
                pool: "n".into(),
                kind: "fuse".into(),
                attributes: BTreeMap::from([("type".into(), "fuse".into())]),
                device_nodes: vec!["/dev/fuse".into()],
                nodes: vec![NodeId::of(&DeviceNode::char("/dev/fuse", 10, 229, 0o666))],
                shared: false,
                health: None,
            }],
            unpublished: BTreeMap::new(),
        };
        write_snapshot(d.path(), &snap).unwrap();
        assert_eq!(read_snapshot(d.path()).unwrap().unwrap(), snap);
        std::fs::write(d.path().join(FILE), br#"{"version": 2}"#).unwrap();
        let e = read_snapshot(d.path()).unwrap_err().to_string();
        assert!(e.contains("unknown version 2"), "{e}");
    }
}
