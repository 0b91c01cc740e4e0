//! Durable file replacement: a reader sees the old file or the new one, never a mix, and
//! after return the new one survives a crash.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{RecordError, Result};

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Writes `data` to `path` via a temp file in the same directory: write, fsync, rename,
/// fsync the directory.
pub fn write_file(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().ok_or_else(|| {
        RecordError::io("write", path, std::io::Error::other("no parent directory"))
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    // Hidden and unique per process and call, so that concurrent writers and readers that
    // list the directory never trip over it.
    let tmp = dir.join(format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| RecordError::io("create", &tmp, e))?;
        f.write_all(data)
            .map_err(|e| RecordError::io("write", &tmp, e))?;
        // Data and size; the rename and the directory fsync carry the rest.
        f.sync_data()
            .map_err(|e| RecordError::io("fsync", &tmp, e))?;
        fs::rename(&tmp, path).map_err(|e| RecordError::io("rename", path, e))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes a file and makes the removal durable. A missing file is not an error.
pub fn remove_file(path: &Path) -> Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => {
            if let Some(dir) = path.parent() {
                sync_dir(dir)?;
            }
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(RecordError::io("remove", path, e)),
    }
}

/// Creates an empty marker file durably. An existing one is kept.
pub fn touch(path: &Path) -> Result<()> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| RecordError::io("create", path, e))?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| RecordError::io("fsync", dir, e))
}

/// Creates a directory (and parents) and makes its entry durable.
pub fn create_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(|e| RecordError::io("mkdir", dir, e))?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}
