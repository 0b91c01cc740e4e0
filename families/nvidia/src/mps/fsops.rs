//! File system work on a tenancy's directories, some of which tenants write (the pipe
//! directory) or fill (the shared-memory tmpfs): removal walks by directory descriptor,
//! never follows a symlink and never crosses into another mount, so nothing a tenant
//! plants there reaches anything else; it reads a bounded batch of names at a time, holds
//! a bounded number of descriptors whatever the depth, and does a bounded amount of work.

use std::ffi::{CStr, CString};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, renameat2, AtFlags, OFlag, RenameFlags};
use nix::sys::stat::{fstatat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// How deep a walk descends (each level holds a descriptor and a batch of names); a
/// directory deeper is moved up to the top of the walk and taken apart from there, so no
/// depth stops a removal.
const MAX_DEPTH: usize = 32;
/// How many names of a directory are read before they are removed.
const BATCH: usize = 256;
/// How many entries one removal takes at most: one a tenant keeps filling fails (and is
/// retried) rather than hold graft-mps.
const MAX_ENTRIES: u64 = 1 << 20;

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
    let top = nix::fcntl::open(dir, dir_flags(), Mode::empty()).map_err(|e| err("open", dir, e))?;
    let dev = nix::sys::stat::fstat(&top)
        .map_err(|e| err("stat", dir, e))?
        .st_dev;
    let mut walk = Walk {
        top,
        dev,
        left: MAX_ENTRIES,
        moved: 0,
    };
    let top = walk.top.try_clone().map_err(|e| err("dup", dir, e))?;
    walk.clear(&top, dir, 0)
}

/// One removal: the directory it empties, and what it may still do.
struct Walk {
    top: OwnedFd,
    dev: u64,
    left: u64,
    moved: u64,
}

impl Walk {
    /// Empties the directory `fd` (at `at`, `depth` below the top), a batch at a time.
    fn clear(&mut self, fd: &OwnedFd, at: &Path, depth: usize) -> std::io::Result<()> {
        loop {
            let names = batch(fd, at)?;
            if names.is_empty() {
                return Ok(());
            }
            for name in names {
                self.remove(fd, &name, at, depth)?;
            }
        }
    }

    fn remove(&mut self, fd: &OwnedFd, name: &CStr, at: &Path, depth: usize) -> Step {
        let shown = at.join(name.to_string_lossy().as_ref());
        if self.left == 0 {
            return Err(err("remove", &shown, "more entries than one removal takes"));
        }
        self.left -= 1;
        let st = match fstatat(fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(err("stat", &shown, e)),
        };
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
            return match unlinkat(fd, name, UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => Ok(()),
                Err(e) => Err(err("remove", &shown, e)),
            };
        }
        if st.st_dev != self.dev {
            return Err(err("remove", &shown, "is a mount point"));
        }
        if depth + 1 >= MAX_DEPTH {
            return self.move_up(fd, name, &shown);
        }
        let sub = match openat(fd, name, dir_flags(), Mode::empty()) {
            Ok(sub) => sub,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(err("open", &shown, e)),
        };
        self.clear(&sub, &shown, depth + 1)?;
        match unlinkat(fd, name, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(err("remove", &shown, e)),
        }
    }

    /// Moves a directory too deep to descend into to the top, under a name of graft's (a
    /// name taken is skipped, never replaced), where the top's walk finds it.
    fn move_up(&mut self, fd: &OwnedFd, name: &CStr, shown: &Path) -> Step {
        loop {
            if self.left == 0 {
                return Err(err("move", shown, "more entries than one removal takes"));
            }
            self.left -= 1;
            self.moved += 1;
            let to = format!(".graft-deep-{}", self.moved);
            match renameat2(
                fd,
                name,
                &self.top,
                to.as_str(),
                RenameFlags::RENAME_NOREPLACE,
            ) {
                Ok(()) | Err(Errno::ENOENT) => return Ok(()),
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(err("move", shown, e)),
            }
        }
    }
}

type Step = std::io::Result<()>;

/// Up to [`BATCH`] names of the directory `fd`, read from its start.
fn batch(fd: &OwnedFd, at: &Path) -> std::io::Result<Vec<CString>> {
    let dup = nix::unistd::dup(fd).map_err(|e| err("dup", at, e))?;
    // The duplicate shares the offset: start from the top, as entries were removed.
    nix::unistd::lseek(&dup, 0, nix::unistd::Whence::SeekSet).map_err(|e| err("seek", at, e))?;
    let mut d = Dir::from_fd(dup).map_err(|e| err("read", at, e))?;
    let mut names = Vec::new();
    for entry in d.iter() {
        let entry = entry.map_err(|e| err("read", at, e))?;
        let name = entry.file_name();
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            names.push(name.to_owned());
            if names.len() == BATCH {
                break;
            }
        }
    }
    Ok(names)
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
    fn no_depth_or_width_stops_a_removal() {
        let t = tempfile::tempdir().unwrap();
        let pipe = t.path().join("pipe");
        std::fs::create_dir(&pipe).unwrap();
        // 300 levels made one at a time by descriptor (the path would be too long).
        let mut fd = nix::fcntl::open(&pipe, dir_flags(), Mode::empty()).unwrap();
        for _ in 0..300 {
            nix::sys::stat::mkdirat(&fd, "d", Mode::from_bits_truncate(0o755)).unwrap();
            fd = openat(&fd, "d", dir_flags(), Mode::empty()).unwrap();
        }
        for i in 0..BATCH * 3 + 1 {
            std::fs::write(pipe.join(format!("f{i}")), "x").unwrap();
        }
        // A name the move up would take is skipped, not replaced.
        std::fs::write(pipe.join(".graft-deep-1"), "x").unwrap();
        remove_tree(&pipe).unwrap();
        assert!(!pipe.exists());
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
