//! The feed of NVML events fed by tests, and of the lines that set a GPU's health state.
//!
//! The feed is the text file `fake-nvml-events` in the directory of this library file, as
//! the loader reports its path (the `libnvidia-ml.so.1` link and the file it names sit side
//! by side in the fake driver root). Tests append lines; the library only ever reads it,
//! since graft-driver may see the driver root read-only. One line each:
//!
//! ```text
//! <gpu-index> xid <code>                  XidCriticalError, eventData = code
//! <gpu-index> xid <code> gi <g> ci <c>    the same, attributed to that MIG GPU/compute instance
//! <gpu-index> ecc-double-bit              DoubleBitEccError
//! <gpu-index> ecc-single-bit              SingleBitEccError
//! <gpu-index> unavailable                 GpuUnavailableError
//! <gpu-index> recovery <action>           GpuRecoveryAction, eventData = action (0..=4, or any
//!                                         other number, passed on as is); also the GPU's
//!                                         recovery action field from now on
//! <gpu-index> lost                        not an event: the GPU is lost from now on
//! <gpu-index> found                       not an event: the GPU is no longer lost
//! <gpu-index> remap-pending               not an event: a row remapping waits for a reset
//! <gpu-index> remap-failed                not an event: a row remapping failed
//! <gpu-index> remap-clear                 not an event: neither
//! ```
//!
//! `<gpu-index>` is 0..=7; `#` comments, blank and malformed lines are skipped; a line is
//! consumed once its newline is there. The file may be absent, and appear later. What the
//! events mean for an event set is in the `events` module; what the state lines (and the
//! last `recovery` line) mean for the NVML calls, in the `health` module.

use std::ffi::{c_uint, c_ulonglong};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nvml_wrapper_sys::bindings::*;

use crate::beside_library;

const FILE_NAME: &str = "fake-nvml-events";
/// Instance ids of an event not attributed to a MIG instance.
pub(crate) const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

pub(crate) const XID: c_ulonglong = nvmlEventTypeXidCriticalError as c_ulonglong;
pub(crate) const ECC_SINGLE: c_ulonglong = nvmlEventTypeSingleBitEccError as c_ulonglong;
pub(crate) const ECC_DOUBLE: c_ulonglong = nvmlEventTypeDoubleBitEccError as c_ulonglong;
pub(crate) const UNAVAILABLE: c_ulonglong = nvmlEventTypeGpuUnavailableError as c_ulonglong;
pub(crate) const RECOVERY: c_ulonglong = nvmlEventTypeGpuRecoveryAction as c_ulonglong;

/// A GPU's row remapping, as the last `remap-*` line set it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Remap {
    #[default]
    Clear,
    Pending,
    Failed,
}

#[derive(Debug, PartialEq)]
pub(crate) enum Line {
    Event {
        gpu: usize,
        kind: c_ulonglong,
        data: c_ulonglong,
        gi: c_uint,
        ci: c_uint,
    },
    Lost(usize),
    Found(usize),
    Remap(usize, Remap),
}

pub(crate) fn parse(line: &str) -> Option<Line> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (gpu, rest) = words.split_first()?;
    let gpu: usize = gpu.parse().ok().filter(|&g| g < 8)?;
    let event = |kind, data, gi, ci| {
        Some(Line::Event {
            gpu,
            kind,
            data,
            gi,
            ci,
        })
    };
    match rest {
        ["xid", code] => event(XID, code.parse().ok()?, NO_INSTANCE, NO_INSTANCE),
        ["xid", code, "gi", gi, "ci", ci] => {
            event(XID, code.parse().ok()?, gi.parse().ok()?, ci.parse().ok()?)
        }
        ["ecc-double-bit"] => event(ECC_DOUBLE, 0, NO_INSTANCE, NO_INSTANCE),
        ["ecc-single-bit"] => event(ECC_SINGLE, 0, NO_INSTANCE, NO_INSTANCE),
        ["unavailable"] => event(UNAVAILABLE, 0, NO_INSTANCE, NO_INSTANCE),
        ["recovery", action] => event(RECOVERY, action.parse().ok()?, NO_INSTANCE, NO_INSTANCE),
        ["lost"] => Some(Line::Lost(gpu)),
        ["found"] => Some(Line::Found(gpu)),
        ["remap-pending"] => Some(Line::Remap(gpu, Remap::Pending)),
        ["remap-failed"] => Some(Line::Remap(gpu, Remap::Failed)),
        ["remap-clear"] => Some(Line::Remap(gpu, Remap::Clear)),
        _ => None,
    }
}

/// The feed's path: next to this library. `None` when the loader cannot say where that
/// is, which reads as an absent file.
pub(crate) fn events_file() -> Option<&'static Path> {
    static FILE: OnceLock<Option<PathBuf>> = OnceLock::new();
    FILE.get_or_init(|| beside_library(FILE_NAME)).as_deref()
}

/// The complete lines of the file from `offset` on, each with the offset just past it.
/// Nothing when the file is absent or unreadable.
pub(crate) fn lines_from(path: &Path, offset: u64) -> Vec<(String, u64)> {
    let mut buf = Vec::new();
    let read = File::open(path).and_then(|mut f| {
        f.seek(SeekFrom::Start(offset))?;
        f.read_to_end(&mut buf)
    });
    if read.is_err() {
        return Vec::new();
    }
    let mut lines = Vec::new();
    let mut end = offset;
    for chunk in buf.split_inclusive(|&b| b == b'\n') {
        let Some(text) = chunk.strip_suffix(b"\n") else {
            break; // still being written
        };
        end += chunk.len() as u64;
        lines.push((String::from_utf8_lossy(text).into_owned(), end));
    }
    lines
}

/// Every complete line of the file; none when it is absent or unreadable.
pub(crate) fn all_lines() -> Vec<String> {
    match events_file() {
        Some(path) => lines_from(path, 0).into_iter().map(|(t, _)| t).collect(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let xid = |gpu, data, gi, ci| Line::Event {
            gpu,
            kind: XID,
            data,
            gi,
            ci,
        };
        assert_eq!(
            parse("3 xid 79"),
            Some(xid(3, 79, NO_INSTANCE, NO_INSTANCE))
        );
        assert_eq!(parse(" 6  xid 31 gi 2 ci 0 "), Some(xid(6, 31, 2, 0)));
        assert_eq!(parse("7 lost"), Some(Line::Lost(7)));
        assert_eq!(parse("0 found"), Some(Line::Found(0)));
        assert_eq!(
            parse("5 remap-pending"),
            Some(Line::Remap(5, Remap::Pending))
        );
        assert_eq!(parse("5 remap-failed"), Some(Line::Remap(5, Remap::Failed)));
        assert_eq!(parse("5 remap-clear"), Some(Line::Remap(5, Remap::Clear)));
        for bad in [
            "",
            "# 3 xid 79",
            "8 xid 79",
            "-1 xid 79",
            "3 xid",
            "3 xid 79 gi 2",
            "3 xid x",
            "3 recovery",
            "3 lost now",
            "3 ecc",
            "3 remap",
            "3 remap-pending now",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn partial_lines() {
        let dir = std::env::temp_dir().join(format!("fake-nvml-lines-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join(FILE_NAME);
        std::fs::write(&path, "0 lost\n1 xid 4").unwrap();
        assert_eq!(lines_from(&path, 0), vec![("0 lost".to_string(), 7)]);
        assert_eq!(lines_from(&path, 7), vec![]);
        assert_eq!(lines_from(&dir.join("absent"), 0), vec![]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
