//! The GPU health monitor: one blocking thread that watches NVML events for every GPU the
//! node publishes ([`super::nvml_events`]), probes each GPU at start, every probe interval
//! and after a recovery-action event ([`super::probe`]), keeps each device's condition
//! ([`super::state`]) across restarts ([`super::store`]), and publishes the resulting
//! [`HealthReport`].
//!
//! An event NVML attributes to a GPU instance lands on the devices of that instance
//! ([`super::targets`]): for a dynamic-MIG GPU the monitor asks NVML which profile and
//! placement the instance has, since placement devices carry no instance id.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::nvmlDevice_t;
use tokio::sync::watch;

use super::classify::{classify, Verdict};
pub use super::nvml_events::check_events;
use super::nvml_events::{register, wait, Registered, Waited, WAIT_MS};
use super::probe::{self, Check};
use super::state::Tracker;
use super::store;
use super::targets::{gpu_uuids, targets, Instance};
use crate::nvml;
use graft_driver_core::health::HealthReport;
use graft_driver_core::model::Device;

/// What the health monitor is run with.
#[derive(Debug, Clone)]
pub struct MonitorConfig {
    /// libnvidia-ml.so.1 as this process loads it.
    pub nvml_lib: PathBuf,
    /// XIDs an application causes: they leave a device degraded, not unhealthy.
    pub informational_xids: BTreeSet<u64>,
    /// How long a degraded device must be quiet to clear; `None`: only a reset clears it.
    pub quiet: Option<Duration>,
    /// How often every GPU is probed.
    pub probe_every: Duration,
    /// graft's state directory: the conditions are kept below it.
    pub state_dir: PathBuf,
    /// This boot's id: a condition from another boot has seen a reset.
    pub boot_id: String,
}

/// Starts the monitor thread. It ends when every receiver of `out` is gone. The conditions
/// kept from before are in `out` when this returns, so that nothing published after it
/// (ResourceSlices, the kubelet's stream) shows a kept condition's device healthy first.
pub fn spawn(
    config: MonitorConfig,
    mut inventory: watch::Receiver<Vec<Device>>,
    out: watch::Sender<HealthReport>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let mut tracker = Tracker::new(config.quiet, config.probe_every, &config.boot_id);
    match store::load(&config.state_dir) {
        Ok(kept) => {
            if !kept.is_empty() {
                tracing::info!(
                    devices = kept.len(),
                    "GPU health: conditions kept from before"
                );
            }
            tracker.restore(kept);
        }
        Err(e) => {
            tracing::warn!(error = %e, "GPU health: the kept conditions are unreadable; starting without")
        }
    }
    let devices = inventory.borrow_and_update().clone();
    let names: BTreeSet<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    out.send_replace(tracker.report(|n| names.contains(n)));
    std::thread::Builder::new()
        .name("gpu-health".into())
        .spawn(move || run(config, tracker, devices, inventory, out))
}

/// The tracker, what it publishes to, and the devices it reports on.
struct Health<'a> {
    config: &'a MonitorConfig,
    tracker: Tracker,
    out: &'a watch::Sender<HealthReport>,
    devices: Vec<Device>,
}

impl Health<'_> {
    /// Publishes (and saves) the report when it changed.
    fn publish(&mut self) {
        let names: BTreeSet<&str> = self.devices.iter().map(|d| d.name.as_str()).collect();
        let report = self.tracker.report(|n| names.contains(n));
        if *self.out.borrow() == report {
            return;
        }
        log_changes(&self.out.borrow(), &report);
        self.out.send_replace(report);
        if let Err(e) = store::save(&self.config.state_dir, self.tracker.entries()) {
            tracing::warn!(error = %e, "GPU health: cannot keep the conditions for a restart");
        }
    }

    /// Applies a probe of GPU `uuid` to its devices.
    fn apply(&mut self, uuid: &str, check: &Check, prompt: bool) {
        let now = SystemTime::now();
        let names = targets(&self.devices, uuid, None);
        for signal in &check.findings {
            if let Verdict::Condition {
                condition,
                reason,
                message,
            } = classify(*signal, &self.config.informational_xids)
            {
                for t in &names {
                    self.tracker
                        .observe(t, condition, &reason, &message, now, false);
                }
            }
        }
        if check.unknown {
            return;
        }
        for t in &names {
            if self.tracker.probed(t, check.probed, now, prompt) {
                tracing::info!(device = t, gpu = uuid, "GPU health: the GPU is fine again");
            }
        }
    }
}

fn run(
    config: MonitorConfig,
    tracker: Tracker,
    devices: Vec<Device>,
    mut inventory: watch::Receiver<Vec<Device>>,
    out: watch::Sender<HealthReport>,
) {
    let mut health = Health {
        config: &config,
        tracker,
        out: &out,
        devices,
    };
    while !out.is_closed() {
        match nvml::open(&config.nvml_lib) {
            Ok(nvml) => watch_events(&nvml, &mut inventory, &mut health),
            Err(e) => tracing::warn!(
                lib = %config.nvml_lib.display(), error = %e,
                "GPU health: cannot load NVML; trying again in 30 s"
            ),
        }
        if !out.is_closed() {
            std::thread::sleep(Duration::from_secs(30));
        }
    }
}

/// The profile and placement start of GPU instance `gi` on `device`, for dynamic MIG.
fn placement(nvml: &Nvml, device: nvmlDevice_t, gi: u32) -> Option<(u32, u32)> {
    // SAFETY: `device` is the GPU handle NVML put in the event, valid while `nvml` lives.
    match unsafe { nvml::gi_placement(nvml, device, gi) } {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::debug!(gi, error = %e, "GPU health: no placement for the instance");
            None
        }
    }
}

/// Runs until `out` has no receivers (returns) or NVML stops working (returns; the caller
/// loads it again).
fn watch_events(
    nvml: &Nvml,
    inventory: &mut watch::Receiver<Vec<Device>>,
    health: &mut Health<'_>,
) {
    let config = health.config;
    let mut uuids = gpu_uuids(&health.devices);
    // The GPUs the set was asked to watch (NVML may have refused some).
    let mut asked = uuids.clone();
    let mut registered: Registered<'_> = match register(nvml, &asked) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "GPU health: cannot create an NVML event set");
            return;
        }
    };
    let mut last_probe: Option<Instant> = None;
    let mut failures = 0u32;
    while !health.out.is_closed() {
        if inventory.has_changed().unwrap_or(false) {
            health.devices = inventory.borrow_and_update().clone();
            let names: BTreeSet<&str> = health.devices.iter().map(|d| d.name.as_str()).collect();
            health.tracker.prune(|n| names.contains(n));
            let now_uuids = gpu_uuids(&health.devices);
            if now_uuids != uuids {
                uuids = now_uuids;
                // New GPUs are probed at once.
                last_probe = None;
            }
        }
        let mut probe_now = false;
        match wait(nvml, &registered) {
            Ok(Waited::Event {
                uuid,
                device,
                signal,
                gi,
                ci,
            }) => {
                failures = 0;
                match classify(signal, &config.informational_xids) {
                    // The driver says nothing needs doing: see that the GPU is fine.
                    Verdict::Recovered => {
                        let check = probe::check(nvml, &uuid);
                        health.apply(&uuid, &check, true);
                    }
                    Verdict::Condition {
                        condition,
                        reason,
                        message,
                    } => {
                        let at = gi.map(|gi| Instance {
                            gi,
                            ci,
                            placement: placement(nvml, device, gi),
                        });
                        let now = SystemTime::now();
                        for t in targets(&health.devices, &uuid, at.as_ref()) {
                            tracing::warn!(
                                device = t,
                                gpu = uuid,
                                ?signal,
                                ?gi,
                                ?ci,
                                "GPU health event"
                            );
                            health
                                .tracker
                                .observe(&t, condition, &reason, &message, now, true);
                        }
                    }
                }
            }
            Ok(Waited::Nothing) => failures = 0,
            Ok(Waited::Lost) => probe_now = true,
            Err(e) => {
                failures += 1;
                tracing::warn!(error = %e, "GPU health: waiting for events failed");
                if failures >= 10 {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        if probe_now || last_probe.is_none_or(|t| t.elapsed() >= config.probe_every) {
            last_probe = Some(Instant::now());
            let mut reached = BTreeSet::new();
            for uuid in &uuids {
                let check = probe::check(nvml, uuid);
                if check.reached {
                    reached.insert(uuid.clone());
                }
                health.apply(uuid, &check, false);
            }
            // Watch what NVML reaches: a lost GPU out of the set, one back in it.
            if reached != asked {
                asked = reached;
                match register(nvml, &asked) {
                    Ok(r) => registered = r,
                    Err(e) => {
                        tracing::warn!(error = %e, "GPU health: cannot create an NVML event set");
                        return;
                    }
                }
            } else if probe_now {
                // NVML says lost, the probe finds nothing: do not spin on it.
                std::thread::sleep(Duration::from_millis(WAIT_MS.into()));
            }
        }
        health.tracker.tick(SystemTime::now());
        health.publish();
    }
}

fn log_changes(before: &HealthReport, after: &HealthReport) {
    for (name, h) in &after.devices {
        if before.get(name) != Some(h) {
            tracing::warn!(device = name, condition = ?h.condition, reason = h.reason, "{}", h.message);
        }
    }
    for name in before.devices.keys() {
        if after.get(name).is_none() {
            tracing::info!(device = name, "device healthy again");
        }
    }
}
