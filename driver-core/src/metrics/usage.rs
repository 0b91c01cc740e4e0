//! Device usage by the pod that uses it: each family's measurements ([`crate::usage`])
//! joined with the claim records, so that a GPU's utilisation, memory and power carry the
//! namespace, pod, container and claim it is allocated to, and the GPU's `UUID` and
//! `GPU_I_ID` as dcgm-exporter labels them (a join with its series, docs/operations.md).
//! A device several containers receive is reported for each; an MPS GPU's processes each
//! for their own container, read from graft-nri's container index.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use graft_record::containers::{read_entry, ContainerEntry};
use graft_record::ClaimRecord;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::claims::Core;
use crate::usage::{DeviceUsage, UsageReport};

/// Whose a measurement is.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct UsageLabels {
    namespace: String,
    pod: String,
    container: String,
    claim: String,
    device: String,
    #[prometheus(flatten)]
    gpu: GpuLabels,
}

/// The GPU under dcgm-exporter's label names.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
#[allow(non_snake_case)]
struct GpuLabels {
    UUID: String,
    GPU_I_ID: String,
}

type Gauges = Family<UsageLabels, Gauge<f64, AtomicU64>>;

/// The usage gauges.
#[derive(Default)]
pub struct UsageMetrics {
    utilization: Gauges,
    memory: Gauges,
    power: Gauges,
}

/// One attributed measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct Attributed {
    labels: UsageLabels,
    utilization: Option<f64>,
    memory_used_bytes: Option<u64>,
    power_watts: Option<f64>,
}

impl UsageMetrics {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "graft_gpu_utilization_ratio",
            "Time the GPU was busy over NVML's last sample period (0 to 1), by the pod, container and claim it is allocated to (not reported for MIG devices)",
            self.utilization.clone(),
        );
        r.register(
            "graft_gpu_memory_used_bytes",
            "Device memory in use on the GPU, MIG device, or by the container's processes on an MPS GPU, by the pod, container and claim it is allocated to",
            self.memory.clone(),
        );
        r.register(
            "graft_gpu_power_watts",
            "Power the GPU draws, by the pod, container and claim it is allocated to (not reported for MIG devices)",
            self.power.clone(),
        );
    }

    /// Replaces every series with `now`'s.
    fn set(&self, now: &[Attributed]) {
        for g in [&self.utilization, &self.memory, &self.power] {
            g.clear();
        }
        for a in now {
            if let Some(v) = a.utilization {
                self.utilization.get_or_create(&a.labels).set(v);
            }
            if let Some(v) = a.memory_used_bytes {
                self.memory.get_or_create(&a.labels).inc_by(v as f64);
            }
            if let Some(v) = a.power_watts {
                self.power.get_or_create(&a.labels).set(v);
            }
        }
    }
}

fn labels(
    namespace: &str,
    pod: &str,
    container: &str,
    claim: &str,
    d: &DeviceUsage,
) -> UsageLabels {
    UsageLabels {
        namespace: namespace.into(),
        pod: pod.into(),
        container: container.into(),
        claim: claim.into(),
        device: d.device.clone(),
        gpu: GpuLabels {
            UUID: d.gpu_uuid.clone(),
            GPU_I_ID: d.gpu_instance.clone(),
        },
    }
}

/// `report`'s measurements for the containers `records` give each device to; an MPS
/// client's for the container `entry(id)` says it runs in, when that container received
/// the device. Devices no claim holds are left out.
pub fn attribute(
    report: &UsageReport,
    records: &[ClaimRecord],
    entry: impl Fn(&str) -> Option<ContainerEntry>,
) -> Vec<Attributed> {
    let mut out = Vec::new();
    for d in &report.devices {
        if d.per_process {
            // Summed per container: a container may run several clients.
            let mut per: BTreeMap<UsageLabels, u64> = BTreeMap::new();
            for p in &d.processes {
                let Some(e) = entry(&p.container_id) else {
                    continue;
                };
                let Some(r) = e.records.iter().find(|r| r.devices.contains(&d.device)) else {
                    continue;
                };
                let l = labels(&e.pod.namespace, &e.pod.name, &e.container, &r.name, d);
                *per.entry(l).or_default() += p.memory_used_bytes;
            }
            out.extend(per.into_iter().map(|(labels, bytes)| Attributed {
                labels,
                utilization: None,
                memory_used_bytes: Some(bytes),
                power_watts: None,
            }));
            continue;
        }
        for r in records
            .iter()
            .filter(|r| r.devices.iter().any(|x| x.name == d.device))
        {
            for p in &r.pods {
                for c in p
                    .containers
                    .iter()
                    .filter(|c| c.devices.contains(&d.device))
                {
                    out.push(Attributed {
                        labels: labels(&p.namespace, &p.name, &c.name, &r.claim.name, d),
                        utilization: d.utilization,
                        memory_used_bytes: d.memory_used_bytes,
                        power_watts: d.power_watts,
                    });
                }
            }
        }
    }
    out
}

/// Reads the records and container entries for a report, on a blocking thread.
fn attribute_now(core: &Core, state_dir: &Path, report: &UsageReport) -> Vec<Attributed> {
    let records = match core.records() {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the claim records for the usage metrics");
            return Vec::new();
        }
    };
    attribute(report, &records, |id| {
        read_entry(state_dir, id).ok().flatten()
    })
}

/// Keeps `gauges` equal to the families' last reports, attributed to the claims that hold
/// each device.
pub async fn run(
    gauges: Arc<UsageMetrics>,
    core: Arc<Core>,
    state_dir: PathBuf,
    mut reports: watch::Receiver<UsageReport>,
) {
    loop {
        let report = reports.borrow_and_update().clone();
        let (c, dir) = (core.clone(), state_dir.clone());
        match tokio::task::spawn_blocking(move || attribute_now(&c, &dir, &report)).await {
            Ok(now) => gauges.set(&now),
            Err(e) => tracing::error!(error = %e, "attributing device usage panicked"),
        }
        if reports.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
