//! A read-only bind mount of a host file onto a file inside the container, by fd: the
//! target is the O_PATH handle pathrs resolved inside the root, never a path string.

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
const MS_PRIVATE: u64 = libc::MS_PRIVATE as u64;

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
    source: BorrowedFd<'_>,
    target: BorrowedFd<'_>,
    root: &Root,
    path: &str,
) -> anyhow::Result<()> {
    match bind_new_api(source, target) {
        Ok(()) => Ok(()),
        // A kernel before 5.12 (mount_setattr) or 5.2 (open_tree).
        Err(Errno::ENOSYS) => bind_legacy(source, target, root, path),
        Err(e) => Err(e).with_context(|| format!("mounting over {path} in the container")),
    }
}

/// The detached copy is made read-only before it is attached, so the mount never appears
/// writable, even for an instant.
pub(crate) fn bind_new_api(source: BorrowedFd<'_>, target: BorrowedFd<'_>) -> Result<(), Errno> {
    let tree = open_tree(
        source,
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH,
    )
    .map_err(errno)?;

    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        attr_clr: 0,
        propagation: MS_PRIVATE,
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

/// rustix's errno as nix's: the callers match on ENOSYS.
fn errno(e: rustix::io::Errno) -> Errno {
    Errno::from_raw(e.raw_os_error())
}

/// Without the new API: a bind through the fds' magic links, then a read-only remount of
/// the new mount. The O_PATH target still names the inode now covered, so the new mount
/// is found by resolving the path inside the root again and checking it is our file.
fn bind_legacy(
    source: BorrowedFd<'_>,
    target: BorrowedFd<'_>,
    root: &Root,
    path: &str,
) -> anyhow::Result<()> {
    let src = format!("/proc/self/fd/{}", source.as_raw_fd());
    let dst = format!("/proc/self/fd/{}", target.as_raw_fd());
    mount(
        Some(src.as_str()),
        dst.as_str(),
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .with_context(|| format!("bind-mounting over {path} in the container"))?;
    let fresh = root
        .resolve(path)
        .with_context(|| format!("resolving {path} in the container after the bind"))?;
    let (want, got) = (fstat(source)?, fstat(fresh.as_fd())?);
    if (want.st_dev, want.st_ino) != (got.st_dev, got.st_ino) {
        bail!("{path} in the container is not the new bind mount; not making it read-only");
    }
    let flags = MsFlags::MS_BIND
        | MsFlags::MS_REMOUNT
        | MsFlags::MS_RDONLY
        | MsFlags::MS_NOSUID
        | MsFlags::MS_NODEV
        | MsFlags::MS_NOEXEC;
    let fresh_path = format!("/proc/self/fd/{}", fresh.as_fd().as_raw_fd());
    mount(
        None::<&str>,
        fresh_path.as_str(),
        None::<&str>,
        flags,
        None::<&str>,
    )
    .with_context(|| format!("making the mount over {path} in the container read-only"))
}
