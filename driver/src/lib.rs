//! graft's DRA kubelet plugin as a library: discovery, ResourceSlices, the two-phase
//! prepare checkpoint and the records the NRI plugin reads. The `graft-driver` binary wires
//! these together; tests and benchmarks drive them directly.

pub mod checkpoint;
pub mod discovery;
pub mod error;
pub mod hook_install;
pub mod limits;
pub mod mapping;
pub mod opaque;
pub mod plugin;
pub mod prepare;
pub mod publisher;
pub mod setup;
pub mod slices;

pub use error::{DriverError, Result};

/// The driver name graft registers under unless told otherwise.
pub const DEFAULT_DRIVER_NAME: &str = "graft.dev";
