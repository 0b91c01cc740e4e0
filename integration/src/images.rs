//! Container images built by hand for tests: a busybox root plus whatever a test plants in
//! it (hostile symlinks, FIFOs, a preload library), saved as an OCI image-layout tar with
//! the same script the testbed and the graft image use, and imported into containerd.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// The applets the test scripts use.
const APPLETS: &[&str] = &[
    "sh", "cat", "ls", "echo", "grep", "readlink", "stat", "test", "sleep", "true", "find",
];

/// A root directory for an image, starting as a minimal busybox system.
pub struct ImageRoot {
    /// The root directory.
    pub dir: PathBuf,
}

impl ImageRoot {
    /// `/bin/busybox` with its applets in `/bin`, plus `/proc`, `/sys`, `/dev`, `/tmp`; no
    /// `/etc` (tests plant their own).
    pub fn busybox(dir: &Path) -> anyhow::Result<Self> {
        for d in ["bin", "proc", "sys", "dev", "tmp"] {
            std::fs::create_dir_all(dir.join(d))?;
        }
        std::fs::copy("/bin/busybox", dir.join("bin/busybox"))
            .context("copying the static busybox (package busybox-static)")?;
        for a in APPLETS {
            symlink("busybox", dir.join("bin").join(a))?;
        }
        Ok(ImageRoot {
            dir: dir.to_path_buf(),
        })
    }

    /// A path inside the root (`rel` without a leading slash).
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel.trim_start_matches('/'))
    }

    /// Creates the directory `rel` (and parents) inside the root.
    pub fn mkdir(&self, rel: &str) -> anyhow::Result<&Self> {
        std::fs::create_dir_all(self.path(rel))?;
        Ok(self)
    }

    /// Writes a file inside the root, creating its directory.
    pub fn write(&self, rel: &str, text: &str) -> anyhow::Result<&Self> {
        let p = self.path(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(&p, text)?;
        Ok(self)
    }

    /// Plants a symlink `rel -> target` inside the root, creating its directory.
    pub fn symlink(&self, rel: &str, target: &str) -> anyhow::Result<&Self> {
        let p = self.path(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        symlink(target, &p).with_context(|| format!("planting {rel} -> {target}"))?;
        Ok(self)
    }

    /// Saves the root as an OCI layout tar named `reference`, with `PATH=/bin`.
    pub fn save(&self, reference: &str, tar: &Path) -> anyhow::Result<()> {
        self.save_with(reference, tar, r#"{"Env":["PATH=/bin"],"Cmd":["/bin/sh"]}"#)
    }

    /// Saves the root as an OCI layout tar named `reference` with the image config
    /// fragment `config` (`{"Env":[...],"Cmd":[...]}`).
    pub fn save_with(&self, reference: &str, tar: &Path, config: &str) -> anyhow::Result<()> {
        let out = Command::new("bash")
            .arg("-c")
            .arg(
                r#"set -e; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; source "$1"; shift; make_image "$@""#,
            )
            .arg("make-image")
            .arg(layout_script()?)
            .arg(reference)
            .arg(&self.dir)
            .arg(config)
            .arg(tar)
            .output()?;
        if !out.status.success() {
            bail!(
                "building image {reference}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }
}

/// `deploy/image/oci-layout.sh`: from the repository this runs in (a tool run from a
/// checkout), else the one this crate was built from.
fn layout_script() -> anyhow::Result<PathBuf> {
    let rel = "deploy/image/oci-layout.sh";
    let candidates = [
        std::env::current_dir()?.join(rel),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .with_context(|| format!("{rel} not found: run from the graft repository"))
}
