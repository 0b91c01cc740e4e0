//! A read-only bind mount of a host file onto a file inside the container, by fd: the
//! target is the O_PATH handle pathrs resolved inside the root, never a path string.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use anyhow::{bail, Context};
use nix::errno::Errno;
use nix::mount::{mount, MsFlags};
use nix::sys::stat::fstat;
use pathrs::Root;

// From <linux/mount.h>; defined here so that the build does not depend on how recent the
// libc crate is.
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x04;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
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
    let flags =
        OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint;
    // SAFETY: open_tree(2) only reads the NUL-terminated empty path and the fd (borrowed,
    // so open for the call); it writes no memory of ours.
    let ret =
        unsafe { libc::syscall(libc::SYS_open_tree, source.as_raw_fd(), c"".as_ptr(), flags) };
    let ret = Errno::result(ret)?;
    let fd = libc::c_int::try_from(ret).map_err(|_| Errno::EBADF)?;
    // SAFETY: on success open_tree returned a new fd that nothing else owns.
    let tree = unsafe { OwnedFd::from_raw_fd(fd) };

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

    let flags = MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH;
    // SAFETY: move_mount(2) reads two empty NUL-terminated paths and two fds that are open
    // for the call (owned or borrowed); it writes no memory of ours.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            flags,
        )
    };
    Errno::result(ret).map(drop)
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
