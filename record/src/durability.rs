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
//!   `write(2)` never returns). That is kept off the answer path: [`WritebackCheck`] runs
//!   `syncfs(2)` on the state directory's file system every few seconds (Linux reports each
//!   write-back error since the last call on the same descriptor), and while its last check
//!   failed the store refuses to record claims ([`RecordError::DiskFailed`]), so no pod
//!   starts on state the disk did not take. A later check whose probe write and `fdatasync`
//!   succeed clears it.
//!
//! Files whose state outlives a boot, or that another program reads (the device snapshot,
//! MPS shares, health), keep [`crate::atomic::write_file`]'s write, sync, rename, sync.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::atomic::{FILE_MODE, NOFOLLOW_CLOEXEC};
use crate::error::{RecordError, Result};

/// The probe file a check writes and syncs after a failure, in the state directory.
pub const PROBE_NAME: &str = ".writeback-probe";

/// Write-back errors of the state directory's file system, checked off the answer path.
#[derive(Debug)]
pub struct WritebackCheck {
    root: PathBuf,
    /// Held open: `syncfs` reports an error to each descriptor open when it happened.
    dir: File,
    /// The last check's failure, while no later check has succeeded.
    failed: Mutex<Option<String>>,
}

impl WritebackCheck {
    /// Opens the state directory `root` for checks.
    pub fn open(root: &Path) -> Result<Self> {
        let dir = File::open(root).map_err(|e| RecordError::io("open", root, e))?;
        Ok(Self {
            root: root.to_path_buf(),
            dir,
            failed: Mutex::new(None),
        })
    }

    /// Syncs the file system and, after a failure, writes and syncs the probe file: `Err`
    /// names the failing call while the disk does not take writes. Blocking (it waits for
    /// the disk): run it on a blocking thread.
    pub fn check(&self) -> Result<()> {
        let was_failed = self.failed().is_some();
        let out = nix::unistd::syncfs(&self.dir)
            .map_err(|e| RecordError::io("syncfs", &self.root, e.into()))
            .and_then(|()| if was_failed { self.probe() } else { Ok(()) });
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
    pub fn refuse_if_failed(&self) -> Result<()> {
        match self.failed() {
            None => Ok(()),
            Some(reason) => Err(RecordError::DiskFailed {
                dir: self.root.clone(),
                reason,
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

    /// Marks the disk failed as a check that saw `reason` would (tests).
    #[doc(hidden)]
    pub fn fail_for_test(&self, reason: &str) {
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_on_a_healthy_disk_passes_and_clears_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let check = WritebackCheck::open(dir.path()).unwrap();
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
    fn a_probe_through_a_link_fails() {
        let dir = tempfile::tempdir().unwrap();
        let check = WritebackCheck::open(dir.path()).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join(PROBE_NAME)).unwrap();
        check.fail_for_test("EIO");
        assert!(check.check().is_err());
        assert!(check.failed().is_some());
    }
}
