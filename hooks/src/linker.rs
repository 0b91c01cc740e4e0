//! Whether the image's dynamic linker already finds the driver's libraries, so that its
//! cache need not be rebuilt: running ldconfig is most of what a GPU container's start costs
//! beyond a plain one.
//!
//! glibc's loader looks up a library it does not find in `/etc/ld.so.cache` in its system
//! directories. Those depend on how the image's glibc was built: Debian and Ubuntu search
//! `/lib/<triplet>`, `/usr/lib/<triplet>`, `/lib` and `/usr/lib` (what `ld.so --help` lists
//! as the system search path); Red Hat-family images search `/lib64` and `/usr/lib64`. So
//! no rebuild is needed when every library directory graft mounts is one of the image's
//! system directories (or on its `LD_LIBRARY_PATH`), and the image's own cache names none of
//! the driver's libraries (a cache entry is found before the system directories are). Any
//! other image (no glibc the hook recognises, musl, another layout) gets the cache rebuilt.

use pathrs::Root;

use crate::inroot;

/// The largest `/etc/ld.so.cache` read; a real one is tens of KiB.
const MAX_CACHE: u64 = 16 << 20;

/// The GNU triplet of this build, which is the container's (graft-hook runs on the node).
fn triplet() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "aarch64-linux-gnu"
    } else {
        "x86_64-linux-gnu"
    }
}

/// The system directories of the image's glibc loader, as found from where its libc is;
/// `None` when the hook does not recognise the layout.
pub fn system_dirs(root: &Root) -> Option<Vec<String>> {
    let t = triplet();
    let exists = |p: &str| root.resolve(p).is_ok();
    if exists(&format!("/lib/{t}/libc.so.6")) || exists(&format!("/usr/lib/{t}/libc.so.6")) {
        return Some(vec![
            format!("/lib/{t}"),
            format!("/usr/lib/{t}"),
            "/lib".into(),
            "/usr/lib".into(),
        ]);
    }
    if exists("/lib64/libc.so.6") || exists("/usr/lib64/libc.so.6") {
        return Some(vec!["/lib64".into(), "/usr/lib64".into()]);
    }
    None
}

/// Why the image's linker cache must be rebuilt for `folders` holding `sonames`, or `None`
/// when the loader finds them as it is. `ld_library_path` is the container's own.
pub fn rebuild_reason(
    root: &Root,
    folders: &[String],
    sonames: &[&str],
    ld_library_path: Option<&str>,
) -> anyhow::Result<Option<String>> {
    let Some(mut searched) = system_dirs(root) else {
        return Ok(Some(
            "the image has no glibc in a layout graft-hook knows".into(),
        ));
    };
    searched.extend(
        ld_library_path
            .unwrap_or_default()
            .split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| d.trim_end_matches('/').to_string()),
    );
    if let Some(f) = folders.iter().find(|f| !searched.contains(f)) {
        return Ok(Some(format!(
            "{f} is not searched by the image's loader without a cache entry"
        )));
    }
    let cache = inroot::read_regular(root, "/etc/ld.so.cache", MAX_CACHE)?.unwrap_or_default();
    if let Some(s) = sonames
        .iter()
        .find(|s| memchr::memmem::find(&cache, s.as_bytes()).is_some())
    {
        return Ok(Some(format!("the image's ld.so.cache already names {s}")));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Fixture;

    fn reason(f: &Fixture, folders: &[&str], lp: Option<&str>) -> Option<String> {
        let root = inroot::open_root(&f.root).unwrap();
        let folders: Vec<String> = folders.iter().map(|s| s.to_string()).collect();
        rebuild_reason(&root, &folders, &["libcuda.so.1", "libnvidia-ml.so.1"], lp).unwrap()
    }

    #[test]
    fn debian_and_red_hat_images_find_libraries_in_their_system_directories() {
        let t = triplet();
        let debian = Fixture::new();
        debian.write(&format!("usr/lib/{t}/libc.so.6"), "libc");
        debian.link("lib", "usr/lib");
        assert_eq!(reason(&debian, &[&format!("/usr/lib/{t}")], None), None);
        assert_eq!(reason(&debian, &[&format!("/lib/{t}")], None), None);
        let r = reason(&debian, &["/usr/lib64"], None).unwrap();
        assert!(r.contains("/usr/lib64"), "{r}");

        let rhel = Fixture::new();
        rhel.write("usr/lib64/libc.so.6", "libc");
        rhel.link("lib64", "usr/lib64");
        assert_eq!(reason(&rhel, &["/usr/lib64"], None), None);
        assert!(reason(&rhel, &[&format!("/usr/lib/{t}")], None).is_some());
    }

    #[test]
    fn ld_library_path_counts_and_a_cache_entry_or_no_glibc_forces_a_rebuild() {
        let t = triplet();
        let f = Fixture::new();
        f.write(&format!("usr/lib/{t}/libc.so.6"), "libc");
        let gke = "/usr/local/nvidia/lib64";
        assert!(reason(&f, &[gke], None).is_some());
        assert_eq!(
            reason(
                &f,
                &[gke],
                Some("/usr/local/nvidia/lib:/usr/local/nvidia/lib64/")
            ),
            None
        );
        f.write(
            "etc/ld.so.cache",
            "glibc-ld.so.cache1.1 ... libcuda.so.1 ...",
        );
        let r = reason(&f, &[&format!("/usr/lib/{t}")], None).unwrap();
        assert!(r.contains("libcuda.so.1"), "{r}");

        let busybox = Fixture::new();
        busybox.write("bin/busybox", "static");
        let r = reason(&busybox, &[&format!("/usr/lib/{t}")], None).unwrap();
        assert!(r.contains("no glibc"), "{r}");
    }

    #[test]
    fn a_libc_behind_a_link_out_of_the_root_does_not_count() {
        let t = triplet();
        let f = Fixture::new();
        // The host's decoy has a libc; the image's library directory points there. Inside
        // the root that leads nowhere, so the image has no glibc graft-hook knows.
        std::fs::write(f.decoy.join("lib/libc.so.6"), "decoy libc").unwrap();
        f.link(&format!("usr/lib/{t}"), "/{D}/lib");
        let r = reason(&f, &[&format!("/usr/lib/{t}")], None).unwrap();
        assert!(r.contains("no glibc"), "{r}");
    }
}
