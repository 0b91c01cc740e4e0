//! Persistence mode around passthrough. With persistence on (nvidia-persistenced running,
//! as on most GPU nodes) the GPU stays open, and the nvidia driver refuses its unbind lock
//! until that ends: graft turns it off first, and back on once the GPU is on nvidia again.
//!
//! Off through the driver root's `nvidia-smi -i <bdf> -pm 0` (the setup's
//! `Smi`): nvidia-smi asks nvidia-persistenced over its RPC socket when the daemon runs (NVIDIA's
//! Driver Persistence guide, "Persistence Daemon"), so the daemon closes the GPU. Read, and
//! turned back on, through NVML (`nvmlDeviceGetPersistenceMode`,
//! `nvmlDeviceSetPersistenceMode`), as NVIDIA's DRA driver does after its unbind: the
//! daemon does not handle a GPU that comes back (hotplug). NVML is loaded for each call, so
//! that it enumerates the GPUs as they are now.

use std::path::PathBuf;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use crate::nvml;
use crate::setup_error::NvidiaSetupError;
use graft_driver_core::claims::setup_port::SetupError;

/// A GPU's persistence mode, read and turned back on around passthrough.
pub trait PersistenceMode: Send + Sync {
    /// Whether GPU `pci`'s persistence mode is on; `None` when NVML does not see the GPU
    /// (not bound to nvidia).
    fn enabled(&self, pci: &str) -> Result<Option<bool>, SetupError>;
    /// Turns it on.
    fn enable(&self, pci: &str) -> Result<(), SetupError>;
}

/// Through the driver's libnvidia-ml.so.1.
pub struct NvmlPersistence {
    /// As this process can load it.
    pub lib: PathBuf,
}

fn failed(pci: &str, what: &str, e: impl std::fmt::Display) -> SetupError {
    NvidiaSetupError::Persistence {
        pci: pci.to_string(),
        reason: format!("{what}: {e}"),
    }
    .into()
}

impl NvmlPersistence {
    fn nvml(&self, pci: &str) -> Result<Nvml, SetupError> {
        nvml::open(&self.lib)
            .map_err(|e| failed(pci, &format!("loading {}", self.lib.display()), e))
    }
}

impl PersistenceMode for NvmlPersistence {
    fn enabled(&self, pci: &str) -> Result<Option<bool>, SetupError> {
        let nvml = self.nvml(pci)?;
        let device = match nvml.device_by_pci_bus_id(pci) {
            Ok(d) => d,
            Err(NvmlError::NotFound) => return Ok(None),
            Err(e) => return Err(failed(pci, "finding the GPU", e)),
        };
        device
            .is_in_persistent_mode()
            .map(Some)
            .map_err(|e| failed(pci, "nvmlDeviceGetPersistenceMode", e))
    }

    fn enable(&self, pci: &str) -> Result<(), SetupError> {
        let nvml = self.nvml(pci)?;
        let mut device = nvml
            .device_by_pci_bus_id(pci)
            .map_err(|e| failed(pci, "finding the GPU", e))?;
        device
            .set_persistent(true)
            .map_err(|e| failed(pci, "nvmlDeviceSetPersistenceMode", e))
    }
}

/// For nodes and tests where graft does not touch persistence mode: every GPU reads as
/// unknown, so nothing is turned off or on.
pub struct Untouched;

impl PersistenceMode for Untouched {
    fn enabled(&self, _: &str) -> Result<Option<bool>, SetupError> {
        Ok(None)
    }

    fn enable(&self, _: &str) -> Result<(), SetupError> {
        Ok(())
    }
}
