//! The one naming rule for the copies of the NVIDIA driver's params file that graft-hook
//! mounts over a container's own (disable-device-node-modification).
//!
//! graft-driver gives graft-hook `--params-copy <state>/nvidia/params` ([`params_copy_base`]);
//! graft-hook names each container's copy `<base>.<container id>` ([`params_copy_for`]),
//! plus a suffix for the MIG capability files' copies ([`COPY_SUFFIXES`]); graft-nri removes
//! the copies of containers that are gone ([`container_of`]). A container id is 1 to 128 of
//! `[A-Za-z0-9_-]` ([`is_container_id`]), so no id can leave the directory or end early.

use std::path::{Path, PathBuf};

/// Where, below the state directory, the per-container copies are kept
/// (`<this>.<container id>`).
pub const PARAMS_COPY: &str = "nvidia/params";

/// The suffix of the copy of the MIG `config` capability file.
pub const MIG_CONFIG_SUFFIX: &str = ".mig-config";
/// The suffix of the copy of the MIG `monitor` capability file.
pub const MIG_MONITOR_SUFFIX: &str = ".mig-monitor";
/// Every suffix a container's copies may have after `<base>.<container id>`: the params
/// file's own copy has none.
pub const COPY_SUFFIXES: [&str; 3] = ["", MIG_CONFIG_SUFFIX, MIG_MONITOR_SUFFIX];

/// The file name of [`PARAMS_COPY`]: what every copy's name starts with, then a `.`.
const STEM: &str = "params";

/// The longest container id accepted.
const MAX_ID: usize = 128;

/// The only `--params-copy` graft-hook may be given: `<state_dir>/nvidia/params`.
pub fn params_copy_base(state_dir: &Path) -> PathBuf {
    state_dir.join(PARAMS_COPY)
}

/// Whether `id` may name a container's copy: 1 to 128 of `[A-Za-z0-9_-]`.
pub fn is_container_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `<base>.<container id>`, the params copy of one container; `None` when the id is not
/// one ([`is_container_id`]) or `base` has no file name.
pub fn params_copy_for(base: &Path, container_id: &str) -> Option<PathBuf> {
    if !is_container_id(container_id) {
        return None;
    }
    let mut name = base.file_name()?.to_os_string();
    name.push(".");
    name.push(container_id);
    Some(base.with_file_name(name))
}

/// The container whose copy `file_name` (an entry of the copies' directory) is:
/// `params.<id>` or `params.<id><suffix>` with a suffix of [`COPY_SUFFIXES`]. `None` for
/// any other name.
pub fn container_of(file_name: &str) -> Option<&str> {
    let rest = file_name.strip_prefix(STEM)?.strip_prefix('.')?;
    // An id has no `.`, so it ends at the first one; what follows is the suffix.
    let end = rest.find('.').unwrap_or(rest.len());
    let (id, suffix) = rest.split_at(end);
    (is_container_id(id) && COPY_SUFFIXES.contains(&suffix)).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_is_below_the_state_directory() {
        assert_eq!(
            params_copy_base(Path::new("/var/lib/graft")),
            Path::new("/var/lib/graft/nvidia/params")
        );
    }

    #[test]
    fn copies_are_named_per_container() {
        let base = Path::new("/var/lib/graft/nvidia/params");
        assert_eq!(
            params_copy_for(base, "abc-1_2").unwrap(),
            Path::new("/var/lib/graft/nvidia/params.abc-1_2")
        );
        assert!(params_copy_for(base, &"a".repeat(128)).is_some());
        let long = "a".repeat(129);
        for bad in ["", "../x", "a/b", ".", "a b", "a\0b", "a.b", long.as_str()] {
            assert!(params_copy_for(base, bad).is_none(), "{bad:?}");
        }
        assert!(params_copy_for(Path::new("/"), "c1").is_none());
    }

    #[test]
    fn a_copys_name_gives_its_container_back() {
        let base = Path::new("/s/nvidia/params");
        for suffix in COPY_SUFFIXES {
            let copy = params_copy_for(base, "c-1").unwrap();
            let name = format!("{}{suffix}", copy.file_name().unwrap().to_str().unwrap());
            assert_eq!(container_of(&name), Some("c-1"), "{name}");
        }
        for other in [
            "params",
            "params.",
            "params..mig-config",
            "params.c1.other",
            "paramsx.c1",
            "other.c1",
            "params.a b",
        ] {
            assert_eq!(container_of(other), None, "{other}");
        }
    }
}
