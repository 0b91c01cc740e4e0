//! Mounts the tests make for themselves (they run as root): a small tmpfs to fill up, and
//! read-only remounts.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};

fn mount(args: &[&str], target: &Path) -> anyhow::Result<()> {
    let out = Command::new("mount")
        .args(args)
        .arg(target)
        .output()
        .context("running mount")?;
    if !out.status.success() {
        bail!(
            "mount {args:?} {}: {}",
            target.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A tmpfs of `size` (`mount -o size=`) at `target`.
pub fn mount_tmpfs(target: &Path, size: &str) -> anyhow::Result<()> {
    mount(
        &[
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0700"),
            "tmpfs",
        ],
        target,
    )
}

/// Remounts `target` read-only (`ro = true`) or read-write.
pub fn remount(target: &Path, ro: bool) -> anyhow::Result<()> {
    mount(
        &["-o", if ro { "remount,ro" } else { "remount,rw" }],
        target,
    )
}

/// Lazily unmounts `target`.
pub fn unmount(target: &Path) -> anyhow::Result<()> {
    let st = Command::new("umount").arg("-l").arg(target).status()?;
    if !st.success() {
        bail!("umount -l {} failed", target.display());
    }
    Ok(())
}
