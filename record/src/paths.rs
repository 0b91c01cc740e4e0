//! Path rules shared by both daemons and graft-hook: what counts as a clean absolute path,
//! and containment by whole components.

use std::path::Path;

/// Absolute, no NUL, and nothing but normal components after the root: no `.`, no `..`,
/// no empty component a string comparison could be fooled by.
pub fn is_clean_absolute(p: &str) -> bool {
    // Checked on the string: `Path::components` silently drops `.` and repeated slashes.
    let Some(rest) = p.strip_prefix('/') else {
        return false;
    };
    !p.contains('\0')
        && (rest.is_empty()
            || rest
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".."))
}

/// Whether clean absolute `p` is `root` or below it, by whole components (`/devx` is not
/// under `/dev`).
pub fn is_under(p: &str, root: &str) -> bool {
    Path::new(p).starts_with(Path::new(root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_paths() {
        for ok in ["/", "/dev/fuse", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"] {
            assert!(is_clean_absolute(ok), "{ok}");
        }
        for bad in [
            "",
            "dev",
            "/dev/../etc",
            "/dev/./x",
            "/a//b",
            "/a/",
            "/a\0b",
        ] {
            assert!(!is_clean_absolute(bad), "{bad:?}");
        }
    }

    #[test]
    fn containment_is_by_component() {
        assert!(is_under("/dev/fuse", "/dev"));
        assert!(is_under("/dev", "/dev"));
        assert!(!is_under("/devx/fuse", "/dev"));
        assert!(is_under("/anything", "/"));
    }
}
