//! create-symlinks: recreates the driver's library symlinks inside the container.
//!
//! The link's directories are resolved inside the root, so a symlinked `/usr/lib/...` in
//! the image leads where the container will see it, never to the host. The target is only
//! symlink content, evaluated later by the container inside its own root.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::Path;

use anyhow::{bail, Context};
use graft_record::paths::is_clean_absolute;
use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{fstatat, SFlag};
use pathrs::{Handle, Root};

use crate::inroot;

/// A parsed `TARGET::LINK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link<'a> {
    pub target: &'a str,
    pub parent: &'a str,
    pub name: &'a str,
}

pub fn parse(spec: &str) -> anyhow::Result<Link<'_>> {
    let Some((target, link)) = spec.split_once("::") else {
        bail!("--link {spec:?}: expected TARGET::LINK");
    };
    if target.is_empty() || target.contains('\0') {
        bail!("--link {spec:?}: the target must be non-empty, without NUL");
    }
    if !is_clean_absolute(link) || link == "/" {
        bail!("--link {spec:?}: the link must be a clean absolute path below /");
    }
    // A clean absolute path other than "/" always has both.
    let (parent, name) = link.rsplit_once('/').unwrap_or(("", link));
    Ok(Link {
        target,
        parent: if parent.is_empty() { "/" } else { parent },
        name,
    })
}

pub fn create(rootfs: &Path, specs: &[String]) -> anyhow::Result<()> {
    // All checked before anything is touched.
    let links = specs
        .iter()
        .map(|s| parse(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let root = inroot::open_root(rootfs)?;
    for l in links {
        let dir = inroot::mkdir_all(&root, l.parent)?;
        let shown = format!("{}/{}", l.parent.trim_end_matches('/'), l.name);
        inroot::ensure_symlink(dir.as_fd(), l.name, l.target)
            .with_context(|| format!("linking {shown} -> {} in the container", l.target))?;
    }
    Ok(())
}

/// Like [`create`], but each link only when its target exists in the container (resolved
/// inside the root, from the link's directory): the links of driver files that were not
/// mounted (a capability the claim did not ask for) are skipped. Links to links are made in
/// passes, so their order does not matter. What `made` knows (the driver files' links, the
/// directories) is not resolved again. Returns how many were skipped.
pub fn create_present(
    root: &Root,
    specs: &[String],
    made: &mut inroot::Made,
) -> anyhow::Result<usize> {
    let mut pending = specs
        .iter()
        .map(|s| parse(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut found: HashMap<&str, Handle> = HashMap::new();
    loop {
        let before = pending.len();
        let mut rest = Vec::new();
        for l in pending {
            if !present(root, &mut found, made, &l) {
                rest.push(l);
                continue;
            }
            // One in-root resolution per directory, not per link (most of the hook's
            // time): the fd stays the directory that was resolved inside the root.
            let dir = made.dir(root, l.parent)?;
            let shown = format!("{}/{}", l.parent.trim_end_matches('/'), l.name);
            inroot::ensure_symlink(dir, l.name, l.target)
                .with_context(|| format!("linking {shown} -> {} in the container", l.target))?;
            // Its target is present, so it is: a link to it is made without a lookup.
            made.exists(shown);
        }
        pending = rest;
        if pending.is_empty() || pending.len() == before {
            return Ok(pending.len());
        }
    }
}

/// Whether `l`'s target exists, resolved inside the root from the link's directory. A plain
/// name this run made or linked is known; another is looked up in that directory's fd
/// (resolved once per directory): an entry there that is not a symlink is the answer; a
/// symlink, a path or an error is resolved from the root as a whole, which follows the
/// image's links inside the root.
fn present<'a>(
    root: &Root,
    dirs: &mut HashMap<&'a str, Handle>,
    made: &inroot::Made,
    l: &Link<'a>,
) -> bool {
    let plain = !l.target.contains('/') && l.target != "." && l.target != "..";
    if plain {
        let full = format!("{}/{}", l.parent.trim_end_matches('/'), l.target);
        if made.is_known(&full) {
            return true;
        }
        let st = match made.known_dir(l.parent) {
            Some(dir) => fstatat(dir, l.target, AtFlags::AT_SYMLINK_NOFOLLOW),
            None => {
                if !dirs.contains_key(l.parent) {
                    // Not cached when absent: a later pass looks again.
                    if let Ok(h) = root.resolve(l.parent) {
                        dirs.insert(l.parent, h);
                    }
                }
                let Some(dir) = dirs.get(l.parent) else {
                    return false;
                };
                fstatat(dir, l.target, AtFlags::AT_SYMLINK_NOFOLLOW)
            }
        };
        match st {
            Ok(st) if !inroot::is_type(&st, SFlag::S_IFLNK) => return true,
            Err(Errno::ENOENT) => return false,
            _ => {}
        }
    }
    let target = if l.target.starts_with('/') {
        l.target.to_string()
    } else {
        format!("{}/{}", l.parent.trim_end_matches('/'), l.target)
    };
    root.resolve(&target).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_links_whose_target_is_there_in_any_order() {
        let f = crate::testutil::Fixture::new();
        let lib = "/usr/lib/x86_64-linux-gnu";
        f.write(&format!("{lib}/libcuda.so.580.95.05"), "mounted");
        let specs = vec![
            // A link to a link first: made in the second pass.
            format!("libcuda.so.1::{lib}/libcuda.so"),
            format!("libcuda.so.580.95.05::{lib}/libcuda.so.1"),
            // A capability that was not mounted: skipped, its directory not made.
            "libGLX_nvidia.so.580.95.05::/usr/lib/xorg/libGLX_nvidia.so.0".to_string(),
            // A target out of the root exists only on the host: skipped.
            format!("/{}/lib/libdecoy.so::{lib}/libdecoy.so", f.d()),
            // A plain name that is the image's link out of the root: followed inside the
            // root, where nothing is; skipped.
            format!("libout.so.1::{lib}/libout.so"),
            // A plain name that is the image's link inside: made.
            format!("libin.so.1::{lib}/libin.so"),
        ];
        std::fs::write(f.decoy.join("lib/libreal.so"), "host").unwrap();
        f.link(&format!("{lib}/libout.so.1"), "/{D}/lib/libreal.so");
        f.link(&format!("{lib}/libin.so.1"), "libcuda.so.580.95.05");
        let root = inroot::open_root(&f.root).unwrap();
        let made = &mut inroot::Made::default();
        assert_eq!(create_present(&root, &specs, made).unwrap(), 3);
        assert!(f.in_root(&format!("{lib}/libin.so")).is_symlink());
        assert!(!f.in_root(&format!("{lib}/libout.so")).exists());
        let link = |p: &str| std::fs::read_link(f.in_root(p)).unwrap();
        assert_eq!(
            link(&format!("{lib}/libcuda.so")),
            Path::new("libcuda.so.1")
        );
        assert_eq!(
            link(&format!("{lib}/libcuda.so.1")),
            Path::new("libcuda.so.580.95.05")
        );
        assert!(!f.in_root("usr/lib/xorg").exists());
        assert!(!f.in_root(&format!("{lib}/libdecoy.so")).exists());
    }
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    #[test]
    fn links_are_created_kept_and_replaced() {
        let root = tempfile::tempdir().unwrap();
        let lib = "/usr/lib/x86_64-linux-gnu";
        create(
            root.path(),
            &[
                format!("libcuda.so.580.95.05::{lib}/libcuda.so.1"),
                format!("libcuda.so.1::{lib}/libcuda.so"),
                "t::/top".to_string(),
            ],
        )
        .unwrap();
        let at = root.path().join(&lib[1..]);
        assert_eq!(
            std::fs::read_link(at.join("libcuda.so.1")).unwrap(),
            PathBuf::from("libcuda.so.580.95.05")
        );
        assert_eq!(
            std::fs::read_link(root.path().join("top")).unwrap(),
            PathBuf::from("t")
        );
        // Again: idempotent; a stale link is replaced; a real file is left alone.
        std::fs::remove_file(at.join("libcuda.so")).unwrap();
        symlink("stale", at.join("libcuda.so")).unwrap();
        std::fs::write(at.join("libnvidia-ml.so.1"), "image's own").unwrap();
        create(
            root.path(),
            &[
                format!("libcuda.so.1::{lib}/libcuda.so"),
                format!("libnvidia-ml.so.580.95.05::{lib}/libnvidia-ml.so.1"),
            ],
        )
        .unwrap();
        assert_eq!(
            std::fs::read_link(at.join("libcuda.so")).unwrap(),
            PathBuf::from("libcuda.so.1")
        );
        assert_eq!(
            std::fs::read_to_string(at.join("libnvidia-ml.so.1")).unwrap(),
            "image's own"
        );
    }

    #[test]
    fn bad_link_specs_are_refused_before_anything_is_done() {
        let root = tempfile::tempdir().unwrap();
        for bad in [
            "t::/../../etc/x",
            "t::/usr/../../etc/x",
            "t::/usr/./lib/x",
            "t::relative",
            "t::lib/x",
            "t::/",
            "t::",
            "t::/a//b",
            "t::/a/",
            "t::/a\0b",
            "t\0x::/a",
            "::/a",
            "no-separator",
        ] {
            // A good spec first: it must not be created when a later one is bad.
            let specs = ["ok::/made".to_string(), bad.to_string()];
            assert!(create(root.path(), &specs).is_err(), "{bad:?}");
        }
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
        let l = parse("../a::/x/y").unwrap();
        assert_eq!((l.target, l.parent, l.name), ("../a", "/x", "y"));
        let l = parse("a::/y").unwrap();
        assert_eq!((l.parent, l.name), ("/", "y"));
    }
}
