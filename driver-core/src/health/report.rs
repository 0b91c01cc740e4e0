//! What graft knows of each device's condition: the report the monitor publishes.

use std::collections::BTreeMap;
use std::time::SystemTime;

/// How a device is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    /// Working, but something worth knowing happened (an informational XID): visible as a
    /// taint with effect `None`, no effect on scheduling.
    Degraded,
    /// Must not receive new pods (and, when configured, running ones are evicted).
    Unhealthy,
}

/// One device's health, as last determined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceHealth {
    /// Unhealthy or degraded.
    pub condition: Condition,
    /// Short, label-value shaped: `xid-79`, `ecc-double-bit`, `gpu-lost`, `reset-required`.
    pub reason: String,
    /// One line for people: what happened, as `kubectl describe` and Events show it.
    pub message: String,
    /// When the device entered this condition (whole seconds: it becomes a taint's
    /// `timeAdded`, which the API keeps at second precision).
    pub since: SystemTime,
}

/// Device name (as published) to its health; devices absent are healthy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthReport {
    /// Each device with a condition, by name.
    pub devices: BTreeMap<String, DeviceHealth>,
}

impl HealthReport {
    /// The health of `device`; `None` when healthy.
    pub fn get(&self, device: &str) -> Option<&DeviceHealth> {
        self.devices.get(device)
    }

    /// Healthy for the kubelet: anything but [`Condition::Unhealthy`].
    pub fn is_unhealthy(&self, device: &str) -> bool {
        self.get(device)
            .is_some_and(|h| h.condition == Condition::Unhealthy)
    }
}

/// `t` cut to whole seconds.
pub fn whole_seconds(t: SystemTime) -> SystemTime {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(d.as_secs()),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}
