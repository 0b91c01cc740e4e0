//! What NVML says each GPU is doing, for the metrics that name the pod using it
//! (graft_driver_core::metrics::usage): every `--nvidia-usage-seconds`, per published
//! device, from NVML's reference for each call:
//! - a whole GPU: utilisation (`nvmlDeviceGetUtilizationRates`, the share of the last
//!   sample period a kernel ran), memory used (`nvmlDeviceGetMemoryInfo_v2`) and power
//!   (`nvmlDeviceGetPowerUsage`, milliwatts);
//! - a static MIG device: its memory used, by its own UUID; NVML has no utilisation or
//!   power for a MIG device (`NOT_SUPPORTED`), so none is reported;
//! - an MPS GPU or MPS MIG device: each client process's memory
//!   (`nvmlDeviceGetMPSComputeRunningProcesses_v3`, of a MIG device asked of its own
//!   handle), with the container it runs in, read from the process's cgroup under the host's
//!   /proc; whole-device figures would belong to every share at once, so none are reported.
//!
//! Not measured: the instances graft makes itself (dynamic MIG), whose UUIDs exist only
//! while prepared.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use graft_driver_core::model::{Device, Kind};
use graft_driver_core::usage::{DeviceUsage, ProcessUsage, UsageReport};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Nvml;
use tokio::sync::watch;

use crate::devices::Identity;
use graft_api::attributes::{GI_ID, PARENT_UUID};

/// A /proc/<pid>/cgroup is a line per hierarchy; this is far more than any has.
const CGROUP_CAP: u64 = 64 * 1024;

/// Measures the devices in `inventory` every `every` into `out`, until `out` is dropped.
pub async fn run(
    lib: PathBuf,
    proc_root: PathBuf,
    mut inventory: watch::Receiver<Vec<Device>>,
    out: watch::Sender<UsageReport>,
    every: Duration,
) {
    let mut nvml: Option<Arc<Nvml>> = None;
    let mut failing = false;
    while !out.is_closed() {
        let devices = inventory.borrow_and_update().clone();
        let (l, p, held) = (lib.clone(), proc_root.clone(), nvml.take());
        let round = tokio::task::spawn_blocking(move || {
            let nvml = match held {
                Some(n) => n,
                None => Arc::new(crate::nvml::open(&l).map_err(|e| e.to_string())?),
            };
            let report = measure(&nvml, &devices, &p);
            Ok::<_, String>((nvml, report))
        })
        .await;
        match round {
            Ok(Ok((n, report))) => {
                failing = false;
                nvml = Some(n);
                out.send_if_modified(|r| std::mem::replace(r, report.clone()) != report);
            }
            Ok(Err(e)) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(error = %e, "GPU usage: cannot load NVML; trying again");
                }
            }
            Err(e) => tracing::error!(error = %e, "GPU usage: measuring panicked"),
        }
        tokio::time::sleep(every).await;
    }
}

/// One round over `devices`.
pub fn measure(nvml: &Nvml, devices: &[Device], proc_root: &Path) -> UsageReport {
    let mut report = UsageReport::default();
    for d in devices {
        let id = Identity::of(d);
        let Some(uuid) = id.uuid.as_deref() else {
            continue;
        };
        let Ok(dev) = nvml.device_by_uuid(uuid) else {
            continue;
        };
        let mut u = DeviceUsage {
            device: d.name.clone(),
            gpu_uuid: uuid.to_string(),
            ..Default::default()
        };
        // A device's parent GPU and instance, under dcgm-exporter's labels (a MIG device's).
        let in_parent = |u: &mut DeviceUsage| {
            u.gpu_uuid = d
                .string_attribute(PARENT_UUID)
                .unwrap_or_default()
                .to_string();
            u.gpu_instance = d
                .int_attribute(GI_ID)
                .map(|g| g.to_string())
                .unwrap_or_default();
        };
        match d.kind {
            // An MPS MIG device's processes are asked of its own handle (NVML gives a MIG
            // device's processes per instance).
            Kind::Whole | Kind::Partition if id.mps && !id.dynamic => {
                if d.kind == Kind::Partition {
                    in_parent(&mut u);
                }
                u.per_process = true;
                for p in dev.mps_running_compute_processes().unwrap_or_default() {
                    let UsedGpuMemory::Used(bytes) = p.used_gpu_memory else {
                        continue;
                    };
                    if let Some(container_id) = container_of(proc_root, p.pid) {
                        u.processes.push(ProcessUsage {
                            container_id,
                            memory_used_bytes: bytes,
                        });
                    }
                }
            }
            Kind::Whole => {
                u.utilization = dev
                    .utilization_rates()
                    .ok()
                    .map(|r| f64::from(r.gpu) / 100.0);
                u.memory_used_bytes = dev.memory_info().ok().map(|m| m.used);
                u.power_watts = dev.power_usage().ok().map(|mw| f64::from(mw) / 1000.0);
            }
            Kind::Partition if !id.dynamic => {
                in_parent(&mut u);
                u.memory_used_bytes = dev.memory_info().ok().map(|m| m.used);
            }
            _ => continue,
        }
        report.devices.push(u);
    }
    report
}

/// The runtime's id of the container process `pid` runs in: the last part of its cgroup
/// path (`.../cri-containerd-<id>.scope` under systemd, `.../<id>` under cgroupfs), when
/// that is a container id (64 hex digits).
pub fn container_of(proc_root: &Path, pid: u32) -> Option<String> {
    use std::io::Read;
    let path = proc_root.join(pid.to_string()).join("cgroup");
    let mut text = String::new();
    std::fs::File::open(&path)
        .ok()?
        .take(CGROUP_CAP)
        .read_to_string(&mut text)
        .ok()?;
    container_in(&text)
}

fn container_in(cgroup: &str) -> Option<String> {
    cgroup.lines().find_map(|line| {
        let path = line.rsplit(':').next()?;
        let last = path.rsplit('/').next()?;
        let id = last.strip_suffix(".scope").unwrap_or(last);
        let id = ["cri-containerd-", "crio-", "docker-"]
            .iter()
            .find_map(|p| id.strip_prefix(p))
            .unwrap_or(id);
        (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f1c9f2e0b7d4a6c8e3f5a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d";

    #[test]
    fn a_process_is_placed_in_its_container_by_its_cgroup() {
        let systemd = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234.slice/cri-containerd-{ID}.scope\n"
        );
        assert_eq!(container_in(&systemd).as_deref(), Some(ID));
        let cgroupfs = format!("12:memory:/kubepods/besteffort/pod1234/{ID}\n0::/\n");
        assert_eq!(container_in(&cgroupfs).as_deref(), Some(ID));
        // The host's own processes, and the pod's sandbox cgroup itself, are no container.
        assert_eq!(container_in("0::/system.slice/containerd.service\n"), None);
        assert_eq!(
            container_in("0::/kubepods.slice/kubepods-pod1234.slice\n"),
            None
        );
        assert_eq!(container_in(""), None);
    }

    #[test]
    fn an_unreadable_cgroup_is_no_container() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(container_of(dir.path(), 42), None);
        std::fs::create_dir_all(dir.path().join("42")).unwrap();
        std::fs::write(
            dir.path().join("42/cgroup"),
            format!("0::/kubepods/pod1/{ID}\n"),
        )
        .unwrap();
        assert_eq!(container_of(dir.path(), 42).as_deref(), Some(ID));
    }
}
