//! Where GPU and compute instances may go, as the real library decides it, on a [`State`].
//!
//! A GPU instance must sit at one of its profile's placements, overlap no other GI's
//! memory slices, and keep the GPU within its compute slices (7), its decoders, JPEG and
//! OFA engines, and the profile's instance count. Its id: 0 for a GI spanning the whole
//! GPU (8 memory slices), otherwise the lowest free id from 1. A compute instance must fit
//! in the compute slices its GI has left; its id is the lowest free from 0, and it sits at
//! the first run of free compute slices long enough (or, when the free slices are split,
//! at the first free one: the placement is only reported, never checked).

use nvml_wrapper_sys::bindings::*;

use super::profiles::{CiProfile, GiProfile, Model, COMPUTE_SLICES};
use super::state::{Ci, Gi, State, CI_IDS, GI_IDS};
use crate::{INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED};

pub(crate) const INSUFFICIENT_RESOURCES: nvmlReturn_t =
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;
pub(crate) const IN_USE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_IN_USE;

/// GPU instance profile `index` of `model`: an index NVML does not define is an invalid
/// argument, one this model lacks unsupported.
pub(crate) fn gi_profile(model: &Model, index: u32) -> Result<&'static GiProfile, nvmlReturn_t> {
    if index >= NVML_GPU_INSTANCE_PROFILE_COUNT {
        return Err(INVALID_ARGUMENT);
    }
    model.profile(index).ok_or(NOT_SUPPORTED)
}

/// Compute instance profile `index` of GI `gi`.
pub(crate) fn ci_profile(model: &Model, gi: &Gi, index: u32) -> Result<CiProfile, nvmlReturn_t> {
    if index >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        return Err(INVALID_ARGUMENT);
    }
    gi_profile(model, gi.profile)?
        .ci_profile(model, index)
        .ok_or(NOT_SUPPORTED)
}

/// Creates a GI of `profile` at `start`/`size` on `gpu`; returns its id.
pub(crate) fn create_gi(
    state: &mut State,
    model: &Model,
    gpu: usize,
    profile: u32,
    start: u32,
    size: u32,
) -> Result<u32, nvmlReturn_t> {
    let p = gi_profile(model, profile)?;
    if size != p.size || !p.starts.contains(&start) {
        return Err(INVALID_ARGUMENT);
    }
    let others: Vec<&Gi> = state.gis.iter().filter(|g| g.gpu == gpu).collect();
    if others
        .iter()
        .any(|g| start < g.start + g.size && g.start < start + size)
    {
        return Err(INSUFFICIENT_RESOURCES);
    }
    if others.iter().filter(|g| g.profile == profile).count() >= p.instances as usize {
        return Err(INSUFFICIENT_RESOURCES);
    }
    // Profiles this model lacks (a state written under another model) count as nothing.
    let used = others
        .iter()
        .filter_map(|g| model.profile(g.profile))
        .fold([0; 4], |t, o| {
            [
                t[0] + o.slices,
                t[1] + o.decoders,
                t[2] + o.jpegs,
                t[3] + o.ofas,
            ]
        });
    if used[0] + p.slices > COMPUTE_SLICES
        || used[1] + p.decoders > model.decoders
        || used[2] + p.jpegs > model.jpegs
        || used[3] + p.ofas > model.ofas
    {
        return Err(INSUFFICIENT_RESOURCES);
    }
    let free = |id: &u32| !others.iter().any(|g| g.id == *id);
    let id = if size == 8 {
        Some(0).filter(free)
    } else {
        (1..GI_IDS).find(free)
    }
    .ok_or(INSUFFICIENT_RESOURCES)?;
    state.gis.push(Gi {
        gpu,
        id,
        profile,
        start,
        size,
    });
    state.sort();
    Ok(id)
}

/// Destroys GI `id` of `gpu`, which must have no compute instance left.
pub(crate) fn destroy_gi(state: &mut State, gpu: usize, id: u32) -> Result<(), nvmlReturn_t> {
    state.gi(gpu, id).ok_or(NOT_FOUND)?;
    if state.cis.iter().any(|c| c.gpu == gpu && c.gi == id) {
        return Err(IN_USE);
    }
    state.gis.retain(|g| g.gpu != gpu || g.id != id);
    Ok(())
}

/// Creates a CI of `profile` in GI `gi` of `gpu`; returns its id.
pub(crate) fn create_ci(
    state: &mut State,
    model: &Model,
    gpu: usize,
    gi: u32,
    profile: u32,
) -> Result<u32, nvmlReturn_t> {
    let g = state.gi(gpu, gi).ok_or(NOT_FOUND)?;
    let gi_slices = gi_profile(model, g.profile)?.slices;
    let p = ci_profile(model, g, profile)?;
    let siblings: Vec<&Ci> = state
        .cis
        .iter()
        .filter(|c| c.gpu == gpu && c.gi == gi)
        .collect();
    let mut taken = vec![false; gi_slices as usize];
    for c in &siblings {
        let Ok(sp) = ci_profile(model, g, c.profile) else {
            continue;
        };
        for s in c.start..c.start + sp.slices {
            if let Some(t) = taken.get_mut(s as usize) {
                *t = true;
            }
        }
    }
    let used: u32 = siblings
        .iter()
        .filter_map(|c| ci_profile(model, g, c.profile).ok())
        .map(|sp| sp.slices)
        .sum();
    if used + p.slices > gi_slices {
        return Err(INSUFFICIENT_RESOURCES);
    }
    let id = (0..CI_IDS)
        .find(|id| !siblings.iter().any(|c| c.id == *id))
        .ok_or(INSUFFICIENT_RESOURCES)?;
    let len = p.slices as usize;
    let start = (0..=taken.len() - len)
        .find(|&s| taken[s..s + len].iter().all(|t| !t))
        .or_else(|| taken.iter().position(|t| !t))
        .unwrap_or(0) as u32;
    state.cis.push(Ci {
        gpu,
        gi,
        id,
        profile,
        start,
    });
    state.sort();
    Ok(id)
}

/// Destroys CI `id` of GI `gi` of `gpu`.
pub(crate) fn destroy_ci(
    state: &mut State,
    gpu: usize,
    gi: u32,
    id: u32,
) -> Result<(), nvmlReturn_t> {
    state.ci(gpu, gi, id).ok_or(NOT_FOUND)?;
    state
        .cis
        .retain(|c| c.gpu != gpu || c.gi != gi || c.id != id);
    Ok(())
}

#[cfg(test)]
mod tests;
