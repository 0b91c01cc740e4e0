//! Dynamic MIG at prepare time: the GPU and compute instance of an allocated placement are
//! created through NVML (and destroyed at unprepare), as a [`NvidiaWork::Mig`] that the
//! checkpoint holds before anything is created, so a driver killed half way destroys or
//! adopts it on the next unprepare or retry.
//!
//! Which instances are graft's is kept in a `MigLedger`, seeded from the checkpoint at
//! start: discovery offers only placements that no other instance overlaps.

use std::path::PathBuf;
use std::sync::Mutex;

use graft_record::ContainerEdits;
use nvml_wrapper::Nvml;

use crate::devices::{cap_node, MigLedger};
use crate::driver_files::{mig_access_cap, read_char_majors};
use crate::nvml::{create_gi, destroy_gi, find_gi, full_compute_instance, open, MigCallError};
use crate::setup_error::NvidiaSetupError;
use graft_driver_core::claims::setup_port::SetupError;

/// Makes and removes instances through one long-lived NVML handle (its init can take
/// a while on a GPU without persistence mode).
pub struct MigManager {
    /// libnvidia-ml.so.1 as this process loads it.
    pub nvml_lib: PathBuf,
    /// The host's /proc as this process sees it: capability minors.
    pub proc_root: PathBuf,
    /// The instances graft made, shared with discovery.
    pub ledger: MigLedger,
    nvml: Mutex<Option<Nvml>>,
}

fn nvml_failed(what: &str, e: impl std::fmt::Display) -> SetupError {
    NvidiaSetupError::Mig {
        reason: format!("{what}: {e}"),
    }
    .into()
}

impl MigManager {
    /// A manager that loads NVML at its first call.
    pub fn new(nvml_lib: PathBuf, proc_root: PathBuf, ledger: MigLedger) -> Self {
        MigManager {
            nvml_lib,
            proc_root,
            ledger,
            nvml: Mutex::new(None),
        }
    }

    fn with_nvml<T>(
        &self,
        f: impl FnOnce(&Nvml) -> Result<T, SetupError>,
    ) -> Result<T, SetupError> {
        let mut guard = self
            .nvml
            .lock()
            .map_err(|_| nvml_failed("NVML", "a MIG operation panicked earlier"))?;
        if guard.is_none() {
            let n = open(&self.nvml_lib)
                .map_err(|e| nvml_failed(&format!("load {}", self.nvml_lib.display()), e))?;
            *guard = Some(n);
        }
        match guard.as_ref() {
            Some(n) => f(n),
            None => Err(nvml_failed("NVML", "not loaded")),
        }
    }

    /// Creates (or finds, after a crash or a retry) the instance and returns the capability
    /// nodes a container needs on top of the placement device's own edits.
    pub fn create(
        &self,
        gpu_uuid: &str,
        profile: u32,
        start: u32,
        size: u32,
        slices: u32,
    ) -> Result<ContainerEdits, SetupError> {
        // Graft's before it exists: a rescan meanwhile must not take it for the operator's.
        self.ledger.insert(gpu_uuid, profile, start);
        let at = format!("GPU {gpu_uuid} profile {profile} at slice {start}");
        self.with_nvml(|nvml| {
            let d = nvml
                .device_by_uuid(gpu_uuid)
                .map_err(|e| nvml_failed(&format!("GPU {gpu_uuid}"), e))?;
            let minor = d
                .minor_number()
                .map_err(|e| nvml_failed(&format!("GPU {gpu_uuid} minor"), e))?;
            // SAFETY: `d` is a GPU handle of `nvml`, alive for this closure.
            let handle = unsafe { d.handle() };
            let mig = |e: MigCallError| nvml_failed(&at, e);
            // SAFETY (all calls below): handles of `nvml`, used while it lives.
            let (gi, info) = match unsafe { find_gi(nvml, handle, profile, start, 8) }
                .map_err(mig)?
            {
                Some(found) => {
                    tracing::info!(gpu = gpu_uuid, gi = found.1.id, "GPU instance already there; adopting it");
                    found
                }
                None => unsafe { create_gi(nvml, handle, profile, start, size) }
                    .map_err(|e| {
                        if e.insufficient() {
                            NvidiaSetupError::Mig {
                                reason: format!(
                                    "cannot create the GPU instance ({at}): {e}; another \
                                     instance, not made through graft, holds part of it"
                                ),
                            }.into()
                        } else {
                            mig(e)
                        }
                    })?,
            };
            let ci = match unsafe { full_compute_instance(nvml, gi, slices) } {
                Ok(ci) => ci,
                Err(e) => {
                    // No half-made instance is left behind.
                    if let Err(d) = unsafe { destroy_gi(nvml, gi) } {
                        tracing::error!(error = %d, "destroying the GPU instance after a failed compute instance");
                    }
                    return Err(mig(e));
                }
            };
            tracing::info!(gpu = gpu_uuid, gi = info.id, ci, profile, start, "MIG instance created");
            self.cap_nodes(minor, info.id, ci)
        })
    }

    fn cap_nodes(&self, minor: u32, gi: u32, ci: u32) -> Result<ContainerEdits, SetupError> {
        let majors =
            read_char_majors(&self.proc_root).map_err(|e| nvml_failed("/proc/devices", e))?;
        let caps_major = *majors
            .get("nvidia-caps")
            .ok_or_else(|| NvidiaSetupError::Mig {
                reason: "/proc/devices has no nvidia-caps entry".into(),
            })?;
        let cap = |c: Option<u32>| {
            mig_access_cap(&self.proc_root, minor, gi, c)
                .map(|f| cap_node(caps_major, f))
                .map_err(|e| nvml_failed("MIG capability", e))
        };
        Ok(ContainerEdits {
            device_nodes: vec![cap(None)?, cap(Some(ci))?],
            ..Default::default()
        })
    }

    /// Destroys the instance at the placement, if there is one; idempotent.
    pub fn destroy(&self, gpu_uuid: &str, profile: u32, start: u32) -> Result<(), SetupError> {
        let at = format!("GPU {gpu_uuid} profile {profile} at slice {start}");
        self.with_nvml(|nvml| {
            let d = match nvml.device_by_uuid(gpu_uuid) {
                Ok(d) => d,
                Err(nvml_wrapper::error::NvmlError::NotFound) => {
                    tracing::warn!(gpu = gpu_uuid, "GPU gone; nothing to destroy");
                    return Ok(());
                }
                Err(e) => return Err(nvml_failed(&format!("GPU {gpu_uuid}"), e)),
            };
            // SAFETY: handles of `nvml`, used while it lives.
            let handle = unsafe { d.handle() };
            match unsafe { find_gi(nvml, handle, profile, start, 8) } {
                Ok(Some((gi, info))) => {
                    unsafe { destroy_gi(nvml, gi) }.map_err(|e| nvml_failed(&at, e))?;
                    tracing::info!(
                        gpu = gpu_uuid,
                        gi = info.id,
                        profile,
                        start,
                        "MIG instance destroyed"
                    );
                }
                Ok(None) => {}
                Err(e) => return Err(nvml_failed(&at, e)),
            }
            Ok(())
        })?;
        self.ledger.remove(gpu_uuid, profile, start);
        Ok(())
    }
}
