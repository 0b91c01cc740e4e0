//! What the node's GPUs are doing: utilisation, memory used, power draw and MPS client
//! processes, set per node by the file `fake-nvml-usage` next to the library, read again on
//! every call so that a test can change it at any time. One entry a line; blank lines and
//! `#` comments are skipped, and a later line for the same GPU, MIG device or client
//! overrides an earlier one:
//!
//! ```text
//! gpu <index> util <percent> memory <MiB> power <milliwatts>   a whole GPU (0..=7):
//!                                   utilisation 0..=100, memory used, power draw
//! mig <gpu index> <gi id> memory <MiB>   memory used in the MIG device of GPU instance
//!                                        <gi id> (below 15) of that GPU
//! mps <gpu index> <pid> <MiB>            an MPS client process on that GPU, its memory
//! ```
//!
//! Without the file every GPU is idle: utilisation 0, no memory used, 69000 mW (an idle
//! H100 SXM), no MPS clients; so is a GPU or MIG device no line names. A malformed file (a
//! line of another form, an index past 7, a percent over 100, a number that does not fit)
//! counts as absent, and the reason goes to stderr once, as for the MIG configuration.
//!
//! What the calls answer, from the NVML API reference:
//! - `nvmlDeviceGetUtilizationRates`: `gpu` is the configured percent; `memory` (time spent
//!   reading or writing device memory) is 0. "On MIG-enabled GPUs, querying device
//!   utilization rates is not currently supported": `NOT_SUPPORTED` for a GPU in MIG mode
//!   and for a MIG device handle.
//! - `nvmlDeviceGetPowerUsage`: "power usage for this GPU in milliwatts and its associated
//!   circuitry"; power is a board's, so a MIG device handle gets the reference's
//!   `NOT_SUPPORTED` ("the device does not support power readings").
//! - `nvmlDeviceGetMemoryInfo_v2` (in lib.rs): `used` is the configured MiB of the GPU, or
//!   of the MIG device ("per-instance information can be queried by using specific MIG
//!   device handles"), and `free` ("unallocated device memory") is total less reserved less
//!   used, 0 at least.
//! - `nvmlDeviceGetMPSComputeRunningProcesses_v3` and
//!   `nvmlDeviceGetComputeRunningProcesses_v3`: "call this function with *infoCount = 0 ...
//!   The return code will be NVML_ERROR_INSUFFICIENT_SIZE, or NVML_SUCCESS if none are
//!   running. For this call infos is allowed to be NULL"; with too little room the call
//!   says `INSUFFICIENT_SIZE` and sets `*infoCount` to what it needs; a null `infoCount`, or
//!   null `infos` where there is something to write, is `INVALID_ARGUMENT`. `usedGpuMemory`
//!   is "all of the memory used by the application"; `gpuInstanceId` and
//!   `computeInstanceId` are 0xFFFFFFFF, the reference's value outside MIG (`mps` lines are
//!   for GPUs without MIG). The MPS call lists the GPU's `mps` lines; the fake keeps no
//!   per-instance clients, so a MIG device handle gets `NOT_SUPPORTED` (the real library
//!   answers per instance). The other call lists no process, for any handle.
//!
//! Every call fails as the others do for a lost GPU (`GPU_IS_LOST`), a handle that is not
//! this library's (`INVALID_ARGUMENT`) and a MIG device that no longer exists (`NOT_FOUND`).

use std::ffi::c_uint;
use std::io::ErrorKind;
use std::path::PathBuf;

use nvml_wrapper_sys::bindings::*;

use super::handles::GI_IDS;
use super::mig::config::{report, BadLine};
use super::*;

/// The file's name.
const FILE_NAME: &str = "fake-nvml-usage";
const GPUS: usize = PCI_BUSES.len();
/// An idle GPU's power draw.
const IDLE_POWER_MW: c_uint = 69_000;
/// `nvmlProcessInfo_t`'s instance ids outside MIG.
const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// One whole GPU's figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gpu {
    /// Percent, 0..=100.
    pub(crate) util: c_uint,
    pub(crate) memory_mib: u64,
    pub(crate) power_mw: c_uint,
    /// MPS clients, pid and MiB used, in the file's order.
    pub(crate) mps: Vec<(c_uint, u64)>,
}

impl Default for Gpu {
    fn default() -> Self {
        Gpu {
            util: 0,
            memory_mib: 0,
            power_mw: IDLE_POWER_MW,
            mps: Vec::new(),
        }
    }
}

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// By NVML index.
    pub(crate) gpus: [Gpu; GPUS],
    /// Memory used in MIG devices: GPU index, GPU instance id, MiB.
    pub(crate) mig: Vec<(usize, u32, u64)>,
}

impl Usage {
    /// Bytes used in GPU `gpu`, or in its MIG device of GPU instance `gi`.
    pub(crate) fn used_bytes(&self, gpu: usize, gi: Option<u32>) -> u64 {
        let mib = match gi {
            None => self.gpus.get(gpu).map_or(0, |g| g.memory_mib),
            Some(gi) => self
                .mig
                .iter()
                .find(|&&(g, i, _)| (g, i) == (gpu, gi))
                .map_or(0, |&(_, _, mib)| mib),
        };
        mib << 20
    }
}

/// A GPU index of the node.
fn gpu_index(word: &str) -> Option<usize> {
    word.parse::<usize>().ok().filter(|&i| i < GPUS)
}

/// MiB whose bytes fit in 64 bits.
fn mebibytes(word: &str) -> Option<u64> {
    word.parse::<u64>().ok().filter(|&m| m <= u64::MAX >> 20)
}

/// Parses the file's text.
pub(crate) fn parse(text: &str) -> Result<Usage, BadLine> {
    let mut usage = Usage::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default();
        let words: Vec<&str> = line.split_whitespace().collect();
        let bad = || BadLine::at(n, line);
        match words.as_slice() {
            [] => {}
            ["gpu", index, "util", util, "memory", mib, "power", mw] => {
                let gpu = gpu_index(index).ok_or_else(bad)?;
                let util = util.parse().ok().filter(|&u| u <= 100).ok_or_else(bad)?;
                let memory_mib = mebibytes(mib).ok_or_else(bad)?;
                let power_mw = mw.parse().map_err(|_| bad())?;
                let g = &mut usage.gpus[gpu];
                (g.util, g.memory_mib, g.power_mw) = (util, memory_mib, power_mw);
            }
            ["mig", index, gi, "memory", mib] => {
                let gpu = gpu_index(index).ok_or_else(bad)?;
                let gi = gi.parse().ok().filter(|&g| g < GI_IDS).ok_or_else(bad)?;
                let mib = mebibytes(mib).ok_or_else(bad)?;
                usage.mig.retain(|&(g, i, _)| (g, i) != (gpu, gi));
                usage.mig.push((gpu, gi, mib));
            }
            ["mps", index, pid, mib] => {
                let gpu = gpu_index(index).ok_or_else(bad)?;
                let pid: c_uint = pid.parse().map_err(|_| bad())?;
                let mib = mebibytes(mib).ok_or_else(bad)?;
                let clients = &mut usage.gpus[gpu].mps;
                match clients.iter_mut().find(|c| c.0 == pid) {
                    Some(c) => c.1 = mib,
                    None => clients.push((pid, mib)),
                }
            }
            _ => return Err(bad()),
        }
    }
    Ok(usage)
}

/// The file at `path`: idle figures when there is none, or it cannot be read or parsed
/// (those two reported once).
fn read(path: Option<PathBuf>) -> Usage {
    let Some(path) = path else {
        return Usage::default();
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => return Usage::default(),
        Err(e) => {
            report(format!("{}: {e}", path.display()));
            return Usage::default();
        }
    };
    parse(&text).unwrap_or_else(|e| {
        report(format!("{}: {e}", path.display()));
        Usage::default()
    })
}

/// The figures now.
pub(crate) fn now() -> Usage {
    read(beside_library(FILE_NAME))
}

/// The GPU behind a whole-GPU handle, reachable; the handle of a MIG device that exists is
/// `NOT_SUPPORTED` for the calls that say so.
fn whole_gpu(device: nvmlDevice_t) -> Result<usize, nvmlReturn_t> {
    health::reachable(device)?;
    match decode(device) {
        Some(Handle::Gpu(i)) => Ok(i),
        Some(Handle::Mig(inst)) => match mig::device(inst) {
            Ok(_) => Err(NOT_SUPPORTED),
            Err(rc) => Err(rc),
        },
        None => Err(INVALID_ARGUMENT),
    }
}

/// The count protocol of the process lists (see the header) for the processes `list`.
unsafe fn processes(
    list: &[(c_uint, u64)],
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    if count.is_null() {
        return INVALID_ARGUMENT;
    }
    let needed = c_uint::try_from(list.len()).unwrap_or(c_uint::MAX);
    // SAFETY: `count` is not null; the caller passes a live c_uint, as NVML requires.
    if *count < needed {
        // SAFETY: as above.
        *count = needed;
        return INSUFFICIENT_SIZE;
    }
    if needed > 0 && infos.is_null() {
        return INVALID_ARGUMENT;
    }
    for (i, &(pid, mib)) in list.iter().enumerate() {
        // SAFETY: `infos` is not null and the caller said it has room for `*count`
        // entries, at least `needed`; `write`, as the room may be uninitialised.
        infos.add(i).write(nvmlProcessInfo_t {
            pid,
            usedGpuMemory: mib << 20,
            gpuInstanceId: NO_INSTANCE,
            computeInstanceId: NO_INSTANCE,
        });
    }
    put(count, needed)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    let gpu = match whole_gpu(device) {
        Ok(gpu) => gpu,
        Err(rc) => return rc,
    };
    if nvlink::mig_on(gpu) {
        return NOT_SUPPORTED;
    }
    let rates = nvmlUtilization_t {
        gpu: now().gpus[gpu].util,
        memory: 0,
    };
    put(utilization, rates)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    power: *mut c_uint,
) -> nvmlReturn_t {
    match whole_gpu(device) {
        Ok(gpu) => put(power, now().gpus[gpu].power_mw),
        Err(rc) => rc,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    match whole_gpu(device) {
        Ok(gpu) => processes(&now().gpus[gpu].mps, count, infos),
        Err(rc) => rc,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    match gpu_of(device) {
        Ok(_) => processes(&[], count, infos),
        Err(rc) => rc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let idle = Usage::default();
        assert_eq!(parse("").unwrap(), idle);
        assert_eq!(parse("# nothing\n\n   \n").unwrap(), idle);
        assert!(idle
            .gpus
            .iter()
            .all(|g| g.power_mw == 69_000 && g.util == 0));

        let text = "# busy\ngpu 0 util 42 memory 1024 power 350000 # why\n\
                    gpu 3 util 100 memory 0 power 0\ngpu 3 util 7 memory 5 power 6\n\
                    mig 7 5 memory 2048\nmig 7 13 memory 1\nmig 7 13 memory 3\n\
                    mps 2 4242 300\nmps 2 4343 1200\nmps 2 4242 301\nmps 5 1 0\n";
        let u = parse(text).unwrap();
        assert_eq!((u.gpus[0].util, u.gpus[0].memory_mib), (42, 1024));
        assert_eq!(u.gpus[0].power_mw, 350_000);
        assert_eq!(
            (u.gpus[3].util, u.gpus[3].memory_mib, u.gpus[3].power_mw),
            (7, 5, 6)
        );
        assert_eq!(u.gpus[1], Gpu::default());
        assert_eq!(u.mig, vec![(7, 5, 2048), (7, 13, 3)]);
        assert_eq!(u.gpus[2].mps, vec![(4242, 301), (4343, 1200)]);
        assert_eq!(u.gpus[5].mps, vec![(1, 0)]);
        assert_eq!(u.used_bytes(0, None), 1024 << 20);
        assert_eq!(u.used_bytes(7, Some(5)), 2048 << 20);
        assert_eq!(u.used_bytes(7, Some(1)), 0);
        assert_eq!(u.used_bytes(6, None), 0);

        for bad in [
            "gpu 8 util 1 memory 1 power 1",
            "gpu -1 util 1 memory 1 power 1",
            "gpu 0 util 101 memory 1 power 1",
            "gpu 0 util 1.5 memory 1 power 1",
            "gpu 0 util 1 memory 17592186044416 power 1",
            "gpu 0 util 1 memory 1 power 4294967296",
            "gpu 0 util 1 memory 1",
            "gpu 0 utilization 1 memory 1 power 1",
            "mig 8 1 memory 1",
            "mig 7 15 memory 1",
            "mig 7 1 memory x",
            "mig 7 1 1",
            "mps 8 1 1",
            "mps 0 -1 1",
            "mps 0 1",
            "mps 0 1 1 1",
            "gpus 0",
        ] {
            let e = parse(&format!("gpu 0 util 1 memory 1 power 1\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("line 2: "), "{bad:?}: {e}");
        }
    }

    #[test]
    fn absent_or_malformed_file_is_idle() {
        let dir = std::env::temp_dir().join(format!("fake-nvml-usage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE_NAME);
        assert_eq!(read(None), Usage::default());
        assert_eq!(read(Some(path.clone())), Usage::default());
        std::fs::write(&path, "gpu 1 util 50 memory 10 power 100000\n").unwrap();
        assert_eq!(read(Some(path.clone())).gpus[1].util, 50);
        std::fs::write(
            &path,
            "gpu 1 util 50 memory 10 power 100000\ngpu 1 util 101\n",
        )
        .unwrap();
        assert_eq!(read(Some(path.clone())), Usage::default());
        // A directory in its place cannot be read: idle as well.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert_eq!(read(Some(path)), Usage::default());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
