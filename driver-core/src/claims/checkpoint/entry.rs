//! What the checkpoint holds per claim.

use serde::{Deserialize, Serialize};

use crate::claims::lifecycle::ClaimState;

/// One device handed to a claim, with what unprepare and the overlap check need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedDevice {
    /// The pool it was allocated from.
    pub pool: String,
    /// Its name.
    pub device: String,
    /// Request names with any subrequest suffix stripped.
    pub requests: Vec<String>,
    /// The share of a shared device; `None` for a whole device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// Allocated with DRA admin access.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin_access: bool,
    /// Node-side work done for the device, undone at unprepare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<crate::claims::setup_port::Setup>,
}

/// One claim as the checkpoint keeps it, keyed by its UID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimEntry {
    /// How far its prepare or unprepare got.
    pub state: ClaimState,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The devices handed to it.
    pub devices: Vec<PreparedDevice>,
}
