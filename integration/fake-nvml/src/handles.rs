//! Handles are addresses inside static tables, one table per handle type, so that a handle
//! says what it is, and which (GPU, GI, CI) it names, without any state: a MIG device's
//! handle stays a valid handle after its instance is destroyed (calls on it then say
//! `NOT_FOUND`), and names the same device again if it is created again.

use std::ptr;

use nvml_wrapper_sys::bindings::*;

/// GPU instance ids are below this, compute instance ids below [`CI_IDS`].
pub(crate) const GI_IDS: u32 = 15;
pub(crate) const CI_IDS: u32 = 8;

const GPUS: usize = 8;
const GIS: usize = GI_IDS as usize;
const CIS: usize = CI_IDS as usize;

static GPU: [u8; GPUS] = [0; GPUS];
static MIG_DEVICE: [u8; GPUS * GIS * CIS] = [0; GPUS * GIS * CIS];
static GPU_INSTANCE: [u8; GPUS * GIS] = [0; GPUS * GIS];
static COMPUTE_INSTANCE: [u8; GPUS * GIS * CIS] = [0; GPUS * GIS * CIS];

/// A MIG device, or a compute instance: GPU index, GI id, CI id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Inst {
    pub(crate) gpu: usize,
    pub(crate) gi: u32,
    pub(crate) ci: u32,
}

pub(crate) enum Handle {
    Gpu(usize),
    Mig(Inst),
}

/// The address of `table[at]`, as the pointer type of a handle.
fn address<T>(table: &'static [u8], at: usize) -> *mut T {
    // The callers never write through it: NVML handles are opaque.
    ptr::addr_of!(table[at]).cast_mut().cast()
}

/// The position of `handle` in `table`, if it points into it.
fn position<T>(table: &'static [u8], handle: *mut T) -> Option<usize> {
    let at = (handle as usize).checked_sub(table.as_ptr() as usize)?;
    (at < table.len()).then_some(at)
}

fn inst_at(at: usize) -> Inst {
    Inst {
        gpu: at / (GIS * CIS),
        gi: (at / CIS % GIS) as u32,
        ci: (at % CIS) as u32,
    }
}

fn inst_position(inst: Inst) -> usize {
    (inst.gpu * GIS + inst.gi as usize) * CIS + inst.ci as usize
}

pub(crate) fn handle_of_gpu(i: usize) -> nvmlDevice_t {
    address(&GPU, i)
}

pub(crate) fn handle_of_mig(inst: Inst) -> nvmlDevice_t {
    address(&MIG_DEVICE, inst_position(inst))
}

pub(crate) fn decode(device: nvmlDevice_t) -> Option<Handle> {
    if let Some(i) = position(&GPU, device) {
        return Some(Handle::Gpu(i));
    }
    position(&MIG_DEVICE, device).map(|at| Handle::Mig(inst_at(at)))
}

pub(crate) fn handle_of_gi(gpu: usize, gi: u32) -> nvmlGpuInstance_t {
    address(&GPU_INSTANCE, gpu * GIS + gi as usize)
}

/// GPU index and GI id.
pub(crate) fn decode_gi(gi: nvmlGpuInstance_t) -> Option<(usize, u32)> {
    position(&GPU_INSTANCE, gi).map(|at| (at / GIS, (at % GIS) as u32))
}

pub(crate) fn handle_of_ci(inst: Inst) -> nvmlComputeInstance_t {
    address(&COMPUTE_INSTANCE, inst_position(inst))
}

pub(crate) fn decode_ci(ci: nvmlComputeInstance_t) -> Option<Inst> {
    position(&COMPUTE_INSTANCE, ci).map(inst_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for gpu in 0..GPUS {
            assert!(matches!(decode(handle_of_gpu(gpu)), Some(Handle::Gpu(g)) if g == gpu));
            for gi in 0..GI_IDS {
                assert_eq!(decode_gi(handle_of_gi(gpu, gi)), Some((gpu, gi)));
                for ci in 0..CI_IDS {
                    let inst = Inst { gpu, gi, ci };
                    assert!(
                        matches!(decode(handle_of_mig(inst)), Some(Handle::Mig(i)) if i == inst)
                    );
                    assert_eq!(decode_ci(handle_of_ci(inst)), Some(inst));
                }
            }
        }
        // Handles of one type are not handles of another.
        let inst = Inst {
            gpu: 1,
            gi: 2,
            ci: 3,
        };
        assert!(decode(handle_of_ci(inst).cast()).is_none());
        assert!(decode_ci(handle_of_mig(inst).cast()).is_none());
        assert!(decode_gi(handle_of_gpu(0).cast()).is_none());
        assert!(decode(ptr::null_mut()).is_none());
    }
}
