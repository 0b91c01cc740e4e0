//! The NVIDIA driver's user-space files on this node: the libraries of the running driver
//! version, its binaries, GSP firmware and IPC sockets, found under the driver root the way
//! the dynamic linker would find them (fixed library directories, then `ld.so.cache`).
//!
//! Paths are kept as the container will see them (driver root stripped); [`Roots`] turns
//! them into the host path a mount needs and the path this process can read.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::ldcache;
use crate::error::{DriverError, Result};

const LIB_DIRS: &[&str] = &[
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

const BIN_DIRS: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/bin",
    "/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
];

const BINARIES: &[&str] = &[
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
];

const SOCKETS: &[&str] = &[
    "/run/nvidia-persistenced/socket",
    "/run/nvidia-fabricmanager/socket",
];

/// Where things are. `host` is where this process sees the host's `/` (`/` on the host,
/// `/host` in the DaemonSet); `driver` is the driver installation's root as a host path
/// (`/`, or `/run/nvidia/driver` with a driver container).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub host: PathBuf,
    pub driver: PathBuf,
}

impl Roots {
    /// A host path as this process can open it.
    pub fn visible(&self, host_path: &Path) -> PathBuf {
        self.host
            .join(host_path.strip_prefix("/").unwrap_or(host_path))
    }

    /// The host path of a file inside the driver root.
    pub fn host_path(&self, driver_path: &str) -> PathBuf {
        self.driver.join(driver_path.trim_start_matches('/'))
    }

    /// A file inside the driver root as this process can open it.
    pub fn driver_visible(&self, driver_path: &str) -> PathBuf {
        self.visible(&self.host_path(driver_path))
    }
}

/// Files of one driver version. Every path is absolute and relative to the driver root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverFiles {
    pub version: String,
    /// Directories holding libcuda or libnvidia-ml of this version.
    pub lib_dirs: Vec<String>,
    /// Every `*.so.<version>` in those directories and their `vdpau/`.
    pub libraries: Vec<String>,
    /// Symlinks next to the libraries that lead to one of them: (target as written, link).
    pub symlinks: Vec<(String, String)>,
    pub binaries: Vec<String>,
    pub firmware: Vec<String>,
    pub sockets: Vec<String>,
}

/// Finds the files of driver `version` under the roots.
pub fn find(roots: &Roots, version: &str) -> Result<DriverFiles> {
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

    let mut files = DriverFiles {
        version: version.to_string(),
        ..DriverFiles::default()
    };
    for dir in &lib_dirs {
        for d in [dir.clone(), format!("{dir}/vdpau")] {
            let Ok(entries) = std::fs::read_dir(roots.driver_visible(&d)) else {
                continue;
            };
            let mut names: Vec<(String, bool)> = entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let is_link = e.file_type().ok()?.is_symlink();
                    Some((name, is_link))
                })
                .collect();
            names.sort();
            let libs: BTreeSet<String> = names
                .iter()
                .filter(|(n, link)| !link && n.ends_with(&suffix))
                .map(|(n, _)| n.clone())
                .collect();
            for n in &libs {
                files.libraries.push(format!("{d}/{n}"));
            }
            for (n, link) in &names {
                if !link || libs.contains(n) {
                    continue;
                }
                if let Some(target) = link_into(roots, &d, n, &libs) {
                    files.symlinks.push((target, format!("{d}/{n}")));
                }
            }
        }
    }
    files.lib_dirs = lib_dirs;
    for name in BINARIES {
        if let Some(p) = BIN_DIRS
            .iter()
            .map(|d| format!("{d}/{name}"))
            .find(|p| roots.driver_visible(p).is_file())
        {
            files.binaries.push(p);
        }
    }
    for fw in ["/lib/firmware", "/usr/lib/firmware"] {
        let dir = format!("{fw}/nvidia/{version}");
        let Ok(entries) = std::fs::read_dir(roots.driver_visible(&dir)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("gsp") && n.ends_with(".bin"))
            .collect();
        names.sort();
        files
            .firmware
            .extend(names.into_iter().map(|n| format!("{dir}/{n}")));
        break;
    }
    for s in SOCKETS {
        if roots.driver_visible(s).exists() {
            files.sockets.push(s.to_string());
        }
    }
    Ok(files)
}

/// The target of symlink `dir/name` as written, when following it (at most a few hops,
/// within `dir`) reaches one of `libs`.
fn link_into(roots: &Roots, dir: &str, name: &str, libs: &BTreeSet<String>) -> Option<String> {
    let visible = roots.driver_visible(dir);
    let first = std::fs::read_link(visible.join(name)).ok()?;
    let first = first.to_str()?.to_string();
    let mut hop = first.clone();
    for _ in 0..4 {
        // Only links within the directory: anything else is not ours to recreate.
        if hop.contains('/') {
            return None;
        }
        if libs.contains(&hop) {
            return Some(first);
        }
        hop = std::fs::read_link(visible.join(&hop))
            .ok()?
            .to_str()?
            .to_string();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const V: &str = "580.95.05";

    fn driver_root() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let lib = root.path().join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(lib.join("vdpau")).unwrap();
        for l in ["libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"] {
            std::fs::write(lib.join(format!("{l}.so.{V}")), "elf").unwrap();
        }
        std::fs::write(lib.join("libnvidia-ml.so.570.1"), "old").unwrap();
        std::fs::write(lib.join(format!("vdpau/libvdpau_nvidia.so.{V}")), "elf").unwrap();
        symlink(format!("libcuda.so.{V}"), lib.join("libcuda.so.1")).unwrap();
        symlink("libcuda.so.1", lib.join("libcuda.so")).unwrap();
        symlink("/elsewhere/libfoo.so.1", lib.join("libfoo.so")).unwrap();
        std::fs::create_dir_all(root.path().join("usr/bin")).unwrap();
        std::fs::write(root.path().join("usr/bin/nvidia-smi"), "#!").unwrap();
        let fw = root.path().join(format!("lib/firmware/nvidia/{V}"));
        std::fs::create_dir_all(&fw).unwrap();
        std::fs::write(fw.join("gsp_ga10x.bin"), "").unwrap();
        std::fs::write(fw.join("gsp_tu10x.bin"), "").unwrap();
        std::fs::create_dir_all(root.path().join("run/nvidia-persistenced")).unwrap();
        std::fs::write(root.path().join("run/nvidia-persistenced/socket"), "").unwrap();
        root
    }

    #[test]
    fn finds_the_versioned_file_set() {
        let root = driver_root();
        let roots = Roots {
            host: root.path().to_path_buf(),
            driver: "/".into(),
        };
        let f = find(&roots, V).unwrap();
        let lib = "/usr/lib/x86_64-linux-gnu";
        assert_eq!(f.lib_dirs, vec![lib.to_string()]);
        assert_eq!(
            f.libraries,
            vec![
                format!("{lib}/libcuda.so.{V}"),
                format!("{lib}/libnvidia-ml.so.{V}"),
                format!("{lib}/libnvidia-ptxjitcompiler.so.{V}"),
                format!("{lib}/vdpau/libvdpau_nvidia.so.{V}"),
            ]
        );
        assert_eq!(
            f.symlinks,
            vec![
                ("libcuda.so.1".to_string(), format!("{lib}/libcuda.so")),
                (format!("libcuda.so.{V}"), format!("{lib}/libcuda.so.1")),
            ]
        );
        assert_eq!(f.binaries, vec!["/usr/bin/nvidia-smi".to_string()]);
        assert_eq!(f.firmware.len(), 2);
        assert_eq!(
            f.sockets,
            vec!["/run/nvidia-persistenced/socket".to_string()]
        );
    }

    #[test]
    fn a_driver_root_below_the_host_root() {
        let host = tempfile::tempdir().unwrap();
        let root = driver_root();
        let inner = host.path().join("run/nvidia");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::rename(root.path(), inner.join("driver")).unwrap();
        let roots = Roots {
            host: host.path().to_path_buf(),
            driver: "/run/nvidia/driver".into(),
        };
        let f = find(&roots, V).unwrap();
        assert_eq!(
            roots.host_path(&f.libraries[0]),
            PathBuf::from(format!(
                "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.{V}"
            ))
        );
    }

    #[test]
    fn libraries_listed_only_in_ld_so_cache() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("opt/nvidia/lib");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("libnvidia-ml.so.{V}")), "elf").unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::write(
            root.path().join("etc/ld.so.cache"),
            ldcache::tests::build(&[(
                ldcache::tests::native(),
                "libnvidia-ml.so.1",
                "/opt/nvidia/lib/libnvidia-ml.so.1",
            )]),
        )
        .unwrap();
        let roots = Roots {
            host: root.path().to_path_buf(),
            driver: "/".into(),
        };
        let f = find(&roots, V).unwrap();
        assert_eq!(f.lib_dirs, vec!["/opt/nvidia/lib".to_string()]);
    }

    #[test]
    fn no_driver_is_a_clear_error() {
        let root = tempfile::tempdir().unwrap();
        let roots = Roots {
            host: root.path().to_path_buf(),
            driver: "/".into(),
        };
        let err = find(&roots, V).unwrap_err().to_string();
        assert!(err.contains(&format!("libnvidia-ml.so.{V}")), "{err}");
    }
}
