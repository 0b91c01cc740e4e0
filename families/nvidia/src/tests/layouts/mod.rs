//! The driver layouts users run, each as a fake host, and exactly what graft mounts from it
//! (source → destination): every GPU container's compute and utility files, firmware and
//! sockets, and each optional capability's files. Binaries are ELF stand-ins (the host's
//! `true` with a version string appended) or wrapper scripts where the layout has one.
//! This module builds the fake hosts; [`distros`] and [`others`] hold the layouts.

mod distros;
mod others;

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

use crate::devices as edits;
use crate::driver_files::testing::{
    build_ldcache, check_executable, driver_elf, native_ldcache, outside as mounts_outside,
    write_exe, Rejected,
};
use crate::driver_files::{self, Capability, DriverFiles, Roots};

const V: &str = "580.95.05";
const OLD: &str = "570.86.10";
/// Sorted as a directory listing is.
const COMPUTE_LIBS: &[&str] = &[
    "libcuda",
    "libnvidia-future",
    "libnvidia-gpucomp",
    "libnvidia-nvvm",
    "libnvidia-ptxjitcompiler",
];
const UTILITY_LIBS: &[&str] = &["libnvidia-cfg", "libnvidia-ml"];
const GRAPHICS_LIBS: &[&str] = &[
    "libEGL_nvidia",
    "libGLX_nvidia",
    "libnvidia-eglcore",
    "libnvidia-glcore",
];
const VIDEO_LIBS: &[&str] = &["libnvcuvid", "libnvidia-encode"];
const EGL_WAYLAND: &str = "libnvidia-egl-wayland.so.1.1.13";
const UTILITY_BINS: &[&str] = &["nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"];
const COMPUTE_BINS: &[&str] = &["nvidia-cuda-mps-control", "nvidia-cuda-mps-server"];
/// The ld.so.cache flags of an AArch64 64-bit ELF library.
const AARCH64: i32 = 0x0a03;

type Pairs = Vec<(String, String)>;

/// A fake host with the driver under `driver` ("" for the host's own `/`).
struct Node {
    host: tempfile::TempDir,
    driver: &'static str,
}

impl Node {
    fn new(driver: &'static str) -> Self {
        Node {
            host: tempfile::tempdir().unwrap(),
            driver,
        }
    }

    /// A path inside the driver root as the test sees it.
    fn at(&self, p: &str) -> PathBuf {
        let root = self.host.path().join(self.driver.trim_start_matches('/'));
        root.join(p.trim_start_matches('/'))
    }

    fn file(&self, p: &str) {
        let p = self.at(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "x").unwrap();
    }

    /// A real socket: graft mounts nothing else at a driver socket's path.
    fn socket(&self, p: &str) {
        let p = self.at(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        drop(std::os::unix::net::UnixListener::bind(p).unwrap());
    }

    fn link(&self, p: &str, target: &str) {
        let p = self.at(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink(target, p).unwrap();
    }

    fn exe(&self, p: &str, version: &str) {
        write_exe(&self.at(p), &driver_elf(version));
    }

    /// The driver's libraries of every capability in `dir`, with the usual links, and a
    /// library left from another version.
    fn libs(&self, dir: &str) {
        for l in [COMPUTE_LIBS, UTILITY_LIBS, GRAPHICS_LIBS, VIDEO_LIBS].concat() {
            self.file(&format!("{dir}/{l}.so.{V}"));
        }
        self.file(&format!("{dir}/{EGL_WAYLAND}"));
        self.file(&format!("{dir}/vdpau/libvdpau_nvidia.so.{V}"));
        self.file(&format!("{dir}/libcuda.so.{OLD}"));
        self.link(&format!("{dir}/libcuda.so.1"), &format!("libcuda.so.{V}"));
        self.link(&format!("{dir}/libcuda.so"), "libcuda.so.1");
        self.link(
            &format!("{dir}/libnvidia-ml.so.1"),
            &format!("libnvidia-ml.so.{V}"),
        );
        self.link(
            &format!("{dir}/libGLX_nvidia.so.0"),
            &format!("libGLX_nvidia.so.{V}"),
        );
        self.link(
            &format!("{dir}/vdpau/libvdpau_nvidia.so.1"),
            &format!("libvdpau_nvidia.so.{V}"),
        );
    }

    fn bins(&self, dir: &str) {
        for b in [UTILITY_BINS, COMPUTE_BINS].concat() {
            self.exe(&format!("{dir}/{b}"), V);
        }
    }

    fn firmware(&self, dir: &str) {
        for f in ["gsp_ga10x.bin", "gsp_tu10x.bin"] {
            self.file(&format!("{dir}/nvidia/{V}/{f}"));
        }
    }

    fn ld_so_cache(&self, entries: &[(i32, &str, &str)]) {
        let p = self.at("/etc/ld.so.cache");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, build_ldcache(entries)).unwrap();
    }

    fn roots(&self) -> Roots {
        let driver = if self.driver.is_empty() {
            "/"
        } else {
            self.driver
        };
        Roots {
            host: self.host.path().to_path_buf(),
            driver: driver.into(),
        }
    }

    fn scan(&self) -> Scan {
        let roots = self.roots();
        let files = driver_files::find(&roots, V).unwrap();
        let pairs = |m: &[graft_record::Mount]| -> Pairs {
            m.iter()
                .map(|m| (m.source.clone(), m.destination.clone()))
                .collect()
        };
        Scan {
            default: pairs(&edits::default_mounts(&roots, &files)),
            optional: edits::optional(&roots, &files)
                .into_iter()
                .map(|(k, e)| (k, pairs(&e.mounts)))
                .collect(),
            files,
        }
    }
}

struct Scan {
    files: DriverFiles,
    default: Pairs,
    optional: BTreeMap<String, Pairs>,
}

/// What a `dir` filled by [`Node::libs`] mounts for `cap`; `src` is the driver root.
fn libs(src: &str, dir: &str, cap: Capability) -> Pairs {
    let stems = match cap {
        Capability::Compute => COMPUTE_LIBS,
        Capability::Utility => UTILITY_LIBS,
        Capability::Graphics => GRAPHICS_LIBS,
        Capability::Video => VIDEO_LIBS,
        Capability::Display => &[],
    };
    let mut names: Vec<String> = stems.iter().map(|l| format!("{l}.so.{V}")).collect();
    if cap == Capability::Graphics {
        names.push(EGL_WAYLAND.into());
        names.sort();
    }
    if cap == Capability::Video {
        names.push(format!("vdpau/libvdpau_nvidia.so.{V}"));
    }
    in_place(src, dir, &names)
}

/// `dir/<name>` for each name, mounted where it is.
fn in_place(src: &str, dir: &str, names: &[impl AsRef<str>]) -> Pairs {
    names
        .iter()
        .map(|n| {
            let p = format!("{dir}/{}", n.as_ref());
            (format!("{src}{p}"), p)
        })
        .collect()
}

/// `dir/<name>` mounted at `/usr/bin/<name>`.
fn bins(src: &str, dir: &str, names: &[&str]) -> Pairs {
    names
        .iter()
        .map(|n| (format!("{src}{dir}/{n}"), format!("/usr/bin/{n}")))
        .collect()
}

/// Every GPU container's mounts: compute then utility, firmware, sockets.
fn default_mounts(src: &str, lib: &str, bin: &str, firmware: &str, sockets: &[&str]) -> Pairs {
    let mut want = libs(src, lib, Capability::Compute);
    want.extend(bins(src, bin, COMPUTE_BINS));
    want.extend(libs(src, lib, Capability::Utility));
    want.extend(bins(src, bin, UTILITY_BINS));
    if !firmware.is_empty() {
        let dir = format!("{firmware}/nvidia/{V}");
        want.extend(in_place(src, &dir, &["gsp_ga10x.bin", "gsp_tu10x.bin"]));
    }
    want.extend(sockets.iter().map(|s| (format!("{src}{s}"), s.to_string())));
    want
}

fn owned(pairs: &[(&str, &str)]) -> Pairs {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}
