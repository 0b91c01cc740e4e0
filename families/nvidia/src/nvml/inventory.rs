//! Reads the GPU inventory through NVML (nvml-wrapper 0.13), loading the library from an
//! explicit path under the driver root. Calls the wrapper lacks (GPU/compute instance ids,
//! fabric info, brand and architecture as raw numbers) go through its raw bindings, and
//! only after checking that the symbol was found, since those bindings panic otherwise.
//!
//! What identifies a GPU (index, UUID, minor, PCI address) and its MIG devices is required:
//! a GPU where one of those reads fails (NVML says `GPU_IS_LOST` for a GPU that fell off the
//! bus) is set aside in [`Inventory::failed`] with the error, and the scan goes on with the
//! others. Every other value is an attribute, and one that cannot be read is logged and left
//! out.

use std::path::Path;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device as NvmlDevice, Nvml};

use super::layout::MigLayout;
use super::mig;
use super::names::{architecture_name, brand_name, profile_name, sysfs_bus_id};
use super::open::{open, preload};
use super::raw::{clique, raw_u32, RawU32};
use super::selection::GpuSelection;
use super::topology::{self, Island};
use graft_driver_core::error::{DriverError, Result};

/// Everything discovery needs from NVML, in plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    /// As NVML prints it, e.g. `580.95.05`.
    pub driver_version: String,
    /// NVML's integer form, e.g. 13000 for 13.0; `None` when NVML could not tell.
    pub cuda_driver_version: Option<i32>,
    /// The GPUs NVML read.
    pub gpus: Vec<Gpu>,
    /// The GPUs NVML counts but could not read, by index.
    pub failed: Vec<FailedGpu>,
}

/// A GPU NVML counts but could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedGpu {
    /// NVML index.
    pub index: u32,
    /// When NVML gave it before the failing read.
    pub uuid: Option<String>,
    /// The read and NVML's error, e.g. `device 3: GPU is lost`.
    pub error: String,
    /// NVML said `GPU_IS_LOST`: fallen off the bus or otherwise inaccessible.
    pub lost: bool,
}

/// A GPU as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// NVML index.
    pub index: u32,
    /// The device node's minor: `/dev/nvidia<minor>`.
    pub minor: u32,
    /// The GPU's UUID (`GPU-...`).
    pub uuid: String,
    /// Product name.
    pub name: Option<String>,
    /// Brand name (NVML's `nvmlBrandType_t`).
    pub brand: Option<String>,
    /// Architecture name (Hopper, ...).
    pub architecture: Option<String>,
    /// CUDA compute capability (major, minor).
    pub compute_capability: Option<(i32, i32)>,
    /// Total memory.
    pub memory_bytes: Option<u64>,
    /// sysfs form: lowercase, 4-digit domain (`0000:18:00.0`).
    pub pci_bus_id: String,
    /// MIG mode is on.
    pub mig_enabled: bool,
    /// The MIG devices that exist (static MIG).
    pub migs: Vec<Mig>,
    /// With MIG on: the GPU instance profiles, placements and instances, for dynamic MIG.
    /// `None` when this NVML cannot tell (logged).
    pub mig_layout: Option<MigLayout>,
    /// `<cluster uuid>.<clique id>` when the GPU is registered in an NVLink fabric.
    pub clique: Option<String>,
    /// The GPUs NVLink joins it to, when it is offered whole and joined to any.
    pub nvlink_island: Option<Island>,
}

/// A MIG device as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mig {
    /// The MIG device's UUID (`MIG-...`).
    pub uuid: String,
    /// GPU instance id.
    pub gi: u32,
    /// Compute instance id.
    pub ci: u32,
    /// Profile name such as `3g.40gb` or `1c.3g.40gb`.
    pub profile: String,
    /// Memory of the GPU instance.
    pub memory_bytes: u64,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Shared copy engines.
    pub copy_engines: u32,
    /// Shared video decoders.
    pub decoders: u32,
    /// Shared video encoders.
    pub encoders: u32,
    /// Shared JPEG engines.
    pub jpeg_engines: u32,
    /// Shared optical-flow engines.
    pub ofa_engines: u32,
}

impl GpuSelection {
    /// Whether `g` is in the set.
    pub fn covers(&self, g: &Gpu) -> bool {
        self.covers_gpu(&g.uuid, g.index)
    }
}

/// A failed read of one GPU: its UUID when known.
struct GpuError {
    uuid: Option<String>,
    error: String,
    lost: bool,
}

impl GpuError {
    fn nvml(uuid: Option<&str>, what: &str, e: NvmlError) -> Self {
        let lost = matches!(e, NvmlError::GpuLost);
        // NVML's code too, which is what its documentation and the forums name.
        let code = if lost {
            " (NVML_ERROR_GPU_IS_LOST)"
        } else {
            ""
        };
        GpuError {
            uuid: uuid.map(str::to_string),
            lost,
            error: format!("{what}: {e}{code}"),
        }
    }
}

fn err(what: &str, e: NvmlError) -> DriverError {
    DriverError::Discovery {
        backend: "nvidia",
        reason: format!("NVML {what}: {e}"),
    }
}

/// An optional value: logged and left out when NVML cannot give it.
fn optional<T>(what: &str, r: std::result::Result<T, NvmlError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!("NVML {what}: {e}; the attribute is left out");
            None
        }
    }
}

/// Loads NVML from `lib` and reads the inventory. NVML is shut down again before return,
/// so that a driver upgrade is picked up at the next scan.
///
/// `libcuda` is the driver root's `libcuda.so.1`: NVML loads it by name to report the CUDA
/// version, which a process whose loader does not search the driver root (graft-driver in
/// its container) cannot find. Loaded here by full path first, it is found by its soname.
///
/// MIG profiles and placements are read only for the GPUs in `partitioned` (dynamic MIG):
/// a scan of a static-MIG node makes no MIG management calls.
pub fn read_inventory(
    lib: &Path,
    libcuda: Option<&Path>,
    partitioned: &GpuSelection,
) -> Result<Inventory> {
    let nvml = open(lib).map_err(|e| err(&format!("load {}", lib.display()), e))?;
    let driver_version = nvml
        .sys_driver_version()
        .map_err(|e| err("driver version", e))?;
    let _cuda = libcuda.and_then(preload);
    let cuda_driver_version = optional("CUDA driver version", nvml.sys_cuda_driver_version());
    let count = nvml.device_count().map_err(|e| err("device count", e))?;
    let mut gpus = Vec::with_capacity(count as usize);
    let mut handles = Vec::with_capacity(count as usize);
    let mut failed = Vec::new();
    for index in 0..count {
        let read = nvml
            .device_by_index(index)
            .map_err(|e| GpuError::nvml(None, &format!("device {index}"), e))
            .and_then(|d| read_gpu(&nvml, &d, index, partitioned).map(|g| (g, d)));
        match read {
            Ok((g, d)) => {
                gpus.push(g);
                handles.push(d);
            }
            Err(e) => {
                // Reported (once, with what becomes of its devices) by `unread`.
                tracing::debug!(
                    index,
                    uuid = e.uuid,
                    lost = e.lost,
                    error = e.error,
                    "NVML cannot read this GPU; the others are read on"
                );
                failed.push(FailedGpu {
                    index,
                    uuid: e.uuid,
                    error: e.error,
                    lost: e.lost,
                });
            }
        }
    }
    set_islands(&mut gpus, &handles);
    Ok(Inventory {
        driver_version,
        cuda_driver_version,
        gpus,
        failed,
    })
}

/// Each whole GPU's NVLink island; GPUs in MIG mode have no GPU-to-GPU P2P and take no part.
fn set_islands(gpus: &mut [Gpu], handles: &[NvmlDevice<'_>]) {
    let whole: Vec<usize> = (0..gpus.len()).filter(|&i| !gpus[i].mig_enabled).collect();
    let devices: Vec<&NvmlDevice<'_>> = whole.iter().map(|&i| &handles[i]).collect();
    let bus: Vec<String> = whole.iter().map(|&i| gpus[i].pci_bus_id.clone()).collect();
    let found = topology::islands(&bus, &topology::joined_pairs(&devices));
    for (&i, island) in whole.iter().zip(found) {
        gpus[i].nvlink_island = island;
    }
}

fn read_gpu(
    nvml: &Nvml,
    d: &NvmlDevice<'_>,
    index: u32,
    partitioned: &GpuSelection,
) -> std::result::Result<Gpu, GpuError> {
    let at = |what: &str| format!("device {index} {what}");
    let uuid = d.uuid().map_err(|e| GpuError::nvml(None, &at("uuid"), e))?;
    let fail = |what: &str, e| GpuError::nvml(Some(&uuid), &at(what), e);
    let minor = d.minor_number().map_err(|e| fail("minor number", e))?;
    let pci = d.pci_info().map_err(|e| fail("PCI info", e))?;
    let name = optional(&at("name"), d.name());
    let memory_bytes = optional(&at("memory"), d.memory_info()).map(|m| m.total);
    let compute_capability = optional(&at("compute capability"), d.cuda_compute_capability())
        .map(|cc| (cc.major, cc.minor));
    let mig_enabled = match d.mig_mode() {
        Ok(m) => m.current == 1,
        // GPUs without MIG support say so; that is not an error.
        Err(NvmlError::NotSupported) | Err(NvmlError::FailedToLoadSymbol(_)) => false,
        Err(e) => return Err(fail("MIG mode", e)),
    };
    // SAFETY (for the raw calls below): the handle is valid while `nvml` lives.
    let handle = unsafe { d.handle() };
    let brand = raw_u32(nvml, handle, RawU32::Brand).map(|b| brand_name(b).to_string());
    let architecture =
        raw_u32(nvml, handle, RawU32::Architecture).map(|a| architecture_name(a).to_string());
    let mut migs = Vec::new();
    let mut mig_layout = None;
    if mig_enabled && partitioned.covers_gpu(&uuid, index) {
        // SAFETY: a GPU handle of `nvml`, which outlives the call.
        match unsafe { mig::read_layout(nvml, handle) } {
            Ok(l) => mig_layout = Some(l),
            Err(e) => {
                tracing::warn!(gpu = index, error = %e, "cannot read the MIG profiles; dynamic MIG is off for this GPU")
            }
        }
    }
    if mig_enabled {
        // MIG profile names are shares of the parent's memory.
        let parent_memory = memory_bytes.ok_or_else(|| fail("memory", NvmlError::Unknown))?;
        let max = d.mig_device_count().map_err(|e| fail("MIG count", e))?;
        for i in 0..max {
            let m = match d.mig_device_by_index(i) {
                Ok(m) => m,
                Err(NvmlError::NotFound) | Err(NvmlError::InvalidArg) => continue,
                Err(e) => return Err(fail(&format!("MIG device {i}"), e)),
            };
            migs.push(
                read_mig(nvml, &m, parent_memory)
                    .map_err(|(what, e)| fail(&format!("MIG device {i} {what}"), e))?,
            );
        }
    }
    Ok(Gpu {
        index,
        minor,
        uuid,
        name,
        brand,
        architecture,
        compute_capability,
        memory_bytes,
        pci_bus_id: sysfs_bus_id(&pci.bus_id),
        mig_enabled,
        migs,
        mig_layout,
        clique: clique(nvml, handle),
        nvlink_island: None,
    })
}

/// A MIG device's identity and size; a failed read as (what, NVML's error).
fn read_mig(
    nvml: &Nvml,
    m: &NvmlDevice<'_>,
    parent_memory: u64,
) -> std::result::Result<Mig, (&'static str, NvmlError)> {
    let uuid = m.uuid().map_err(|e| ("uuid", e))?;
    let a = m.attributes().map_err(|e| ("attributes", e))?;
    // SAFETY: valid handle while `nvml` lives.
    let handle = unsafe { m.handle() };
    let gi = raw_u32(nvml, handle, RawU32::GpuInstanceId).ok_or((
        "GPU instance id (nvmlDeviceGetGpuInstanceId)",
        NvmlError::Unknown,
    ))?;
    let ci = raw_u32(nvml, handle, RawU32::ComputeInstanceId).ok_or((
        "compute instance id (nvmlDeviceGetComputeInstanceId)",
        NvmlError::Unknown,
    ))?;
    Ok(Mig {
        uuid,
        gi,
        ci,
        profile: profile_name(
            a.gpu_instance_slice_count,
            a.compute_instance_slice_count,
            a.memory_size_mb,
            parent_memory,
        ),
        memory_bytes: a.memory_size_mb << 20,
        multiprocessors: a.multiprocessor_count,
        copy_engines: a.shared_copy_engine_count,
        decoders: a.shared_decoder_count,
        encoders: a.shared_encoder_count,
        jpeg_engines: a.shared_jpeg_count,
        ofa_engines: a.shared_ofa_count,
    })
}

#[cfg(test)]
mod tests;
