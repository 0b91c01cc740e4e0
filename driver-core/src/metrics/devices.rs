//! The labels of `graft_driver_devices`: a device's DeviceClass and health.

use prometheus_client::encoding::EncodeLabelSet;

use graft_api::{attributes, classes};

use crate::model::{Attribute, Device, Kind};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DeviceLabels {
    pub(super) class: &'static str,
    pub(super) health: &'static str,
}

/// The `health` label's values: a degraded device still works, and is counted apart.
pub(super) const HEALTHS: [&str; 3] = ["healthy", "degraded", "unhealthy"];

/// Every `class` label value: the chart's DeviceClasses (graft_api::classes). A fixed set:
/// a type devices.toml names that no class of the chart selects counts under `graft.dev`.
pub(super) fn all_classes() -> impl Iterator<Item = &'static str> {
    classes::ALL.iter().map(|c| c.name)
}

/// The `class` label of a device: the most specific of the chart's DeviceClasses that
/// selects it (gpu.graft.dev leaves out a GPU in MIG mode: its MIG devices are offered).
pub fn class(d: &Device) -> &'static str {
    let mig_mode = d.kind == Kind::Whole
        && d.attributes.get(attributes::MIG_ENABLED) == Some(&Attribute::Bool(true));
    classes::of(d.string_attribute(attributes::TYPE), mig_mode)
}
