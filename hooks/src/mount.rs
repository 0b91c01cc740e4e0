//! A read-only bind mount of a host file onto a file inside the container, by fd: the
//! target is the O_PATH handle pathrs resolved inside the root, never a path string.
//!
//! The mount calls themselves are behind [`Mounter`]: [`Kernel`] makes them, and the
//! tests' recording double (`crate::recording_mounter`) records what would be mounted
//! where, with which flags, so that the choices are checked without root.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use anyhow::{bail, Context};
use nix::errno::Errno;
use nix::mount::{mount, MsFlags};
use nix::sys::stat::fstat;
use pathrs::Root;
use rustix::mount::{move_mount, open_tree, MoveMountFlags, OpenTreeFlags};

// From <linux/mount.h>: mount_setattr(2) has no wrapper in nix or rustix.
const MOUNT_ATTR_RDONLY: u64 = 0x01;
const MOUNT_ATTR_NOSUID: u64 = 0x02;
const MOUNT_ATTR_NODEV: u64 = 0x04;
const MOUNT_ATTR_NOEXEC: u64 = 0x08;
/// The new mount is private: nothing mounted below it propagates anywhere.
#[allow(clippy::unnecessary_cast)] // c_ulong is u32 on 32-bit targets.
pub const MS_PRIVATE: u64 = libc::MS_PRIVATE as u64;

/// What a read-only mount sets (mount_setattr(2)'s `attr_set`).
pub const READ_ONLY_ATTRS: u64 =
    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;

/// The same as remount flags, for kernels without the new mount API.
pub const READ_ONLY_REMOUNT: MsFlags = MsFlags::MS_BIND
    .union(MsFlags::MS_REMOUNT)
    .union(MsFlags::MS_RDONLY)
    .union(MsFlags::MS_NOSUID)
    .union(MsFlags::MS_NODEV)
    .union(MsFlags::MS_NOEXEC);

/// The mount calls graft-hook makes, each on fds: the real ones name them through
/// `/proc/self/fd` where the call takes a path.
pub trait Mounter {
    /// Attaches a detached clone of `source`'s mount over `target`, with `attr_set` set
    /// and `propagation` as its propagation before it is attached (open_tree,
    /// mount_setattr, move_mount). ENOSYS on a kernel before 5.2 or 5.12.
    fn attach_clone(
        &self,
        source: BorrowedFd<'_>,
        target: BorrowedFd<'_>,
        attr_set: u64,
        propagation: u64,
    ) -> Result<(), Errno>;

    /// Bind-mounts `source` over `target` (mount(2), MS_BIND).
    fn bind(&self, source: BorrowedFd<'_>, target: BorrowedFd<'_>) -> Result<(), Errno>;

    /// Changes the mount `target` is on with `flags` (mount(2), MS_REMOUNT among them).
    fn remount(&self, target: BorrowedFd<'_>, flags: MsFlags) -> Result<(), Errno>;
}

/// The kernel's mount calls.
pub struct Kernel;

/// `struct mount_attr` (MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Mounts `source` (any fd of the file) read-only, nosuid, nodev, noexec over `target`
/// (an O_PATH handle inside the root). `path` is the target's in-container path, for the
/// fallback's re-resolution and for messages.
pub fn bind_read_only(
    m: &dyn Mounter,
    source: BorrowedFd<'_>,
    target: BorrowedFd<'_>,
    root: &Root,
    path: &str,
) -> anyhow::Result<()> {
    // The detached copy is made read-only before it is attached, so the mount never
    // appears writable, even for an instant.
    match m.attach_clone(source, target, READ_ONLY_ATTRS, MS_PRIVATE) {
        Ok(()) => Ok(()),
        // A kernel before 5.12 (mount_setattr) or 5.2 (open_tree).
        Err(Errno::ENOSYS) => bind_legacy(m, source, target, root, path),
        Err(e) => Err(e).with_context(|| format!("mounting over {path} in the container")),
    }
}

/// Without the new API: a bind, then a read-only remount of the new mount. The O_PATH
/// target still names the inode now covered, so the new mount is found by resolving the
/// path inside the root again and checking it is our file.
fn bind_legacy(
    m: &dyn Mounter,
    source: BorrowedFd<'_>,
    target: BorrowedFd<'_>,
    root: &Root,
    path: &str,
) -> anyhow::Result<()> {
    m.bind(source, target)
        .with_context(|| format!("bind-mounting over {path} in the container"))?;
    let fresh = root
        .resolve(path)
        .with_context(|| format!("resolving {path} in the container after the bind"))?;
    let (want, got) = (fstat(source)?, fstat(fresh.as_fd())?);
    if (want.st_dev, want.st_ino) != (got.st_dev, got.st_ino) {
        bail!("{path} in the container is not the new bind mount; not making it read-only");
    }
    m.remount(fresh.as_fd(), READ_ONLY_REMOUNT)
        .with_context(|| format!("making the mount over {path} in the container read-only"))
}

impl Mounter for Kernel {
    fn attach_clone(
        &self,
        source: BorrowedFd<'_>,
        target: BorrowedFd<'_>,
        attr_set: u64,
        propagation: u64,
    ) -> Result<(), Errno> {
        let tree = open_tree(
            source,
            "",
            OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::OPEN_TREE_CLOEXEC
                | OpenTreeFlags::AT_EMPTY_PATH,
        )
        .map_err(errno)?;

        let attr = MountAttr {
            attr_set,
            attr_clr: 0,
            propagation,
            userns_fd: 0,
        };
        // SAFETY: mount_setattr(2) reads `size` bytes of `attr`, a live #[repr(C)] struct
        // matching the kernel's struct mount_attr (VER0, 32 bytes), and the empty path.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_EMPTY_PATH as libc::c_uint,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        Errno::result(ret)?;

        move_mount(
            &tree,
            "",
            target,
            "",
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
        )
        .map_err(errno)
    }

    fn bind(&self, source: BorrowedFd<'_>, target: BorrowedFd<'_>) -> Result<(), Errno> {
        mount(
            Some(fd_path(source).as_str()),
            fd_path(target).as_str(),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
    }

    fn remount(&self, target: BorrowedFd<'_>, flags: MsFlags) -> Result<(), Errno> {
        mount(
            None::<&str>,
            fd_path(target).as_str(),
            None::<&str>,
            flags,
            None::<&str>,
        )
    }
}

/// The magic link that names `fd`'s file for calls that take a path.
fn fd_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// rustix's errno as nix's: the callers match on ENOSYS.
fn errno(e: rustix::io::Errno) -> Errno {
    Errno::from_raw(e.raw_os_error())
}
