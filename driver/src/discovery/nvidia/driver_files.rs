//! The NVIDIA driver's user-space files on this node: the libraries of the running driver
//! version, its binaries, the loaders' manifests and X modules, GSP firmware and IPC
//! sockets, found under the driver root the way the dynamic linker would find the
//! libraries (fixed library directories, then `ld.so.cache`), each with the driver
//! capability it belongs to (see [`super::capabilities`]).
//!
//! Paths are kept as the container will see them (driver root stripped); [`Roots`] turns
//! them into the host path a mount needs and the path this process can read. A
//! [`DriverFile`] whose container path differs from its place in the driver root (a binary,
//! a manifest reached through a link) carries both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::capabilities::Capability;
use super::libraries::{self, Link};
use super::{binaries, config_files};
use crate::error::Result;

use graft_record::nofollow::{open_socket, DRIVER_SOCKETS};

const FIRMWARE_DIRS: &[&str] = &["/lib/firmware", "/usr/lib/firmware"];

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

/// One file to mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverFile {
    pub capability: Capability,
    /// Where it is, inside the driver root: [`Roots::host_path`] makes it a mount source.
    pub path: String,
    /// Where the container sees it.
    pub destination: String,
}

/// Files of one driver version. Every path is absolute and relative to the driver root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverFiles {
    pub version: String,
    /// Directories holding libcuda or libnvidia-ml of this version.
    pub lib_dirs: Vec<String>,
    /// Every `*.so.<version>` in those directories and their `vdpau/`, and the driver's
    /// libraries versioned on their own (EGL platforms, legacy NVVM); mounted at their path.
    pub libraries: Vec<DriverFile>,
    /// Symlinks next to the libraries that lead to a compute or utility one: (target as
    /// written, link). Recreated in every GPU container.
    pub symlinks: Vec<(String, String)>,
    /// The same for the files of the other capabilities (`libGLX_nvidia.so.0`,
    /// `libglxserver_nvidia.so`), to recreate when the capability is asked for.
    pub optional_symlinks: BTreeMap<Capability, Vec<(String, String)>>,
    /// Found by [`binaries::find`]; each at `/usr/bin/<name>`.
    pub binaries: Vec<DriverFile>,
    /// Loader manifests and X modules ([`config_files`]).
    pub configs: Vec<DriverFile>,
    /// GSP firmware; always mounted.
    pub firmware: Vec<String>,
    /// The persistenced and fabricmanager sockets; always mounted.
    pub sockets: Vec<String>,
}

impl DriverFiles {
    /// The libraries, binaries and configs of one capability (not firmware nor sockets).
    pub fn files_of(&self, cap: Capability) -> impl Iterator<Item = &DriverFile> {
        self.libraries
            .iter()
            .chain(&self.binaries)
            .chain(&self.configs)
            .filter(move |f| f.capability == cap)
    }

    /// The capabilities this node's driver has files for.
    pub fn capabilities(&self) -> BTreeSet<Capability> {
        self.libraries
            .iter()
            .chain(&self.binaries)
            .chain(&self.configs)
            .map(|f| f.capability)
            .collect()
    }

    /// Files a link under `symlinks` or `optional_symlinks`, by where it leads.
    fn add_link(&mut self, (cap, target, link): Link) {
        if cap.is_default() {
            self.symlinks.push((target, link));
        } else {
            let links = self.optional_symlinks.entry(cap).or_default();
            links.push((target, link));
        }
    }

    /// The binary `name` (`nvidia-smi`), when one of the running version was found.
    pub fn binary(&self, name: &str) -> Option<&DriverFile> {
        self.binaries
            .iter()
            .find(|b| Path::new(&b.destination).file_name() == Some(name.as_ref()))
    }
}

/// Finds the files of driver `version` under the roots.
pub fn find(roots: &Roots, version: &str) -> Result<DriverFiles> {
    let lib_dirs = libraries::lib_dirs(roots, version)?;
    let mut files = DriverFiles {
        version: version.to_string(),
        ..DriverFiles::default()
    };
    for dir in &lib_dirs {
        for d in [dir.clone(), format!("{dir}/vdpau")] {
            let (libs, links) = libraries::in_dir(roots, &d, version);
            files.libraries.extend(libs);
            links.into_iter().for_each(|l| files.add_link(l));
        }
    }
    files.binaries = binaries::find(roots, &lib_dirs, version);
    files.configs = config_files::find(roots, version);
    let mut config_dirs: BTreeMap<String, BTreeMap<String, Capability>> = BTreeMap::new();
    for f in &files.configs {
        let p = Path::new(&f.destination);
        if let (Some(dir), Some(name)) = (p.parent().and_then(Path::to_str), file_name(p)) {
            config_dirs
                .entry(dir.to_string())
                .or_default()
                .insert(name, f.capability);
        }
    }
    // Links beside the X modules (`libglxserver_nvidia.so`): Xorg loads them by those names.
    // Only the other capabilities': every container's links are the libraries'.
    for (dir, names) in &config_dirs {
        let links = libraries::links_in(roots, dir, names);
        for l in links.into_iter().filter(|(cap, ..)| !cap.is_default()) {
            files.add_link(l);
        }
    }
    files.lib_dirs = lib_dirs;
    files.firmware = firmware(roots, version);
    files.sockets = sockets(roots);
    Ok(files)
}

/// The driver's sockets that are there and safe to hand out: a socket, reached from the
/// driver root with no symlink and through directories only root can change
/// ([`open_socket`]). Anything else at the path is left out, with the reason: graft-nri
/// refuses a record that mounts it. (Packaged drivers whose `nvidia-persistenced` account
/// owns `/run/nvidia-persistenced` lose that socket: that account could swap it.)
fn sockets(roots: &Roots) -> Vec<String> {
    let driver = roots.visible(&roots.driver);
    let mut out = Vec::new();
    for s in DRIVER_SOCKETS {
        let host = roots.host_path(s).to_string_lossy().into_owned();
        match open_socket(&driver, s) {
            Ok(_) => out.push(s.to_string()),
            Err(e) if e.is_missing() => {}
            Err(e) => {
                tracing::warn!(path = host, reason = %e, "driver socket not mounted into containers")
            }
        }
    }
    out
}

/// GSP firmware of `version`, from the first firmware directory that has any.
fn firmware(roots: &Roots, version: &str) -> Vec<String> {
    for fw in FIRMWARE_DIRS {
        let dir = format!("{fw}/nvidia/{version}");
        let Ok(entries) = std::fs::read_dir(roots.driver_visible(&dir)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("gsp") && n.ends_with(".bin"))
            .collect();
        if names.is_empty() {
            continue;
        }
        names.sort();
        // /lib is often a link to /usr/lib: the first directory with files is enough.
        return names.into_iter().map(|n| format!("{dir}/{n}")).collect();
    }
    Vec::new()
}

fn file_name(p: &Path) -> Option<String> {
    p.file_name()?.to_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::nvidia::elf::tests::{driver_elf, write_exe};
    use std::os::unix::fs::symlink;

    const V: &str = "580.95.05";
    const LIB: &str = "/usr/lib/x86_64-linux-gnu";

    fn driver_root() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let lib = root.path().join(&LIB[1..]);
        std::fs::create_dir_all(lib.join("vdpau")).unwrap();
        for l in ["libcuda", "libnvidia-ml", "libGLX_nvidia", "libnvcuvid"] {
            std::fs::write(lib.join(format!("{l}.so.{V}")), "elf").unwrap();
        }
        std::fs::write(lib.join("libnvidia-ml.so.570.1"), "old").unwrap();
        std::fs::write(lib.join(format!("vdpau/libvdpau_nvidia.so.{V}")), "elf").unwrap();
        symlink(format!("libcuda.so.{V}"), lib.join("libcuda.so.1")).unwrap();
        symlink("libcuda.so.1", lib.join("libcuda.so")).unwrap();
        symlink(
            format!("libGLX_nvidia.so.{V}"),
            lib.join("libGLX_nvidia.so.0"),
        )
        .unwrap();
        symlink(
            format!("libvdpau_nvidia.so.{V}"),
            lib.join("vdpau/libvdpau_nvidia.so.1"),
        )
        .unwrap();
        symlink("/elsewhere/libfoo.so.1", lib.join("libfoo.so")).unwrap();
        write_exe(&root.path().join("usr/bin/nvidia-smi"), &driver_elf(V));
        root
    }

    fn at(root: &Path) -> Roots {
        Roots {
            host: root.to_path_buf(),
            driver: "/".into(),
        }
    }

    #[test]
    fn links_are_split_by_the_capability_they_lead_to() {
        let root = driver_root();
        let f = find(&at(root.path()), V).unwrap();
        assert_eq!(f.lib_dirs, vec![LIB.to_string()]);
        // Compute and utility: recreated in every GPU container, as the hook's --link.
        assert_eq!(
            f.symlinks,
            vec![
                ("libcuda.so.1".to_string(), format!("{LIB}/libcuda.so")),
                (format!("libcuda.so.{V}"), format!("{LIB}/libcuda.so.1")),
            ]
        );
        assert_eq!(
            f.optional_symlinks,
            BTreeMap::from([
                (
                    Capability::Graphics,
                    vec![(
                        format!("libGLX_nvidia.so.{V}"),
                        format!("{LIB}/libGLX_nvidia.so.0")
                    )]
                ),
                (
                    Capability::Video,
                    vec![(
                        format!("libvdpau_nvidia.so.{V}"),
                        format!("{LIB}/vdpau/libvdpau_nvidia.so.1")
                    )]
                ),
            ])
        );
        assert_eq!(
            f.capabilities(),
            BTreeSet::from([
                Capability::Compute,
                Capability::Utility,
                Capability::Graphics,
                Capability::Video
            ])
        );
        assert_eq!(
            f.binary("nvidia-smi").map(|b| b.path.as_str()),
            Some("/usr/bin/nvidia-smi")
        );
        assert!(f.binary("nvidia-imex").is_none());
    }

    #[test]
    fn firmware_from_the_first_directory_that_has_it() {
        let root = driver_root();
        std::fs::create_dir_all(root.path().join(format!("lib/firmware/nvidia/{V}"))).unwrap();
        let fw = root.path().join(format!("usr/lib/firmware/nvidia/{V}"));
        std::fs::create_dir_all(&fw).unwrap();
        std::fs::write(fw.join("gsp_ga10x.bin"), "").unwrap();
        std::fs::write(fw.join("README"), "").unwrap();
        let f = find(&at(root.path()), V).unwrap();
        assert_eq!(
            f.firmware,
            vec![format!("/usr/lib/firmware/nvidia/{V}/gsp_ga10x.bin")]
        );
    }

    #[test]
    fn no_driver_is_a_clear_error() {
        let root = tempfile::tempdir().unwrap();
        let err = find(&at(root.path()), V).unwrap_err().to_string();
        assert!(err.contains(&format!("libnvidia-ml.so.{V}")), "{err}");
    }
}
