//! Kubernetes Events graft-driver posts where an operator looks (`kubectl describe`): on the
//! claims whose prepare failed ([`claims`]), on the Node while graft-nri is away ([`nri`]),
//! on pods whose container graft-nri refused ([`refusals`]); health Events live in
//! the health module's `events`. One reporter for all of them, and one background [`Poster`]:
//! posting never delays or fails the work it reports on.

pub mod claims;
pub mod nri;
mod post;
pub mod refusals;

pub use post::{
    bounded_note, claim_ref, node_ref, pod_ref, recorder, reporter, Poster, Posting, NOTE_LIMIT,
    QUEUE,
};
