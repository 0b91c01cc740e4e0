//! ComputeDomains on this node (docs/compute-domains.md): the two opaque configuration
//! kinds graft-compute-domain-controller writes ([`config`]), and the gate a domain's
//! workload channel passes at prepare ([`gate`]): the channel the domain's own, the node
//! labelled for the domain, the domain Ready here, as the controller's [`record`] says. The domain's objects and its
//! IMEX daemons are the controller's.

pub mod clique_label;
pub mod config;
pub mod gate;
pub mod record;
pub mod refusal;

pub use config::{AllocationMode, DomainConfig};
pub use gate::{DomainGate, GateSlot, KubeGate};
pub use refusal::{DomainRef, Grant, Refusal};
