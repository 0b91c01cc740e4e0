//! CUDA forward compatibility: an image built for a newer CUDA than the node's driver can
//! ship that CUDA's user-space driver in `/usr/local/cuda/compat` (`libcuda.so.<version>`,
//! from NVIDIA's `cuda-compat` package). When its major version is above the host driver's,
//! the container must load it instead of the host's libcuda: its directory goes first in
//! the linker configuration.

use std::os::fd::OwnedFd;

use anyhow::Context;
use nix::dir::Dir;
use pathrs::flags::OpenFlags;
use pathrs::Root;

/// Where NVIDIA's CUDA images put the compat libraries.
pub const DEFAULT_DIR: &str = "/usr/local/cuda/compat";

/// The leading number of a driver version (`580.95.05` → 580).
fn major(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

/// `dir` (inside the root) when it holds exactly one `libcuda.so.<version>` whose major is
/// above `host_version`'s; `None` otherwise (no such directory, no newer libcuda, or more
/// than one, which is ambiguous and left alone).
pub fn newer_compat_dir(
    root: &Root,
    dir: &str,
    host_version: &str,
) -> anyhow::Result<Option<String>> {
    let Some(host) = major(host_version) else {
        return Ok(None);
    };
    let handle = match root.resolve(dir) {
        Ok(h) => h,
        Err(_) => return Ok(None),
    };
    let dir_file = handle
        .reopen(OpenFlags::O_RDONLY | OpenFlags::O_DIRECTORY)
        .with_context(|| format!("opening {dir} in the container"))?;
    let mut entries = Dir::from_fd(OwnedFd::from(dir_file))
        .with_context(|| format!("reading {dir} in the container"))?;
    let mut found = Vec::new();
    for e in entries.iter() {
        let e = e.with_context(|| format!("reading {dir} in the container"))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(v) = name.strip_prefix("libcuda.so.") {
            // `libcuda.so.1` is the soname link; only a full version counts.
            if v.contains('.') {
                found.push(v.to_string());
            }
        }
    }
    Ok(match found.as_slice() {
        [v] if major(v).is_some_and(|m| m > host) => Some(dir.to_string()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inroot;
    use crate::testutil::Fixture;

    fn check(f: &Fixture, host: &str) -> Option<String> {
        let root = inroot::open_root(&f.root).unwrap();
        newer_compat_dir(&root, DEFAULT_DIR, host).unwrap()
    }

    #[test]
    fn only_one_newer_libcuda_turns_it_on() {
        let f = Fixture::new();
        assert_eq!(check(&f, "580.95.05"), None);
        f.write("usr/local/cuda/compat/libcuda.so.590.10.01", "elf");
        f.link("usr/local/cuda/compat/libcuda.so.1", "libcuda.so.590.10.01");
        assert_eq!(check(&f, "580.95.05").as_deref(), Some(DEFAULT_DIR));
        assert_eq!(
            check(&f, "590.20.01"),
            None,
            "same major: the host's is used"
        );
        assert_eq!(check(&f, "not-a-version"), None);
        f.write("usr/local/cuda/compat/libcuda.so.595.1.2", "elf");
        assert_eq!(check(&f, "580.95.05"), None, "two candidates: ambiguous");
    }

    #[test]
    fn a_compat_directory_linked_out_of_the_root_is_read_inside() {
        let f = Fixture::new();
        std::fs::write(f.decoy.join("lib/libcuda.so.999.1.1"), "decoy").unwrap();
        f.link("usr/local/cuda/compat", "/{D}/lib");
        assert_eq!(check(&f, "580.95.05"), None);
    }
}
