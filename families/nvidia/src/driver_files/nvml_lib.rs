//! Where the driver's libnvidia-ml.so.1 is, as this process can load it: the path the
//! operator gave, else the usual library directories of the driver root, else its
//! `ld.so.cache`.

use std::path::PathBuf;

use super::ldcache;
use super::roots::Roots;
use graft_driver_core::error::{DriverError, Result};

const NVML: &str = "libnvidia-ml.so.1";

const SEARCHED: &[&str] = &[
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib",
];

/// libnvidia-ml.so.1 under the driver root; `configured` (a path inside the driver root)
/// when given.
pub fn nvml_library(roots: &Roots, configured: Option<&str>) -> Result<PathBuf> {
    if let Some(p) = configured {
        return Ok(roots.driver_visible(p));
    }
    let mut tried = Vec::new();
    for dir in SEARCHED {
        let p = roots.driver_visible(&format!("{dir}/{NVML}"));
        if p.exists() {
            return Ok(p);
        }
        tried.push(p);
    }
    if let Ok(data) = std::fs::read(roots.driver_visible("/etc/ld.so.cache")) {
        if let Some(e) = ldcache::parse(&data)
            .unwrap_or_default()
            .into_iter()
            .find(|e| e.name == NVML)
        {
            return Ok(roots.driver_visible(&e.path));
        }
    }
    Err(DriverError::Discovery {
        backend: "nvidia",
        reason: format!(
            "{NVML} not found under driver root {} (tried {} and ld.so.cache); \
             set --nvidia-nvml-lib",
            roots.driver.display(),
            tried
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}
