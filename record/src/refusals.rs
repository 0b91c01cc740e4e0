//! graft-nri's journal of refused containers, which graft-driver turns into Events on the
//! pods (graft-nri makes no API calls).
//!
//! ```text
//! <root>/refusals/                           0700
//! <root>/refusals/<ms>-<seq>.json            one refusal each (0600, at most ENTRY_MAX bytes)
//! <root>/refusals/.w-<pid>-<seq>              an entry being written (renamed into place)
//! ```
//!
//! graft-nri writes an entry on the refusal path only, without fsync (an Event lost to a
//! crash is acceptable; a slow CreateContainer answer is not), and keeps at most
//! [`COUNT_MAX`] entries, dropping the oldest. graft-driver reads, posts and deletes them.
//! Anything in the directory is treated as hostile: entries are opened without following
//! symlinks, read up to [`ENTRY_MAX`] bytes, and every field is validated.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat2, AtFlags, OFlag, RenameFlags};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};

use crate::atomic::{self, FILE_MODE};
use crate::error::{InvalidRecord, RecordError, Result};
mod entry;
pub use entry::{PodRef, Refusal};

const DIR: &str = "refusals";
const VERSION: u32 = 1;
/// Largest entry, in bytes; a longer file is skipped (and removed) unread.
pub const ENTRY_MAX: usize = 4096;
/// Most entries kept; the oldest go first.
pub const COUNT_MAX: usize = 64;
/// Most bytes of a refusal's reason (cut at a character boundary).
pub const REASON_MAX: usize = 1536;
/// Most claims an entry names.
pub const CLAIMS_MAX: usize = 16;
/// An entry being written carries this prefix until it is renamed into place.
const TMP_PREFIX: &str = ".w-";
/// A write in progress older than this was abandoned by its writer.
const TMP_STALE_SECS: i64 = 60;

/// The journal's directory below the state directory.
pub fn journal_dir(root: &Path) -> PathBuf {
    root.join(DIR)
}

/// Creates the journal directory ([`atomic::DIR_MODE`]) if nothing is at its name; whatever
/// is there is left alone (never chmod-ed through a planted link) and checked at open.
pub fn create_dir(root: &Path) -> Result<()> {
    let dir = journal_dir(root);
    match std::fs::symlink_metadata(&dir) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => atomic::create_dir(&dir),
        Err(e) => Err(RecordError::io("stat", dir, e)),
    }
}

/// Opens the journal directory itself without following a symlink.
fn open_dir(dir: &Path) -> Result<OwnedFd> {
    nix::fcntl::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| RecordError::io("open", dir, e.into()))
}

/// Whether `name` is one of the journal's entry names (`<digits>-<digits>.json`).
fn is_entry_name(name: &str) -> bool {
    name.strip_suffix(".json")
        .and_then(|s| s.split_once('-'))
        .is_some_and(|(a, b)| {
            !a.is_empty()
                && !b.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && b.bytes().all(|c| c.is_ascii_digit())
        })
}

/// The directory's entry names, sorted oldest first (names start with the time).
fn names(dir: &Path) -> Result<Vec<String>> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| RecordError::io("read dir", dir, e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort_by_key(|n| {
        let (ms, seq) = n
            .strip_suffix(".json")
            .and_then(|s| s.split_once('-'))
            .unwrap_or(("", ""));
        (
            ms.parse::<u64>().unwrap_or(0),
            seq.parse::<u64>().unwrap_or(0),
        )
    });
    Ok(out)
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Appends a refusal (graft-nri). No fsync; the oldest entries beyond [`COUNT_MAX`] go.
pub fn append(root: &Path, refusal: &Refusal) -> Result<PathBuf> {
    let dir = journal_dir(root);
    create_dir(root)?;
    let dfd = open_dir(&dir)?;
    let mut data = serde_json::to_vec(refusal)
        .map_err(|e| RecordError::io("encode", &dir, std::io::Error::other(e)))?;
    if data.len() > ENTRY_MAX {
        // Only a long pod name and many long claim names get here: drop the claims.
        let mut r = refusal.clone();
        r.claims.clear();
        data = serde_json::to_vec(&r)
            .map_err(|e| RecordError::io("encode", &dir, std::io::Error::other(e)))?;
    }
    // Only finished entries count (another writer's write in progress is not touched).
    let existing: Vec<String> = names(&dir)?
        .into_iter()
        .filter(|n| is_entry_name(n))
        .collect();
    for old in existing
        .iter()
        .take((existing.len() + 1).saturating_sub(COUNT_MAX))
    {
        let _ = nix::unistd::unlinkat(&dfd, old.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
    // Written under a name the reader skips, then renamed into place: the driver, woken by
    // the create, never reads a half-written entry (and would delete it as invalid).
    let tmp = format!(
        "{TMP_PREFIX}{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(
        &dfd,
        tmp.as_str(),
        flags,
        Mode::from_bits_truncate(FILE_MODE),
    )
    .map_err(|e| RecordError::io("create", dir.join(&tmp), e.into()))?;
    if let Err(e) = File::from(fd).write_all(&data) {
        let _ = nix::unistd::unlinkat(&dfd, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        return Err(RecordError::io("write", dir.join(&tmp), e));
    }
    for _ in 0..8 {
        let name = format!(
            "{:013}-{}.json",
            refusal.at_ms,
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        match renameat2(
            &dfd,
            tmp.as_str(),
            &dfd,
            name.as_str(),
            RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => return Ok(dir.join(name)),
            // Taken (by a previous run's entry of the same millisecond): the next number.
            Err(Errno::EEXIST) => continue,
            Err(e) => {
                let _ = nix::unistd::unlinkat(
                    &dfd,
                    tmp.as_str(),
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                );
                return Err(RecordError::io("rename", dir.join(name), e.into()));
            }
        }
    }
    let _ = nix::unistd::unlinkat(&dfd, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
    Err(RecordError::io(
        "create",
        &dir,
        std::io::Error::other("no free entry name"),
    ))
}

/// Whether `name` is a write in progress that is young enough to be left to its writer;
/// an older one was left by a writer that died, and is removed as any other non-entry.
fn is_fresh_write(dfd: &impl AsFd, name: &str) -> bool {
    if !name.starts_with(TMP_PREFIX) {
        return false;
    }
    let Ok(st) = fstatat(dfd, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
        return true; // gone already: renamed into place or removed
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    now.saturating_sub(st.st_mtime) < TMP_STALE_SECS
}

/// Why an entry of graft-nri's refusal journal is not a refusal (read by [`read_all`]):
/// graft-driver logs it and removes the entry.
#[derive(Debug, thiserror::Error)]
pub enum BadEntry {
    /// A name graft-nri does not write.
    #[error("not a journal entry name")]
    Name,
    /// A symlink where an entry should be.
    #[error("a symlink; never followed")]
    Symlink,
    /// The entry could not be opened.
    #[error("cannot open: {0}")]
    Open(#[source] nix::errno::Errno),
    /// The opened entry could not be stat'ed.
    #[error("cannot stat: {0}")]
    Stat(#[source] nix::errno::Errno),
    /// A directory, FIFO or anything else but a file.
    #[error("not a regular file")]
    NotAFile,
    /// Larger than `ENTRY_MAX` bytes; not read.
    #[error("{0} bytes, more than {max}", max = ENTRY_MAX)]
    TooLarge(i64),
    /// The entry could not be read.
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    /// It grew past `ENTRY_MAX` bytes while being read.
    #[error("more than {max} bytes", max = ENTRY_MAX)]
    Grew,
    /// Not the JSON of a refusal.
    #[error("not a refusal: {0}")]
    Json(#[source] serde_json::Error),
    /// A refusal whose fields break the contract.
    #[error(transparent)]
    Invalid(#[from] InvalidRecord),
}

/// One journal entry as the driver finds it.
#[derive(Debug)]
pub struct JournalEntry {
    /// The entry's file name in the journal.
    pub name: String,
    /// The refusal, or why the entry is not one (to be logged and removed).
    pub refusal: Result<Refusal, BadEntry>,
}

/// The journal's entries, oldest first, at most [`COUNT_MAX`] (graft-driver). A missing
/// directory is an empty journal.
pub fn read_all(root: &Path) -> Result<Vec<JournalEntry>> {
    let dir = journal_dir(root);
    let dfd = match open_dir(&dir) {
        Ok(fd) => fd,
        Err(RecordError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(e),
    };
    Ok(names(&dir)?
        .into_iter()
        .filter(|name| !is_fresh_write(&dfd, name))
        .take(COUNT_MAX)
        .filter_map(|name| match read_entry(&dfd, &name) {
            // Pruned by graft-nri since the listing: nothing to post or remove.
            Err(Gone) => None,
            Ok(r) => Some(JournalEntry { name, refusal: r }),
        })
        .collect())
}

/// An entry that vanished between the listing and its open.
struct Gone;

fn read_entry(dfd: &impl AsFd, name: &str) -> std::result::Result<Result<Refusal, BadEntry>, Gone> {
    if !is_entry_name(name) {
        return Ok(Err(BadEntry::Name));
    }
    let fd = match openat(
        dfd,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Err(Gone),
        Err(Errno::ELOOP) => return Ok(Err(BadEntry::Symlink)),
        Err(e) => return Ok(Err(BadEntry::Open(e))),
    };
    Ok(parse_entry(fd))
}

fn parse_entry(fd: OwnedFd) -> Result<Refusal, BadEntry> {
    let st = fstat(&fd).map_err(BadEntry::Stat)?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(BadEntry::NotAFile);
    }
    if st.st_size as u64 > ENTRY_MAX as u64 {
        return Err(BadEntry::TooLarge(st.st_size));
    }
    let mut data = Vec::with_capacity(ENTRY_MAX);
    File::from(fd)
        .take(ENTRY_MAX as u64 + 1)
        .read_to_end(&mut data)
        .map_err(BadEntry::Read)?;
    if data.len() > ENTRY_MAX {
        return Err(BadEntry::Grew);
    }
    let r: Refusal = serde_json::from_slice(&data).map_err(BadEntry::Json)?;
    r.validate()?;
    Ok(r)
}

/// Removes an entry (a symlink is removed, not followed). A missing one is not an error.
pub fn remove(root: &Path, name: &str) -> Result<()> {
    let dir = journal_dir(root);
    let dfd = open_dir(&dir)?;
    match nix::unistd::unlinkat(&dfd, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        // A directory planted under an entry's name.
        Err(Errno::EISDIR) => {
            nix::unistd::unlinkat(&dfd, name, nix::unistd::UnlinkatFlags::RemoveDir)
                .map_err(|e| RecordError::io("remove", dir.join(name), e.into()))
        }
        Err(e) => Err(RecordError::io("remove", dir.join(name), e.into())),
    }
}

#[cfg(test)]
mod tests;
