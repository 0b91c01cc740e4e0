//! graft-driver's rescans: on changes in the watched directories, on request (a setup that
//! changed what the node offers), and periodically — sooner while a backend fails or a GPU
//! is left out. Each rescan updates the core's inventory, graft-nri's list of absent
//! devices, the publisher's channel, and reports backends that fail or recover.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use graft_driver::claims::Core;
use graft_driver::discovery::inventory::Inventory;
use graft_driver::discovery::{report, Discovery};
use graft_driver::events::Poster;
use graft_driver::health::absent;
use graft_driver::metrics::DriverMetrics;
use graft_driver::model::Device;
use tokio::sync::{mpsc, watch, Notify};

/// While a backend fails or a GPU is left out, rescans come at least this often.
const RETRY: Duration = Duration::from_secs(5);

/// A rescan loop's parts.
pub struct Rescan {
    pub backends: Arc<Vec<Box<dyn Discovery>>>,
    pub inventory: Inventory,
    pub core: Arc<Core>,
    pub state_dir: PathBuf,
    /// The periodic rescan.
    pub every: Duration,
    pub events: Poster,
    pub node: String,
    pub metrics: Arc<DriverMetrics>,
    /// Backends that could not start everything (NVIDIA without NVML): graft-driver
    /// restarts (once, cleanly) when one's scan works, to start what needs it.
    pub restart: Option<Restart>,
    pub wake: mpsc::Receiver<()>,
    pub out: watch::Sender<Vec<Device>>,
}

/// When graft-driver restarts, and how it is asked to.
pub struct Restart {
    /// Backend (discovery) names, each with the line logged when its scan works.
    pub when_up: Vec<(&'static str, &'static str)>,
    pub notify: Arc<Notify>,
}

/// Tells graft-nri which prepared devices the node no longer has (file I/O: a blocking
/// thread). A failure is logged: the check it feeds only adds refusals.
pub async fn refresh_absent(state_dir: PathBuf, devices: Vec<Device>) {
    match tokio::task::spawn_blocking(move || absent::refresh(&state_dir, &devices)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot write the list of absent devices"),
        Err(e) => {
            tracing::warn!(error = %e, "writing the list of absent devices failed internally")
        }
    }
}

/// Runs until its task is stopped (graft_driver::daemon).
pub async fn run(mut r: Rescan) {
    let retry = r.every.min(RETRY);
    let inventory = Arc::new(Mutex::new(r.inventory));
    loop {
        let degraded = inventory.lock().map(|i| i.degraded()).unwrap_or(true);
        tokio::select! {
            _ = r.wake.recv() => tokio::time::sleep(Duration::from_millis(100)).await,
            _ = tokio::time::sleep(if degraded { retry } else { r.every }) => {}
        }
        while r.wake.try_recv().is_ok() {}
        // Discovery reads sysfs and directories and may load NVML: a blocking thread.
        let (scan, inv) = (Arc::clone(&r.backends), Arc::clone(&inventory));
        let found = tokio::task::spawn_blocking(move || {
            let mut inv = inv.lock().unwrap_or_else(|p| p.into_inner());
            let s = inv.scan(&scan, std::time::SystemTime::now());
            (s, inv.devices().to_vec(), inv.up())
        })
        .await;
        let (scanned, devs, up) = match found {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "rescan failed internally; keeping the last inventory");
                continue;
            }
        };
        if let Ok(inv) = inventory.lock() {
            report::record(&scanned, &inv, &r.metrics);
        }
        report::post(&scanned.changes, &r.events, &r.node);
        if let Some(restart) = &r.restart {
            for &(backend, why) in &restart.when_up {
                if up.iter().any(|&(b, ok)| b == backend && ok) {
                    tracing::warn!("{why}");
                    restart.notify.notify_one();
                }
            }
        }
        r.core.set_inventory(&devs);
        refresh_absent(r.state_dir.clone(), devs.clone()).await;
        r.out.send_if_modified(|cur| {
            let changed = *cur != devs;
            if changed {
                tracing::info!(devices = devs.len(), "device inventory changed");
                *cur = devs;
            }
            changed
        });
    }
}
