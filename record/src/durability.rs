//! Which writes of the prepare path are synced, and why none need to be.
//!
//! The rule, in one place. The claim records and the driver's checkpoint are written with
//! `write(2)` and `rename(2)` and **not synced** on the prepare and unprepare paths:
//!
//! - **A process crash loses nothing.** A killed graft-driver (or graft-nri reading after
//!   it) sees every write that returned, from the page cache, whether or not it reached the
//!   disk. Renames are atomic there too, and the checkpoint's two slots survive a write torn
//!   by a kill (a fatal signal can cut a `write` short).
//! - **A power loss or kernel crash is a new boot**, with a new boot id. graft-driver then
//!   discards every claim of the earlier boot and every record its checkpoint of this boot
//!   does not hold (`claims::startup`), whatever state the files were left in: a torn or
//!   zeroed slot, a record of zero length, a rename or removal that never reached the disk.
//!   The kubelet prepares again (its own checkpoint restores claims as not prepared), and the
//!   devices' own state reset with the machine. So a sync before a reboot protects nothing
//!   graft reads after it; `driver/tests/core/claims/power_loss.rs` plays each state a
//!   missing sync may leave.
//! - **What a sync still did was report a disk error** (`EIO` at write-back, which
//!   `write(2)` never returns). That is kept off the answer path: every few seconds
//!   [`WritebackCheck`] `fdatasync`s the files and directories graft wrote since the last
//!   check, and the checkpoint's slots (Linux reports a write-back error to the next sync
//!   of the file, even through a descriptor opened after it). It syncs only what graft
//!   wrote, never the whole file system (`syncfs` would flush every tenant's dirty data on
//!   a shared root disk). While its last check failed the store refuses to record claims
//!   ([`RecordError::DiskFailed`]), so no pod starts on state the disk did not take; a
//!   later check whose probe write and `fdatasync` succeed clears it.
//!
//! Files whose state outlives a boot, or that another program reads (the device snapshot,
//! MPS shares, health), keep [`crate::atomic::write_file`]'s write, sync, rename, sync.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::fcntl::OFlag;

use crate::atomic::{FILE_MODE, NOFOLLOW_CLOEXEC};
use crate::error::{RecordError, Result};

/// The probe file a check writes and syncs after a failure, in the state directory.
pub const PROBE_NAME: &str = ".writeback-probe";

/// Write-back errors of what graft wrote to its state directory, checked off the answer
/// path.
#[derive(Debug)]
pub struct WritebackCheck {
    root: PathBuf,
    /// Files and directories written since the last check.
    dirty: Mutex<BTreeSet<PathBuf>>,
    /// Files synced at every check (the checkpoint's slots, written in place).
    always: Mutex<Vec<PathBuf>>,
    /// The last check's failure, while no later check has succeeded.
    failed: Mutex<Option<String>>,
}

impl WritebackCheck {
    /// Checks of what graft writes below the state directory `root`.
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            dirty: Mutex::default(),
            always: Mutex::default(),
            failed: Mutex::new(None),
        }
    }

    /// Notes that `path` (a file or directory) and its directory were written: the next
    /// check syncs them. Cheap: called on the prepare path.
    pub fn dirtied(&self, path: &Path) {
        let mut d = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        d.insert(path.to_path_buf());
        if let Some(parent) = path.parent() {
            d.insert(parent.to_path_buf());
        }
    }

    /// Files every check syncs (they are written in place, outside [`Self::dirtied`]).
    pub fn check_always(&self, paths: impl IntoIterator<Item = PathBuf>) {
        self.always
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(paths);
    }

    /// Syncs what was written since the last check and, after a failure, writes and syncs
    /// the probe file: `Err` names the path and call that failed. Blocking (it waits for
    /// the disk): run it on a blocking thread.
    pub fn check(&self) -> Result<()> {
        let was_failed = self.failed().is_some();
        let mut paths = std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|p| p.into_inner()));
        paths.extend(
            self.always
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned(),
        );
        let out = paths.iter().try_for_each(|p| sync_one(p)).and_then(|()| {
            if was_failed {
                self.probe()
            } else {
                Ok(())
            }
        });
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) =
            out.as_ref().err().map(|e| e.to_string());
        out
    }

    /// The last check's error, while no later check has succeeded.
    pub fn failed(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// `Err` while the last check failed: what the store answers instead of recording.
    /// On the prepare path: a lock and a test, no copy while the disk is fine.
    pub fn refuse_if_failed(&self) -> Result<()> {
        match &*self.failed.lock().unwrap_or_else(|p| p.into_inner()) {
            None => Ok(()),
            Some(reason) => Err(RecordError::DiskFailed {
                dir: self.root.clone(),
                reason: reason.clone(),
            }),
        }
    }

    fn probe(&self) -> Result<()> {
        let path = self.root.join(PROBE_NAME);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .custom_flags(NOFOLLOW_CLOEXEC)
            .open(&path)
            .map_err(|e| RecordError::io("open", &path, e))?;
        f.write_all(b"graft write-back probe\n")
            .and_then(|()| f.sync_data())
            .map_err(|e| RecordError::io("write and fdatasync", &path, e))
    }

    /// How many paths wait for the next check (tests).
    #[doc(hidden)]
    pub fn pending(&self) -> usize {
        self.dirty.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Marks the disk failed as a check that saw `reason` would (tests).
    #[doc(hidden)]
    pub fn fail_for_test(&self, reason: &str) {
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.to_string());
    }
}

/// `fdatasync` of one file or directory, opened without following a link; one that is
/// gone (removed since) has nothing left to report.
fn sync_one(path: &Path) -> Result<()> {
    let flags = (OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).bits();
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
    {
        Ok(f) => f
            .sync_data()
            .map_err(|e| RecordError::io("fdatasync", path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RecordError::io("open for fdatasync", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_on_a_healthy_disk_passes_and_clears_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let check = WritebackCheck::new(dir.path());
        check.check().unwrap();
        assert!(check.refuse_if_failed().is_ok());
        check.fail_for_test("EIO");
        let e = check.refuse_if_failed().unwrap_err().to_string();
        assert!(
            e.contains("EIO") && e.contains(&dir.path().display().to_string()),
            "{e}"
        );
        // The probe proves the disk takes writes again.
        check.check().unwrap();
        assert!(check.refuse_if_failed().is_ok());
        assert!(dir.path().join(PROBE_NAME).exists());
    }

    #[test]
    fn a_check_syncs_what_was_written_once_and_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let check = WritebackCheck::new(dir.path());
        let f = dir.path().join("a.json");
        std::fs::write(&f, b"{}").unwrap();
        check.dirtied(&f);
        check.dirtied(&dir.path().join("gone.json"));
        assert_eq!(check.pending(), 3, "the files and their directory");
        check.check().unwrap();
        assert_eq!(check.pending(), 0);
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        check.dirtied(&link);
        let e = check.check().unwrap_err().to_string();
        assert!(e.contains("link.json"), "{e}");
        assert!(check.refuse_if_failed().is_err());
    }

    #[test]
    fn a_probe_through_a_link_fails() {
        let dir = tempfile::tempdir().unwrap();
        let check = WritebackCheck::new(dir.path());
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join(PROBE_NAME)).unwrap();
        check.fail_for_test("EIO");
        assert!(check.check().is_err());
        assert!(check.failed().is_some());
    }
}
