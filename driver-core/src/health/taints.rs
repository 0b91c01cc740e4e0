//! Health as DRA device taints on the published devices.
//!
//! An unhealthy device carries `<driver>/unhealthy=<reason>` with effect `NoSchedule` (or
//! `NoExecute` when the operator wants running pods evicted); a degraded one carries
//! `<driver>/degraded=<reason>` with effect `None`, which only shows. `timeAdded` is when
//! the condition began, so that republishing an unchanged condition writes nothing.
//!
//! While graft-nri has been away past its grace period, every device also carries
//! `<driver>/nri-unavailable` with effect `NoSchedule`: no container on this node would get
//! its devices, so the scheduler should not send new pods here.

use k8s_openapi::api::resource::v1::DeviceTaint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::report::{Condition, HealthReport};
use crate::model::FamilyTaints;

/// The taint key for a condition of `driver`'s devices.
pub fn taint_key(driver: &str, condition: Condition) -> String {
    match condition {
        Condition::Unhealthy => format!("{driver}/unhealthy"),
        Condition::Degraded => format!("{driver}/degraded"),
    }
}

/// What an unhealthy device's taint does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FatalEffect {
    /// New pods are not scheduled on it; running ones stay.
    NoSchedule,
    /// Running pods that use it are evicted as well.
    NoExecute,
}

/// A flag value that is neither taint effect for unhealthy devices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a taint effect for unhealthy devices (NoSchedule or NoExecute)")]
pub struct NotAnEffect(pub String);

impl std::str::FromStr for FatalEffect {
    type Err = NotAnEffect;
    fn from_str(s: &str) -> Result<Self, NotAnEffect> {
        match s {
            "NoSchedule" => Ok(FatalEffect::NoSchedule),
            "NoExecute" => Ok(FatalEffect::NoExecute),
            other => Err(NotAnEffect(other.to_string())),
        }
    }
}

/// Turns a health report into taints for one driver.
#[derive(Debug, Clone)]
pub struct Tainting {
    /// The driver whose devices are tainted (the taint key's prefix).
    pub driver: String,
    /// The effect of the unhealthy taint.
    pub fatal: FatalEffect,
    /// The health of each device.
    pub report: HealthReport,
    /// Since when graft-nri has been away past its grace period, if it is.
    pub nri_outage: Option<std::time::SystemTime>,
    /// What the families taint their own devices with.
    pub family: FamilyTaints,
}

impl Tainting {
    /// No taints at all.
    pub fn none(driver: &str) -> Self {
        Tainting {
            driver: driver.to_string(),
            fatal: FatalEffect::NoSchedule,
            report: HealthReport::default(),
            nri_outage: None,
            family: FamilyTaints::default(),
        }
    }

    /// The taint key for `condition`.
    pub fn key(&self, condition: Condition) -> String {
        taint_key(&self.driver, condition)
    }

    /// The taints of device `name`; `None` when it has none.
    pub fn for_device(&self, name: &str) -> Option<Vec<DeviceTaint>> {
        let mut taints = Vec::new();
        if let Some(h) = self.report.get(name) {
            let effect = match (h.condition, self.fatal) {
                (Condition::Degraded, _) => "None",
                (Condition::Unhealthy, FatalEffect::NoSchedule) => "NoSchedule",
                (Condition::Unhealthy, FatalEffect::NoExecute) => "NoExecute",
            };
            taints.push(taint(self.key(h.condition), &h.reason, effect, h.since));
        }
        if let Some(since) = self.nri_outage {
            let key = format!("{}/nri-unavailable", self.driver);
            taints.push(taint(key, "not-connected", "NoSchedule", since));
        }
        for t in self.family.of(name) {
            let key = format!("{}/{}", self.driver, t.key);
            taints.push(taint(key, &t.value, "NoSchedule", t.since));
        }
        (!taints.is_empty()).then_some(taints)
    }
}

fn taint(key: String, value: &str, effect: &str, since: std::time::SystemTime) -> DeviceTaint {
    let secs = since
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    DeviceTaint {
        key,
        value: Some(value.to_string()),
        effect: effect.to_string(),
        time_added: k8s_openapi::jiff::Timestamp::from_second(secs)
            .ok()
            .map(Time),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::DeviceHealth;
    use std::time::{Duration, SystemTime};

    #[test]
    fn unhealthy_and_degraded_taints() {
        let mut t = Tainting::none("graft.dev");
        assert!(t.for_device("gpu-2").is_none());
        let since = SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000);
        for (name, condition, reason) in [
            ("gpu-2", Condition::Unhealthy, "xid-79"),
            ("gpu-3", Condition::Degraded, "xid-13"),
        ] {
            t.report.devices.insert(
                name.into(),
                DeviceHealth {
                    condition,
                    reason: reason.into(),
                    message: String::new(),
                    since,
                },
            );
        }
        let u = &t.for_device("gpu-2").unwrap()[0];
        assert_eq!(
            (u.key.as_str(), u.value.as_deref(), u.effect.as_str()),
            ("graft.dev/unhealthy", Some("xid-79"), "NoSchedule")
        );
        assert_eq!(
            serde_json::to_value(u).unwrap()["timeAdded"],
            "2026-09-21T14:13:20Z"
        );
        let d = &t.for_device("gpu-3").unwrap()[0];
        assert_eq!(
            (d.key.as_str(), d.effect.as_str()),
            ("graft.dev/degraded", "None")
        );
        t.fatal = "NoExecute".parse().unwrap();
        assert_eq!(t.for_device("gpu-2").unwrap()[0].effect, "NoExecute");
        assert!("PreferNoSchedule".parse::<FatalEffect>().is_err());
        // graft-nri away: every device gets the NRI taint too, beside its own.
        t.nri_outage = Some(since);
        let both = t.for_device("gpu-2").unwrap();
        assert_eq!(both.len(), 2);
        assert_eq!(
            (both[1].key.as_str(), both[1].effect.as_str()),
            ("graft.dev/nri-unavailable", "NoSchedule")
        );
        assert_eq!(t.for_device("gpu-9").unwrap().len(), 1);
    }
}
