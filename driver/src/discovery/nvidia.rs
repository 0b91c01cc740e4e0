//! The `nvidia` backend: GPUs, MIG devices, VFIO functions and IMEX channels found through
//! NVML. It fits the [`Discovery`] trait like every backend; the NVML discovery itself is
//! the NVIDIA work and not in this build yet, so selecting it fails loudly at start.

use std::path::PathBuf;

use super::{Device, Discovery};
use crate::error::{DriverError, Result};

pub struct NvidiaDiscovery {
    #[allow(dead_code)]
    driver_root: PathBuf,
}

impl NvidiaDiscovery {
    pub fn new(driver_root: PathBuf) -> Result<Self> {
        Err(DriverError::Discovery {
            backend: "nvidia",
            reason: format!(
                "NVML discovery (driver root {}) is not available in this build",
                driver_root.display()
            ),
        })
    }
}

impl Discovery for NvidiaDiscovery {
    fn name(&self) -> &'static str {
        "nvidia"
    }

    fn discover(&self) -> Result<Vec<Device>> {
        Ok(Vec::new())
    }
}
