//! The driver files' links into the prepared directory: graft-driver binds one read-only
//! directory holding a copy of each file every GPU container gets (`--driver-dir`), and
//! graft-hook makes each file's usual path (`--driver-file`, the libraries' directory,
//! `/usr/bin`, the firmware's) a symlink to its copy there. A symlink costs graft-hook tens
//! of microseconds where a bind cost the runtime half a millisecond.
//!
//! The usual path is the image's: its directories are resolved (made when missing) inside
//! the root, and whatever the image had at the name is replaced, as a bind over it would
//! have hidden it; a directory there is refused, as the bind would have failed. The link's
//! target is absolute, evaluated later by the container inside its own root, where it is
//! the read-only mount.

use anyhow::{bail, Context};
use graft_record::paths::{is_clean_absolute, is_under};
use pathrs::Root;

use crate::inroot;

/// Where the copy of `file` is in the container.
fn copy_of(dir: &str, file: &str) -> String {
    format!("{}{file}", dir.trim_end_matches('/'))
}

/// Checks every argument before anything is touched.
pub fn check(dir: &str, files: &[String]) -> anyhow::Result<()> {
    if !is_clean_absolute(dir) || dir == "/" {
        bail!("--driver-dir {dir:?}: must be a clean absolute path below /");
    }
    for f in files {
        if !is_clean_absolute(f) || f == "/" {
            bail!("--driver-file {f:?}: must be a clean absolute path below /");
        }
        if is_under(f, dir) || is_under(dir, f) {
            bail!("--driver-file {f:?}: is, or holds, the driver directory {dir:?}");
        }
    }
    Ok(())
}

/// Links each of `files` to its copy below `dir`, recording in `made` the directories and
/// the links. Returns how many links changed.
pub fn link_into(
    root: &Root,
    dir: &str,
    files: &[String],
    made: &mut inroot::Made,
) -> anyhow::Result<usize> {
    check(dir, files)?;
    let mut changed = 0;
    for f in files {
        // Clean, absolute and not "/": it has a parent and a name.
        let (parent, name) = f.rsplit_once('/').unwrap_or(("", f));
        let parent = if parent.is_empty() { "/" } else { parent };
        let fd = made.dir(root, parent)?;
        let target = copy_of(dir, f);
        if inroot::force_symlink(fd, name, &target)
            .with_context(|| format!("linking {f} -> {target} in the container"))?
        {
            changed += 1;
        }
        // The copy is in the read-only mount the runtime made before the hooks run.
        made.exists(f.clone());
    }
    Ok(changed)
}

/// [`link_into`] on its own.
#[cfg(test)]
pub fn link(root: &Root, dir: &str, files: &[String]) -> anyhow::Result<usize> {
    link_into(root, dir, files, &mut inroot::Made::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Fixture;
    use std::path::PathBuf;

    const DIR: &str = "/usr/lib/graft-nvidia";

    #[test]
    fn files_become_links_into_the_directory_whatever_the_image_had_there() {
        let f = Fixture::new();
        let lib = "/usr/lib/x86_64-linux-gnu";
        f.write(&format!("{DIR}{lib}/libcuda.so.580.95.05"), "copy");
        // The image's own file and a stale link are replaced; the directory is made.
        f.write(&format!("{lib}/libcuda.so.580.95.05"), "image's own");
        f.link("/usr/bin/nvidia-smi", "/somewhere/else");
        let files = vec![
            format!("{lib}/libcuda.so.580.95.05"),
            "/usr/bin/nvidia-smi".to_string(),
            "/lib/firmware/nvidia/580.95.05/gsp_ga10x.bin".to_string(),
        ];
        let root = inroot::open_root(&f.root).unwrap();
        assert_eq!(link(&root, DIR, &files).unwrap(), 3);
        for file in &files {
            assert_eq!(
                std::fs::read_link(f.in_root(&file[1..])).unwrap(),
                PathBuf::from(format!("{DIR}{file}"))
            );
        }
        // Again: nothing to change.
        assert_eq!(link(&root, DIR, &files).unwrap(), 0);
    }

    #[test]
    fn the_images_links_out_of_the_root_lead_inside_it() {
        let f = Fixture::new();
        let before = f.decoy_snapshot();
        // Both the image's directory and its file at the usual path lead to the host.
        f.link("/usr/bin", "/{D}/lib");
        // Where that link leads inside the root.
        f.mkdir(&format!("{}/lib", f.d()));
        f.link("/lib/firmware", "../../../../{D}");
        f.link(
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "/{D}/lib/libdecoy.so",
        );
        let files = vec![
            "/usr/bin/libdecoy.so".to_string(),
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1".to_string(),
        ];
        let root = inroot::open_root(&f.root).unwrap();
        link(&root, DIR, &files).unwrap();
        let firmware = ["/lib/firmware/etc/ld.so.conf".to_string()];
        link(&root, DIR, &firmware).unwrap();
        assert!(f.in_root(&format!("{}/etc/ld.so.conf", f.d())).is_symlink());
        assert_eq!(f.decoy_snapshot(), before, "the host's files changed");
        assert!(f
            .in_root(&format!("{}/lib/libdecoy.so", f.d()))
            .is_symlink());
        assert_eq!(
            std::fs::read_link(f.in_root("/usr/lib/x86_64-linux-gnu/libcuda.so.1")).unwrap(),
            PathBuf::from(format!("{DIR}/usr/lib/x86_64-linux-gnu/libcuda.so.1"))
        );
    }

    #[test]
    fn a_directory_at_the_path_is_refused_and_bad_arguments_touch_nothing() {
        let f = Fixture::new();
        f.write("usr/bin/nvidia-smi/inside", "a directory");
        let root = inroot::open_root(&f.root).unwrap();
        let e = link(&root, DIR, &["/usr/bin/nvidia-smi".into()]).unwrap_err();
        assert!(format!("{e:#}").contains("/usr/bin/nvidia-smi"), "{e:#}");
        assert!(f.in_root("usr/bin/nvidia-smi/inside").is_file());
        for (dir, file) in [
            (DIR, "/usr/lib/graft-nvidia/x"),
            (DIR, "/usr/lib"),
            (DIR, "/a/../b"),
            (DIR, "/"),
            ("/", "/usr/bin/x"),
            ("relative", "/usr/bin/x"),
        ] {
            assert!(
                link(&root, dir, &["/ok".into(), file.into()]).is_err(),
                "{dir} {file}"
            );
        }
        assert!(!f.in_root("ok").exists());
    }
}
