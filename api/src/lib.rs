//! graft's cluster-facing contract, compiled: every name one of graft's components writes
//! into the cluster and another reads back. graft-driver publishes devices with these
//! attributes, capacities and `type` values and reads these opaque configurations; the
//! ComputeDomain controller writes those configurations, reads the attributes and owns the
//! CRD; graft-scheduler-extender reads the attributes and speaks kube-scheduler's extender
//! protocol; the chart's DeviceClasses select by them (a test renders each class's CEL from
//! [`classes`] and compares it with the chart's template).
//!
//! A name changed here changes for every component at once; one written as a string
//! elsewhere is a bug. Adding a name is compatible; renaming or removing one is not, for
//! clusters hold claims, selectors and objects written with the old one.

pub mod attributes;
pub mod capacity;
pub mod classes;
pub mod client;
pub mod compute_domain;
pub mod extender;
pub mod opaque;

/// The DRA driver name graft publishes its devices under, also the attribute domain
/// (`device.attributes['graft.dev']`) and the API group of its opaque configurations.
pub const DRIVER: &str = "graft.dev";

/// The `type` attribute's values: what a device is, for DeviceClass selectors.
/// (Character devices and served files carry the type their devices.toml entry gives.)
pub mod types {
    /// A whole NVIDIA GPU.
    pub const GPU: &str = "gpu";
    /// A MIG device of an NVIDIA GPU, static or a dynamic placement.
    pub const MIG: &str = "mig";
    /// An NVIDIA GPU's PCI function for VFIO passthrough.
    pub const VFIO: &str = "vfio";
    /// An NVIDIA IMEX channel.
    pub const IMEX_CHANNEL: &str = "imex-channel";
    /// A place for one ComputeDomain's IMEX daemon on a node.
    pub const IMEX_DAEMON: &str = "imex-daemon";
    /// A DRM render node.
    pub const RENDER: &str = "render";
}

/// The [`attributes::SHARING`] attribute's values: how a GPU is shared.
pub mod sharing {
    /// Through MPS: claims take shares of its compute and memory.
    pub const MPS: &str = "mps";
    /// Time-sliced among claims, as replicas: each claim consumes shares of it
    /// ([`crate::capacity::SHARES`]), and CUDA switches between their processes.
    pub const TIME_SLICING: &str = "timeSlicing";
}
