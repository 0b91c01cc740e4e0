//! GPUs a scan could not read (NVML fails on them, or their devices cannot be built): one
//! such GPU never takes the others down. A GPU this process published before keeps the
//! devices it last had, so that claims on it stay visible and the health monitor, whose
//! probe finds the same failure, taints them (`gpu-lost` for a GPU off the bus); a GPU
//! never published is left out until a scan reads it. Either way it is reported.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::nvml::FailedGpu;
use graft_driver_core::backend::scan::Unavailable;
use graft_driver_core::model::Device;

/// The Event reason of a GPU the scan could not read.
pub const REASON: &str = "GpuUnavailable";

/// One GPU's devices as a scan built them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDevices {
    /// NVML index.
    pub index: u32,
    /// The GPU's UUID.
    pub uuid: String,
    /// What the scan built of it.
    pub devices: Vec<Device>,
}

/// What each GPU last published, and what the last scan could not read.
#[derive(Default)]
pub struct Unread {
    /// By NVML index.
    published: Mutex<BTreeMap<u32, GpuDevices>>,
    last: Mutex<Vec<Unavailable>>,
}

impl Unread {
    /// The devices to publish for this scan's GPUs: those read, and those kept for GPUs that
    /// failed after an earlier scan published them.
    pub fn settle(&self, read: Vec<GpuDevices>, failed: &[FailedGpu]) -> Vec<Device> {
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<Device> = Vec::new();
        for g in read {
            out.extend(g.devices.iter().cloned());
            published.insert(g.index, g);
        }
        let mut report = Vec::new();
        for f in failed {
            let who = match &f.uuid {
                Some(u) => format!("GPU at NVML index {} ({u})", f.index),
                None => format!("GPU at NVML index {}", f.index),
            };
            // Kept only when it is the same GPU, as far as NVML still says.
            let kept = published
                .get(&f.index)
                .filter(|p| f.uuid.as_ref().is_none_or(|u| *u == p.uuid));
            let message = match kept {
                Some(p) => {
                    out.extend(p.devices.iter().cloned());
                    format!(
                        "{who}: {}; its {} device(s) stay published as last read, tainted \
                         by the health monitor while NVML cannot reach it",
                        f.error,
                        p.devices.len()
                    )
                }
                None => format!(
                    "{who}: {}; left out until a scan reads it (the other GPUs are offered)",
                    f.error
                ),
            };
            report.push(Unavailable {
                key: format!("nvidia-gpu-index-{}", f.index),
                reason: REASON,
                message,
            });
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        // Logged when it is new: a failing GPU is rescanned every few seconds.
        for u in report.iter().filter(|u| !last.contains(u)) {
            tracing::warn!(key = u.key, "{}", u.message);
        }
        *last = report;
        out
    }

    /// What the last scan could not read.
    pub fn unavailable(&self) -> Vec<Unavailable> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graft_driver_core::model::Kind;

    fn dev(name: &str) -> Device {
        Device::new(name, Kind::Whole)
    }

    fn gpu(index: u32, uuid: &str, names: &[&str]) -> GpuDevices {
        GpuDevices {
            index,
            uuid: uuid.into(),
            devices: names.iter().map(|n| dev(n)).collect(),
        }
    }

    fn failed(index: u32, uuid: Option<&str>) -> FailedGpu {
        FailedGpu {
            index,
            uuid: uuid.map(str::to_string),
            error: format!("device {index}: GPU is lost"),
            lost: true,
        }
    }

    fn names(d: &[Device]) -> Vec<&str> {
        d.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn published_gpus_keep_their_devices_new_ones_are_left_out() {
        let u = Unread::default();
        // Index 1 fails before any scan published it: left out.
        let out = u.settle(vec![gpu(0, "GPU-a", &["gpu-2"])], &[failed(1, None)]);
        assert_eq!(names(&out), ["gpu-2"]);
        let r = u.unavailable();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].reason, "GpuUnavailable");
        assert!(r[0].message.contains("NVML index 1"), "{}", r[0].message);
        assert!(r[0].message.contains("left out"), "{}", r[0].message);

        // Both read; then index 0 fails: kept as last read.
        u.settle(
            vec![gpu(0, "GPU-a", &["gpu-2"]), gpu(1, "GPU-b", &["gpu-3"])],
            &[],
        );
        assert!(u.unavailable().is_empty());
        let out = u.settle(vec![gpu(1, "GPU-b", &["gpu-3"])], &[failed(0, None)]);
        assert_eq!(names(&out), ["gpu-3", "gpu-2"]);
        assert!(u.unavailable()[0].message.contains("stay published"));

        // Another GPU now answers at index 0 and fails: not the one published there.
        let out = u.settle(vec![], &[failed(0, Some("GPU-z"))]);
        assert!(out.is_empty(), "{:?}", names(&out));
        let out = u.settle(vec![], &[failed(0, Some("GPU-a"))]);
        assert_eq!(names(&out), ["gpu-2"]);
    }
}
