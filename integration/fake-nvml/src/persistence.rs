//! Persistence mode, per GPU: `nvmlDeviceGetPersistenceMode` and
//! `nvmlDeviceSetPersistenceMode`, with the state in a file that every process shares
//! (graft-driver's NVML, the fake nvidia-smi's `-pm`, the fake kernel of the tests, which
//! refuses a GPU's unbind lock while its persistence mode is on).
//!
//! The file is `fake-nvml-persistence` in the directory of this library file (as the
//! `fake-nvml-events` feed; integration/fake-nvml/nvidia-smi.c reads and writes the same file
//! at `/usr/lib/x86_64-linux-gnu/fake-nvml-persistence` inside the driver root it runs in).
//! Text, one GPU a line, `#` comments and blank lines skipped:
//!
//! ```text
//! <gpu-index> enabled|disabled
//! ```
//!
//! A GPU the file does not list, or a file that is absent, is enabled: the fake node stands
//! for one that runs nvidia-persistenced, which turns persistence mode on for every GPU when
//! it starts (nvidia-persistenced(1), `--persistence-mode`: "By default, nvidia-persistenced
//! starts with persistence mode enabled for all devices"). A malformed line is an error:
//! both calls fail with `NVML_ERROR_UNKNOWN`, the reason on stderr once.
//!
//! Readers take a shared `flock` on the file, writers an exclusive one, and a change is
//! written in place (truncate, write): tests bind-mount this one file writable into
//! graft-driver's otherwise read-only view of the driver root, and a rename over a mount
//! point fails.
//!
//! Behaviour, from the NVML API reference (nvmlDeviceGetPersistenceMode,
//! nvmlDeviceSetPersistenceMode; "Device Commands": each of them "requires root/admin
//! access. Non-admin users will see an NVML_ERROR_NO_PERMISSION error code"):
//! - Get on a GPU handle returns `NVML_FEATURE_ENABLED` or `NVML_FEATURE_DISABLED`;
//!   `NVML_ERROR_INVALID_ARGUMENT` for an invalid handle or a null pointer;
//! - Set needs root (else `NVML_ERROR_NO_PERMISSION`) and a mode of the two (else
//!   `NVML_ERROR_INVALID_ARGUMENT`), and takes effect at once;
//! - a MIG device's handle is not a GPU: both answer `NVML_ERROR_INVALID_ARGUMENT` (graft
//!   calls them on GPUs only, found by PCI bus id).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use nvml_wrapper_sys::bindings::*;

use super::*;
use crate::mig::config::BadLine;

const FILE_NAME: &str = "fake-nvml-persistence";
const NO_PERMISSION: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NO_PERMISSION;
const ENABLED: nvmlEnableState_t = nvmlEnableState_enum_NVML_FEATURE_ENABLED;
const DISABLED: nvmlEnableState_t = nvmlEnableState_enum_NVML_FEATURE_DISABLED;

/// Persistence mode by GPU index, from the file's text.
pub(crate) fn parse(text: &str) -> Result<[bool; 8], BadLine> {
    let mut modes = [true; 8];
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default();
        let words: Vec<&str> = line.split_whitespace().collect();
        let bad = || BadLine::at(n, line);
        match words.as_slice() {
            [] => {}
            [gpu, mode] => {
                let slot = gpu
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| modes.get_mut(i))
                    .ok_or_else(bad)?;
                *slot = match *mode {
                    "enabled" => true,
                    "disabled" => false,
                    _ => return Err(bad()),
                };
            }
            _ => return Err(bad()),
        }
    }
    Ok(modes)
}

pub(crate) fn to_text(modes: &[bool; 8]) -> String {
    let mut text = String::from("# fake NVML persistence mode\n");
    for (i, on) in modes.iter().enumerate() {
        text += &format!("{i} {}\n", if *on { "enabled" } else { "disabled" });
    }
    text
}

fn lock(f: &File, how: libc::c_int) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor this function's caller owns for the call's duration.
    if unsafe { libc::flock(f.as_raw_fd(), how) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn read_locked(f: &mut File) -> std::io::Result<String> {
    let mut text = String::new();
    f.seek(SeekFrom::Start(0))?;
    f.take(1 << 16).read_to_string(&mut text)?;
    Ok(text)
}

fn failed(what: String) -> nvmlReturn_t {
    mig::config::report(what);
    UNKNOWN
}

/// The modes now (all enabled without the file).
fn load() -> Result<[bool; 8], nvmlReturn_t> {
    let Some(path) = beside_library(FILE_NAME) else {
        return Ok([true; 8]);
    };
    let mut f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok([true; 8]),
        Err(e) => return Err(failed(format!("{}: {e}", path.display()))),
    };
    let text = lock(&f, libc::LOCK_SH)
        .and_then(|()| read_locked(&mut f))
        .map_err(|e| failed(format!("{}: {e}", path.display())))?;
    parse(&text).map_err(|e| failed(format!("{}: {e}", path.display())))
}

/// Sets GPU `gpu`'s mode, in place under an exclusive lock.
fn store(gpu: usize, on: bool) -> Result<(), nvmlReturn_t> {
    let Some(path) = beside_library(FILE_NAME) else {
        return Err(failed("cannot tell where this library is".into()));
    };
    let io = |e: std::io::Error| failed(format!("{}: {e}", path.display()));
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&path)
        .map_err(io)?;
    lock(&f, libc::LOCK_EX).map_err(io)?;
    let mut modes = parse(&read_locked(&mut f).map_err(io)?)
        .map_err(|e| failed(format!("{}: {e}", path.display())))?;
    modes[gpu] = on;
    f.set_len(0).map_err(io)?;
    f.seek(SeekFrom::Start(0)).map_err(io)?;
    f.write_all(to_text(&modes).as_bytes()).map_err(io)
}

fn gpu_only(device: nvmlDevice_t) -> Result<usize, nvmlReturn_t> {
    // A lost GPU fails every per-device call (see health.rs).
    crate::health::reachable(device)?;
    match handles::decode(device) {
        Some(handles::Handle::Gpu(i)) => Ok(i),
        _ => Err(INVALID_ARGUMENT),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    device: nvmlDevice_t,
    mode: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    let gpu = match gpu_only(device) {
        Ok(i) => i,
        Err(rc) => return rc,
    };
    match load() {
        Ok(modes) => put(mode, if modes[gpu] { ENABLED } else { DISABLED }),
        Err(rc) => rc,
    }
}

#[no_mangle]
pub extern "C" fn nvmlDeviceSetPersistenceMode(
    device: nvmlDevice_t,
    mode: nvmlEnableState_t,
) -> nvmlReturn_t {
    let gpu = match gpu_only(device) {
        Ok(i) => i,
        Err(rc) => return rc,
    };
    let on = match mode {
        ENABLED => true,
        DISABLED => false,
        _ => return INVALID_ARGUMENT,
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return NO_PERMISSION;
    }
    match store(gpu, on) {
        Ok(()) => SUCCESS,
        Err(rc) => rc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        assert_eq!(parse("").unwrap(), [true; 8]);
        let m = parse("# x\n\n3 disabled # why\n 5 enabled\n3 disabled\n").unwrap();
        assert_eq!(m, [true, true, true, false, true, true, true, true]);
        assert_eq!(parse(&to_text(&m)).unwrap(), m);
        for bad in ["8 enabled", "1 on", "1", "x disabled", "1 enabled now"] {
            let e = parse(&format!("0 enabled\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("line 2: "), "{bad:?}: {e}");
        }
    }
}
