//! What the core is given and what it answers, as plain data: the async edge reads claims
//! and pods from the API server and turns them into [`ClaimInput`]s, so the core needs no
//! Kubernetes client and unit tests build inputs by hand.

use graft_record::InvalidRecord;
use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;

use super::config_edits::ConfigRefused;
use super::seams::NotReady;
use crate::error::DriverError;
use crate::mapping::PodUse;
use crate::opaque::ConfigError;
use crate::setup::SetupError;

pub use crate::model::{Allocated, ClaimId};

/// A claim to prepare: its allocation (this driver's results only), the configuration
/// entries of the allocation, and the pods it is reserved for.
#[derive(Debug, Clone)]
pub struct ClaimInput {
    pub id: ClaimId,
    pub results: Vec<Allocated>,
    pub configs: Vec<DeviceAllocationConfiguration>,
    pub pods: Vec<PodUse>,
    /// Pods in `reservedFor` that could not be read; the claim fails if there are any.
    pub pod_errors: Vec<String>,
}

/// Why one claim was not prepared (or unprepared). Its text is what the kubelet puts on
/// the pod's events.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("graft-nri is not ready to inject devices: {0}")]
    NriNotReady(#[source] NotReady),
    /// Another operation on the claim still runs (a slow device setup); the kubelet's retry
    /// picks up its result.
    #[error("claim {claim}: an earlier prepare or unprepare of it is still running (a device setup can take a while); the kubelet retries")]
    InProgress { claim: String },
    /// Its devices are busy with another claim's setup past the deadline.
    #[error("claim {claim}: devices {devices:?} are still being set up for another claim; the kubelet retries")]
    DevicesBusy { claim: String, devices: Vec<String> },
    #[error("{}", .0.join("; "))]
    PodsUnreadable(Vec<String>),
    #[error("device {pool}/{device} of request {request} is not in this node's pool {node}")]
    NotInPool {
        pool: String,
        device: String,
        request: String,
        node: String,
    },
    #[error("device {device} (request {request}) is not present on node {node}")]
    NotPresent {
        device: String,
        request: String,
        node: String,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("request {request}: device {device}: {source}")]
    Configure {
        request: String,
        device: String,
        #[source]
        source: ConfigRefused,
    },
    #[error(
        "request {request}: device {device} cannot be shared (sharing applies to full NVIDIA GPUs)"
    )]
    CannotShare { request: String, device: String },
    #[error("request {request}: {source}")]
    SetupRefused {
        request: String,
        #[source]
        source: SetupError,
    },
    /// A device setup panicked on its thread: the claim fails as it does when a setup
    /// fails, the other claims of the call go on.
    #[error("claim {claim}: a device setup panicked")]
    SetupPanicked { claim: String },
    #[error("device {device}: {source}")]
    Setup {
        device: String,
        #[source]
        source: SetupError,
    },
    #[error("device {device} is already prepared for claim {holder} ({holder_uid})")]
    AlreadyPrepared {
        device: String,
        holder: String,
        holder_uid: String,
    },
    #[error("the record for claim {claim} would break graft's injection policy: {source}")]
    Policy {
        claim: String,
        #[source]
        source: InvalidRecord,
    },
    /// Local state (records, checkpoint) could not be read or written.
    #[error("{claim}: {source}")]
    Local {
        claim: String,
        #[source]
        source: DriverError,
    },
}

/// One claim's result.
pub type Outcome<T> = Result<T, ClaimError>;
