//! Device health: what graft knows of each device's condition ([`HealthReport`]), and where
//! it goes (device taints on the ResourceSlices, the kubelet's resource health stream,
//! Events through `crate::events::health`). Where it comes from is the families' part: for
//! GPUs, NVIDIA's health source (graft-nvidia's `health`: NVML events and probes).
//!
//! The monitor publishes a [`HealthReport`] through a `tokio::sync::watch` channel. A
//! device that is not in the report is healthy: only devices with something to say appear.

pub mod absent;
mod report;
pub mod taints;

pub use report::{whole_seconds, Condition, DeviceHealth, HealthReport};
