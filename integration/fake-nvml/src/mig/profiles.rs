//! The GPU models the fake can be, and their MIG profiles, with the numbers the real
//! library reports for them. Profile ids are the `NVML_GPU_INSTANCE_PROFILE_*` and
//! `NVML_COMPUTE_INSTANCE_PROFILE_*` indices themselves (the real library numbers them
//! apart; callers pass back whatever id the profile info gave them, so either works).

use nvml_wrapper_sys::bindings::*;

/// A GPU instance profile: its engines, memory, and where it may sit, as `start`s in
/// memory slices (8 per GPU), each `size` slices long.
#[derive(Debug)]
pub(crate) struct GiProfile {
    pub(crate) index: u32,
    /// As in `nvmlGpuInstanceProfileInfo_v2_t.name`, less the `MIG ` in front.
    pub(crate) name: &'static str,
    pub(crate) slices: u32,
    pub(crate) instances: u32,
    pub(crate) sms: u32,
    pub(crate) copy_engines: u32,
    pub(crate) decoders: u32,
    pub(crate) jpegs: u32,
    pub(crate) ofas: u32,
    pub(crate) memory_mb: u64,
    pub(crate) starts: &'static [u32],
    pub(crate) size: u32,
}

/// A GPU model: what the full GPU reports, and its MIG profiles.
#[derive(Debug)]
pub(crate) struct Model {
    /// The word after `model` in the configuration file.
    pub(crate) key: &'static str,
    pub(crate) name: &'static str,
    pub(crate) memory: u64,
    pub(crate) architecture: nvmlDeviceArchitecture_t,
    pub(crate) compute_capability: (i32, i32),
    /// `nvmlPciInfo_t.pciDeviceId`: device id in the high half, vendor in the low.
    pub(crate) pci_device_id: u32,
    pub(crate) sms: u32,
    pub(crate) copy_engines: u32,
    pub(crate) decoders: u32,
    pub(crate) jpegs: u32,
    pub(crate) ofas: u32,
    pub(crate) profiles: &'static [GiProfile],
}

/// Compute slices on every MIG-capable model the fake knows.
pub(crate) const COMPUTE_SLICES: u32 = 7;

const ONE_EACH: &[u32] = &[0, 1, 2, 3, 4, 5, 6];
const EVEN: &[u32] = &[0, 2, 4, 6];
const TWO_SLICES: &[u32] = &[0, 2, 4];
const HALVES: &[u32] = &[0, 4];
const FIRST: &[u32] = &[0];

#[allow(clippy::too_many_arguments)]
const fn gi(
    index: u32,
    name: &'static str,
    slices: u32,
    instances: u32,
    sms: u32,
    engines: [u32; 4],
    memory_mb: u64,
    starts: &'static [u32],
    size: u32,
) -> GiProfile {
    let [copy_engines, decoders, jpegs, ofas] = engines;
    GiProfile {
        index,
        name,
        slices,
        instances,
        sms,
        copy_engines,
        decoders,
        jpegs,
        ofas,
        memory_mb,
        starts,
        size,
    }
}

// Engines below are [copy engines, decoders, JPEG, OFA]; no profile has an encoder.
pub(crate) const H100_80GB: Model = Model {
    key: "h100-80gb",
    name: "NVIDIA H100 80GB HBM3",
    memory: 85_520_809_984,
    architecture: NVML_DEVICE_ARCH_HOPPER,
    compute_capability: (9, 0),
    pci_device_id: 0x2330_10de,
    sms: 132,
    copy_engines: 8,
    decoders: 7,
    jpegs: 7,
    ofas: 1,
    profiles: &[
        gi(0, "1g.10gb", 1, 7, 16, [1, 1, 1, 0], 9_856, ONE_EACH, 1),
        gi(7, "1g.10gb+me", 1, 1, 16, [1, 1, 1, 1], 9_856, ONE_EACH, 1),
        gi(9, "1g.20gb", 1, 4, 16, [1, 1, 1, 0], 19_968, EVEN, 2),
        gi(1, "2g.20gb", 2, 3, 32, [2, 2, 2, 0], 19_968, TWO_SLICES, 2),
        gi(2, "3g.40gb", 3, 2, 60, [3, 3, 3, 0], 40_192, HALVES, 4),
        gi(3, "4g.40gb", 4, 1, 64, [4, 4, 4, 0], 40_192, FIRST, 4),
        gi(4, "7g.80gb", 7, 1, 132, [8, 7, 7, 1], 80_896, FIRST, 8),
    ],
};

pub(crate) const A100_40GB: Model = Model {
    key: "a100-40gb",
    name: "NVIDIA A100-SXM4-40GB",
    memory: 42_949_672_960,
    architecture: NVML_DEVICE_ARCH_AMPERE,
    compute_capability: (8, 0),
    pci_device_id: 0x20b0_10de,
    sms: 108,
    copy_engines: 7,
    decoders: 5,
    jpegs: 1,
    ofas: 1,
    profiles: &[
        gi(0, "1g.5gb", 1, 7, 14, [1, 0, 0, 0], 4_864, ONE_EACH, 1),
        gi(7, "1g.5gb+me", 1, 1, 14, [1, 1, 1, 1], 4_864, ONE_EACH, 1),
        gi(9, "1g.10gb", 1, 4, 14, [1, 1, 0, 0], 9_856, EVEN, 2),
        gi(1, "2g.10gb", 2, 3, 28, [2, 1, 0, 0], 9_856, TWO_SLICES, 2),
        gi(2, "3g.20gb", 3, 2, 42, [3, 2, 0, 0], 19_968, HALVES, 4),
        gi(3, "4g.20gb", 4, 1, 56, [4, 2, 0, 0], 19_968, FIRST, 4),
        gi(4, "7g.40gb", 7, 1, 98, [7, 5, 1, 1], 40_192, FIRST, 8),
    ],
};

pub(crate) const MODELS: [&Model; 2] = [&H100_80GB, &A100_40GB];

impl Model {
    pub(crate) fn profile(&self, index: u32) -> Option<&'static GiProfile> {
        self.profiles.iter().find(|p| p.index == index)
    }
}

/// Compute slices of `NVML_COMPUTE_INSTANCE_PROFILE_<index>`.
const CI_SLICES: [u32; 7] = [1, 2, 3, 4, 7, 8, 6];

/// A compute instance profile inside a GPU instance of profile `gi`.
#[derive(Debug, PartialEq)]
pub(crate) struct CiProfile {
    pub(crate) index: u32,
    pub(crate) slices: u32,
    /// How many fit in the GPU instance.
    pub(crate) instances: u32,
    pub(crate) sms: u32,
    /// As in `nvmlComputeInstanceProfileInfo_v2_t.name`, less the `MIG ` in front.
    pub(crate) name: String,
}

impl GiProfile {
    /// The compute instance profile `index` of this GPU instance profile; `None` when the
    /// GI cannot hold it (more slices than it has, or a size these models lack).
    pub(crate) fn ci_profile(&self, model: &Model, index: u32) -> Option<CiProfile> {
        let slices = *CI_SLICES.get(index as usize)?;
        if slices > self.slices || !matches!(slices, 1..=4 | 7) {
            return None;
        }
        let (sms, name) = if slices == self.slices {
            (self.sms, self.name.to_string())
        } else {
            // A partial CI gets the SMs of the plain GI profile of its size.
            let sms = model
                .profiles
                .iter()
                .find(|p| p.slices == slices && p.index <= NVML_GPU_INSTANCE_PROFILE_7_SLICE)
                .map_or(0, |p| p.sms)
                .min(self.sms);
            (sms, format!("{slices}c.{}", self.name))
        };
        Some(CiProfile {
            index,
            slices,
            instances: self.slices / slices,
            sms,
            name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables() {
        for model in MODELS {
            for p in model.profiles {
                assert!(p.slices <= COMPUTE_SLICES, "{}", p.name);
                assert!(p.starts.iter().all(|s| s + p.size <= 8), "{}", p.name);
                assert!(p.instances as usize <= p.starts.len(), "{}", p.name);
                assert!(p.memory_mb << 20 <= model.memory, "{}", p.name);
                assert!(p.name.starts_with(&format!("{}g.", p.slices)), "{}", p.name);
                assert!(model.profile(p.index).is_some());
            }
            // The 8- and 6-slice profiles exist on neither model.
            assert!(model.profile(NVML_GPU_INSTANCE_PROFILE_8_SLICE).is_none());
            assert!(model.profile(NVML_GPU_INSTANCE_PROFILE_6_SLICE).is_none());
        }
    }

    #[test]
    fn compute_instance_profiles() {
        let g3 = H100_80GB
            .profile(NVML_GPU_INSTANCE_PROFILE_3_SLICE)
            .unwrap();
        let full = g3
            .ci_profile(&H100_80GB, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE)
            .unwrap();
        assert_eq!((full.slices, full.instances, full.sms), (3, 1, 60));
        assert_eq!(full.name, "3g.40gb");
        let one = g3
            .ci_profile(&H100_80GB, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
            .unwrap();
        assert_eq!((one.slices, one.instances, one.sms), (1, 3, 16));
        assert_eq!(one.name, "1c.3g.40gb");
        for bigger in [
            NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
            NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
            NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE,
            NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1,
            99,
        ] {
            assert_eq!(g3.ci_profile(&H100_80GB, bigger), None, "{bigger}");
        }
        let g7 = A100_40GB
            .profile(NVML_GPU_INSTANCE_PROFILE_7_SLICE)
            .unwrap();
        let two = g7
            .ci_profile(&A100_40GB, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE)
            .unwrap();
        assert_eq!((two.instances, two.sms), (3, 28));
        assert_eq!(two.name, "2c.7g.40gb");
        assert_eq!(
            g7.ci_profile(&A100_40GB, NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE),
            None
        );
    }
}
