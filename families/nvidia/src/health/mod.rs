//! NVIDIA's health source: what NVML says of each published GPU and MIG device, turned into
//! the [`graft_driver_core::health::HealthReport`] every family's health ends in. One blocking thread
//! ([`monitor`]) waits on NVML's events ([`nvml_events`]), probes each GPU ([`probe`]),
//! classifies what it hears ([`classify`]), lands it on devices ([`targets`]), keeps each
//! device's condition over time ([`state`]) and across restarts ([`store`]).

pub mod classify;
pub mod monitor;
pub mod nvml_events;
pub mod probe;
pub mod state;
pub mod store;
pub mod targets;
