//! The labels of `graft_driver_devices`: a device's DeviceClass and health.

use prometheus_client::encoding::EncodeLabelSet;

use crate::model::{Attribute, Device, Kind};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DeviceLabels {
    pub(super) class: &'static str,
    pub(super) health: &'static str,
}

/// The `health` label's values: a degraded device still works, and is counted apart.
pub(super) const HEALTHS: [&str; 3] = ["healthy", "degraded", "unhealthy"];

/// The DeviceClass every graft device is in (the chart's catch-all class).
const ANY: &str = "graft.dev";

/// Every `class` label value: the chart's DeviceClasses (its values' `deviceClasses`), each
/// `<type>.graft.dev` selecting the devices whose `type` attribute is `<type>`. A fixed set:
/// a type devices.toml names that no class of the chart selects counts under `graft.dev`.
#[rustfmt::skip]
pub(super) const CLASSES: [&str; 11] = [
    ANY, "fuse.graft.dev", "tun.graft.dev", "kvm.graft.dev", "serial.graft.dev",
    "gpu.graft.dev", "mig.graft.dev", "imex-channel.graft.dev", "vfio.graft.dev",
    "licence.graft.dev", "render.graft.dev",
];

/// The `class` label of a device: the most specific of the chart's DeviceClasses that
/// selects it.
pub fn class(d: &Device) -> &'static str {
    // gpu.graft.dev leaves out a GPU in MIG mode (its MIG devices are offered instead).
    if d.kind == Kind::Gpu && d.attributes.get("migEnabled") == Some(&Attribute::Bool(true)) {
        return ANY;
    }
    let Some(ty) = d.string_attribute("type") else {
        return ANY;
    };
    CLASSES
        .iter()
        .find(|c| c.strip_suffix(".graft.dev") == Some(ty))
        .copied()
        .unwrap_or(ANY)
}
