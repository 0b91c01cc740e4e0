//! The driver's libraries: the directories holding libcuda or libnvidia-ml of the running
//! version (fixed directories, then the driver root's `ld.so.cache`), the libraries in
//! them with their capabilities, and the symlinks beside them that lead to one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::capabilities::{self, Capability};
use super::files::{DriverFile, Link};
use super::ldcache;
use super::roots::Roots;
use graft_driver_core::error::{DriverError, Result};

pub const LIB_DIRS: &[&str] = &[
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib",
];

/// The directories holding libcuda or libnvidia-ml of `version`: [`LIB_DIRS`], then those
/// the driver root's `ld.so.cache` names.
pub fn lib_dirs(roots: &Roots, version: &str) -> Result<Vec<String>> {
    let suffix = format!(".so.{version}");
    let mut candidates: Vec<String> = LIB_DIRS.iter().map(|d| d.to_string()).collect();
    if let Ok(data) = std::fs::read(roots.driver_visible("/etc/ld.so.cache")) {
        for e in ldcache::parse(&data).unwrap_or_default() {
            if e.name.starts_with("libcuda.so") || e.name.starts_with("libnvidia-ml.so") {
                if let Some(dir) = Path::new(&e.path).parent().and_then(Path::to_str) {
                    candidates.push(dir.to_string());
                }
            }
        }
    }
    let mut lib_dirs = Vec::new();
    let mut seen = BTreeSet::new();
    for dir in candidates {
        let visible = roots.driver_visible(&dir);
        // The same directory may be listed twice or reached through a symlink (/lib64).
        let Ok(real) = std::fs::canonicalize(&visible) else {
            continue;
        };
        if !seen.insert(real) {
            continue;
        }
        let has = |lib: &str| visible.join(format!("{lib}{suffix}")).is_file();
        if has("libcuda") || has("libnvidia-ml") {
            lib_dirs.push(dir);
        }
    }
    if lib_dirs.is_empty() {
        return Err(DriverError::Discovery {
            backend: "nvidia",
            reason: format!(
                "no libcuda{suffix} or libnvidia-ml{suffix} under driver root {} \
                 (searched {} and its ld.so.cache)",
                roots.driver.display(),
                LIB_DIRS.join(", ")
            ),
        });
    }
    Ok(lib_dirs)
}

/// Whether a file (not a link) in a library directory is one of the driver's libraries.
fn is_driver_library(name: &str, suffix: &str) -> bool {
    name.ends_with(suffix)
        || (name.starts_with(capabilities::EGL_PLATFORM_PREFIX) && name.contains(".so."))
        || name.starts_with(capabilities::LEGACY_NVVM_PREFIX)
}

/// The driver's libraries in `dir`, and the links there that lead to them.
pub fn in_dir(roots: &Roots, dir: &str, version: &str) -> (Vec<DriverFile>, Vec<Link>) {
    let suffix = format!(".so.{version}");
    let Ok(entries) = std::fs::read_dir(roots.driver_visible(dir)) else {
        return (Vec::new(), Vec::new());
    };
    let mut libs: BTreeMap<String, Capability> = BTreeMap::new();
    for e in entries.flatten() {
        let (Ok(name), Ok(kind)) = (e.file_name().into_string(), e.file_type()) else {
            continue;
        };
        if kind.is_file() && is_driver_library(&name, &suffix) {
            let cap = capabilities::of_library(&name);
            libs.insert(name, cap);
        }
    }
    let files = libs
        .iter()
        .map(|(name, cap)| {
            let path = format!("{dir}/{name}");
            DriverFile {
                capability: *cap,
                path: path.clone(),
                destination: path,
            }
        })
        .collect();
    (files, links_in(roots, dir, &libs))
}

/// The symlinks in `dir`, by name, that lead (within `dir`) to one of `targets`: the
/// target's capability, the link's target as written, the link's path.
pub fn links_in(roots: &Roots, dir: &str, targets: &BTreeMap<String, Capability>) -> Vec<Link> {
    let Ok(entries) = std::fs::read_dir(roots.driver_visible(dir)) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !targets.contains_key(n))
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|n| {
            let (target, cap) = link_into(roots, dir, &n, targets)?;
            Some((cap, target, format!("{dir}/{n}")))
        })
        .collect()
}

/// The target of symlink `dir/name` as written, and the capability of the file it reaches
/// when following it (at most a few hops, within `dir`) reaches one of `targets`.
fn link_into(
    roots: &Roots,
    dir: &str,
    name: &str,
    targets: &BTreeMap<String, Capability>,
) -> Option<(String, Capability)> {
    let visible = roots.driver_visible(dir);
    let first = std::fs::read_link(visible.join(name)).ok()?;
    let first = first.to_str()?.to_string();
    let mut hop = first.clone();
    for _ in 0..4 {
        // Only links within the directory: anything else is not ours to recreate.
        if hop.contains('/') {
            return None;
        }
        if let Some(cap) = targets.get(&hop) {
            return Some((first, *cap));
        }
        hop = std::fs::read_link(visible.join(&hop))
            .ok()?
            .to_str()?
            .to_string();
    }
    None
}
