//! The driver's binaries: for each name, the first candidate that is an executable of the
//! running driver version, looked for next to the driver's libraries first
//! (`/usr/local/nvidia/lib64` → `/usr/local/nvidia/bin`, where GKE keeps the real
//! nvidia-smi behind a wrapper script in `/usr/bin`), then in the usual directories. Each is
//! mounted at `/usr/bin/<name>`, on the container's `PATH` whatever the host's layout.

use std::path::Path;

use super::capabilities;
use super::elf;
use super::files::DriverFile;
use super::in_root;
use super::roots::Roots;

pub const BIN_DIRS: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/bin",
    "/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
];

pub const BINARIES: &[&str] = &[
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
];

/// Where a binary goes in the container.
pub const CONTAINER_BIN_DIR: &str = "/usr/bin";

/// The directories searched, in order: `<lib dir>/../bin` of each library directory, then
/// [`BIN_DIRS`]; each once.
pub fn search_dirs(lib_dirs: &[String]) -> Vec<String> {
    let mut dirs: Vec<String> = Vec::new();
    let beside = lib_dirs.iter().filter_map(|d| {
        let parent = Path::new(d).parent()?;
        parent.join("bin").to_str().map(str::to_string)
    });
    for d in beside.chain(BIN_DIRS.iter().map(|d| d.to_string())) {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

/// The binaries of driver `version` found under the roots, in [`BINARIES`] order.
pub fn find(roots: &Roots, lib_dirs: &[String], version: &str) -> Vec<DriverFile> {
    let dirs = search_dirs(lib_dirs);
    let mut out = Vec::new();
    for name in BINARIES {
        let mut skipped = Vec::new();
        let found = dirs.iter().find_map(|dir| {
            let candidate = format!("{dir}/{name}");
            let visible = roots.driver_visible(&candidate);
            // Not there at all: the usual case, not worth a word.
            std::fs::symlink_metadata(&visible).ok()?;
            let real = match in_root::resolve(roots, &candidate) {
                Ok(real) => real,
                Err(why) => {
                    skipped.push(format!("{candidate}: {why}"));
                    return None;
                }
            };
            match elf::check_executable(&roots.driver_visible(&real), version) {
                Ok(()) => Some(real),
                Err(why) => {
                    skipped.push(format!("{candidate}: {why}"));
                    None
                }
            }
        });
        match found {
            Some(real) => {
                for s in &skipped {
                    tracing::debug!(binary = name, "skipped {s}");
                }
                out.push(DriverFile {
                    capability: capabilities::of_binary(name),
                    path: real,
                    destination: format!("{CONTAINER_BIN_DIR}/{name}"),
                });
            }
            // Candidates, none usable: containers will lack it, which deserves a word.
            None if !skipped.is_empty() => tracing::warn!(
                binary = name,
                driver_version = version,
                "no executable of the running driver found; skipped {}",
                skipped.join("; ")
            ),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::capabilities::Capability;
    use super::super::elf::tests::{driver_elf, write_exe};
    use super::*;
    use std::os::unix::fs::symlink;

    const V: &str = "580.95.05";

    #[test]
    fn search_order_beside_the_libraries_first() {
        let dirs = search_dirs(&[
            "/usr/local/nvidia/lib64".into(),
            "/usr/lib64".into(),
            "/usr/lib/x86_64-linux-gnu".into(),
        ]);
        assert_eq!(
            dirs[..4],
            [
                "/usr/local/nvidia/bin",
                "/usr/bin",
                "/usr/lib/bin",
                "/usr/sbin"
            ]
        );
        assert_eq!(dirs.iter().filter(|d| *d == "/usr/bin").count(), 1);
    }

    #[test]
    fn the_first_executable_of_the_version_wins() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        // /usr/local/bin has the right one; /usr/bin an older one, /usr/sbin a script.
        write_exe(&r.join("usr/bin/nvidia-smi"), &driver_elf("570.86.10"));
        write_exe(&r.join("usr/sbin/nvidia-smi"), b"#!/bin/sh\nexit 0\n");
        write_exe(&r.join("usr/local/bin/nvidia-smi"), &driver_elf(V));
        // Reached through a link inside the root: the link's target is mounted.
        write_exe(&r.join("opt/nv/nvidia-debugdump"), &driver_elf(V));
        symlink(
            "../../opt/nv/nvidia-debugdump",
            r.join("usr/bin/nvidia-debugdump"),
        )
        .unwrap();
        // A link that climbs out of the root is not followed.
        symlink(
            "../../../../../../../bin/true",
            r.join("usr/bin/nvidia-persistenced"),
        )
        .unwrap();
        let roots = Roots {
            host: r.to_path_buf(),
            driver: "/".into(),
        };
        let got = find(&roots, &[], V);
        let pairs: Vec<(&str, &str, Capability)> = got
            .iter()
            .map(|f| (f.path.as_str(), f.destination.as_str(), f.capability))
            .collect();
        assert_eq!(
            pairs,
            [
                (
                    "/usr/local/bin/nvidia-smi",
                    "/usr/bin/nvidia-smi",
                    Capability::Utility
                ),
                (
                    "/opt/nv/nvidia-debugdump",
                    "/usr/bin/nvidia-debugdump",
                    Capability::Utility
                ),
            ]
        );
    }
}
