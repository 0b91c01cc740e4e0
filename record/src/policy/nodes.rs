//! Device nodes no record may hand a container, whatever the node's configuration: the
//! kernel's raw memory, I/O port and log devices, by path and by number (a node is what its
//! numbers say, not its name). Which other nodes a container may get is graft-nri's check
//! against what graft-driver published ([`crate::devices`]).

use crate::error::InvalidRecord;
use crate::format::{DeviceKind, DeviceNode};
use crate::paths::{is_clean_absolute, is_under};

/// Paths no device node may have in a container.
pub const DENIED_PATHS: &[&str] = &["/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg"];
/// Character devices (major, minor) no record may name: mem, kmem, port, kmsg.
pub const DENIED_CHAR: &[(i64, i64, &str)] = &[
    (1, 1, "/dev/mem"),
    (1, 2, "/dev/kmem"),
    (1, 4, "/dev/port"),
    (1, 11, "/dev/kmsg"),
];

pub(super) fn check(f: &str, n: &DeviceNode) -> Result<(), InvalidRecord> {
    let bad = |reason: String| {
        Err(InvalidRecord {
            field: f.to_string(),
            reason,
        })
    };
    if !is_clean_absolute(&n.path) || !is_under(&n.path, "/dev") || n.path == "/dev" {
        return bad(format!(
            "device node {:?} is not a clean path below /dev",
            n.path
        ));
    }
    if DENIED_PATHS.contains(&n.path.as_str()) {
        return bad(format!(
            "device node {:?} is one no container may get (kernel memory, ports or log)",
            n.path
        ));
    }
    if n.kind == DeviceKind::Char {
        if let Some((_, _, what)) = DENIED_CHAR
            .iter()
            .find(|(ma, mi, _)| (*ma, *mi) == (n.major, n.minor))
        {
            return bad(format!(
                "device node {:?} is char {}:{}, the kernel's {what}, which no container may get",
                n.path, n.major, n.minor
            ));
        }
    }
    Ok(())
}
