//! graft's DRA kubelet plugin as a library: discovery, ResourceSlices, the core that
//! prepares claims (checkpoint, records graft-nri reads, device setups) and the async edge
//! that feeds it from the kubelet and the API server. The `graft-driver` binary wires
//! these together; tests and benchmarks drive them directly.

pub mod backend;
pub mod claims;
pub mod coexistence;
pub mod daemon;
pub mod discovery;
pub mod edge;
pub mod error;
pub mod events;
pub mod families;
pub mod health;
pub mod inotify;
pub mod limits;
pub mod mapping;
pub mod metrics;
pub mod model;
pub mod mps;
pub mod opaque;
pub mod plugin;
pub mod publisher;
pub mod quantity;
pub mod slices;
pub mod snapshot;

pub use error::{DriverError, Result};

/// The driver name graft registers under unless told otherwise.
pub const DEFAULT_DRIVER_NAME: &str = graft_api::DRIVER;
