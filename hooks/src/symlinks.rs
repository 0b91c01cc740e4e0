//! create-symlinks: recreates the driver's library symlinks inside the container.

use std::io::ErrorKind;
use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context};

pub fn create(rootfs: &Path, links: &[String]) -> anyhow::Result<()> {
    for spec in links {
        let Some((target, link)) = spec.split_once("::") else {
            bail!("--link {spec:?}: expected TARGET::LINK");
        };
        let at = inside(rootfs, link).with_context(|| format!("--link {spec:?}"))?;
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                if std::fs::read_link(&at)?.as_os_str() == target {
                    continue;
                }
                std::fs::remove_file(&at)?;
            }
            // A real file of that name belongs to the image: leave it.
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("{}", at.display())),
        }
        symlink(target, &at).with_context(|| format!("linking {} -> {target}", at.display()))?;
    }
    Ok(())
}

/// `link` (absolute, inside the container) under `rootfs`, refusing `..` and any existing
/// symlink on the way, which could lead outside the container.
fn inside(rootfs: &Path, link: &str) -> anyhow::Result<PathBuf> {
    let rel = Path::new(link);
    if !rel.is_absolute() {
        bail!("link path must be absolute");
    }
    let mut at = rootfs.to_path_buf();
    let comps: Vec<_> = rel.components().skip(1).collect();
    for (i, c) in comps.iter().enumerate() {
        let Component::Normal(name) = c else {
            bail!("link path may not contain {c:?}");
        };
        at.push(name);
        let last = i + 1 == comps.len();
        if !last {
            if let Ok(m) = std::fs::symlink_metadata(&at) {
                if m.file_type().is_symlink() {
                    bail!("{} is a symlink", at.display());
                }
            }
        }
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_created_kept_and_replaced() {
        let root = tempfile::tempdir().unwrap();
        let lib = "/usr/lib/x86_64-linux-gnu";
        create(
            root.path(),
            &[
                format!("libcuda.so.580.95.05::{lib}/libcuda.so.1"),
                format!("libcuda.so.1::{lib}/libcuda.so"),
            ],
        )
        .unwrap();
        let at = root.path().join(&lib[1..]);
        assert_eq!(
            std::fs::read_link(at.join("libcuda.so.1")).unwrap(),
            PathBuf::from("libcuda.so.580.95.05")
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
    fn escapes_are_refused() {
        let root = tempfile::tempdir().unwrap();
        assert!(create(root.path(), &["t::/../../etc/x".into()]).is_err());
        assert!(create(root.path(), &["t::relative".into()]).is_err());
        assert!(create(root.path(), &["no-separator".into()]).is_err());
        symlink("/", root.path().join("escape")).unwrap();
        assert!(create(root.path(), &["t::/escape/etc/x".into()]).is_err());
    }
}
