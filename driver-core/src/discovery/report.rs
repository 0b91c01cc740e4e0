//! Where a scan's outcome goes: the discovery metrics and the readiness body (through
//! [`DriverMetrics`]), and Events on the Node for each change: `DiscoveryFailed` (Warning)
//! and `DiscoveryRecovered` (Normal) when a backend's scans start failing or work again
//! (`DeviceConfigInvalid` instead of `DiscoveryFailed` when devices.toml is the cause),
//! and the backend's own reason (`GpuUnavailable`, Warning) for a part it could not offer.

use std::time::SystemTime;

use kube::runtime::events::{Event, EventType};

use super::inventory::{Change, Inventory, Scan};
use crate::events::{node_ref, Poster};
use crate::metrics::DriverMetrics;

/// Updates the metrics (and so the readiness body) after a scan.
pub fn record(scan: &Scan, inventory: &Inventory, metrics: &DriverMetrics) {
    metrics.discovery_scanned(
        &inventory.up(),
        &scan.failed,
        inventory
            .failing()
            .into_iter()
            .map(|(name, f)| (name, f.since, f.error))
            .collect(),
    );
}

/// The Event for a change, if it gets one.
pub fn event_for(change: &Change) -> Option<Event> {
    let (type_, reason, note) = match change {
        Change::Failed {
            backend,
            error,
            kept,
            config: true,
        } => return Some(crate::events::node::config_invalid(backend, error, *kept)),
        Change::Failed {
            backend,
            error,
            kept,
            config: false,
        } => (
            EventType::Warning,
            "DiscoveryFailed".to_string(),
            format!(
                "{backend} discovery failed: {error}; its last {kept} device(s) stay published, \
                 the other backends' are unaffected; retried every few seconds"
            ),
        ),
        Change::Recovered {
            backend,
            failed_for,
        } => (
            EventType::Normal,
            "DiscoveryRecovered".to_string(),
            format!(
                "{backend} discovery works again after {} s",
                failed_for.as_secs()
            ),
        ),
        Change::Unavailable { part, .. } => (
            EventType::Warning,
            part.reason.to_string(),
            part.message.clone(),
        ),
        // Logged by the inventory; the device's return is its own news.
        Change::Available { .. } => return None,
    };
    Some(Event {
        type_,
        reason,
        note: Some(note),
        action: "Discover".into(),
        secondary: None,
    })
}

/// Posts the Events of `changes` on the Node.
pub fn post(changes: &[Change], events: &Poster, node: &str) {
    for ev in changes.iter().filter_map(event_for) {
        events.post(ev, node_ref(node));
    }
}

/// Seconds since `t`, for people.
pub fn seconds_since(t: SystemTime) -> u64 {
    SystemTime::now()
        .duration_since(t)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::scan::Unavailable;
    use std::time::Duration;

    #[test]
    fn events_of_changes() {
        let failed = event_for(&Change::Failed {
            backend: "nvidia",
            error: "nvidia discovery: NVML not found".into(),
            kept: 0,
            config: false,
        })
        .unwrap();
        assert_eq!(failed.reason, "DiscoveryFailed");
        assert_eq!(failed.type_, EventType::Warning);
        assert!(failed.note.unwrap().contains("NVML not found"));
        let config = event_for(&Change::Failed {
            backend: "char",
            error: "device config devices.toml: TOML parse error at line 3".into(),
            kept: 2,
            config: true,
        })
        .unwrap();
        assert_eq!(config.reason, "DeviceConfigInvalid");
        assert!(config.note.unwrap().contains("line 3"));
        let back = event_for(&Change::Recovered {
            backend: "nvidia",
            failed_for: Duration::from_secs(12),
        })
        .unwrap();
        assert_eq!(back.reason, "DiscoveryRecovered");
        assert_eq!(back.type_, EventType::Normal);
        let gpu = event_for(&Change::Unavailable {
            backend: "nvidia",
            part: Unavailable {
                key: "k".into(),
                reason: "GpuUnavailable",
                message: "GPU at NVML index 3: GPU is lost".into(),
            },
        })
        .unwrap();
        assert_eq!(gpu.reason, "GpuUnavailable");
        assert_eq!(
            gpu.note.as_deref(),
            Some("GPU at NVML index 3: GPU is lost")
        );
        assert!(event_for(&Change::Available {
            backend: "nvidia",
            key: "k".into()
        })
        .is_none());
    }
}
