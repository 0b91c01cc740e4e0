//! graft-driver's NVIDIA family (`--discovery nvidia`), a crate over graft-driver-core: full
//! GPUs, MIG devices (static and dynamic), IMEX channels and VFIO passthrough functions, in
//! four parts that import each other only through their faces (each part's `mod.rs`):
//!
//! - [`nvml`]: the NVML inventory, the MIG management calls, and the one place NVML is
//!   loaded ([`nvml::open`]);
//! - [`driver_files`]: the driver's user-space files on this node, a library of its own
//!   that imports nothing from the other three;
//! - [`devices`]: device assembly, [`NvidiaDiscovery`], from the inventory and the files;
//!   each device's typed [`devices::Identity`];
//! - [`setup`]: the node-side setups ([`setup::NvidiaSetup`]: passthrough, time-slicing,
//!   dynamic MIG, MPS), which read the devices' identity.
//!
//! Beside them: [`backend`], the family's [`graft_driver_core::backend::Backend`];
//! [`health`], the GPUs' health source (NVML events and probes, feeding the generic
//! [`graft_driver_core::health`]); [`opaque`], NVIDIA's fields and kinds of the claims'
//! opaque configuration (`sharing`, `driverCapabilities`, the ComputeDomain configs);
//! [`domain`], the ComputeDomain side of prepare; [`mps`], the MPS control daemons' keeper
//! that the `graft-mps` binary runs; [`setup_error`], the setups' failures in NVIDIA's
//! words, a leaf the setups and the domains share; and, private to the backend,
//! `hook_install`: graft-hook's install, checked on every start (only NVIDIA's edits run
//! it).
//!
//! Layering: `driver_files` ← `nvml` ← `devices` ← `setup` (an arrow points at a part's
//! user); `nvml` does not need `driver_files` and `devices` does not need `setup`.

pub mod backend;
pub mod coexistence;
pub mod devices;
pub mod domain;
pub mod driver_files;
pub mod flags;
pub mod health;
mod hook_install;
pub mod mps;
pub mod nvml;
pub mod opaque;
pub mod setup;
pub mod setup_error;
pub mod usage;

#[cfg(test)]
mod tests;

pub use devices::{Built, NvidiaConfig, NvidiaDiscovery};
