//! The container's `/etc/ld.so.cache` built by graft-hook itself: the image's own cache with
//! the driver's libraries merged in, written atomically inside the root, instead of running
//! ldconfig (most of what a rebuilt cache cost a container's start).
//!
//! - The image's cache is hostile input: opened only through the root's `/etc` fd without
//!   following a symlink, only a regular file of at most [`MAX_CACHE`] bytes, and parsed by
//!   `graft_ldcache::parse`, which checks every count, offset and string.
//! - The driver's libraries are the `lib*`/`ld-*` files with `.so` in their names (ldconfig's
//!   own filter) that are regular files in the folders graft mounted, keyed by their ELF
//!   `DT_SONAME` as ldconfig keys them (see `soname`), and pointing at `<folder>/<soname>`
//!   when that name exists there (the links graft-hook made), else at the file itself.
//! - They go before the image's entries, and the image's entries of the same name and
//!   architecture are dropped: the driver's libraries win, as they did when graft's folders
//!   came first in ldconfig's configuration.
//! - The new cache is written to a temporary file in the root's `/etc` and renamed over the
//!   old one, so no reader sees half of it. It is not synced, unlike ldconfig's cache on a
//!   host: it lives in the container's writable layer, which a crash discards with the
//!   container (Kubernetes starts a container again from a new rootfs, where the hook runs
//!   again). The sync cost 0.4 to 8 ms of every start that rebuilt the cache.
//!
//! Whatever graft-hook cannot merge faithfully (a symlinked, special, oversized or malformed
//! cache, hwcap entries, a folder of more than [`MAX_NAMES`] files) is not guessed at: the
//! caller runs ldconfig instead, which never reads the old cache and rebuilds it from the
//! image's files, as every rebuild did before.

use std::collections::{HashMap, HashSet};
use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};

use anyhow::Context;
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};
use pathrs::{Handle, Root};

use crate::inroot;
use crate::soname::{self, Lib};

/// The largest image cache read.
pub const MAX_CACHE: usize = graft_ldcache::MAX_CACHE;
/// The most directory entries looked at in one folder.
pub const MAX_NAMES: usize = 16 << 10;
const CACHE: &str = "ld.so.cache";

/// Why the image's cache or a folder is not merged: ldconfig rebuilds the cache instead.
#[derive(Debug, thiserror::Error)]
enum Unmergeable {
    #[error("opening the image's /etc/ld.so.cache: {0}")]
    Open(Errno),
    #[error("stat of the image's /etc/ld.so.cache: {0}")]
    Stat(Errno),
    #[error("the image's /etc/ld.so.cache is a symlink")]
    Symlink,
    #[error("the image's /etc/ld.so.cache is not a regular file of at most 16 MiB")]
    NotRegular,
    /// Reading it failed; the whole chain, as `{:#}` writes it.
    #[error("{0:#}")]
    Read(anyhow::Error),
    #[error("{folder}: {why}")]
    Folder { folder: String, why: Unlisted },
}

/// Why a folder's names were not listed.
#[derive(Debug, thiserror::Error)]
enum Unlisted {
    #[error("{0}")]
    Dup(std::io::Error),
    #[error("{0}")]
    Read(Errno),
    #[error("more than {MAX_NAMES} library files")]
    TooMany,
}

/// What [`rebuild`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The cache was written, with this many driver libraries and image entries.
    Written {
        /// Entries from the folders.
        driver: usize,
        /// Entries kept from the image's cache.
        image: usize,
    },
    /// Nothing was written; ldconfig must rebuild the cache, for this reason.
    Fallback(String),
}

/// Merges the libraries in `folders` (earlier folders win) into the root's cache. With
/// `copies` (the driver's prepared directory), each folder's copies there come first,
/// each named by its usual path, which graft-hook linked to the copy (`copies`): the
/// folder itself holds only links to them, which [`scan`] does not follow.
pub fn rebuild(root: &Root, folders: &[String], copies: Option<&str>) -> anyhow::Result<Outcome> {
    let etc = inroot::mkdir_all(root, "/etc")?;
    let data = match read_cache(etc.as_fd()) {
        Ok(d) => d,
        Err(why) => return Ok(Outcome::Fallback(why.to_string())),
    };
    let image = match graft_ldcache::parse(&data) {
        Ok(e) => e,
        Err(_) if data.is_empty() => Vec::new(),
        Err(e) => return Ok(Outcome::Fallback(format!("the image's ld.so.cache: {e}"))),
    };
    // They name glibc-hwcaps subdirectories through the extension directory, not copied.
    if image.iter().any(|e| e.hwcap != 0) {
        return Ok(Outcome::Fallback(
            "the image's ld.so.cache has hwcap entries".into(),
        ));
    }
    let mut driver: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for f in folders {
        let copy = copies.map(|dir| format!("{}{f}", dir.trim_end_matches('/')));
        for at in copy.iter().chain(std::iter::once(f)) {
            match scan(root, at, f)? {
                Ok(found) => driver.extend(found),
                Err(why) => return Ok(Outcome::Fallback(why.to_string())),
            }
        }
    }
    let flags = graft_ldcache::native_flags();
    let ours = driver.iter().map(|(k, v)| graft_ldcache::Entry {
        flags,
        key: k,
        value: v,
        osversion: 0,
        hwcap: 0,
    });
    let theirs = image
        .iter()
        .filter(|e| e.flags != flags || !driver.iter().any(|(k, _)| k == e.key));
    let kept = theirs.clone().count();
    let entries: Vec<_> = ours.chain(theirs.cloned()).collect();
    let bytes = match graft_ldcache::build(&entries) {
        Ok(b) => b,
        Err(e) => return Ok(Outcome::Fallback(format!("writing the cache: {e}"))),
    };
    // Synced before the rename, as ldconfig does with the cache it writes.
    inroot::write_atomic(etc.as_fd(), CACHE, &bytes, 0o644)
        .context("writing /etc/ld.so.cache in the container")?;
    Ok(Outcome::Written {
        driver: driver.len(),
        image: kept,
    })
}

/// The image's cache, empty when there is none; `Err` says why it is not used.
fn read_cache(etc: BorrowedFd<'_>) -> Result<Vec<u8>, Unmergeable> {
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = match openat(etc, CACHE, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(Vec::new()),
        Err(e) => return Err(Unmergeable::Open(e)),
    };
    let st = fstat(&fd).map_err(Unmergeable::Stat)?;
    if inroot::is_type(&st, SFlag::S_IFLNK) {
        return Err(Unmergeable::Symlink);
    }
    if !inroot::is_type(&st, SFlag::S_IFREG) || st.st_size as u64 > MAX_CACHE as u64 {
        return Err(Unmergeable::NotRegular);
    }
    // Reopened from the O_PATH fd and checked to be the same inode (inroot::read_handle).
    inroot::read_handle(&Handle::from_fd(fd), "/etc/ld.so.cache", MAX_CACHE as u64)
        .map_err(Unmergeable::Read)
}

/// The `(soname, path)` of each library in `folder`, one per soname, each path as if in
/// `shown` (the folder itself, or the usual folder of a prepared copy); the inner `Err` is
/// a reason to fall back. A folder that is not there has none.
#[allow(clippy::type_complexity)]
fn scan(
    root: &Root,
    folder: &str,
    shown: &str,
) -> anyhow::Result<Result<Vec<(Vec<u8>, Vec<u8>)>, Unmergeable>> {
    let handle = match root.resolve(folder) {
        Ok(h) => h,
        Err(e) if inroot::is_errno(&e, libc::ENOENT) => return Ok(Ok(Vec::new())),
        Err(e) => return Err(e).with_context(|| format!("resolving {folder} in the container")),
    };
    let dir = handle
        .reopen(pathrs::flags::OpenFlags::O_RDONLY | pathrs::flags::OpenFlags::O_DIRECTORY)
        .with_context(|| format!("opening {folder} in the container"))?;
    let names = match list(&dir) {
        Ok(n) => n,
        Err(why) => {
            let folder = folder.to_string();
            return Ok(Err(Unmergeable::Folder { folder, why }));
        }
    };
    let present: HashSet<&[u8]> = names.iter().map(|n| n.to_bytes()).collect();
    let mut found: HashMap<Vec<u8>, (Vec<u8>, bool)> = HashMap::new();
    for name in &names {
        let Some(lib) = library(dir.as_fd(), name) else {
            continue;
        };
        let file = name.to_bytes();
        let key = match lib {
            Lib::Soname(s) => s,
            Lib::NoSoname => file.to_vec(),
            Lib::Other => continue,
        };
        let linked = present.contains(key.as_slice());
        let target = if linked { key.as_slice() } else { file };
        let mut path = shown.trim_end_matches('/').as_bytes().to_vec();
        path.push(b'/');
        path.extend_from_slice(target);
        // Two files with one soname: the one its soname link names, else the higher version.
        match found.get(&key) {
            Some((old, old_linked)) if *old_linked || (!linked && old >= &path) => {}
            _ => {
                found.insert(key, (path, linked));
            }
        }
    }
    let mut out: Vec<_> = found.into_iter().map(|(k, (p, _))| (k, p)).collect();
    out.sort();
    Ok(Ok(out))
}

/// The names in `dir` that ldconfig would look at.
fn list(dir: &File) -> Result<Vec<std::ffi::CString>, Unlisted> {
    let fd = dir.try_clone().map_err(Unlisted::Dup)?;
    let mut d = Dir::from_fd(fd.into()).map_err(Unlisted::Read)?;
    let mut names = Vec::new();
    for entry in d.iter() {
        let entry = entry.map_err(Unlisted::Read)?;
        let n = entry.file_name();
        let b = n.to_bytes();
        if (b.starts_with(b"lib") || b.starts_with(b"ld-"))
            && memchr::memmem::find(b, b".so").is_some()
        {
            names.push(n.to_owned());
            if names.len() > MAX_NAMES {
                return Err(Unlisted::TooMany);
            }
        }
    }
    Ok(names)
}

/// The soname of `name` in `dir` when it is a regular file (never followed: a symlink is
/// found through the file it names); `None` for anything else or an error.
fn library(dir: BorrowedFd<'_>, name: &CStr) -> Option<Lib> {
    let st = fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    if !inroot::is_type(&st, SFlag::S_IFREG) {
        return None;
    }
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let file = File::from(openat(dir, name, flags, Mode::empty()).ok()?);
    // Swapped for something else since the stat: not read.
    let st2 = fstat(&file).ok()?;
    if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) {
        return None;
    }
    Some(soname::read(&file))
}

#[cfg(test)]
mod tests;
