//! graft's NRI plugin.
//!
//! The transport and lifecycle modules ([`mux`], [`events`], [`sdk`]) form a small NRI
//! plugin SDK usable on its own. [`inject`] and [`plugin`] are graft: they read the records
//! the driver wrote and turn them into container adjustments.

pub mod entries;
pub mod events;
#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod guard;
pub mod inject;
pub mod metrics;
pub mod mux;
pub mod plugin;
pub mod published;
pub mod reads;
pub mod refusal;
pub mod sdk;
pub mod sources;
pub mod verify;
