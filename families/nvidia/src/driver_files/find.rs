//! Finds the NVIDIA driver's user-space files on this node: the libraries of the running
//! driver version, its binaries, the loaders' manifests and X modules, GSP firmware and IPC
//! sockets, found under the driver root the way the dynamic linker would find the
//! libraries (fixed library directories, then `ld.so.cache`), each with the driver
//! capability it belongs to.

use std::collections::BTreeMap;
use std::path::Path;

use super::binaries;
use super::capabilities::Capability;
use super::config_files;
use super::files::{DriverFiles, Link};
use super::libraries;
use super::roots::Roots;
use graft_driver_core::error::Result;

use graft_record::nofollow::{open_socket, DRIVER_SOCKETS};

const FIRMWARE_DIRS: &[&str] = &["/lib/firmware", "/usr/lib/firmware"];

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
            links.into_iter().for_each(|l| add_link(&mut files, l));
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
            add_link(&mut files, l);
        }
    }
    files.lib_dirs = lib_dirs;
    files.firmware = firmware(roots, version);
    files.sockets = sockets(roots);
    Ok(files)
}

/// Files a link under `symlinks` or `optional_symlinks`, by where it leads.
fn add_link(files: &mut DriverFiles, (cap, target, link): Link) {
    if cap.is_default() {
        files.symlinks.push((target, link));
    } else {
        let links = files.optional_symlinks.entry(cap).or_default();
        links.push((target, link));
    }
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
    use super::super::elf::tests::{driver_elf, write_exe};
    use super::*;
    use std::collections::BTreeSet;
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
