//! graft's NRI plugin, built on the NRI SDK (`graft_nri_sdk`): [`inject`] and [`plugin`]
//! read the records the driver wrote and turn them into container adjustments.

pub mod entries;
#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod inject;
pub mod metrics;
pub mod plugin;
pub mod published;
pub mod reads;
pub mod refusal;
pub mod sources;
pub mod unclaimed;
pub mod validator;
pub mod verify;
