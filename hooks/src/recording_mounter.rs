//! A [`Mounter`] for tests that records each call, naming the fds by the paths they had
//! when it was made, so that tests check what would be mounted where, with which flags,
//! without root. It can also act out a mount's effect without one (see [`Recording`]).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::mount::MsFlags;

use crate::mount::Mounter;

/// One mount call, the fds named by path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// open_tree, mount_setattr, move_mount.
    AttachClone {
        source: PathBuf,
        target: PathBuf,
        attr_set: u64,
        propagation: u64,
        /// What the source held at the time.
        text: String,
    },
    /// mount(2) with MS_BIND.
    Bind { source: PathBuf, target: PathBuf },
    /// mount(2) on an existing mount.
    Remount { target: PathBuf, flags: MsFlags },
}

/// Records calls. A mount it "makes" (an attach, or a bind when `bind_lands`) links the
/// source's file over the target's path, so that the target then reads as the source
/// and is the same inode, as it would be over a real mount.
#[derive(Default)]
pub struct Recording {
    calls: Mutex<Vec<Call>>,
    /// Attaching fails with ENOSYS: a kernel without the new mount API.
    pub old_kernel: bool,
    /// A bind puts the source over the target; without it a bind does nothing visible.
    pub bind_lands: bool,
}

impl Recording {
    /// A kernel with the new mount API.
    pub fn new() -> Recording {
        Recording::default()
    }

    /// A kernel without it, whose binds land (`bind_lands`) or not.
    pub fn old_kernel(bind_lands: bool) -> Recording {
        Recording {
            old_kernel: true,
            bind_lands,
            ..Recording::default()
        }
    }

    /// The calls so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, call: Call) {
        self.calls.lock().unwrap().push(call);
    }
}

/// The path `fd` names now.
fn path_of(fd: BorrowedFd<'_>) -> PathBuf {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
}

/// `source`'s file linked over `target`, as a mount would show it there.
fn act_out(source: &Path, target: &Path) {
    let tmp = target.with_extension("recording-mounter");
    std::fs::hard_link(source, &tmp).unwrap();
    std::fs::rename(&tmp, target).unwrap();
}

impl Mounter for Recording {
    fn attach_clone(
        &self,
        source: BorrowedFd<'_>,
        target: BorrowedFd<'_>,
        attr_set: u64,
        propagation: u64,
    ) -> Result<(), Errno> {
        let (source, target) = (path_of(source), path_of(target));
        let text = std::fs::read_to_string(&source).unwrap();
        self.record(Call::AttachClone {
            source: source.clone(),
            target: target.clone(),
            attr_set,
            propagation,
            text,
        });
        if self.old_kernel {
            return Err(Errno::ENOSYS);
        }
        act_out(&source, &target);
        Ok(())
    }

    fn bind(&self, source: BorrowedFd<'_>, target: BorrowedFd<'_>) -> Result<(), Errno> {
        let (source, target) = (path_of(source), path_of(target));
        self.record(Call::Bind {
            source: source.clone(),
            target: target.clone(),
        });
        if self.bind_lands {
            act_out(&source, &target);
        }
        Ok(())
    }

    fn remount(&self, target: BorrowedFd<'_>, flags: MsFlags) -> Result<(), Errno> {
        let target = path_of(target);
        self.record(Call::Remount { target, flags });
        Ok(())
    }
}
