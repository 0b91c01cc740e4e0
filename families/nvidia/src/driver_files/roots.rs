//! Where the host and the driver installation are, as this process sees them.

use std::path::{Path, PathBuf};

/// Where things are. `host` is where this process sees the host's `/` (`/` on the host,
/// `/host` in the DaemonSet); `driver` is the driver installation's root as a host path
/// (`/`, or `/run/nvidia/driver` with a driver container).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// Where this process sees the host's `/`.
    pub host: PathBuf,
    /// The driver installation's root, as a host path.
    pub driver: PathBuf,
}

impl Roots {
    /// A host path as this process can open it.
    pub fn visible(&self, host_path: &Path) -> PathBuf {
        self.host
            .join(host_path.strip_prefix("/").unwrap_or(host_path))
    }

    /// The host path of a file inside the driver root.
    pub fn host_path(&self, driver_path: &str) -> PathBuf {
        self.driver.join(driver_path.trim_start_matches('/'))
    }

    /// A file inside the driver root as this process can open it.
    pub fn driver_visible(&self, driver_path: &str) -> PathBuf {
        self.visible(&self.host_path(driver_path))
    }
}
