//! What the core is given and what it answers, as plain data: the async edge reads claims
//! and pods from the API server and turns them into [`ClaimInput`]s, so the core needs no
//! Kubernetes client and unit tests build inputs by hand.

use graft_record::InvalidRecord;
use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;

use super::config_edits::ConfigRefused;
use super::seams::NotReady;
use crate::claims::setup_port::SetupError;
use crate::error::DriverError;
use crate::mapping::PodUse;
use crate::opaque::ConfigError;

use crate::model::{Allocated, ClaimId};

/// A claim to prepare: its allocation (this driver's results only), the configuration
/// entries of the allocation, and the pods it is reserved for.
#[derive(Debug, Clone)]
pub struct ClaimInput {
    /// Which claim.
    pub id: ClaimId,
    /// Its allocation results for this driver.
    pub results: Vec<Allocated>,
    /// The configuration entries of its allocation.
    pub configs: Vec<DeviceAllocationConfiguration>,
    /// The pods it is reserved for, as read.
    pub pods: Vec<PodUse>,
    /// Pods in `reservedFor` that could not be read; the claim fails if there are any.
    pub pod_errors: Vec<String>,
}

/// Why one claim was not prepared (or unprepared). Its text is what the kubelet puts on
/// the pod's events.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// graft-nri is not in place to inject, so nothing is prepared.
    #[error("graft-nri is not ready to inject devices: {0}")]
    NriNotReady(#[source] NotReady),
    /// Another operation on the claim still runs (a slow device setup); the kubelet's retry
    /// picks up its result.
    #[error("claim {claim}: an earlier prepare or unprepare of it is still running (a device setup can take a while); the kubelet retries")]
    InProgress {
        /// The claim (`namespace/name`).
        claim: String,
    },
    /// Its devices are busy with another claim's setup past the deadline.
    #[error("claim {claim}: devices {devices:?} are still being set up for another claim; the kubelet retries")]
    DevicesBusy {
        /// The claim (`namespace/name`).
        claim: String,
        /// The busy devices.
        devices: Vec<String>,
    },
    /// Pods it is reserved for could not be read.
    #[error("{}", .0.join("; "))]
    PodsUnreadable(Vec<String>),
    /// An allocated device belongs to another node's pool.
    #[error("device {pool}/{device} of request {request} is not in this node's pool {node}")]
    NotInPool {
        /// The pool allocated from.
        pool: String,
        /// The device allocated.
        device: String,
        /// The request it was allocated for.
        request: String,
        /// This node.
        node: String,
    },
    /// An allocated device is not (any more) on this node.
    #[error("device {device} (request {request}) is not present on node {node}")]
    NotPresent {
        /// The device allocated.
        device: String,
        /// The request it was allocated for.
        request: String,
        /// This node.
        node: String,
    },
    /// The claim's configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A device's configuration cannot be applied to it.
    #[error("request {request}: device {device}: {source}")]
    Configure {
        /// The request the device was allocated for.
        request: String,
        /// The device.
        device: String,
        /// What was refused.
        #[source]
        source: ConfigRefused,
    },
    /// Sharing settings given for a device that cannot be shared.
    #[error(
        "request {request}: device {device} cannot be shared ({} applies to {})",
        .sharing.setting,
        .sharing.to
    )]
    CannotShare {
        /// The request the device was allocated for.
        request: String,
        /// The device.
        device: String,
        /// The sharing setting, and what it applies to (its family's words).
        sharing: crate::opaque::Applies,
    },
    /// A device's backend refused to plan its setup.
    #[error("request {request}: {source}")]
    SetupRefused {
        /// The request the device was allocated for.
        request: String,
        /// Why.
        #[source]
        source: SetupError,
    },
    /// A device setup panicked on its thread: the claim fails as it does when a setup
    /// fails, the other claims of the call go on.
    #[error("claim {claim}: a device setup panicked")]
    SetupPanicked {
        /// The claim (`namespace/name`).
        claim: String,
    },
    /// A device's setup or its undo failed.
    #[error("device {device}: {source}")]
    Setup {
        /// The device.
        device: String,
        /// What failed.
        #[source]
        source: SetupError,
    },
    /// A device's checkpointed setup record cannot be read by its family, so it cannot be
    /// undone: the claim's entry stays, and so does the claim, until a driver that reads
    /// the record unprepares it (or the record is mended).
    #[error(
        "claim {claim}: device {device}: {source}; it stays prepared until its setup can be undone"
    )]
    UnreadableSetup {
        /// The claim (`namespace/name`).
        claim: String,
        /// The device.
        device: String,
        /// What its family could not read.
        #[source]
        source: Box<SetupError>,
    },
    /// The device is prepared for another claim.
    #[error("device {device} is already prepared for claim {holder} ({holder_uid})")]
    AlreadyPrepared {
        /// The device.
        device: String,
        /// The holder (`namespace/name`).
        holder: String,
        /// The holder's UID.
        holder_uid: String,
    },
    /// The claim's record would break the injection policy.
    #[error("the record for claim {claim} would break graft's injection policy: {source}")]
    Policy {
        /// The claim (`namespace/name`).
        claim: String,
        /// What the policy refused.
        #[source]
        source: InvalidRecord,
    },
    /// Local state (records, checkpoint) could not be read or written.
    #[error("{claim}: {source}")]
    Local {
        /// The claim (`namespace/name`).
        claim: String,
        /// What failed.
        #[source]
        source: DriverError,
    },
}

/// One claim's result.
pub type Outcome<T> = Result<T, ClaimError>;
