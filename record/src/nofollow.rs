//! Opening a host path without following any symlink on the way: how both daemons look at
//! an entry of a served directory (the files backend) that a container will get. A symlink
//! planted there, or in any directory above the entry, could otherwise hand a pod any file
//! of the host. Each component is opened with `O_PATH | O_NOFOLLOW` relative to the one
//! before, so no symlink is ever followed and the answer is about the very inode found.
//!
//! Every directory on the way (the root this process sees the host through included) must
//! be root's and writable by nobody else: another account that can write one could swap
//! the entry for a symlink between this look and the runtime's mount, which no check can
//! close. A sticky directory (`/tmp`) is refused too: its other users can still create
//! names in it. An entry served read-write must lie below a directory closed to group and
//! others ([`open_served`]), so that no host user reaches what a container plants there.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};

use crate::paths::is_clean_absolute;

/// The NVIDIA driver's IPC sockets, as paths inside its driver root. Every GPU container
/// gets them read-write, so each must be a socket reached as [`open_entry`] reaches a
/// served entry ([`open_socket`]): a symlink swapped in would hand containers another
/// socket of the host (containerd's, say).
pub const DRIVER_SOCKETS: &[&str] = &[
    "/run/nvidia-persistenced/socket",
    "/run/nvidia-fabricmanager/socket",
];

/// Whether mount source `source` is one of the [`DRIVER_SOCKETS`] (below any driver root).
pub fn is_driver_socket(source: &str) -> bool {
    DRIVER_SOCKETS.iter().any(|s| source.ends_with(s))
}

/// [`open_entry`], and the entry must be a socket.
pub fn open_socket(root: &Path, path: &str) -> Result<Entry, EntryError> {
    let e = open_entry(root, path)?;
    if e.kind != EntryType::Socket {
        return Err(EntryError::NotSocket {
            path: path.into(),
            found: e.kind,
        });
    }
    Ok(e)
}

/// What an entry is. Only these may be served; anything else (a symlink, a device node, a
/// FIFO) is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryType {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A Unix socket.
    Socket,
}

impl EntryType {
    /// The type in words, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryType::File => "regular file",
            EntryType::Directory => "directory",
            EntryType::Socket => "socket",
        }
    }
}

impl std::fmt::Display for EntryType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an entry cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    /// The path is not a clean absolute path.
    #[error("{path:?} is not a clean absolute path")]
    NotClean {
        /// The path as given.
        path: String,
    },
    /// A component on the way is a symlink.
    #[error("{path}: {at} is a symlink; served entries are never reached through one")]
    Symlink {
        /// The entry's path.
        path: String,
        /// The symlink.
        at: String,
    },
    /// A component on the way is not a directory.
    #[error("{path}: {at} is not a directory")]
    NotDirectory {
        /// The entry's path.
        path: String,
        /// The component that is not a directory.
        at: String,
    },
    /// The entry is a device node, FIFO or symlink.
    #[error("{path} is a {found}, not a regular file, directory or socket")]
    Unsupported {
        /// The entry's path.
        path: String,
        /// What it is, in words.
        found: &'static str,
    },
    /// A directory on the way is not root's, or others may write it.
    #[error(
        "{path}: {at} is owned by uid {owner} with mode {mode:04o}; every directory on the \
         way to a served entry must be root's and not writable by group or others"
    )]
    Writable {
        /// The entry's path.
        path: String,
        /// The directory at fault.
        at: String,
        /// Its owner.
        owner: u32,
        /// Its mode.
        mode: u32,
    },
    /// A read-write entry with no private directory above it: a host user could reach it.
    #[error(
        "{path} is served read-write, but no directory above it is root's with mode 0700 \
         (closed to group and others): a host user could reach what a container plants there"
    )]
    NotPrivate {
        /// The entry's path.
        path: String,
    },
    /// A socket was asked for and something else is there.
    #[error("{path} is a {found}, not a socket")]
    NotSocket {
        /// The entry's path.
        path: String,
        /// What is there instead.
        found: EntryType,
    },
    /// A component could not be opened.
    #[error("{path}: cannot open {at}: {source}")]
    Open {
        /// The entry's path.
        path: String,
        /// The component that could not be opened.
        at: String,
        /// The system's error.
        #[source]
        source: nix::Error,
    },
}

impl EntryError {
    /// The entry is not there at all (as opposed to being something it must not be).
    pub fn is_missing(&self) -> bool {
        matches!(
            self,
            EntryError::Open {
                source: nix::Error::ENOENT,
                ..
            }
        )
    }
}

/// An entry found without following a symlink.
#[derive(Debug)]
pub struct Entry {
    /// The entry, opened (O_PATH for a directory or socket).
    pub fd: OwnedFd,
    /// What the entry is.
    pub kind: EntryType,
    /// Bytes, for a regular file.
    pub size: u64,
    /// Owner and permission bits of the entry itself.
    pub owner: u32,
    /// Permission bits of the entry itself.
    pub mode: u32,
    /// Some directory below the root and above the entry is root's and closed to group
    /// and others: no host user but root reaches the entry.
    pub private: bool,
}

impl Entry {
    /// Refuses a directory that another account may write (this entry as a served directory).
    pub fn check_trusted_dir(&self, path: &str) -> Result<(), EntryError> {
        trusted(self.owner, self.mode, path, path)
    }
}

/// Root (or this process's own user, which is root wherever graft runs) owns it.
fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

fn trusted(owner: u32, mode: u32, path: &str, at: &str) -> Result<(), EntryError> {
    if trusted_owner(owner) && mode & 0o022 == 0 {
        return Ok(());
    }
    Err(EntryError::Writable {
        path: path.into(),
        at: at.into(),
        owner,
        mode: mode & 0o7777,
    })
}

/// [`open_entry`], and for an entry served read-write (`read_write`), a private directory
/// above it ([`Entry::private`]).
pub fn open_served(root: &Path, path: &str, read_write: bool) -> Result<Entry, EntryError> {
    let e = open_entry(root, path)?;
    if read_write && !e.private {
        return Err(EntryError::NotPrivate { path: path.into() });
    }
    Ok(e)
}

/// Opens host path `path` (clean, absolute) as seen below `root` (`/`, or where the host's
/// root is mounted here), following no symlink in any component of `path`. `root` itself is
/// trusted: it is how this process sees the host.
pub fn open_entry(root: &Path, path: &str) -> Result<Entry, EntryError> {
    if !is_clean_absolute(path) {
        return Err(EntryError::NotClean { path: path.into() });
    }
    let open_err = |at: &Path, source| EntryError::Open {
        path: path.into(),
        at: at.display().to_string(),
        source,
    };
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut fd = nix::fcntl::open(root, flags | OFlag::O_DIRECTORY, Mode::empty())
        .map_err(|e| open_err(root, e))?;
    let st = fstat(&fd).map_err(|e| open_err(root, e))?;
    trusted(st.st_uid, st.st_mode, path, &root.display().to_string())?;
    let mut private = false;
    let mut at = PathBuf::from("/");
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    for (i, c) in components.iter().enumerate() {
        at.push(c);
        let next = openat(&fd, *c, flags, Mode::empty()).map_err(|e| open_err(&at, e))?;
        let st = fstat(&next).map_err(|e| open_err(&at, e))?;
        let fmt = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        let at_s = || at.display().to_string();
        if fmt == SFlag::S_IFLNK {
            return Err(EntryError::Symlink {
                path: path.into(),
                at: at_s(),
            });
        }
        let last = i + 1 == components.len();
        if !last {
            if fmt != SFlag::S_IFDIR {
                return Err(EntryError::NotDirectory {
                    path: path.into(),
                    at: at_s(),
                });
            }
            trusted(st.st_uid, st.st_mode, path, &at_s())?;
            private |= st.st_mode & 0o077 == 0;
            fd = next;
            continue;
        }
        let kind = match fmt {
            SFlag::S_IFREG => EntryType::File,
            SFlag::S_IFDIR => EntryType::Directory,
            SFlag::S_IFSOCK => EntryType::Socket,
            other => {
                return Err(EntryError::Unsupported {
                    path: path.into(),
                    found: describe(other),
                })
            }
        };
        return Ok(Entry {
            fd: next,
            kind,
            size: u64::try_from(st.st_size).unwrap_or(0),
            owner: st.st_uid,
            mode: st.st_mode & 0o7777,
            private,
        });
    }
    // `path` is `/`: the host's root is never served.
    Err(EntryError::Unsupported {
        path: path.into(),
        found: "root directory",
    })
}

fn describe(fmt: SFlag) -> &'static str {
    match fmt {
        SFlag::S_IFCHR => "character device",
        SFlag::S_IFBLK => "block device",
        SFlag::S_IFIFO => "FIFO",
        SFlag::S_IFLNK => "symlink",
        _ => "file of unknown type",
    }
}

#[cfg(test)]
mod tests;
