//! Devices that prepared claims hold but the node no longer has: a serial adapter
//! unplugged, a served file deleted, a MIG device reconfigured away. graft-driver writes the
//! list after every rescan; graft-nri refuses to create a container that would need one of
//! them, since it would start with a device that is not there.
//!
//! ```text
//! <root>/absent-devices.json   {"version": 1, "devices": ["serial-0", ...]} (atomic replace)
//! ```
//!
//! A missing file means none is absent. The file is read like every state file
//! ([`crate::read`]): never through a symlink, only a regular file, at most
//! [`SMALL_FILE_CAP`] bytes. graft-nri looks on every CreateContainer, through an
//! [`AbsentCache`].

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::atomic;
use crate::cache::{keepable, key_of, FileKey};
use crate::error::{RecordError, Result};
use crate::read::{open_state_file, read_capped, read_state_file, SMALL_FILE_CAP};

const ABSENT_FILE: &str = "absent-devices.json";
const VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct AbsentFile {
    version: u32,
    devices: BTreeSet<String>,
}

/// Replaces the list (graft-driver). An empty list is no file: graft-nri's check on every
/// CreateContainer is then one failed `lstat`.
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

/// The devices listed as absent; empty when there is no list. A symlink, a non-regular
/// file, a file over [`SMALL_FILE_CAP`] bytes and one that is not the list are errors
/// naming the file.
pub fn read_absent(root: &Path) -> Result<BTreeSet<String>> {
    let path = root.join(ABSENT_FILE);
    match read_state_file(&path, SMALL_FILE_CAP)? {
        Some(data) => parse(&path, &data),
        None => Ok(BTreeSet::new()),
    }
}

fn parse(path: &Path, data: &[u8]) -> Result<BTreeSet<String>> {
    let f: AbsentFile = serde_json::from_slice(data)
        .map_err(|e| RecordError::io("parse", path, std::io::Error::other(e)))?;
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

/// The list as last read from one state directory, for a reader that looks on every
/// container (graft-nri): each call is one `lstat`, and the file is read again only when it
/// is another file (graft-driver replaces it by rename: a new inode) or has changed (size,
/// modification or change time). A missing file is the empty list, remembered as such.
/// What is kept follows the claim records' rule (`cache`): only a file that did not change
/// while it was read and is settled, so that a rewrite within the clock's tick is never
/// mistaken for the file read before. Errors are never kept: the next call reads again.
#[derive(Debug, Default)]
pub struct AbsentCache {
    last: Mutex<Last>,
}

/// The list last read, with the key of its file; `None` as the key: there was no file.
type Last = Option<(Option<FileKey>, Arc<BTreeSet<String>>)>;

impl AbsentCache {
    /// An empty cache (usable in a `static`).
    pub const fn new() -> Self {
        AbsentCache {
            last: Mutex::new(None),
        }
    }

    /// [`read_absent`] of `root`, from the cache while the file is the one last read.
    pub fn read(&self, root: &Path) -> Result<Arc<BTreeSet<String>>> {
        let path = root.join(ABSENT_FILE);
        let seen = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_file() => Some(key_of(&m)),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let mut last = self.lock();
                if let Some((None, none)) = last.as_ref() {
                    return Ok(none.clone());
                }
                let none = Arc::new(BTreeSet::new());
                *last = Some((None, none.clone()));
                return Ok(none);
            }
            // A symlink, a FIFO, an lstat that failed: the full read says what is wrong.
            _ => None,
        };
        if let (Some(seen), Some((Some(k), list))) = (seen, self.lock().as_ref()) {
            if *k == seen {
                return Ok(list.clone());
            }
        }
        let read = read_file(&path);
        let mut last = self.lock();
        match read {
            Ok((list, keep)) => {
                *last = keep.map(|k| (Some(k), list.clone()));
                Ok(list)
            }
            Err(e) => {
                *last = None;
                Err(e)
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Last> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The list at `path`, with the key to keep it under when it may be kept.
fn read_file(path: &Path) -> Result<(Arc<BTreeSet<String>>, Option<FileKey>)> {
    let Some((f, meta)) = open_state_file(path, SMALL_FILE_CAP)? else {
        // Gone since the lstat: none absent; the next call remembers that.
        return Ok((Arc::new(BTreeSet::new()), None));
    };
    let key = key_of(&meta);
    let list = parse(path, &read_capped(&f, &meta, path, SMALL_FILE_CAP)?)?;
    Ok((Arc::new(list), keepable(&f, &key).then_some(key)))
}

#[cfg(test)]
mod tests;
