//! Per-device health over time: conditions set by events, and cleared again when the device
//! has been quiet long enough and NVML can reach it (or the driver says nothing needs
//! doing). Pure logic with the clock passed in, so tests need not wait.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::classify::Verdict;
use super::{whole_seconds, DeviceHealth, HealthReport};

struct Entry {
    health: DeviceHealth,
    last_event: SystemTime,
    /// NVML cannot reach the device: no quiet time clears it until it can.
    lost: bool,
}

/// Health of the devices something has been said about.
pub struct Tracker {
    /// How long a device must be free of new events before its condition is cleared;
    /// `None` keeps conditions until graft-driver restarts (NVIDIA's device plugin's way).
    quiet: Option<Duration>,
    entries: BTreeMap<String, Entry>,
}

impl Tracker {
    pub fn new(quiet: Option<Duration>) -> Self {
        Tracker {
            quiet,
            entries: BTreeMap::new(),
        }
    }

    /// Applies a verdict about `device`; true when its published health changed.
    pub fn observe(&mut self, device: &str, verdict: &Verdict, now: SystemTime) -> bool {
        match verdict {
            Verdict::Recovered => match self.entries.get(device) {
                Some(e) if !e.lost => {
                    self.entries.remove(device);
                    true
                }
                _ => false,
            },
            Verdict::Condition {
                condition,
                reason,
                message,
            } => {
                let lost = reason == "gpu-lost";
                match self.entries.get_mut(device) {
                    Some(e) => {
                        e.last_event = now;
                        e.lost |= lost;
                        // A worse condition replaces a milder one; an equal or milder
                        // one only keeps the device from recovering.
                        if *condition > e.health.condition
                            || (*condition == e.health.condition && e.health.reason != *reason)
                        {
                            let since = if *condition > e.health.condition {
                                whole_seconds(now)
                            } else {
                                e.health.since
                            };
                            e.health = DeviceHealth {
                                condition: *condition,
                                reason: reason.clone(),
                                message: message.clone(),
                                since,
                            };
                            return true;
                        }
                        false
                    }
                    None => {
                        self.entries.insert(
                            device.to_string(),
                            Entry {
                                health: DeviceHealth {
                                    condition: *condition,
                                    reason: reason.clone(),
                                    message: message.clone(),
                                    since: whole_seconds(now),
                                },
                                last_event: now,
                                lost,
                            },
                        );
                        true
                    }
                }
            }
        }
    }

    /// NVML reached `device` again: it may recover once quiet.
    pub fn reachable(&mut self, device: &str, now: SystemTime) {
        if let Some(e) = self.entries.get_mut(device) {
            if e.lost {
                e.lost = false;
                // The quiet time starts now: a GPU back on the bus has not proven itself yet.
                e.last_event = now;
            }
        }
    }

    /// Clears conditions whose quiet time has passed; true when any did.
    pub fn tick(&mut self, now: SystemTime) -> bool {
        let Some(quiet) = self.quiet else {
            return false;
        };
        let before = self.entries.len();
        self.entries.retain(|_, e| {
            e.lost
                || now
                    .duration_since(e.last_event)
                    .map(|d| d < quiet)
                    .unwrap_or(true)
        });
        self.entries.len() != before
    }

    /// Forgets devices that are no longer published.
    pub fn retain(&mut self, published: impl Fn(&str) -> bool) -> bool {
        let before = self.entries.len();
        self.entries.retain(|name, _| published(name));
        self.entries.len() != before
    }

    pub fn report(&self) -> HealthReport {
        HealthReport {
            devices: self
                .entries
                .iter()
                .map(|(k, e)| (k.clone(), e.health.clone()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::classify::{classify, default_informational, Signal};
    use crate::health::Condition;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(s * 1000 + 300)
    }

    fn v(s: Signal) -> Verdict {
        classify(s, &default_informational())
    }

    #[test]
    fn fatal_then_quiet_recovers() {
        let mut t = Tracker::new(Some(Duration::from_secs(10)));
        assert!(t.observe("gpu-2", &v(Signal::Xid(48)), at(100)));
        let h = t.report().devices["gpu-2"].clone();
        assert_eq!(h.condition, Condition::Unhealthy);
        assert_eq!(h.reason, "xid-48");
        // Whole seconds: a taint's timeAdded.
        assert_eq!(h.since, SystemTime::UNIX_EPOCH + Duration::from_secs(100));
        // The same error again restarts the quiet time but changes nothing published.
        assert!(!t.observe("gpu-2", &v(Signal::Xid(48)), at(105)));
        assert!(!t.tick(at(114)));
        assert!(t.tick(at(115)));
        assert!(t.report().devices.is_empty());
    }

    #[test]
    fn worse_replaces_milder_and_milder_does_not_downgrade() {
        let mut t = Tracker::new(Some(Duration::from_secs(10)));
        assert!(t.observe("gpu-2", &v(Signal::Xid(13)), at(1)));
        assert_eq!(t.report().devices["gpu-2"].condition, Condition::Degraded);
        assert!(t.observe("gpu-2", &v(Signal::Xid(79)), at(2)));
        assert_eq!(t.report().devices["gpu-2"].condition, Condition::Unhealthy);
        assert!(!t.observe("gpu-2", &v(Signal::Xid(13)), at(3)));
        assert_eq!(t.report().devices["gpu-2"].reason, "xid-79");
    }

    #[test]
    fn a_lost_gpu_waits_to_be_reachable_then_quiet() {
        let mut t = Tracker::new(Some(Duration::from_secs(5)));
        assert!(t.observe("gpu-0", &v(Signal::Lost), at(0)));
        assert!(!t.tick(at(100)));
        assert!(!t.observe("gpu-0", &v(Signal::RecoveryAction(0)), at(100)));
        t.reachable("gpu-0", at(100));
        assert!(!t.tick(at(104)));
        assert!(t.tick(at(105)));
    }

    #[test]
    fn recovery_action_none_clears_at_once_and_sticky_never_ticks() {
        let mut t = Tracker::new(None);
        t.observe("gpu-1", &v(Signal::RecoveryAction(1)), at(0));
        assert!(!t.tick(at(1_000_000)));
        assert!(t.observe("gpu-1", &v(Signal::RecoveryAction(0)), at(1)));
        assert!(t.report().devices.is_empty());
        t.observe("gpu-1", &v(Signal::Xid(79)), at(0));
        assert!(t.retain(|n| n != "gpu-1"));
    }
}
