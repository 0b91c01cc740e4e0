//! The labels of `graft_driver_devices`: a device's class and health.

use prometheus_client::encoding::EncodeLabelSet;

use crate::model::Kind;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DeviceLabels {
    pub(super) class: &'static str,
    pub(super) health: &'static str,
}

/// The `health` label's values: a degraded device still works, and is counted apart.
pub(super) const HEALTHS: [&str; 3] = ["healthy", "degraded", "unhealthy"];

/// Every `class` label value, one per line of the match below.
#[rustfmt::skip]
pub(super) const CLASSES: [&str; 7] = ["char", "files", "gpu", "imex_channel", "imex_daemon", "mig", "vfio"];

/// The `class` label of a device.
pub fn class(kind: Kind) -> &'static str {
    match kind {
        Kind::Char => "char",
        Kind::Entry(_) => "files",
        Kind::Gpu => "gpu",
        Kind::ImexChannel => "imex_channel",
        Kind::ImexDaemon => "imex_daemon",
        Kind::Mig => "mig",
        Kind::Vfio => "vfio",
    }
}
