//! The check's container image: busybox, the host's glibc (every library the probe, the
//! driver's nvidia-smi and its libcuda and NVML need, as `ldd` finds them, plus the glibc
//! libraries a CUDA base image always has), an ld.so.conf as distributions ship it, and
//! the compiled probe. The driver itself comes only from graft's injection.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

use crate::images::ImageRoot;

/// The check's image, as imported into containerd.
pub const IMAGE: &str = "docker.io/library/graft-gpu-check:test";
/// The CUDA probe's path in the image.
pub const PROBE: &str = "/usr/local/bin/graft-cuda-probe";
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// What the driver's libraries need besides libc (the real libnvidia-ml.so.1 and
/// libcuda.so.1 need all of these); every glibc-based CUDA image has them.
const GLIBC: &[&str] = &["libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1"];
const LIB_DIRS: &[&str] = &[
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/lib",
];

/// The image as built: its tar, the host libraries it holds, and what `ldd` could not
/// resolve (reported, since a container will miss it too).
pub struct Built {
    /// The image's tar.
    pub tar: PathBuf,
    /// The host libraries copied into it.
    pub libs: Vec<PathBuf>,
    /// What `ldd` could not resolve.
    pub unresolved: Vec<String>,
}

/// The driver-root files whose libraries the image must hold.
fn driver_programs(driver_root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for bin in ["usr/bin/nvidia-smi", "bin/nvidia-smi"] {
        let p = driver_root.join(bin);
        if p.is_file() {
            out.push(p);
            break;
        }
    }
    for lib in ["libcuda.so.1", "libnvidia-ml.so.1"] {
        if let Some(p) = LIB_DIRS
            .iter()
            .map(|d| driver_root.join(d).join(lib))
            .find(|p| p.exists())
        {
            out.push(p);
        }
    }
    out
}

/// `ldd FILE`: the resolved paths, and the names it could not find.
fn ldd(file: &Path, libs: &mut BTreeSet<PathBuf>, unresolved: &mut Vec<String>) {
    let Ok(out) = Command::new("ldd").arg(file).output() else {
        unresolved.push(format!("ldd {}: cannot run ldd", file.display()));
        return;
    };
    // A static executable ("not a dynamic executable") needs nothing.
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((name, rest)) => {
                let rest = rest.trim();
                if rest.starts_with("not found") {
                    unresolved.push(format!("{} (needed by {})", name.trim(), file.display()));
                    continue;
                }
                rest.split_whitespace().next().unwrap_or_default()
            }
            None => line.split_whitespace().next().unwrap_or_default(),
        };
        if path.starts_with('/') {
            libs.insert(PathBuf::from(path));
        }
    }
}

/// Copies the host file `path` into `root` at the same path, recreating the symlinks met
/// on the way (`/lib -> usr/lib`, the loader's `/lib64` link) so that the container's
/// loader finds it by every name the host's does. Symlinks are made inside `root` only
/// where nothing is there yet, and never followed on this side.
fn replicate(root: &Path, path: &Path, depth: usize) -> anyhow::Result<()> {
    if depth > 16 {
        bail!("too many symlinks resolving {}", path.display());
    }
    let comps: Vec<Component> = path.components().collect();
    let mut cur = PathBuf::from("/");
    for (i, c) in comps.iter().enumerate() {
        match c {
            Component::Normal(n) => cur.push(n),
            // `cur` is a real directory here (links are resolved below), so `..` is lexical.
            Component::ParentDir => {
                cur.pop();
                continue;
            }
            _ => continue,
        }
        let inside = root.join(cur.strip_prefix("/").unwrap_or(&cur));
        let meta = fs::symlink_metadata(&cur).with_context(|| format!("{}", cur.display()))?;
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&cur)?;
            if fs::symlink_metadata(&inside).is_err() {
                symlink(&target, &inside)?;
            }
            let mut next = match cur.parent() {
                Some(parent) if target.is_relative() => parent.join(&target),
                _ => target,
            };
            for rest in &comps[i + 1..] {
                next.push(rest);
            }
            return replicate(root, &next, depth + 1);
        }
        if meta.is_dir() {
            if fs::symlink_metadata(&inside).is_err() {
                fs::create_dir(&inside)?;
            }
        } else if fs::symlink_metadata(&inside).is_err() {
            fs::copy(&cur, &inside).with_context(|| format!("copying {}", cur.display()))?;
        }
    }
    Ok(())
}

/// Builds the image under `dir` (which must not exist yet).
pub fn build(dir: &Path, probe: &Path, driver_root: &Path) -> anyhow::Result<Built> {
    let root = ImageRoot::busybox(&dir.join("rootfs"))?;
    root.write("/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")?
        .mkdir("/etc/ld.so.conf.d")?
        .mkdir("/usr/local/bin")?;
    let probe_in = root.path(PROBE);
    fs::copy(probe, &probe_in).with_context(|| format!("copying {}", probe.display()))?;
    fs::set_permissions(&probe_in, fs::Permissions::from_mode(0o755))?;

    let mut libs = BTreeSet::new();
    let mut unresolved = Vec::new();
    ldd(probe, &mut libs, &mut unresolved);
    for p in driver_programs(driver_root) {
        ldd(&p, &mut libs, &mut unresolved);
    }
    let libc_dir = libs
        .iter()
        .find(|p| p.file_name().is_some_and(|n| n == "libc.so.6"))
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .context("ldd found no libc.so.6 for the probe")?;
    for name in GLIBC {
        let p = libc_dir.join(name);
        if p.exists() {
            libs.insert(p);
        }
    }
    for lib in &libs {
        replicate(&root.dir, lib, 0)
            .with_context(|| format!("copying {} into the image", lib.display()))?;
    }
    let tar = dir.join("image.tar");
    root.save_with(
        IMAGE,
        &tar,
        &format!(r#"{{"Env":["{PATH_ENV}"],"Cmd":["/bin/sh"]}}"#),
    )?;
    Ok(Built {
        tar,
        libs: libs.into_iter().collect(),
        unresolved,
    })
}
