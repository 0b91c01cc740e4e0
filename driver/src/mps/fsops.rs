//! File system work on a tenancy's directories, some of which tenants write (the pipe
//! directory) or fill (the shared-memory tmpfs): removal walks by directory descriptor,
//! never follows a symlink and never crosses into another mount, so nothing a tenant
//! plants there reaches anything else.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::dir::Dir;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// How deep a tree graft removes (each level holds a descriptor while it is walked).
const MAX_DEPTH: usize = 256;

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

fn err(what: &str, path: &Path, e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("{what} {}: {e}", path.display()))
}

/// Removes everything inside `dir` (kept itself, with its mode). Symlinks, FIFOs and
/// sockets are unlinked, not followed or opened; a directory on another device (a mount)
/// is refused.
pub fn clear_dir(dir: &Path) -> std::io::Result<()> {
    let fd = nix::fcntl::open(dir, dir_flags(), Mode::empty()).map_err(|e| err("open", dir, e))?;
    let dev = nix::sys::stat::fstat(&fd)
        .map_err(|e| err("stat", dir, e))?
        .st_dev;
    clear_fd(fd, dev, dir, 0)
}

fn clear_fd(fd: OwnedFd, dev: u64, at: &Path, depth: usize) -> std::io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(err("remove", at, "nested too deep"));
    }
    let dup = nix::unistd::dup(&fd).map_err(|e| err("dup", at, e))?;
    let mut names = Vec::new();
    {
        let mut d = Dir::from_fd(dup).map_err(|e| err("read", at, e))?;
        for entry in d.iter() {
            let entry = entry.map_err(|e| err("read", at, e))?;
            let name = entry.file_name().to_owned();
            if name.as_bytes() != b"." && name.as_bytes() != b".." {
                names.push(name);
            }
        }
    }
    for name in names {
        let shown = at.join(name.to_string_lossy().as_ref());
        let st = match fstatat(&fd, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(nix::errno::Errno::ENOENT) => continue,
            Err(e) => return Err(err("stat", &shown, e)),
        };
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR {
            if st.st_dev != dev {
                return Err(err("remove", &shown, "is a mount point"));
            }
            let sub = openat(&fd, name.as_c_str(), dir_flags(), Mode::empty())
                .map_err(|e| err("open", &shown, e))?;
            clear_fd(sub, dev, &shown, depth + 1)?;
            unlinkat(&fd, name.as_c_str(), UnlinkatFlags::RemoveDir)
                .map_err(|e| err("remove", &shown, e))?;
        } else {
            match unlinkat(&fd, name.as_c_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
                Err(e) => return Err(err("remove", &shown, e)),
            }
        }
    }
    let _ = fd.as_raw_fd();
    Ok(())
}

/// Removes `dir` and everything in it as [`clear_dir`] does; a missing one is fine.
pub fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err("stat", dir, e)),
        Ok(m) if !m.is_dir() => return std::fs::remove_file(dir),
        Ok(_) => {}
    }
    clear_dir(dir)?;
    std::fs::remove_dir(dir).map_err(|e| err("remove", dir, e))
}

/// Creates `dir` if missing (its parent must exist) and gives it exactly `mode`; refuses a
/// symlink or non-directory there.
pub fn ensure_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(err("use", dir, "is not a directory")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir(dir).map_err(|e| err("create", dir, e))?
        }
        Err(e) => return Err(err("stat", dir, e)),
    }
    // The process's umask would narrow the mode: set it explicitly.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| err("chmod", dir, e))
}

/// Whether `path` is the root of a mount (its device differs from its parent's).
pub fn is_mount_point(path: &Path) -> bool {
    let (Ok(m), Some(parent)) = (std::fs::symlink_metadata(path), path.parent()) else {
        return false;
    };
    std::fs::symlink_metadata(parent).is_ok_and(|p| p.dev() != m.dev())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn removal_never_follows_what_a_tenant_planted() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        let pipe = t.path().join("pipe");
        std::fs::create_dir(&pipe).unwrap();
        symlink(&outside, pipe.join("dir-link")).unwrap();
        symlink(
            outside.join("keep"),
            pipe.join("nvidia-cuda-mps-control.pid"),
        )
        .unwrap();
        nix::unistd::mkfifo(&pipe.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        let mut deep = pipe.join("a");
        for _ in 0..20 {
            std::fs::create_dir_all(&deep).unwrap();
            deep = deep.join("a");
        }
        std::fs::write(deep.with_file_name("f"), "x").unwrap();
        clear_dir(&pipe).unwrap();
        assert!(pipe.is_dir());
        assert_eq!(std::fs::read_dir(&pipe).unwrap().count(), 0);
        assert_eq!(std::fs::read_to_string(outside.join("keep")).unwrap(), "x");
        remove_tree(&pipe).unwrap();
        assert!(!pipe.exists());
        remove_tree(&pipe).unwrap();
    }

    #[test]
    fn directories_get_their_exact_mode() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("pipe");
        ensure_dir(&d, 0o1777).unwrap();
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o1777);
        symlink(t.path(), t.path().join("link")).unwrap();
        assert!(ensure_dir(&t.path().join("link"), 0o700).is_err());
        assert!(!is_mount_point(&d));
    }
}
