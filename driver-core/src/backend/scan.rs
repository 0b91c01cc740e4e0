//! The discovery port: what every backend implements, and what it reports it could not
//! offer.

use std::path::PathBuf;

use crate::error::Result;
use crate::model::Device;

/// A part of the node a backend could not offer as it should at its last scan (a GPU NVML
/// cannot read), reported once when it appears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// Stable while it lasts: the same part on the next scan has the same key.
    pub key: String,
    /// The Event reason, e.g. `GpuUnavailable`.
    pub reason: &'static str,
    /// One line for people: what, why, and what graft does about it.
    pub message: String,
}

/// A discovery backend.
pub trait Discovery: Send + Sync {
    /// Short backend name for logs and errors.
    fn name(&self) -> &'static str;
    /// The devices present now. Called at start and on every rescan. An error means the
    /// whole scan failed: the backend's last devices stay published (the inventory keeps them).
    fn discover(&self) -> Result<Vec<Device>>;
    /// Paths whose changes should trigger a rescan (device directories, config files).
    fn watch_paths(&self) -> Vec<PathBuf> {
        Vec::new()
    }
    /// What the last [`Discovery::discover`] could not offer, though the scan went on.
    fn unavailable(&self) -> Vec<Unavailable> {
        Vec::new()
    }
}
