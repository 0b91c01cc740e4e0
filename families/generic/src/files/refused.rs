//! Served directories refused because another account could change them: each scan says
//! which, in the log (path, owner, mode), in a gauge (`graft_driver_served_dirs_refused`)
//! and, through the backend's `Discovery::unavailable`, in a `ServedDirectoryRefused`
//! Warning Event on the Node, so that an operator sees why a directory's devices are
//! missing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::gauge::Gauge;

/// The directories the last scan refused, and why; shared with the metrics.
#[derive(Clone, Default)]
pub struct RefusedDirs {
    dirs: Arc<Mutex<BTreeMap<String, String>>>,
    gauge: Gauge,
}

impl RefusedDirs {
    /// Counting into `gauge` (the metrics' own).
    pub fn with_gauge(gauge: Gauge) -> Self {
        RefusedDirs {
            gauge,
            ..Default::default()
        }
    }

    /// The outcome of one scan: each refused directory and the reason. A directory refused
    /// for the first time (or for a new reason) is logged as a warning, later scans quietly.
    pub fn scanned(&self, now: BTreeMap<String, String>) {
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        for (dir, reason) in &now {
            if dirs.get(dir) != Some(reason) {
                tracing::warn!(
                    dir,
                    reason,
                    "served directory refused: its devices are not published"
                );
            } else {
                tracing::debug!(dir, reason, "served directory still refused");
            }
        }
        for dir in dirs.keys().filter(|d| !now.contains_key(*d)) {
            tracing::info!(dir, "served directory no longer refused");
        }
        self.gauge.set(i64::try_from(now.len()).unwrap_or(i64::MAX));
        *dirs = now;
    }

    /// The refused directories and why.
    pub fn get(&self) -> BTreeMap<String, String> {
        self.dirs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
