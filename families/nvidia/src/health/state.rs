//! Per-device health over time. Pure logic with the clock passed in, so tests need not wait.
//!
//! - A condition comes from an event or from what a probe of the GPU found; a worse one
//!   replaces a milder one, an equal one keeps the first reason (the root cause stays
//!   visible) and only counts as a new event.
//! - **Unhealthy never clears on time.** It clears when a probe of its GPU passes (NVML
//!   reaches it, its memory reads, nothing pending or failed) and NVML's recovery action
//!   reads `NONE`: at once after a recovery-action event saying so, at a probe tick once
//!   the driver had a probe interval since the condition's last event to post an action (a
//!   tick right after an XID must not beat the driver's own recovery action). Where the
//!   driver cannot tell the recovery action (older drivers), only a reset can clear it: the
//!   node's boot differs from the one the condition was last seen in, and the probe passes.
//! - **Degraded** (informational XIDs) clears after a quiet time without new events; with
//!   none configured, as an unhealthy condition whose driver cannot tell the action.
//! - Devices no longer published keep their conditions (not reported) until they come back
//!   or the node reboots; entries come and go with the health store.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use graft_driver_core::health::{whole_seconds, Condition, DeviceHealth, HealthReport};

/// One device's condition and what clearing it depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The condition, its reason and since when.
    pub health: DeviceHealth,
    /// The last event of it (probe findings do not count: they repeat every tick).
    pub last_event: SystemTime,
    /// The node's boot it was last seen in.
    pub boot_id: String,
}

/// NVML's recovery action for a GPU, as a probe read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The action read (NVML's value).
    Read(u64),
    /// This driver has no such field.
    NotSupported,
    /// The read failed.
    Failed,
}

/// What a probe of one GPU says about clearing its devices' conditions (the conditions it
/// found are observed separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probed {
    /// NVML reached the GPU and every read that applies to it passed.
    pub passes: bool,
    /// The GPU's recovery action.
    pub action: Action,
}

/// Health of the devices something has been said about.
pub struct Tracker {
    /// How long a degraded device must be free of new events before it clears; `None`:
    /// only a reset clears it.
    quiet: Option<Duration>,
    /// How long after a condition's last event a probe tick may clear it.
    settle: Duration,
    boot_id: String,
    entries: BTreeMap<String, Entry>,
}

impl Tracker {
    /// A tracker with nothing said yet; `quiet` and `settle` as on [`Tracker`]'s fields.
    pub fn new(quiet: Option<Duration>, settle: Duration, boot_id: &str) -> Self {
        Tracker {
            quiet,
            settle,
            boot_id: boot_id.to_string(),
            entries: BTreeMap::new(),
        }
    }

    /// Conditions kept from an earlier run of graft-driver (see the health store).
    pub fn restore(&mut self, entries: BTreeMap<String, Entry>) {
        self.entries = entries;
    }

    /// Every device's entry, by device name.
    pub fn entries(&self) -> &BTreeMap<String, Entry> {
        &self.entries
    }

    /// Sets (or confirms) a condition on `device`; `event` when an NVML event said it, not a
    /// probe. True when the device's published health changed.
    pub fn observe(
        &mut self,
        device: &str,
        condition: Condition,
        reason: &str,
        message: &str,
        now: SystemTime,
        event: bool,
    ) -> bool {
        let fresh = || DeviceHealth {
            condition,
            reason: reason.to_string(),
            message: message.to_string(),
            since: whole_seconds(now),
        };
        match self.entries.get_mut(device) {
            Some(e) => {
                if event {
                    e.last_event = now;
                }
                e.boot_id.clone_from(&self.boot_id);
                if condition > e.health.condition {
                    e.health = fresh();
                    return true;
                }
                false
            }
            None => {
                self.entries.insert(
                    device.to_string(),
                    Entry {
                        health: fresh(),
                        // A finding of a probe has no event to settle after.
                        last_event: if event { now } else { SystemTime::UNIX_EPOCH },
                        boot_id: self.boot_id.clone(),
                    },
                );
                true
            }
        }
    }

    /// A probe of `device`'s GPU; `prompt` when a recovery-action event asked for it. Clears
    /// the device's condition when the GPU is fine; true when it did.
    pub fn probed(&mut self, device: &str, p: Probed, now: SystemTime, prompt: bool) -> bool {
        let Some(e) = self.entries.get(device) else {
            return false;
        };
        let reset = e.boot_id != self.boot_id;
        let settled = prompt
            || now
                .duration_since(e.last_event)
                .is_ok_and(|d| d >= self.settle);
        let clears = p.passes
            && match e.health.condition {
                Condition::Degraded => self.quiet.is_none() && reset,
                Condition::Unhealthy => match p.action {
                    Action::Read(0) => settled,
                    Action::NotSupported => reset,
                    Action::Read(_) | Action::Failed => false,
                },
            };
        if clears {
            self.entries.remove(device);
        }
        clears
    }

    /// Clears degraded conditions whose quiet time has passed; true when any did.
    pub fn tick(&mut self, now: SystemTime) -> bool {
        let Some(quiet) = self.quiet else {
            return false;
        };
        let before = self.entries.len();
        self.entries.retain(|_, e| {
            e.health.condition != Condition::Degraded
                || now
                    .duration_since(e.last_event)
                    .map(|d| d < quiet)
                    .unwrap_or(true)
        });
        self.entries.len() != before
    }

    /// Forgets the conditions of devices no longer published that date from an earlier
    /// boot: whatever they were, a reboot reset them, and the device is not there to say.
    pub fn prune(&mut self, published: impl Fn(&str) -> bool) -> bool {
        let before = self.entries.len();
        let boot = &self.boot_id;
        self.entries
            .retain(|name, e| published(name) || e.boot_id == *boot);
        self.entries.len() != before
    }

    /// The health of the published devices.
    pub fn report(&self, published: impl Fn(&str) -> bool) -> HealthReport {
        HealthReport {
            devices: self
                .entries
                .iter()
                .filter(|(k, _)| published(k))
                .map(|(k, e)| (k.clone(), e.health.clone()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
