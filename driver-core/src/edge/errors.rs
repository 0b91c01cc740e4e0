//! What the kubelet is told when a call or a claim fails.

use std::collections::BTreeMap;

use crate::claims::input::ClaimError;
use crate::claims::seams::Crashed;
use crate::claims::tenant::without_paths;
use crate::claims::CoreError;
use crate::error::DriverError;
use crate::model::ClaimId;

/// Errors that fail a whole call, as the reference helper does; the kubelet retries.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The claim could not be read from the API server.
    #[error("retrieve claim {claim}: {source}")]
    Fetch {
        /// The claim (`namespace/name`).
        claim: String,
        /// The API's error.
        #[source]
        source: kube::Error,
    },
    /// The claim is gone from the API server.
    #[error("claim {claim} not found")]
    NotFound {
        /// The claim (`namespace/name`).
        claim: String,
    },
    /// The claim of that name is another one than the kubelet asked for.
    #[error("claim {claim} got replaced (uid {found}, expected {expected})")]
    Replaced {
        /// The claim (`namespace/name`).
        claim: String,
        /// The UID found.
        found: String,
        /// The UID the kubelet gave.
        expected: String,
    },
    /// The claim has no allocation.
    #[error("claim {claim} not allocated")]
    NotAllocated {
        /// The claim (`namespace/name`).
        claim: String,
    },
    /// Local state (records, checkpoint) could not be read or written.
    #[error(transparent)]
    Local(#[from] DriverError),
    /// The core's thread stopped in a way it should not (a panic).
    #[error("graft-driver failed internally: {0}")]
    Internal(#[source] tokio::task::JoinError),
    /// A crash point stopped the core (only in tests).
    #[error("graft-driver failed internally: {0}")]
    Crashed(#[source] Crashed),
    /// Start-up did not finish in its time.
    #[error("graft-driver failed internally: start-up did not finish")]
    StartupUnfinished,
}

/// A failed claim's error as the kubelet is told it (and the claim's author reads it in the
/// pod's Events): what [`ClaimError::for_tenant`] leaves of the claim's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClaimFailure(pub String);

/// A claim's result as the kubelet gets it: devices, or the error text.
pub type ClaimOutcome<T> = Result<T, ClaimFailure>;

/// A failed claim's text for its author (the kubelet's and graft's Events); the node's log
/// keeps what that leaves out.
pub fn told(ids: &[ClaimId], uid: &str, e: ClaimError) -> ClaimFailure {
    let namespace = ids
        .iter()
        .find(|i| i.uid == uid)
        .map_or("", |i| &i.namespace);
    let text = e.for_tenant(namespace);
    if text != e.to_string() {
        tracing::warn!(claim_uid = uid, error = %e, "claim failed");
    }
    ClaimFailure(text)
}

impl CallError {
    /// The text for the kubelet (the pod's Events): without the host paths local state
    /// errors name, which stay in the node's log.
    pub fn for_tenant(&self) -> String {
        let full = self.to_string();
        let text = without_paths(&full);
        if text != full {
            tracing::warn!(error = %full, "NodePrepareResources or NodeUnprepareResources failed");
        }
        text
    }
}

/// A call's error from the core's.
pub fn core_error(e: CoreError) -> CallError {
    match e {
        CoreError::Local(e) => CallError::Local(e),
        CoreError::Crashed(c) => CallError::Crashed(c),
    }
}

/// Every claim of the call is still being worked on.
pub fn in_progress<T>(ids: &[ClaimId]) -> BTreeMap<String, ClaimOutcome<T>> {
    ids.iter()
        .map(|id| {
            let e = ClaimError::InProgress {
                claim: id.to_string(),
            };
            (id.uid.clone(), Err(ClaimFailure(e.to_string())))
        })
        .collect()
}
