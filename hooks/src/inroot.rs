//! File work inside the container's root, which the image controls. Paths are resolved only
//! by pathrs (openat2 `RESOLVE_IN_ROOT`, or its checked emulation where the kernel lacks
//! it), so an image's symlinks, absolute or relative, land inside the root as they will for
//! the container. Everything after that is an `*at` call on the directory fd pathrs
//! returned: no path string is resolved again on the host.

use std::ffi::OsStr;
use std::fs::{File, Permissions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, renameat, OFlag};
use nix::sys::stat::{fchmod, fstat, FileStat, Mode, SFlag};
use nix::unistd::{symlinkat, unlinkat, UnlinkatFlags};
use pathrs::error::{Error as PathrsError, ErrorKind};
use pathrs::flags::OpenFlags;
use pathrs::{Handle, Root};

/// Cap on what is read from a file of the image.
pub const MAX_FILE: u64 = 1 << 20;

/// Tries at a fresh temporary name before giving up.
const TEMP_TRIES: u32 = 16;

pub fn open_root(rootfs: &Path) -> anyhow::Result<Root> {
    Root::open(rootfs).with_context(|| format!("opening the container root {}", rootfs.display()))
}

pub fn is_errno(e: &PathrsError, errno: i32) -> bool {
    e.kind() == ErrorKind::OsError(Some(errno))
}

pub fn is_type(st: &FileStat, kind: SFlag) -> bool {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == kind
}

/// What one hook run has made or resolved in the root: the directories (by in-container
/// path, each fd the directory resolved inside the root) and the paths known to exist, so
/// that a later step neither resolves them again nor follows the links it made.
#[derive(Default)]
pub struct Made {
    dirs: std::collections::HashMap<String, OwnedFd>,
    paths: std::collections::HashSet<String>,
}

impl Made {
    /// `path`'s directory fd, made (`mkdir_all`) on first use.
    pub fn dir(&mut self, root: &Root, path: &str) -> anyhow::Result<BorrowedFd<'_>> {
        if !self.dirs.contains_key(path) {
            self.dirs.insert(path.to_string(), mkdir_all(root, path)?);
        }
        // Inserted just above when it was missing.
        self.dirs
            .get(path)
            .map(|d| d.as_fd())
            .ok_or_else(|| anyhow::anyhow!("{path}: not made"))
    }

    /// The fd of `path` when it was made or resolved already.
    pub fn known_dir(&self, path: &str) -> Option<BorrowedFd<'_>> {
        self.dirs.get(path).map(|d| d.as_fd())
    }

    /// Records that `path` exists (a link made to something present, or what was there).
    pub fn exists(&mut self, path: String) {
        self.paths.insert(path);
    }

    pub fn is_known(&self, path: &str) -> bool {
        self.paths.contains(path)
    }
}

/// `mkdir -p` inside the root (new directories 0755); the directory's fd.
pub fn mkdir_all(root: &Root, path: &str) -> anyhow::Result<OwnedFd> {
    let dir = root
        .mkdir_all(path, &Permissions::from_mode(0o755))
        .with_context(|| format!("creating the directory {path} in the container"))?;
    Ok(dir.into())
}

/// The contents of the regular file at `path` in the root, following its symlinks inside
/// the root; `None` when nothing is there. A FIFO, device, socket or directory planted by
/// the image is an error before it is ever opened for reading (no hang, no endless read).
pub fn read_regular(root: &Root, path: &str, max: u64) -> anyhow::Result<Option<Vec<u8>>> {
    let handle = match root.resolve(path) {
        Ok(h) => h,
        Err(e) if is_errno(&e, libc::ENOENT) => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("resolving {path} in the container")),
    };
    read_handle(&handle, path, max).map(Some)
}

/// As [`read_regular`], for a handle already resolved (`path` is for messages).
pub fn read_handle(handle: &Handle, path: &str, max: u64) -> anyhow::Result<Vec<u8>> {
    let st = fstat(handle).with_context(|| format!("stat of {path} in the container"))?;
    if !is_type(&st, SFlag::S_IFREG) {
        bail!("{path} in the container is not a regular file");
    }
    // pathrs re-opens the O_PATH handle itself (through procfs): the inode just checked,
    // and checked again below all the same.
    let file = handle
        .reopen(OpenFlags::O_RDONLY | OpenFlags::O_NONBLOCK | OpenFlags::O_NOCTTY)
        .with_context(|| format!("opening {path} in the container"))?;
    let st2 = fstat(&file).with_context(|| format!("stat of {path} in the container"))?;
    if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) || !is_type(&st2, SFlag::S_IFREG) {
        bail!("{path} in the container changed while it was opened");
    }
    let mut data = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut data)
        .with_context(|| format!("reading {path} in the container"))?;
    if data.len() as u64 > max {
        bail!("{path} in the container is larger than {max} bytes");
    }
    Ok(data)
}

/// Replaces `name` in `dir` with a regular file holding `data`: a fresh temporary file
/// beside it, then a rename over it, so readers see the old or the new file, never half.
pub fn write_atomic(dir: BorrowedFd<'_>, name: &str, data: &[u8], mode: u32) -> anyhow::Result<()> {
    check_name(name)?;
    let (tmp, fd) = create_temp(dir, name, mode)?;
    let done = (|| -> anyhow::Result<()> {
        let mut file = File::from(fd);
        // Explicit, so the result does not depend on the runtime's umask.
        fchmod(&file, Mode::from_bits_truncate(mode)).context("setting the file mode")?;
        file.write_all(data).context("writing")?;
        renameat(dir, tmp.as_str(), dir, name).context("renaming it into place")?;
        Ok(())
    })();
    if done.is_err() {
        let _ = unlinkat(dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
    }
    done
}

/// Makes `name` in `dir` a symlink to `target`: kept when it already is one, created when
/// absent, replaced atomically when it points elsewhere. Anything else there is the
/// image's own file and is left alone. Returns whether it changed anything.
pub fn ensure_symlink(dir: BorrowedFd<'_>, name: &str, target: &str) -> anyhow::Result<bool> {
    check_name(name)?;
    // Each step acts on what the previous one saw; a change in between makes it fail
    // (EEXIST) and the loop looks again, so there is no check-then-act on a path.
    for _ in 0..TEMP_TRIES {
        match readlinkat(dir, name) {
            Ok(current) if current == OsStr::new(target) => return Ok(false),
            Ok(_) => {
                replace_symlink(dir, name, target)?;
                return Ok(true);
            }
            // Not a symlink: the image's own file or directory.
            Err(Errno::EINVAL) => return Ok(false),
            Err(Errno::ENOENT) => match symlinkat(target, dir, name) {
                Ok(()) => return Ok(true),
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(e).context("creating the symlink"),
            },
            Err(e) => return Err(e).context("reading the existing entry"),
        }
    }
    bail!("the entry kept changing while it was being linked")
}

/// `name` in `dir` made a symlink to `target`, whatever the image had there (a file or a
/// link is replaced in one rename; a directory is an error, as a bind of a file over it
/// would be). Returns whether it changed.
pub fn force_symlink(dir: BorrowedFd<'_>, name: &str, target: &str) -> anyhow::Result<bool> {
    check_name(name)?;
    match readlinkat(dir, name) {
        Ok(current) if current == OsStr::new(target) => Ok(false),
        // Nothing there (the common case): one call. Something made meanwhile is replaced.
        Err(Errno::ENOENT) => match symlinkat(target, dir, name) {
            Ok(()) => Ok(true),
            Err(Errno::EEXIST) => replace_symlink(dir, name, target).map(|()| true),
            Err(e) => Err(e).context("creating the symlink"),
        },
        _ => replace_symlink(dir, name, target).map(|()| true),
    }
}

fn replace_symlink(dir: BorrowedFd<'_>, name: &str, target: &str) -> anyhow::Result<()> {
    for _ in 0..TEMP_TRIES {
        let tmp = temp_name(name);
        match symlinkat(target, dir, tmp.as_str()) {
            Ok(()) => {}
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(e).context("creating a temporary symlink"),
        }
        return renameat(dir, tmp.as_str(), dir, name).or_else(|e| {
            let _ = unlinkat(dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
            Err(e).context("renaming the new symlink into place")
        });
    }
    bail!("no free temporary name beside {name}")
}

/// A new file beside `name`: O_EXCL and O_NOFOLLOW, so nothing the image planted under a
/// guessed name is opened.
fn create_temp(dir: BorrowedFd<'_>, name: &str, mode: u32) -> anyhow::Result<(String, OwnedFd)> {
    let flags =
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_WRONLY;
    for _ in 0..TEMP_TRIES {
        let tmp = temp_name(name);
        match openat(
            dir.as_fd(),
            tmp.as_str(),
            flags,
            Mode::from_bits_truncate(mode),
        ) {
            Ok(fd) => return Ok((tmp, fd)),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(e).context("creating a temporary file"),
        }
    }
    bail!("no free temporary name beside {name}")
}

fn temp_name(name: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(".{name}.graft-{}-{seq}-{nanos:x}", std::process::id())
}

/// One path component: these names are relative to a directory fd.
fn check_name(name: &str) -> anyhow::Result<()> {
    let bytes = OsStr::new(name).as_bytes();
    if bytes.is_empty()
        || name == "."
        || name == ".."
        || bytes.contains(&b'/')
        || bytes.contains(&0)
    {
        bail!("{name:?} is not a single file name");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn dir_fd(p: &Path) -> OwnedFd {
        File::open(p).unwrap().into()
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let fd = dir_fd(d.path());
        std::fs::write(d.path().join("f"), "old").unwrap();
        write_atomic(fd.as_fd(), "f", b"new", 0o640).unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("f")).unwrap(), "new");
        let mode = std::fs::metadata(d.path().join("f"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o640);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(
                write_atomic(fd.as_fd(), bad, b"x", 0o644).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn symlinks_are_kept_created_replaced_or_left() {
        let d = tempfile::tempdir().unwrap();
        let fd = dir_fd(d.path());
        assert!(ensure_symlink(fd.as_fd(), "l", "t1").unwrap());
        assert!(!ensure_symlink(fd.as_fd(), "l", "t1").unwrap());
        assert!(ensure_symlink(fd.as_fd(), "l", "t2").unwrap());
        assert_eq!(
            std::fs::read_link(d.path().join("l")).unwrap(),
            Path::new("t2")
        );
        std::fs::write(d.path().join("f"), "image").unwrap();
        assert!(!ensure_symlink(fd.as_fd(), "f", "t").unwrap());
        assert_eq!(
            std::fs::read_to_string(d.path().join("f")).unwrap(),
            "image"
        );
        symlink("/", d.path().join("dangling-or-not")).unwrap();
        assert!(ensure_symlink(fd.as_fd(), "dangling-or-not", "t").unwrap());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 3);
    }
}
