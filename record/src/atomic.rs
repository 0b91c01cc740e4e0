//! Durable file replacement: a reader sees the old file or the new one, never a mix, and
//! after return the new one survives a crash.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::OFlag;

use crate::error::{RecordError, Result};

/// Open flags for record files: never through a symlink, never inherited by a program run.
pub(crate) const NOFOLLOW_CLOEXEC: i32 = OFlag::O_NOFOLLOW.bits() | OFlag::O_CLOEXEC.bits();

/// Mode of every file graft writes into its state directory: root only.
pub const FILE_MODE: u32 = 0o600;
/// Mode of the state directory and every directory graft creates in it: root only.
pub const DIR_MODE: u32 = 0o700;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Writes `data` to `path` via a temp file in the same directory: write, fsync, rename,
/// fsync the directory. The file is [`FILE_MODE`].
pub fn write_file(path: &Path, data: &[u8]) -> Result<()> {
    write_file_mode(path, data, FILE_MODE)
}

/// [`write_file`] with the new file's mode given.
pub fn write_file_mode(path: &Path, data: &[u8], mode: u32) -> Result<()> {
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
            .mode(mode)
            .custom_flags(NOFOLLOW_CLOEXEC)
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

/// Opens (creating it [`FILE_MODE`]) a lock file read-only: flock needs no write access, and a
/// daemon holding no file open for writing lets the state directory be remounted read-only.
pub fn open_lock(path: &Path) -> Result<File> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::Mode;
    open(
        path,
        OFlag::O_RDONLY | OFlag::O_CREAT | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::from_bits_truncate(FILE_MODE),
    )
    .map(File::from)
    .map_err(|e| RecordError::io("open", path, std::io::Error::from(e)))
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
        .mode(FILE_MODE)
        .custom_flags(NOFOLLOW_CLOEXEC)
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

/// Creates a directory (and parents, each [`DIR_MODE`]) and makes its entry durable.
pub fn create_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|e| RecordError::io("mkdir", dir, e))?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Creates `dir` if needed and makes it [`DIR_MODE`] (root only) whatever it was: a hostPath
/// the kubelet created is 0755.
pub fn private_dir(dir: &Path) -> Result<()> {
    create_dir(dir)?;
    let meta = fs::metadata(dir).map_err(|e| RecordError::io("stat", dir, e))?;
    if meta.permissions().mode() & 0o7777 != DIR_MODE {
        fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE))
            .map_err(|e| RecordError::io("chmod", dir, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_files_and_directories_are_root_only() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("state");
        DirBuilder::new().mode(0o755).create(&root).unwrap();
        private_dir(&root).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&root), 0o700);
        create_dir(&root.join("a/b")).unwrap();
        assert_eq!(mode(&root.join("a")), 0o700);
        assert_eq!(mode(&root.join("a/b")), 0o700);
        write_file(&root.join("f.json"), b"{}").unwrap();
        assert_eq!(mode(&root.join("f.json")), 0o600);
        touch(&root.join("m")).unwrap();
        assert_eq!(mode(&root.join("m")), 0o600);
        // A symlink planted at a marker's name is not followed.
        std::os::unix::fs::symlink("/etc/passwd", root.join("planted")).unwrap();
        assert!(touch(&root.join("planted")).is_err());
    }
}
