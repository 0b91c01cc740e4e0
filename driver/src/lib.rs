//! graft's DRA kubelet plugin assembled: the vendor-neutral core (graft-driver-core) and the
//! device families (graft-nvidia, graft-generic-families), with the registry that names
//! the families ([`families`]). The `graft-driver` and `graft-mps` binaries wire these
//! together; tests and benchmarks drive them through this face, which keeps the paths
//! they always used (`graft_driver::claims`, `graft_driver::discovery::nvidia`...).

pub use graft_driver_core::{
    backend, claims, daemon, edge, error, events, health, inotify, limits, mapping, metrics, model,
    opaque, plugin, publisher, quantity, slices, snapshot, usage,
};
pub use graft_driver_core::{DriverError, Result, DEFAULT_DRIVER_NAME};
/// The MPS control daemons' keeper (the `graft-mps` binary), NVIDIA's.
pub use graft_nvidia::mps;

pub mod families;

/// The core's discovery parts and every family, under the names they always had.
pub mod discovery {
    pub use graft_driver_core::discovery::*;
    pub use graft_generic_families::{char, files, render};
    pub use graft_nvidia as nvidia;
}
