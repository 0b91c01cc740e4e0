//! Symlinks followed inside the driver root, the way the driver root's own processes see
//! them: an absolute target starts at the driver root, not at this process's `/` (which
//! may be a DaemonSet's) nor at the host's (a driver container's links name its own
//! files). A mount source must be the file itself: a bind mount follows a symlink in the
//! host's namespace, where it may lead somewhere else entirely.

use std::collections::VecDeque;

use super::roots::Roots;

/// As many links as the kernel follows in one lookup.
const MAX_LINKS: usize = 40;

/// Why a path could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// A component is missing or unreadable.
    Missing,
    /// A link leads above the driver root.
    Escapes,
    /// More than [`MAX_LINKS`] links.
    Loop,
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unresolved::Missing => "a link dangles",
            Unresolved::Escapes => "a link leads out of the driver root",
            Unresolved::Loop => "too many links",
        })
    }
}

/// `path` (absolute, inside the driver root) with every symlink in it followed, as a path
/// inside the driver root.
pub fn resolve(roots: &Roots, path: &str) -> Result<String, Unresolved> {
    let mut done: Vec<String> = Vec::new();
    let mut todo: VecDeque<String> = parts(path).collect();
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        if part == ".." {
            done.pop().ok_or(Unresolved::Escapes)?;
            continue;
        }
        done.push(part);
        let here = format!("/{}", done.join("/"));
        let visible = roots.driver_visible(&here);
        let meta = std::fs::symlink_metadata(&visible).map_err(|_| Unresolved::Missing)?;
        if !meta.file_type().is_symlink() {
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(Unresolved::Loop);
        }
        let target = std::fs::read_link(&visible).map_err(|_| Unresolved::Missing)?;
        let target = target.to_str().ok_or(Unresolved::Missing)?;
        done.pop();
        if target.starts_with('/') {
            done.clear();
        }
        for p in parts(target).collect::<Vec<_>>().into_iter().rev() {
            todo.push_front(p);
        }
    }
    Ok(format!("/{}", done.join("/")))
}

fn parts(path: &str) -> impl Iterator<Item = String> + '_ {
    path.split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Roots) {
        let host = tempfile::tempdir().unwrap();
        let root = host.path().join("run/nvidia/driver");
        std::fs::create_dir_all(root.join("usr/local/nvidia/bin")).unwrap();
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::fs::write(root.join("usr/local/nvidia/bin/nvidia-smi"), "").unwrap();
        let roots = Roots {
            host: host.path().to_path_buf(),
            driver: "/run/nvidia/driver".into(),
        };
        (host, roots)
    }

    #[test]
    fn absolute_and_relative_links_stay_in_the_root() {
        let (host, roots) = setup();
        let root = host.path().join("run/nvidia/driver");
        symlink("/usr/local/nvidia/bin/nvidia-smi", root.join("usr/bin/abs")).unwrap();
        symlink("../local/nvidia/bin/nvidia-smi", root.join("usr/bin/rel")).unwrap();
        symlink("usr", root.join("u")).unwrap();
        let want = Ok("/usr/local/nvidia/bin/nvidia-smi".to_string());
        assert_eq!(resolve(&roots, "/usr/bin/abs"), want);
        assert_eq!(resolve(&roots, "/usr/bin/rel"), want);
        assert_eq!(resolve(&roots, "/u/bin/./abs"), want);
        assert_eq!(resolve(&roots, "/usr/bin"), Ok("/usr/bin".to_string()));
    }

    #[test]
    fn escapes_loops_and_missing_files_are_refused() {
        let (host, roots) = setup();
        let root = host.path().join("run/nvidia/driver");
        symlink("../../../../etc/passwd", root.join("usr/bin/up")).unwrap();
        symlink("loop", root.join("usr/bin/loop")).unwrap();
        symlink("/nowhere", root.join("usr/bin/dangling")).unwrap();
        assert_eq!(resolve(&roots, "/usr/bin/up"), Err(Unresolved::Escapes));
        assert_eq!(resolve(&roots, "/usr/bin/loop"), Err(Unresolved::Loop));
        assert_eq!(
            resolve(&roots, "/usr/bin/dangling"),
            Err(Unresolved::Missing)
        );
    }
}
