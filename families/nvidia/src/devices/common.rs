//! What every GPU's devices share, and how a scan that cannot go on fails.

use std::collections::BTreeMap;

use graft_driver_core::error::DriverError;

/// What every GPU's devices share: the driver's files and versions.
pub struct Common {
    pub majors: BTreeMap<String, u32>,
    pub edits: graft_record::ContainerEdits,
    pub optional: BTreeMap<String, graft_record::ContainerEdits>,
    pub driver_version: String,
    pub cuda_version: Option<String>,
}

/// The backend failing as a whole, for `reason`.
pub fn fail(reason: impl Into<String>) -> DriverError {
    DriverError::Discovery {
        backend: "nvidia",
        reason: reason.into(),
    }
}
