//! Opening a host path without following any symlink on the way: how both daemons look at
//! an entry of a served directory (the files backend) that a container will get. A symlink
//! planted there, or in any directory above the entry, could otherwise hand a pod any file
//! of the host. Each component is opened with `O_PATH | O_NOFOLLOW` relative to the one
//! before, so no symlink is ever followed and the answer is about the very inode found.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};

use crate::paths::is_clean_absolute;

/// What an entry is. Only these may be served; anything else (a symlink, a device node, a
/// FIFO) is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryType {
    File,
    Directory,
    Socket,
}

impl EntryType {
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
    #[error("{path:?} is not a clean absolute path")]
    NotClean { path: String },
    #[error("{path}: {at} is a symlink; served entries are never reached through one")]
    Symlink { path: String, at: String },
    #[error("{path}: {at} is not a directory")]
    NotDirectory { path: String, at: String },
    #[error("{path} is a {found}, not a regular file, directory or socket")]
    Unsupported { path: String, found: &'static str },
    #[error("{path}: cannot open {at}: {source}")]
    Open {
        path: String,
        at: String,
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
    pub fd: OwnedFd,
    pub kind: EntryType,
    /// Bytes, for a regular file.
    pub size: u64,
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
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        std::fs::create_dir_all(p.join("srv/lic/sub")).unwrap();
        std::fs::write(p.join("srv/lic/seat-a"), b"aaaa").unwrap();
        std::fs::create_dir_all(p.join("etc")).unwrap();
        std::fs::write(p.join("etc/shadow"), b"secret").unwrap();
        symlink("/etc/shadow", p.join("srv/lic/abs")).unwrap();
        symlink("../../etc/shadow", p.join("srv/lic/rel")).unwrap();
        symlink("seat-a", p.join("srv/lic/inside")).unwrap();
        symlink("lic", p.join("srv/alias")).unwrap();
        nix::unistd::mkfifo(&p.join("srv/lic/fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        t
    }

    #[test]
    fn files_and_directories_are_found() {
        let t = tree();
        let e = open_entry(t.path(), "/srv/lic/seat-a").unwrap();
        assert_eq!((e.kind, e.size), (EntryType::File, 4));
        assert_eq!(
            open_entry(t.path(), "/srv/lic/sub").unwrap().kind,
            EntryType::Directory
        );
    }

    #[test]
    fn no_symlink_is_followed_anywhere() {
        let t = tree();
        for (path, at) in [
            ("/srv/lic/abs", "/srv/lic/abs"),
            ("/srv/lic/rel", "/srv/lic/rel"),
            // Even one that stays inside the directory: the rule has no exceptions.
            ("/srv/lic/inside", "/srv/lic/inside"),
            ("/srv/alias/seat-a", "/srv/alias"),
        ] {
            match open_entry(t.path(), path) {
                Err(EntryError::Symlink { at: a, .. }) => assert_eq!(a, at, "{path}"),
                other => panic!("{path}: {other:?}"),
            }
        }
    }

    #[test]
    fn other_types_and_bad_paths_are_refused() {
        let t = tree();
        let err = open_entry(t.path(), "/srv/lic/fifo").unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
        assert!(matches!(
            open_entry(t.path(), "/srv/lic/seat-a/x"),
            Err(EntryError::NotDirectory { .. })
        ));
        assert!(open_entry(t.path(), "/srv/lic/gone")
            .unwrap_err()
            .is_missing());
        for bad in ["srv/lic/seat-a", "/srv/../etc/shadow", "/srv//lic"] {
            assert!(matches!(
                open_entry(t.path(), bad),
                Err(EntryError::NotClean { .. })
            ));
        }
        assert!(open_entry(t.path(), "/").is_err());
    }

    #[test]
    fn device_nodes_are_refused() {
        let err = open_entry(Path::new("/"), "/dev/null").unwrap_err();
        assert!(err.to_string().contains("character device"), "{err}");
    }
}
