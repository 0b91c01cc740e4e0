//! Node-side setups: what the nvidia backend does on the node at prepare and undoes at
//! unprepare, each kept in the checkpoint as the record of an [`NvidiaWork`] (`kinds`).
//! [`NvidiaSetup`] rebinds a GPU to vfio-pci for passthrough (and back), sets the compute
//! time slice through nvidia-smi (NVML has no call for it), makes and removes dynamic-MIG
//! instances ([`MigManager`]) and opens and closes MPS shares ([`MpsManager`]). It reads
//! each device's typed identity, never its attributes.

pub mod answers;
mod domain;
mod dynamic_mig;
mod kinds;
mod mps;
pub mod mps_tenants;
mod node;
mod passthrough;
mod persistence;
mod plan;
mod smi;
mod vfio;

pub use crate::setup_error::NvidiaSetupError;
pub use dynamic_mig::MigManager;
pub use kinds::{NvidiaWork, VfioPeer, FAMILY};
pub use mps::{MpsManager, Share, DEFAULT_WAIT};
pub use node::NvidiaSetup;
pub use persistence::{NvmlPersistence, PersistenceMode, Untouched};
pub use smi::{ChrootSmi, Smi};
pub use vfio::{Vfio, NVIDIA_DRIVER, VFIO_DRIVER};
