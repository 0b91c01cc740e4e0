//! Devices that prepared claims hold but the node no longer has: a serial adapter
//! unplugged, a served file deleted, a MIG device reconfigured away. graft-driver writes the
//! list after every rescan; graft-nri refuses to create a container that would need one of
//! them, since it would start with a device that is not there.
//!
//! ```text
//! <root>/absent-devices.json   {"version": 1, "devices": ["serial-0", ...]} (atomic replace)
//! ```
//!
//! A missing file means none is absent.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::atomic;
use crate::error::{RecordError, Result};

const ABSENT_FILE: &str = "absent-devices.json";
const VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct AbsentFile {
    version: u32,
    devices: BTreeSet<String>,
}

/// Replaces the list (graft-driver). An empty list is no file: graft-nri's check on every
/// CreateContainer is then one failed open.
pub fn write_absent(root: &Path, devices: &BTreeSet<String>) -> Result<()> {
    if devices.is_empty() {
        return atomic::remove_file(&root.join(ABSENT_FILE)).map(drop);
    }
    let data = serde_json::to_vec(&AbsentFile {
        version: VERSION,
        devices: devices.clone(),
    })
    .map_err(|e| RecordError::io("encode", root.join(ABSENT_FILE), std::io::Error::other(e)))?;
    atomic::write_file(&root.join(ABSENT_FILE), &data)
}

/// The devices listed as absent; empty when there is no list.
pub fn read_absent(root: &Path) -> Result<BTreeSet<String>> {
    let path = root.join(ABSENT_FILE);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(RecordError::io("read", path, e)),
    };
    let f: AbsentFile = serde_json::from_slice(&data)
        .map_err(|e| RecordError::io("parse", path.clone(), std::io::Error::other(e)))?;
    if f.version != VERSION {
        return Err(RecordError::io(
            "parse",
            path,
            std::io::Error::other(format!(
                "version {} (this build reads {VERSION})",
                f.version
            )),
        ));
    }
    Ok(f.devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_missing_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_absent(dir.path()).unwrap().is_empty());
        let set = BTreeSet::from(["serial-0".to_string(), "seat-2".to_string()]);
        write_absent(dir.path(), &set).unwrap();
        assert_eq!(read_absent(dir.path()).unwrap(), set);
        write_absent(dir.path(), &BTreeSet::new()).unwrap();
        assert!(!dir.path().join(ABSENT_FILE).exists());
        assert!(read_absent(dir.path()).unwrap().is_empty());
        std::fs::write(
            dir.path().join(ABSENT_FILE),
            b"{\"version\": 9, \"devices\": []}",
        )
        .unwrap();
        assert!(read_absent(dir.path())
            .unwrap_err()
            .to_string()
            .contains("version 9"));
        std::fs::write(dir.path().join(ABSENT_FILE), b"\xff").unwrap();
        assert!(read_absent(dir.path()).is_err());
    }
}
