//! graft-driver's vendor-neutral core: the device model, the family port every device
//! family implements ([`backend::Backend`], [`claims::setup_port::DeviceSetup`],
//! [`opaque::OpaqueFamily`]), the claims' checkpoint and state machine, the records
//! graft-nri reads, ResourceSlices, health, metrics, events and the async edge that feeds
//! the core from the kubelet and the API server. It names no family: the families are
//! crates of their own (graft-nvidia, graft-generic-families) and graft-driver's registry
//! (`graft_driver::families`) is the one place that lists them.

pub mod backend;
pub mod claims;
pub mod daemon;
pub mod discovery;
pub mod edge;
pub mod error;
pub mod events;
pub mod health;
pub mod inotify;
pub mod limits;
pub mod mapping;
pub mod metrics;
pub mod model;
pub mod opaque;
pub mod plugin;
pub mod publisher;
pub mod quantity;
pub mod slices;
pub mod snapshot;
pub mod usage;

pub use error::{DriverError, Result};

/// The driver name graft registers under unless told otherwise.
pub const DEFAULT_DRIVER_NAME: &str = graft_api::DRIVER;
