//! The one naming rule for the NVIDIA driver's prepared directory: graft-driver copies the
//! files every GPU container gets (the compute and utility libraries and binaries, loader
//! manifests, GSP firmware) of one driver version into `<state>/nvidia/driver/<key>`
//! ([`base`], [`is_key`]), each at its usual container path below the directory; a GPU
//! container gets that directory bound read-only at [`IN_CONTAINER`], and graft-hook links
//! each file's usual path to its copy there ([`copy_of`]).
//!
//! One directory bind instead of one bind per file: the runtime's cost per bind mount (a
//! mountpoint made in the container's layer, three mount calls and their path checks) was
//! most of what a GPU container's start paid over a plain one.

use std::path::{Path, PathBuf};

/// Where every GPU container sees the prepared directory.
pub const IN_CONTAINER: &str = "/usr/lib/graft-nvidia";

/// Where, below the state directory, the prepared directories are kept (`<this>/<key>`).
pub const BELOW_STATE: &str = "nvidia/driver";

/// The longest key.
const MAX_KEY: usize = 96;

/// `<state_dir>/nvidia/driver`.
pub fn base(state_dir: &Path) -> PathBuf {
    state_dir.join(BELOW_STATE)
}

/// Whether `k` may name a prepared directory: 1 to 96 of `[A-Za-z0-9._-]`, not starting
/// with `.` (graft-driver's staging directories do).
pub fn is_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= MAX_KEY
        && !k.starts_with('.')
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
}

/// The in-container path of the copy of the file whose usual path is `file` (clean,
/// absolute).
pub fn copy_of(file: &str) -> String {
    format!("{IN_CONTAINER}{file}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_plain_names() {
        assert!(is_key("580.95.05-1f2e3d4c5b6a7980"));
        for bad in ["", ".tmp-1", "a/b", "..", "a b", &"x".repeat(97)] {
            assert!(!is_key(bad), "{bad:?}");
        }
        assert_eq!(
            copy_of("/usr/bin/nvidia-smi"),
            "/usr/lib/graft-nvidia/usr/bin/nvidia-smi"
        );
    }
}
