use super::*;
use crate::mig::profiles::{A100_40GB, H100_80GB, MODELS};

const G1: u32 = NVML_GPU_INSTANCE_PROFILE_1_SLICE;
const G2: u32 = NVML_GPU_INSTANCE_PROFILE_2_SLICE;
const G3: u32 = NVML_GPU_INSTANCE_PROFILE_3_SLICE;
const G4: u32 = NVML_GPU_INSTANCE_PROFILE_4_SLICE;
const G7: u32 = NVML_GPU_INSTANCE_PROFILE_7_SLICE;
const G1_ME: u32 = NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1;
const G1_2X: u32 = NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2;
const C1: u32 = NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE;
const C2: u32 = NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE;
const C3: u32 = NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE;
const C4: u32 = NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE;
const C7: u32 = NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE;

/// Creates (profile, start) GIs in order on GPU 0 of an empty state; the ids, or the
/// first failure.
fn gis(model: &Model, list: &[(u32, u32)]) -> Result<Vec<u32>, nvmlReturn_t> {
    let mut state = State::default();
    let mut ids = Vec::new();
    for &(profile, start) in list {
        let size = model.profile(profile).map_or(1, |p| p.size);
        ids.push(create_gi(&mut state, model, 0, profile, start, size)?);
    }
    Ok(ids)
}

#[test]
fn gpu_instances_that_fit() {
    for model in MODELS {
        let ok = |list: &[(u32, u32)]| {
            gis(model, list).unwrap_or_else(|e| panic!("{} {list:?}: {e}", model.key))
        };
        assert_eq!(ok(&[(G3, 4), (G4, 0)]), [1, 2]);
        assert_eq!(ok(&[(G3, 0), (G3, 4)]), [1, 2]);
        assert_eq!(ok(&[(G7, 0)]), [0]);
        let seven: Vec<(u32, u32)> = (0..7).map(|s| (G1, s)).collect();
        assert_eq!(ok(&seven), [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(
            ok(&[(G1_2X, 0), (G1_2X, 2), (G1_2X, 4), (G1_2X, 6)]).len(),
            4
        );
        assert_eq!(ok(&[(G2, 0), (G2, 2), (G2, 4), (G1, 6)]).len(), 4);
        assert_eq!(ok(&[(G1_ME, 0), (G1, 1), (G2, 2), (G3, 4)]).len(), 4);
        assert_eq!(ok(&[(G4, 0), (G2, 4), (G1, 6)]), [1, 2, 3]);
    }
}

#[test]
fn gpu_instances_that_do_not() {
    const NO: Result<Vec<u32>, nvmlReturn_t> = Err(INSUFFICIENT_RESOURCES);
    for model in MODELS {
        let m = model.key;
        // Overlapping memory slices.
        assert_eq!(gis(model, &[(G3, 0), (G4, 0)]), NO, "{m}");
        assert_eq!(gis(model, &[(G1, 3), (G3, 0)]), NO, "{m}");
        assert_eq!(gis(model, &[(G1_2X, 2), (G2, 2)]), NO, "{m}");
        // The whole GPU with anything.
        assert_eq!(gis(model, &[(G7, 0), (G1, 6)]), NO, "{m}");
        assert_eq!(gis(model, &[(G1, 6), (G7, 0)]), NO, "{m}");
        // Instance counts: one media-extended 1g, one 4g.
        assert_eq!(gis(model, &[(G1_ME, 0), (G1_ME, 1)]), NO, "{m}");
        // Placements the profile does not have.
        for (profile, start) in [(G3, 2), (G4, 4), (G2, 1), (G1_2X, 1), (G7, 1)] {
            assert_eq!(
                gis(model, &[(profile, start)]),
                Err(INVALID_ARGUMENT),
                "{m} {profile}@{start}"
            );
        }
        let mut state = State::default();
        assert_eq!(
            create_gi(&mut state, model, 0, G3, 0, 2),
            Err(INVALID_ARGUMENT)
        );
        // Profiles these models lack, and indices NVML does not define.
        let six = NVML_GPU_INSTANCE_PROFILE_6_SLICE;
        assert_eq!(gis(model, &[(six, 0)]), Err(NOT_SUPPORTED), "{m}");
        let past = NVML_GPU_INSTANCE_PROFILE_COUNT;
        assert_eq!(gis(model, &[(past, 0)]), Err(INVALID_ARGUMENT), "{m}");
    }
}

#[test]
fn gpu_instance_ids() {
    let mut state = State::default();
    let h = &H100_80GB;
    assert_eq!(create_gi(&mut state, h, 0, G1, 3, 1), Ok(1));
    assert_eq!(create_gi(&mut state, h, 0, G1, 0, 1), Ok(2));
    assert_eq!(create_gi(&mut state, h, 1, G7, 0, 8), Ok(0));
    assert_eq!(destroy_gi(&mut state, 0, 1), Ok(()));
    // The lowest free id, whatever the placement; other GPUs do not count.
    assert_eq!(create_gi(&mut state, h, 0, G2, 4, 2), Ok(1));
    assert_eq!(create_gi(&mut state, h, 0, G1, 6, 1), Ok(3));
    assert_eq!(destroy_gi(&mut state, 0, 9), Err(NOT_FOUND));
    // An id a GI already has (as a state file may hold any) is skipped.
    state.gis.push(Gi {
        gpu: 2,
        id: 1,
        profile: G1,
        start: 0,
        size: 1,
    });
    assert_eq!(create_gi(&mut state, h, 2, G1, 1, 1), Ok(2));
}

#[test]
fn compute_instances() {
    let a = &A100_40GB;
    let mut state = State::default();
    let g3 = create_gi(&mut state, a, 5, G3, 4, 4).unwrap();
    assert_eq!(create_ci(&mut state, a, 5, g3, C4), Err(NOT_SUPPORTED));
    assert_eq!(create_ci(&mut state, a, 5, g3, C7), Err(NOT_SUPPORTED));
    assert_eq!(create_ci(&mut state, a, 5, g3, 99), Err(INVALID_ARGUMENT));
    assert_eq!(create_ci(&mut state, a, 5, 9, C1), Err(NOT_FOUND));
    assert_eq!(create_ci(&mut state, a, 5, g3, C3), Ok(0));
    assert_eq!(
        create_ci(&mut state, a, 5, g3, C1),
        Err(INSUFFICIENT_RESOURCES)
    );
    assert_eq!(destroy_gi(&mut state, 5, g3), Err(IN_USE));
    assert_eq!(destroy_ci(&mut state, 5, g3, 0), Ok(()));
    assert_eq!(destroy_ci(&mut state, 5, g3, 0), Err(NOT_FOUND));
    // Smaller CIs share the GI's slices, at the first free ones.
    assert_eq!(create_ci(&mut state, a, 5, g3, C1), Ok(0));
    assert_eq!(create_ci(&mut state, a, 5, g3, C2), Ok(1));
    assert_eq!(
        create_ci(&mut state, a, 5, g3, C1),
        Err(INSUFFICIENT_RESOURCES)
    );
    let starts: Vec<u32> = state.cis.iter().map(|c| c.start).collect();
    assert_eq!(starts, [0, 1]);
    assert_eq!(destroy_ci(&mut state, 5, g3, 0), Ok(()));
    assert_eq!(create_ci(&mut state, a, 5, g3, C1), Ok(0));
    assert_eq!(destroy_ci(&mut state, 5, g3, 0), Ok(()));
    assert_eq!(destroy_ci(&mut state, 5, g3, 1), Ok(()));
    assert_eq!(destroy_gi(&mut state, 5, g3), Ok(()));
    assert_eq!(state, State::default());

    // Seven 1-slice CIs in the whole GPU's GI, ids 0..=6.
    let g7 = create_gi(&mut state, a, 0, G7, 0, 8).unwrap();
    for id in 0..7 {
        assert_eq!(create_ci(&mut state, a, 0, g7, C1), Ok(id));
    }
    assert_eq!(
        create_ci(&mut state, a, 0, g7, C1),
        Err(INSUFFICIENT_RESOURCES)
    );
}
