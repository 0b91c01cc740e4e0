//! `nvidia-container`: everything a GPU container needs from a hook, in one process (each
//! hook is a process the runtime starts while the container waits):
//!
//! 0. with `--driver-dir`, each driver file's usual path linked to its copy in the
//!    read-only directory graft-driver prepared (see `copies`);
//! 1. the driver's library links (as `create-symlinks`), each only when its target was
//!    mounted (the links of every capability are given; the claim chose which are mounted);
//! 2. the linker: when the image ships a newer CUDA's compat libcuda, its directory goes
//!    first and the cache is rebuilt; otherwise the cache is rebuilt only when the image's
//!    loader would not find the driver's libraries as it is (see `linker`), which for the
//!    common images (Debian, Ubuntu, Red Hat family) it does. The cache is rebuilt by
//!    merging the driver's libraries into the image's own (`cache_build`), with the host's
//!    ldconfig only where the image's cache is one graft-hook does not merge;
//! 3. the driver's device-node settings hidden (as `disable-device-node-modification`).

use std::path::{Path, PathBuf};

use crate::rootfs::Container;
use crate::{compat, copies, inroot, ldcache, linker, params, symlinks};

pub struct Options {
    pub links: Vec<String>,
    pub folders: Vec<String>,
    pub ldconfig: PathBuf,
    pub params_copy: PathBuf,
    pub host_params: PathBuf,
    pub container_id: String,
    /// The host driver's version, for CUDA forward compatibility; `None`: off.
    pub driver_version: Option<String>,
    pub compat_dir: String,
    /// Where the prepared directory is in the container; `None`: the files were mounted
    /// one by one.
    pub driver_dir: Option<String>,
    /// The usual paths of the files in it.
    pub driver_files: Vec<String>,
}

/// What step 2 decided, for tests and the error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linker {
    /// The image's loader finds the libraries; its cache was left alone.
    AsIs,
    /// The cache was rebuilt by graft-hook, for this reason.
    Rebuilt(String),
    /// The cache was rebuilt by the host's ldconfig: the first reason is why it was
    /// rebuilt, the second why graft-hook did not merge it itself.
    Ldconfig(String, String),
}

pub fn run(container: &Container, o: &Options) -> anyhow::Result<Linker> {
    let rootfs = &container.rootfs;
    let root = inroot::open_root(rootfs)?;
    let mut made = inroot::Made::default();
    if let Some(dir) = &o.driver_dir {
        copies::link_into(&root, dir, &o.driver_files, &mut made)?;
    }
    symlinks::create_present(&root, &o.links, &mut made)?;
    let compat = match &o.driver_version {
        Some(v) => compat::newer_compat_dir(&root, &o.compat_dir, v)?,
        None => None,
    };
    let decision = match &compat {
        Some(dir) => Linker::Rebuilt(format!("CUDA forward compatibility from {dir}")),
        None => {
            let sonames = sonames(&o.links);
            match linker::rebuild_reason(
                &root,
                &o.folders,
                &sonames,
                container.ld_library_path.as_deref(),
            )? {
                Some(why) => Linker::Rebuilt(why),
                None => Linker::AsIs,
            }
        }
    };
    let decision = match decision {
        Linker::Rebuilt(why) => {
            // The compat directory first: the first directory's library wins.
            let folders: Vec<String> = compat.into_iter().chain(o.folders.clone()).collect();
            match ldcache::refresh(rootfs, &o.ldconfig, &folders, o.driver_dir.as_deref())? {
                None => Linker::Rebuilt(why),
                Some(fallback) => Linker::Ldconfig(why, fallback),
            }
        }
        other => other,
    };
    params::disable_modification(rootfs, &o.host_params, &o.params_copy, &o.container_id)?;
    Ok(decision)
}

/// The library names the links provide (`libcuda.so.1`, `libcuda.so`): what a program asks
/// the loader for, and what an image's cache must not already name.
fn sonames(links: &[String]) -> Vec<&str> {
    links
        .iter()
        .filter_map(|l| l.split_once("::"))
        .filter_map(|(_, link)| Path::new(link).file_name()?.to_str())
        .filter(|n| n.starts_with("lib") && n.contains(".so"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Fixture;

    fn options(f: &Fixture, ldconfig: &Path) -> Options {
        Options {
            links: vec![
                "libcuda.so.580.95.05::/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
                "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so".into(),
            ],
            folders: vec!["/usr/lib/x86_64-linux-gnu".into()],
            ldconfig: ldconfig.to_path_buf(),
            params_copy: f.root.parent().unwrap().join("state/params"),
            host_params: PathBuf::from("/nonexistent/params"),
            container_id: "c1".into(),
            driver_version: Some("580.95.05".into()),
            compat_dir: compat::DEFAULT_DIR.into(),
            driver_dir: None,
            driver_files: Vec::new(),
        }
    }

    /// A stand-in ldconfig that records that it ran.
    fn ldconfig(f: &Fixture) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = f.root.parent().unwrap();
        let (bin, log) = (dir.join("ldconfig"), dir.join("ldconfig.ran"));
        std::fs::write(
            &bin,
            format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        (bin, log)
    }

    fn container(f: &Fixture, lp: Option<&str>) -> Container {
        Container {
            rootfs: f.root.clone(),
            id: Some("c1".into()),
            ld_library_path: lp.map(str::to_string),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_debian_image_keeps_its_cache_and_a_static_one_gets_it_rebuilt() {
        let f = Fixture::new();
        f.write("usr/lib/x86_64-linux-gnu/libc.so.6", "libc");
        f.write("usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05", "mounted");
        let (bin, log) = ldconfig(&f);
        let d = run(&container(&f, None), &options(&f, &bin)).unwrap();
        assert_eq!(d, Linker::AsIs);
        assert!(!log.exists(), "ldconfig ran");
        let link = std::fs::read_link(f.in_root("usr/lib/x86_64-linux-gnu/libcuda.so.1"));
        assert_eq!(link.unwrap(), PathBuf::from("libcuda.so.580.95.05"));
        assert!(!f.in_root("etc/ld.so.conf.d").exists());

        let busybox = Fixture::new();
        busybox.write("usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05", "mounted");
        let (bin, log) = ldconfig(&busybox);
        let d = run(&container(&busybox, None), &options(&busybox, &bin)).unwrap();
        assert!(
            matches!(d, Linker::Rebuilt(ref why) if why.contains("glibc")),
            "{d:?}"
        );
        assert!(!log.exists(), "ldconfig ran");
        assert!(busybox
            .in_root("etc/ld.so.conf.d/00-graft-nvidia.conf")
            .is_file());
        assert!(busybox.in_root("etc/ld.so.cache").is_file());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_cache_graft_hook_does_not_merge_is_rebuilt_by_ldconfig() {
        let f = Fixture::new();
        f.write("usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05", "mounted");
        f.write("etc/ld.so.cache", "glibc-ld.so.cache1.1 truncated");
        let (bin, log) = ldconfig(&f);
        let d = run(&container(&f, None), &options(&f, &bin)).unwrap();
        assert!(
            matches!(d, Linker::Ldconfig(ref why, ref fallback)
                if why.contains("glibc") && fallback.contains("truncated")),
            "{d:?}"
        );
        assert!(log.exists(), "ldconfig did not run");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_newer_compat_libcuda_goes_first() {
        let f = Fixture::new();
        f.write("usr/lib/x86_64-linux-gnu/libc.so.6", "libc");
        f.write("usr/local/cuda/compat/libcuda.so.590.1.1", "elf");
        let (bin, log) = ldconfig(&f);
        let d = run(&container(&f, None), &options(&f, &bin)).unwrap();
        assert!(
            matches!(d, Linker::Rebuilt(ref why) if why.contains("compat")),
            "{d:?}"
        );
        assert!(!log.exists());
        let conf =
            std::fs::read_to_string(f.in_root("etc/ld.so.conf.d/00-graft-nvidia.conf")).unwrap();
        let dirs: Vec<&str> = conf.lines().filter(|l| l.starts_with('/')).collect();
        assert_eq!(
            dirs,
            ["/usr/local/cuda/compat", "/usr/lib/x86_64-linux-gnu"]
        );
    }

    #[test]
    fn sonames_come_from_the_links() {
        let links = vec![
            "libcuda.so.580::/usr/lib/x/libcuda.so.1".to_string(),
            "libcuda.so.1::/usr/lib/x/libcuda.so".to_string(),
            "nvidia_drv.so::/usr/lib/xorg/nvidia_drv.so".to_string(),
            "bad".to_string(),
        ];
        assert_eq!(sonames(&links), ["libcuda.so.1", "libcuda.so"]);
    }
}
