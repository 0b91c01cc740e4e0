//! Durable file replacement: a reader sees the old file or the new one, never a mix, and
//! after return the new one survives a crash.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use nix::fcntl::OFlag;

use crate::error::{RecordError, Result};

/// Open flags for record files: never through a symlink, never inherited by a program run.
pub(crate) const NOFOLLOW_CLOEXEC: i32 = OFlag::O_NOFOLLOW.bits() | OFlag::O_CLOEXEC.bits();

/// Mode of every file graft writes into its state directory: root only.
pub const FILE_MODE: u32 = 0o600;
/// Mode of the state directory and every directory graft creates in it: root only.
pub const DIR_MODE: u32 = 0o700;

/// Writes `data` to `path` via a temp file in the same directory: write, fsync, rename,
/// fsync the directory. The file is [`FILE_MODE`].
pub fn write_file(path: &Path, data: &[u8]) -> Result<()> {
    write_file_mode(path, data, FILE_MODE)
}

/// [`write_file`] with the new file's mode given.
pub fn write_file_mode(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let (dir, tmp) = temp_beside(path, data, mode)?;
    // Data and size; the rename and the directory fsync carry the rest.
    tmp.as_file()
        .sync_data()
        .map_err(|e| RecordError::io("fsync", tmp.path(), e))?;
    tmp.persist(path)
        .map_err(|e| RecordError::io("rename", path, e.error))?;
    sync_dir(dir)
}

/// A new file's content written beside its final path, to be renamed over it with
/// [`Staged::install`]. Writers stage outside their lock, so that only the rename needs it.
/// Not synced: for the files `durability`'s rule covers.
#[derive(Debug)]
pub struct Staged(tempfile::NamedTempFile);

/// [`Staged`] for `path`, with the new file's mode given.
pub fn stage(path: &Path, data: &[u8], mode: u32) -> Result<Staged> {
    let (_, tmp) = temp_beside(path, data, mode)?;
    Ok(Staged(tmp))
}

impl Staged {
    /// Renames the staged file over `path` (atomic, not durable).
    pub fn install(self, path: &Path) -> Result<()> {
        self.0
            .persist(path)
            .map_err(|e| RecordError::io("rename", path, e.error))?;
        Ok(())
    }
}

/// Atomic but not durable: readers see the old file or the new one, and a crash may lose
/// the new one. For diagnostics written on a hot path.
pub fn replace_file(path: &Path, data: &[u8]) -> Result<()> {
    let (_, tmp) = temp_beside(path, data, FILE_MODE)?;
    tmp.persist(path)
        .map_err(|e| RecordError::io("rename", path, e.error))?;
    Ok(())
}

/// `data` in a new temp file in `path`'s directory, to be renamed over `path`.
fn temp_beside<'p>(
    path: &'p Path,
    data: &[u8],
    mode: u32,
) -> Result<(&'p Path, tempfile::NamedTempFile)> {
    let dir = path.parent().ok_or_else(|| {
        RecordError::io("write", path, std::io::Error::other("no parent directory"))
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    // Hidden, and random rather than named by pid: in a container every daemon is pid 1,
    // and a predecessor killed between create and rename leaves its temp file behind.
    // Created with O_EXCL (never through a link); removed again on any error.
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}.tmp."))
        .permissions(fs::Permissions::from_mode(mode))
        .tempfile_in(dir)
        .map_err(|e| RecordError::io("create a temp file in", dir, e))?;
    tmp.write_all(data)
        .map_err(|e| RecordError::io("write", tmp.path(), e))?;
    Ok((dir, tmp))
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

/// fsyncs a directory, so that an entry created or renamed in it survives a crash.
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

    /// A daemon in a container is pid 1 at every start: what a killed predecessor left
    /// half-written never blocks the next write, and a link planted at the target is
    /// replaced, not followed.
    #[test]
    fn leftovers_and_links_do_not_stop_a_write() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join(".nri-status.json");
        for n in 0..4 {
            fs::write(
                d.path().join(format!(".nri-status.json.tmp.1.{n}")),
                b"half",
            )
            .unwrap();
        }
        write_file(&target, b"{\"a\":1}").unwrap();
        write_file(&target, b"{\"a\":2}").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"{\"a\":2}");
        let outside = d.path().join("outside");
        fs::write(&outside, b"keep").unwrap();
        let linked = d.path().join("linked.json");
        std::os::unix::fs::symlink(&outside, &linked).unwrap();
        write_file(&linked, b"new").unwrap();
        assert_eq!(fs::read(&outside).unwrap(), b"keep");
        assert_eq!(fs::read(&linked).unwrap(), b"new");
        assert!(!fs::symlink_metadata(&linked).unwrap().is_symlink());
        // The one temp file of each write is gone; only the planted leftovers remain.
        let temps = fs::read_dir(d.path())
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                n.to_string_lossy().contains(".tmp.")
            })
            .count();
        assert_eq!(temps, 4);
    }
}
