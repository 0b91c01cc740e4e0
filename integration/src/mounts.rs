//! Mounts the tests make for themselves (they run as root): a small tmpfs to fill up, and
//! read-only remounts; and scratch directories that leave neither files nor mounts behind.

use std::path::{Path, PathBuf};
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

/// Mount points below `dir`, deepest first (unreadable mount table: none).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let prefix = format!("{}/", dir.display());
    let mut found: Vec<PathBuf> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(&prefix))
        .map(PathBuf::from)
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found
}

/// Whether anything is still mounted below `dir` (then it must not be removed: removing
/// would reach into the mounted file system). An unreadable mount table counts as yes.
pub fn mounted_under(dir: &Path) -> bool {
    std::fs::metadata("/proc/self/mountinfo").is_err() || !mounts_under(dir).is_empty()
}

/// A test's scratch directory, made empty at creation. Dropped, it detaches what the test
/// left mounted below it (a CRI sandbox's /dev/shm after containerd was killed) and removes
/// itself; where something stays mounted it is left alone and said so. With
/// `GRAFT_KEEP_SCRATCH` set it is kept, to look at after a failure.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// A scratch directory at `path`, made empty.
    pub fn new(path: impl Into<PathBuf>) -> anyhow::Result<Self> {
        let s = Scratch(path.into());
        s.clear();
        if s.0.exists() {
            bail!("{}: could not be emptied (still mounted?)", s.0.display());
        }
        std::fs::create_dir_all(&s.0).with_context(|| format!("create {}", s.0.display()))?;
        Ok(s)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    fn clear(&self) {
        for m in mounts_under(&self.0) {
            let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
        }
        if mounted_under(&self.0) {
            eprintln!("{}: still mounted below, left in place", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("GRAFT_KEEP_SCRATCH").is_some() {
            eprintln!("kept {}", self.0.display());
            return;
        }
        self.clear();
    }
}
