//! What the checkpoint holds per claim.

use serde::{Deserialize, Serialize};

use crate::core::lifecycle::ClaimState;

/// One device handed to a claim, with what unprepare and the overlap check need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedDevice {
    pub pool: String,
    pub device: String,
    /// Request names with any subrequest suffix stripped.
    pub requests: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin_access: bool,
    /// Node-side work done for the device, undone at unprepare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<crate::setup::Setup>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimEntry {
    pub state: ClaimState,
    pub namespace: String,
    pub name: String,
    pub devices: Vec<PreparedDevice>,
}
