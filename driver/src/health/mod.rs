//! Device health: what graft knows of each device's condition, where it comes from (NVML
//! events and probes for GPUs), and where it goes (device taints on the ResourceSlices,
//! the kubelet's resource health stream, Events through `crate::events::health`).
//!
//! The monitor publishes a [`HealthReport`] through a `tokio::sync::watch` channel. A
//! device that is not in the report is healthy: only devices with something to say appear.

pub mod absent;
pub mod classify;
pub mod monitor;
pub mod nvml_events;
pub mod probe;
mod report;
pub mod state;
pub mod store;
pub mod taints;
pub mod targets;

pub use report::{whole_seconds, Condition, DeviceHealth, HealthReport};
