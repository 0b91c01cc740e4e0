//! graft's ComputeDomain: a custom resource for a set of nodes that share GPU memory over
//! NVLink through IMEX, and its controller (`graft-compute-domain-controller`).
//!
//! For a domain the controller chooses one NVLink clique with room (graft's ResourceSlices
//! publish each IMEX channel's `cliqueID`) and a slot in it (its channel number and IMEX
//! ports), and keeps both in its record in graft's namespace; creates the workload
//! ResourceClaimTemplate, whose claims can only get channels of that clique, and, in
//! graft's namespace, the domain's IMEX daemon DaemonSet (on the nodes its allocated
//! workload claims name, its members) and its claim template; reports per-node readiness
//! from the daemon pods on its members; takes the domain's node label from nodes that are
//! no members; and on deletion removes all of it and the domain's node labels. One replica
//! acts at a time (a Lease); it reads the cluster from watch caches, never by listing.

mod apply;
pub mod binding;
pub mod cache;
mod cleanup;
pub mod clique;
mod context;
pub mod controller;
pub use graft_api::compute_domain as crd;
pub mod daemon;
pub mod devices;
pub mod labels;
pub mod lease;
pub mod members;
pub mod metrics;
pub mod objects;
mod place;
pub mod policy;
pub mod record;
pub mod revisit;
pub mod slot;
pub mod status;
mod term;

pub use controller::{run, Context};
pub use crd::{ComputeDomain, ComputeDomainSpec, ComputeDomainStatus};
pub use lease::{run_elected, Election};
pub use objects::DaemonConfig;
pub use policy::SlotPolicy;

/// What went wrong with a domain; each names the domain.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The domain cannot be served as written.
    #[error("compute domain {domain}: {why}")]
    Invalid {
        /// namespace/name.
        domain: String,
        /// What is wrong.
        why: String,
    },
    /// An object could not be built (a bug: the builders' JSON does not fit the type).
    #[error("building the {what}")]
    Build {
        /// Which object.
        what: &'static str,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// An API call failed.
    #[error("compute domain {domain}: {action}")]
    Kube {
        /// namespace/name.
        domain: String,
        /// What was being done.
        action: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Adding or removing the finalizer failed.
    #[error("compute domain {domain}: finalizer")]
    Finalizer {
        /// namespace/name.
        domain: String,
        /// What failed.
        #[source]
        source: Box<kube::runtime::finalizer::Error<Error>>,
    },
}
