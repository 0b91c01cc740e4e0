//! The DeviceClasses the chart installs (templates/30-deviceclasses.yaml, its values'
//! `deviceClasses`), each with the selector it has there: the catch-all `graft.dev`, and
//! `<type>.graft.dev` for the devices whose `type` attribute is `<type>`. The chart's
//! template is checked against [`DeviceClass::cel`] by this crate's tests, and
//! graft-driver's `class` metric label comes from [`of`].

use crate::{attributes, types, DRIVER};

/// One of the chart's DeviceClasses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceClass {
    /// Its name.
    pub name: &'static str,
    /// The `type` it selects; `None` for the catch-all.
    pub device_type: Option<&'static str>,
    /// Whether it leaves out GPUs in MIG mode (CUDA runs only in their MIG devices).
    pub without_mig_mode: bool,
}

const fn typed(name: &'static str, device_type: &'static str) -> DeviceClass {
    DeviceClass {
        name,
        device_type: Some(device_type),
        without_mig_mode: false,
    }
}

/// The catch-all class: every device of graft's.
pub const ANY: DeviceClass = DeviceClass {
    name: DRIVER,
    device_type: None,
    without_mig_mode: false,
};

/// Whole GPUs, not those in MIG mode.
pub const GPU: DeviceClass = DeviceClass {
    name: "gpu.graft.dev",
    device_type: Some(types::GPU),
    without_mig_mode: true,
};

/// IMEX channels: what a ComputeDomain's workload claims ask for.
pub const IMEX_CHANNEL: DeviceClass = typed("imex-channel.graft.dev", types::IMEX_CHANNEL);

/// Every class, in the chart's order.
pub const ALL: [DeviceClass; 11] = [
    ANY,
    typed("fuse.graft.dev", "fuse"),
    typed("tun.graft.dev", "tun"),
    typed("kvm.graft.dev", "kvm"),
    typed("serial.graft.dev", "serial"),
    GPU,
    typed("mig.graft.dev", types::MIG),
    IMEX_CHANNEL,
    typed("vfio.graft.dev", types::VFIO),
    typed("licence.graft.dev", "licence"),
    typed("render.graft.dev", types::RENDER),
];

impl DeviceClass {
    /// The class's CEL selector, as the chart writes it.
    pub fn cel(&self) -> String {
        let attr = format!("device.attributes['{DRIVER}']");
        let mut cel = format!("device.driver == '{DRIVER}'");
        if let Some(t) = self.device_type {
            cel += &format!(" && {attr}.?{}.orValue('') == '{t}'", attributes::TYPE);
        }
        if self.without_mig_mode {
            cel += &format!(" && !{attr}.?{}.orValue(false)", attributes::MIG_ENABLED);
        }
        cel
    }
}

/// The chart's class for MIG devices of one profile (values: nvidia.migProfiles), which
/// serves the name NVIDIA's device plugin gives them (`nvidia.com/mig-1g.10gb`).
pub fn mig_profile_class(profile: &str) -> String {
    format!("mig-{profile}.{DRIVER}")
}

/// That class's CEL selector, as the chart writes it: `mig.graft.dev`'s, and the profile.
pub fn mig_profile_cel(profile: &str) -> String {
    format!(
        "{} && device.attributes['{DRIVER}'].?{}.orValue('') == '{profile}'",
        typed("mig.graft.dev", types::MIG).cel(),
        attributes::PROFILE
    )
}

/// The chart's class for time-sliced shares of whole GPUs (values: nvidia.timeSlicing), which
/// serves the name NVIDIA's device plugin gives them with `renameByDefault`
/// (`nvidia.com/gpu.shared`).
pub const GPU_SHARED: &str = "gpu-shared.graft.dev";

/// That class's CEL selector, as the chart writes it: `gpu.graft.dev`'s, and time-sliced.
pub fn gpu_shared_cel() -> String {
    format!(
        "{} && device.attributes['{DRIVER}'].?{}.orValue('') == '{}'",
        GPU.cel(),
        attributes::SHARING,
        crate::sharing::TIME_SLICING
    )
}

/// The most specific class that selects a device of `device_type` (`None`: it has none),
/// with MIG mode on or off: what `graft_driver_devices`' `class` label says. A type no class
/// names counts under the catch-all.
pub fn of(device_type: Option<&str>, mig_enabled: bool) -> &'static str {
    ALL.iter()
        .find(|c| {
            c.device_type.is_some()
                && c.device_type == device_type
                && !(c.without_mig_mode && mig_enabled)
        })
        .map_or(ANY.name, |c| c.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_counts_under_its_most_specific_class() {
        assert_eq!(of(Some(types::GPU), false), "gpu.graft.dev");
        assert_eq!(of(Some(types::GPU), true), DRIVER);
        assert_eq!(of(Some(types::MIG), false), "mig.graft.dev");
        assert_eq!(of(Some("fuse"), false), "fuse.graft.dev");
        assert_eq!(of(Some("my-own-type"), false), DRIVER);
        assert_eq!(of(None, false), DRIVER);
    }

    #[test]
    fn the_shared_gpu_class_selects_time_sliced_gpus() {
        let cel = gpu_shared_cel();
        assert!(cel.starts_with(&GPU.cel()), "{cel}");
        assert!(
            cel.ends_with(".?sharing.orValue('') == 'timeSlicing'"),
            "{cel}"
        );
    }

    #[test]
    fn a_mig_profile_class_selects_its_profile() {
        assert_eq!(mig_profile_class("1g.10gb"), "mig-1g.10gb.graft.dev");
        assert_eq!(
            mig_profile_cel("1g.10gb"),
            "device.driver == 'graft.dev' && device.attributes['graft.dev'].?type.orValue('') \
             == 'mig' && device.attributes['graft.dev'].?profile.orValue('') == '1g.10gb'"
        );
    }

    #[test]
    fn a_class_selects_its_type() {
        assert_eq!(ANY.cel(), "device.driver == 'graft.dev'");
        assert_eq!(
            GPU.cel(),
            "device.driver == 'graft.dev' && device.attributes['graft.dev'].?type.orValue('') \
             == 'gpu' && !device.attributes['graft.dev'].?migEnabled.orValue(false)"
        );
    }
}
