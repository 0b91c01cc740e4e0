//! Kubernetes Events graft-driver posts where an operator looks (`kubectl describe`): on the
//! claims whose prepare failed ([`claims`]), on the Node while graft-nri is away ([`nri`]),
//! on pods whose container graft-nri refused ([`refusals`]), and device health changes on
//! the Node and the claims and pods that hold the device ([`health`]), and graft-driver's
//! own trouble on the Node: devices.toml, the checkpoint, graft-hook ([`node`]). One
//! reporter for all of them, and one background [`Poster`]: posting never delays or fails
//! the work it reports on.

pub mod claims;
pub mod health;
pub mod node;
pub mod nri;
mod post;
pub mod refusals;

pub use post::{
    bounded_note, claim_ref, node_ref, pod_ref, recorder, reporter, Poster, Posting, CONTROLLER,
    NOTE_LIMIT, QUEUE,
};
