//! The device snapshot graftctl shows (`<state>/devices.json`, format in graft-record):
//! what the publisher last put in the node's ResourceSlices, joined with device health.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use graft_record::devices::{
    write_snapshot, DeviceSnapshot, Health, NodeId, PublishedDevice, DEVICES_VERSION,
};

use crate::health::{Condition, HealthReport};
use crate::model::{Attribute, Device};

/// Writes the snapshot when what it says changes.
pub struct SnapshotWriter {
    state_dir: PathBuf,
    last: Option<DeviceSnapshot>,
}

impl SnapshotWriter {
    /// A writer of `<state_dir>/devices.json`, with nothing written yet.
    pub fn new(state_dir: PathBuf) -> Self {
        SnapshotWriter {
            state_dir,
            last: None,
        }
    }

    /// Records what was published; file I/O on a blocking thread. A failure is logged:
    /// nothing but graftctl reads the file.
    pub async fn published(&mut self, snapshot: DeviceSnapshot) {
        if self.last.as_ref() == Some(&snapshot) {
            return;
        }
        let dir = self.state_dir.clone();
        let mut stamped = snapshot.clone();
        stamped.updated_ms = now_ms();
        match tokio::task::spawn_blocking(move || write_snapshot(&dir, &stamped)).await {
            Ok(Ok(())) => self.last = Some(snapshot),
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot write the device snapshot"),
            Err(e) => tracing::warn!(error = %e, "writing the device snapshot failed internally"),
        }
    }
}

/// The snapshot of `published` devices (`updated_ms` left 0 for comparison).
pub fn snapshot(
    driver: &str,
    node: &str,
    published: &[&Device],
    unpublished: &[(String, String)],
    health: &HealthReport,
) -> DeviceSnapshot {
    DeviceSnapshot {
        version: DEVICES_VERSION,
        driver: driver.to_string(),
        node: node.to_string(),
        driver_version: graft_telemetry::VERSION.to_string(),
        pid: std::process::id(),
        updated_ms: 0,
        devices: published
            .iter()
            .map(|d| PublishedDevice {
                name: d.name.clone(),
                pool: node.to_string(),
                kind: d
                    .string_attribute(graft_api::attributes::TYPE)
                    .unwrap_or_default()
                    .to_string(),
                attributes: d
                    .attributes
                    .iter()
                    .map(|(k, v)| (k.clone(), text(v)))
                    .collect(),
                device_nodes: d
                    .edits
                    .device_nodes
                    .iter()
                    .map(|n| n.path.clone())
                    .collect(),
                nodes: std::iter::once(&d.edits)
                    .chain(d.optional_edits.values())
                    .flat_map(|e| &e.device_nodes)
                    .map(NodeId::of)
                    .collect(),
                shared: d.shared.is_some(),
                health: health.get(&d.name).map(|h| Health {
                    condition: match h.condition {
                        Condition::Unhealthy => "Unhealthy",
                        Condition::Degraded => "Degraded",
                    }
                    .to_string(),
                    reason: h.reason.clone(),
                    message: h.message.clone(),
                    since_ms: h
                        .since
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_millis() as u64)
                        .unwrap_or(0),
                }),
            })
            .collect(),
        unpublished: unpublished.iter().cloned().collect::<BTreeMap<_, _>>(),
    }
}

fn text(v: &Attribute) -> String {
    match v {
        Attribute::Bool(b) => b.to_string(),
        Attribute::Int(i) => i.to_string(),
        Attribute::String(s) | Attribute::Version(s) => s.clone(),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
