//! The node's inventory across backends, each isolated from the others: a backend whose scan
//! fails keeps the devices of its last good scan (none before its first) and is reported as
//! failing, since when and why; it never takes another backend's devices with it. A device
//! name two backends publish goes to the first backend listed; the later one's is dropped
//! with a warning.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use crate::backend::scan::{Discovery, Unavailable};
use crate::model::Device;

/// A backend whose scans fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// The first failed scan of this run of failures.
    pub since: SystemTime,
    /// The last scan's error.
    pub error: String,
}

/// What a scan changed, for Events and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A backend's scan failed, the first time or the first since it last worked.
    Failed {
        /// The backend's name.
        backend: &'static str,
        /// The scan's error.
        error: String,
        /// How many devices of its last good scan stay published.
        kept: usize,
        /// The error is devices.toml's (unreadable or refused).
        config: bool,
    },
    /// A failing backend scanned again.
    Recovered {
        /// The backend's name.
        backend: &'static str,
        /// How long its scans failed.
        failed_for: Duration,
    },
    /// A part a backend could not offer, new (or with a new message) at this scan.
    Unavailable {
        /// The backend's name.
        backend: &'static str,
        /// What it cannot offer, and why.
        part: Unavailable,
    },
    /// A part reported unavailable is offered again.
    Available {
        /// The backend's name.
        backend: &'static str,
        /// The part, by its key.
        key: String,
    },
}

struct Backend {
    name: &'static str,
    devices: Vec<Device>,
    failing: Option<Failing>,
    unavailable: Vec<Unavailable>,
}

/// What one [`Inventory::scan`] found.
#[derive(Debug, Default)]
pub struct Scan {
    /// What changed since the last scan, in backend order.
    pub changes: Vec<Change>,
    /// The backends whose scan failed this time (for the failure counters).
    pub failed: Vec<&'static str>,
}

/// The devices of every backend, merged, and what each backend's last scan said.
pub struct Inventory {
    backends: Vec<Backend>,
    merged: Vec<Device>,
    /// Device names dropped because an earlier backend publishes them: (name, backend).
    collisions: BTreeSet<(String, &'static str)>,
}

impl Inventory {
    /// An inventory of `backends`, none scanned yet.
    pub fn new(backends: &[Box<dyn Discovery>]) -> Self {
        Inventory {
            backends: backends
                .iter()
                .map(|b| Backend {
                    name: b.name(),
                    devices: Vec::new(),
                    failing: None,
                    unavailable: Vec::new(),
                })
                .collect(),
            merged: Vec::new(),
            collisions: BTreeSet::new(),
        }
    }

    /// Runs every backend (the same list, in the same order, as [`Inventory::new`] got).
    pub fn scan(&mut self, backends: &[Box<dyn Discovery>], now: SystemTime) -> Scan {
        let mut scan = Scan::default();
        for (state, b) in self.backends.iter_mut().zip(backends) {
            match b.discover() {
                Ok(devices) => {
                    if let Some(f) = state.failing.take() {
                        let failed_for = now.duration_since(f.since).unwrap_or_default();
                        tracing::info!(backend = state.name, ?failed_for, "discovery works again");
                        scan.changes.push(Change::Recovered {
                            backend: state.name,
                            failed_for,
                        });
                    }
                    state.devices = devices;
                    let now_unavailable = b.unavailable();
                    scan.changes.extend(unavailable_changes(
                        state.name,
                        &state.unavailable,
                        &now_unavailable,
                    ));
                    state.unavailable = now_unavailable;
                }
                Err(e) => {
                    let error = e.to_string();
                    let config = e.is_device_config();
                    scan.failed.push(state.name);
                    match &mut state.failing {
                        Some(f) => {
                            if f.error != error {
                                tracing::warn!(
                                    backend = state.name,
                                    error,
                                    "discovery still fails"
                                );
                            }
                            f.error = error;
                        }
                        None => {
                            tracing::warn!(
                                backend = state.name,
                                error,
                                kept = state.devices.len(),
                                "discovery failed; this backend's last devices stay published"
                            );
                            scan.changes.push(Change::Failed {
                                backend: state.name,
                                error: error.clone(),
                                kept: state.devices.len(),
                                config,
                            });
                            state.failing = Some(Failing { since: now, error });
                        }
                    }
                }
            }
        }
        self.merge();
        scan
    }

    /// Every backend's devices, sorted by name, each name once.
    pub fn devices(&self) -> &[Device] {
        &self.merged
    }

    /// The failing backends, in the order they were given.
    pub fn failing(&self) -> Vec<(&'static str, Failing)> {
        self.backends
            .iter()
            .filter_map(|b| b.failing.clone().map(|f| (b.name, f)))
            .collect()
    }

    /// Every backend's name and whether its last scan worked.
    pub fn up(&self) -> Vec<(&'static str, bool)> {
        self.backends
            .iter()
            .map(|b| (b.name, b.failing.is_none()))
            .collect()
    }

    /// A backend fails or left something out: worth scanning again soon.
    pub fn degraded(&self) -> bool {
        self.backends
            .iter()
            .any(|b| b.failing.is_some() || !b.unavailable.is_empty())
    }

    /// Every backend's devices, in backend order and each backend's own order: the order is
    /// what the scheduler's first fit walks (docs/placement.md), so it is kept as the
    /// backend chose it, never re-sorted. A name a backend already published is dropped.
    fn merge(&mut self) {
        let mut by_name: BTreeMap<&str, &'static str> = BTreeMap::new();
        let mut merged = Vec::new();
        let mut collisions = BTreeSet::new();
        for b in &self.backends {
            for d in &b.devices {
                match by_name.get(d.name.as_str()) {
                    Some(first) => {
                        if !self.collisions.contains(&(d.name.clone(), b.name)) {
                            tracing::warn!(device = d.name, backend = b.name, first,
                                "device name already published by another backend; this one is dropped");
                        }
                        collisions.insert((d.name.clone(), b.name));
                    }
                    None => {
                        by_name.insert(&d.name, b.name);
                        merged.push(d.clone());
                    }
                }
            }
        }
        self.merged = merged;
        self.collisions = collisions;
    }
}

fn unavailable_changes(
    backend: &'static str,
    before: &[Unavailable],
    now: &[Unavailable],
) -> Vec<Change> {
    let mut out: Vec<Change> = now
        .iter()
        .filter(|u| !before.contains(u))
        .map(|u| Change::Unavailable {
            backend,
            part: u.clone(),
        })
        .collect();
    out.extend(
        before
            .iter()
            .filter(|b| !now.iter().any(|u| u.key == b.key))
            .map(|b| {
                tracing::info!(backend, key = b.key, "available again");
                Change::Available {
                    backend,
                    key: b.key.clone(),
                }
            }),
    );
    out
}

#[cfg(test)]
mod tests;
