//! The async edge between the kubelet's calls and the core: it reads claims and the pods
//! they are reserved for from the API server, turns them into the core's plain inputs, and
//! runs the core on a blocking thread under the kubelet's deadline. A call the core cannot
//! finish in time (a device setup waiting for a GPU to be freed) is answered with a
//! retryable error per claim while the work goes on; the kubelet's retry finds it done.

mod call;
mod errors;
mod fetch;
#[cfg(test)]
mod fetch_tests;
mod pods;
mod reasons;

pub use call::{Edge, DEFAULT_MARGIN, KUBELET_DEADLINE};
pub use errors::{CallError, ClaimFailure, ClaimOutcome};
pub use pods::PodCache;
pub use reasons::{call_reason, claim_reason};
