//! Which published devices an NVML signal lands on.
//!
//! A signal about a GPU lands on every device of it: the whole GPU, its MIG devices, its
//! passthrough function. One NVML attributes to a GPU instance lands on that instance's
//! devices only: a static MIG device by its `giID` (and `ciID`), a dynamic-MIG placement
//! (`gpu-<minor>-mig-<profile>-<start>`, which carries no instance id: the instance exists
//! only while a claim holds it) by the profile and placement start NVML reports for the
//! instance ([`Instance::placement`], looked up by the monitor).

use std::collections::BTreeSet;

use graft_api::attributes::{
    CI_ID, DYNAMIC, GI_ID, PARENT_UUID, PLACEMENT_START, PROFILE_ID, UUID,
};
use graft_driver_core::model::{Attribute, Device, Kind};

/// The GPU instance NVML attributed a signal to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance {
    /// The GPU instance's id.
    pub gi: u32,
    /// The compute instance's id, when NVML named one.
    pub ci: Option<u32>,
    /// The GPU instance's profile id and placement start, when NVML could tell.
    pub placement: Option<(u32, u32)>,
}

/// The UUID of the GPU a device is (part of): its own for a whole GPU or its passthrough
/// function, its parent's for a MIG device.
pub fn gpu_of(d: &Device) -> Option<&str> {
    match d.kind {
        Kind::Whole | Kind::Passthrough => d.string_attribute(UUID),
        Kind::Partition => d.string_attribute(PARENT_UUID),
        _ => None,
    }
}

/// The GPUs (by UUID) behind the published devices.
pub fn gpu_uuids(devices: &[Device]) -> BTreeSet<String> {
    devices
        .iter()
        .filter_map(|d| gpu_of(d).map(str::to_string))
        .collect()
}

fn id(d: &Device, key: &str) -> Option<u32> {
    d.int_attribute(key).and_then(|i| u32::try_from(i).ok())
}

/// Whether a MIG device is the instance `at`.
fn holds(d: &Device, at: &Instance) -> bool {
    if d.attributes.get(DYNAMIC) == Some(&Attribute::Bool(true)) {
        return at.placement.is_some_and(|(p, s)| {
            id(d, PROFILE_ID) == Some(p) && id(d, PLACEMENT_START) == Some(s)
        });
    }
    id(d, GI_ID) == Some(at.gi) && at.ci.is_none_or(|c| id(d, CI_ID) == Some(c))
}

/// The published devices a signal on GPU `uuid` lands on; `at` narrows it to one GPU
/// instance when NVML attributed it.
pub fn targets(devices: &[Device], uuid: &str, at: Option<&Instance>) -> Vec<String> {
    devices
        .iter()
        .filter(|d| gpu_of(d) == Some(uuid))
        .filter(|d| match (d.kind, at) {
            (_, None) => true,
            (Kind::Partition, Some(at)) => holds(d, at),
            // An event NVML attributed to an instance is not the whole GPU's.
            _ => false,
        })
        .map(|d| d.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str, kind: Kind, attrs: &[(&str, Attribute)]) -> Device {
        Device {
            attributes: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            ..Device::new(name, kind)
        }
    }

    fn s(v: &str) -> Attribute {
        Attribute::String(v.into())
    }

    fn at(gi: u32, ci: Option<u32>, placement: Option<(u32, u32)>) -> Instance {
        Instance { gi, ci, placement }
    }

    fn static_mig(name: &str, parent: &str, gi: i64) -> Device {
        dev(
            name,
            Kind::Partition,
            &[
                ("parentUUID", s(parent)),
                ("giID", Attribute::Int(gi)),
                ("ciID", Attribute::Int(0)),
            ],
        )
    }

    fn placement(name: &str, parent: &str, profile: i64, start: i64) -> Device {
        dev(
            name,
            Kind::Partition,
            &[
                ("parentUUID", s(parent)),
                ("dynamic", Attribute::Bool(true)),
                ("profileID", Attribute::Int(profile)),
                ("placementStart", Attribute::Int(start)),
            ],
        )
    }

    #[test]
    fn signals_land_on_the_gpu_its_mig_devices_and_its_passthrough_function() {
        let devices = vec![
            dev("gpu-2", Kind::Whole, &[("uuid", s("GPU-a"))]),
            dev("gpu-3", Kind::Whole, &[("uuid", s("GPU-b"))]),
            dev(
                "vfio-0000-18-00-0",
                Kind::Passthrough,
                &[("uuid", s("GPU-a"))],
            ),
            static_mig("gpu-4-mig-1-0", "GPU-c", 1),
            static_mig("gpu-4-mig-2-0", "GPU-c", 2),
            dev("fuse", Kind::Char, &[("uuid", s("GPU-a"))]),
        ];
        assert_eq!(
            targets(&devices, "GPU-a", None),
            ["gpu-2", "vfio-0000-18-00-0"]
        );
        assert_eq!(
            targets(&devices, "GPU-c", None),
            ["gpu-4-mig-1-0", "gpu-4-mig-2-0"]
        );
        assert_eq!(
            targets(&devices, "GPU-c", Some(&at(2, None, None))),
            ["gpu-4-mig-2-0"]
        );
        assert!(targets(&devices, "GPU-c", Some(&at(2, Some(1), None))).is_empty());
        assert!(targets(&devices, "GPU-a", Some(&at(1, None, None))).is_empty());
        assert!(targets(&devices, "GPU-z", None).is_empty());
        assert_eq!(
            gpu_uuids(&devices).into_iter().collect::<Vec<_>>(),
            ["GPU-a", "GPU-b", "GPU-c"]
        );
    }

    #[test]
    fn instance_events_land_on_the_dynamic_placement_that_holds_the_instance() {
        let devices = vec![
            dev("gpu-7", Kind::Whole, &[("uuid", s("GPU-d"))]),
            placement("gpu-7-mig-3g-40gb-0", "GPU-d", 2, 0),
            placement("gpu-7-mig-3g-40gb-4", "GPU-d", 2, 4),
            placement("gpu-7-mig-1g-10gb-4", "GPU-d", 0, 4),
        ];
        // GI 1 is the 3g instance at slice 4 (the monitor asked NVML).
        assert_eq!(
            targets(&devices, "GPU-d", Some(&at(1, Some(0), Some((2, 4))))),
            ["gpu-7-mig-3g-40gb-4"]
        );
        // NVML could not say where the instance is: no placement is blamed.
        assert!(targets(&devices, "GPU-d", Some(&at(1, None, None))).is_empty());
        // A whole-GPU signal lands on all of them.
        assert_eq!(targets(&devices, "GPU-d", None).len(), 4);
    }
}
