//! What the gate and the record share, kept in a leaf both import: the domain a claim
//! names, what one of its devices was allocated, and why a channel is not handed out.

use crate::setup_error::NvidiaSetupError;
use graft_driver_core::claims::setup_port::SetupError;

/// A domain as a claim's configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainRef {
    /// Its uid.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
}

impl DomainRef {
    pub(crate) fn refuse(&self, reason: impl Into<String>) -> SetupError {
        NvidiaSetupError::ComputeDomain {
            domain: format!("{}/{}", self.namespace, self.name),
            reason: reason.into(),
        }
        .into()
    }
}

/// What one device of a workload claim was allocated, as prepare checks it against the
/// domain: the channel number, the node's clique, and whether the claim's configuration
/// asks for every channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The channel's number (`imex-channel-<n>`).
    pub channel: u32,
    /// The node's clique as the channel names it.
    pub clique: String,
    /// `allocationMode: All` in the claim's configuration.
    pub all: bool,
}

/// Why a channel is not handed out: for good (not the domain's channel), or for now.
#[derive(Debug)]
pub enum Refusal {
    /// Not the domain's to give: no wait changes it.
    Final(SetupError),
    /// Not yet (the domain not Ready here, no slot yet, the API server not answering).
    Retry(SetupError),
}

impl Refusal {
    /// The error prepare returns.
    pub fn into_error(self) -> SetupError {
        match self {
            Refusal::Final(e) | Refusal::Retry(e) => e,
        }
    }
}
