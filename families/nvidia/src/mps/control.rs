//! The driver's `nvidia-cuda-mps-control` client run against a daemon: inside the daemon's
//! sandbox (setns into its mount namespace) and with no capability, so that a `control`
//! socket a tenant replaced by a symlink leads nowhere outside the sandbox.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::files::CLIENT_PIPE_DIR;
use super::privileges;
use super::sandbox::{CONTROL, SANDBOX_PATH};

/// The driver's `nvidia-cuda-mps-control` client, set to run inside the sandbox of the
/// daemon whose mount namespace is `ns` (which must not be this process's own).
pub fn control_command(ns: OwnedFd) -> Command {
    let mut cmd = Command::new(CONTROL);
    cmd.env_clear()
        .env("PATH", SANDBOX_PATH)
        .env("HOME", "/")
        .env("CUDA_MPS_PIPE_DIRECTORY", CLIENT_PIPE_DIR)
        .current_dir("/");
    // SAFETY: setns, prctl and capset are async-signal-safe system calls, on a descriptor
    // opened before the fork (and closed on exec) and on locals; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // It only connects to the daemon's socket: root's uid is enough for that.
            privileges::restrict(privileges::CLIENT).map_err(|(_, e)| e)
        });
    }
    cmd
}

/// The mount namespace of `pid`, checked to be another than this process's.
pub fn namespace_of(pid: i32) -> std::io::Result<OwnedFd> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{fstat, Mode};
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let theirs = open(format!("/proc/{pid}/ns/mnt").as_str(), flags, Mode::empty())?;
    let ours = open("/proc/self/ns/mnt", flags, Mode::empty())?;
    let (a, b) = (fstat(&theirs)?, fstat(&ours)?);
    if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) {
        return Err(std::io::Error::other(format!(
            "process {pid} is not in a sandbox of its own"
        )));
    }
    Ok(theirs)
}
