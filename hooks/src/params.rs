//! disable-device-node-modification: with `ModifyDeviceFiles: 1` in the driver's params,
//! libnvidia-ml and nvidia-smi, running as root in the container, create or chmod
//! `/dev/nvidia*` nodes there; with `DeviceFileModify: 1` in the MIG `config` and `monitor`
//! capability files they create `/dev/nvidia-caps/nvidia-cap1` and `nvidia-cap2` (seen on a
//! real H100 after `nvidia-smi` ran in a graft container). A copy of each file with the
//! setting at 0 is bind-mounted read-only over the container's own, so no node appears
//! that graft did not inject.
//!
//! Each copy is per container (`<base>.<container id>[.<suffix>]`) in graft's root-only
//! state directory, and unlinked as soon as it is mounted: the mount keeps the inode, the
//! host keeps nothing, and two containers starting at once never share a file.

use std::fs::{DirBuilder, File};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use graft_record::params;
use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, UnlinkatFlags};

use crate::inroot;
use crate::mount::{self, Mounter};

/// A driver file whose device-node setting is hidden: the key, the path relative to the
/// driver's /proc directory (`/proc/driver/nvidia`), and the copy's name suffix.
struct Hidden {
    key: &'static str,
    rel: &'static str,
    suffix: &'static str,
}

const HIDDEN: &[Hidden] = &[
    Hidden {
        key: "ModifyDeviceFiles",
        rel: "params",
        suffix: "",
    },
    Hidden {
        key: "DeviceFileModify",
        rel: "capabilities/mig/config",
        suffix: params::MIG_CONFIG_SUFFIX,
    },
    Hidden {
        key: "DeviceFileModify",
        rel: "capabilities/mig/monitor",
        suffix: params::MIG_MONITOR_SUFFIX,
    },
];

/// The params text with modification off, or `None` when it already is.
#[cfg(test)]
pub fn rewrite(params: &str) -> Option<String> {
    rewrite_key(params, "ModifyDeviceFiles")
}

/// `text` with `key: 0`, or `None` when it already is (or has no such line).
fn rewrite_key(text: &str, key: &str) -> Option<String> {
    let mut changed = false;
    let out: Vec<String> = text
        .lines()
        .map(|l| match l.split_once(':') {
            Some((k, v)) if k.trim() == key && v.trim() != "0" => {
                changed = true;
                format!("{k}: 0")
            }
            _ => l.to_string(),
        })
        .collect();
    changed.then(|| out.join("\n") + "\n")
}

/// `<base>.<id>`, named by graft-record's rule ([`graft_record::params`]).
pub fn copy_path(base: &Path, id: &str) -> anyhow::Result<PathBuf> {
    if !params::is_container_id(id) {
        bail!("container id {id:?}: expected 1 to 128 of [A-Za-z0-9_-]");
    }
    params::params_copy_for(base, id)
        .with_context(|| format!("--params-copy {}: needs a file name", base.display()))
}

/// Hides the device-node settings of the driver's params (`host_params`, default
/// `/proc/driver/nvidia/params`) and of the MIG capability files beside it.
pub fn disable_modification(
    rootfs: &Path,
    host_params: &Path,
    copy_base: &Path,
    container_id: &str,
) -> anyhow::Result<()> {
    disable_modification_with(&mount::Kernel, rootfs, host_params, copy_base, container_id)
}

/// [`disable_modification`] with the mounts made by `m`.
pub fn disable_modification_with(
    m: &dyn Mounter,
    rootfs: &Path,
    host_params: &Path,
    copy_base: &Path,
    container_id: &str,
) -> anyhow::Result<()> {
    let proc_dir = host_params.parent().unwrap_or(Path::new("/"));
    for h in HIDDEN {
        let host = if h.rel == "params" {
            host_params.to_path_buf()
        } else {
            proc_dir.join(h.rel)
        };
        let target = format!("/proc/driver/nvidia/{}", h.rel);
        let copy = copy_path(copy_base, container_id)?;
        let copy = PathBuf::from(format!("{}{}", copy.display(), h.suffix));
        hide(m, rootfs, &host, &target, h.key, &copy)?;
    }
    Ok(())
}

/// Mounts a copy of `host` with `key: 0` over `target` in the container, when the host
/// file has the key set and the container's file exists.
fn hide(
    m: &dyn Mounter,
    rootfs: &Path,
    host: &Path,
    target: &str,
    key: &str,
    copy: &Path,
) -> anyhow::Result<()> {
    let Some(original) = read_host(host)? else {
        // No NVIDIA driver loaded here, or no MIG: nothing to hide.
        return Ok(());
    };
    let Some(text) = rewrite_key(&original, key) else {
        return Ok(());
    };
    let root = inroot::open_root(rootfs)?;
    let target_fd = match root.resolve(target) {
        Ok(t) => t,
        Err(e) if inroot::is_errno(&e, libc::ENOENT) => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("resolving {target} in the container")),
    };
    // What the container would read. Already 0 (a hook run before, or another tool):
    // nothing to do; a second mount could not go over an unlinked copy anyway.
    let seen = inroot::read_handle(&target_fd, target, inroot::MAX_FILE)?;
    if rewrite_key(&String::from_utf8_lossy(&seen), key).is_none() {
        return Ok(());
    }

    let (dir, name) = host_dir(copy)?;
    let file = create_copy(&dir, &name, text.as_bytes())
        .with_context(|| format!("writing {}", copy.display()))?;
    let mounted = mount::bind_read_only(m, file.as_fd(), target_fd.as_fd(), &root, target);
    // Whether or not the mount worked, nothing stays on the host.
    let unlinked = unlinkat(&dir, name.as_str(), UnlinkatFlags::NoRemoveDir)
        .with_context(|| format!("removing {}", copy.display()));
    mounted?;
    unlinked
}

/// The driver's params; `None` when there is no driver.
fn read_host(path: &Path) -> anyhow::Result<Option<String>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    let mut text = String::new();
    file.take(inroot::MAX_FILE)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(Some(text))
}

/// The copy's directory (graft's state directory, root-only: created 0700) as an fd, and
/// the copy's name in it.
fn host_dir(copy: &Path) -> anyhow::Result<(OwnedFd, String)> {
    let (Some(parent), Some(name)) = (copy.parent(), copy.file_name()) else {
        bail!("{}: no directory or file name", copy.display());
    };
    let Some(name) = name.to_str().map(str::to_string) else {
        bail!("{}: not UTF-8", copy.display());
    };
    if !parent.is_absolute() {
        bail!(
            "--params-copy {}: must be an absolute host path",
            copy.display()
        );
    }
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .with_context(|| format!("creating {}", parent.display()))?;
    let dir = open(
        parent,
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .with_context(|| format!("opening {}", parent.display()))?;
    Ok((dir, name))
}

/// A new file (O_EXCL, O_NOFOLLOW, 0444); a leftover of the same name, from a hook that
/// died before its unlink, is removed first.
fn create_copy(dir: &OwnedFd, name: &str, data: &[u8]) -> anyhow::Result<OwnedFd> {
    match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(e).context("removing a leftover copy"),
    }
    let flags =
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_WRONLY;
    let fd = openat(dir, name, flags, Mode::from_bits_truncate(0o444)).context("creating")?;
    let mut file = File::from(fd);
    if let Err(e) = file.write_all(data) {
        let _ = unlinkat(dir, name, UnlinkatFlags::NoRemoveDir);
        return Err(e).context("writing");
    }
    Ok(file.into())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod kernel_tests;
