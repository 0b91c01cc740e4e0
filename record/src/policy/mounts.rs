//! Which binds a record may add. Sources: the node's allowed roots, and of graft's state
//! directory only what graft serves from it (an MPS tenancy's pipe and shm directories, the
//! NVIDIA driver's prepared directories);
//! nothing that holds the state directory or graft-hook. Options: a fixed list that always
//! includes `nosuid` and `nodev`. Destinations: never `/`, `/dev` itself, the container's
//! identity and name-service files, its service-account credentials, or `/proc` and `/sys`.

use std::path::Path;

use super::InjectionPolicy;
use crate::driver_dir;
use crate::error::InvalidRecord;
use crate::format::Mount;
use crate::paths::{is_clean_absolute, is_under};

/// Mount options a record may use.
pub const MOUNT_OPTIONS: &[&str] = &[
    "ro", "rw", "nosuid", "nodev", "noexec", "bind", "rbind", "private", "rprivate", "slave",
    "rslave",
];
/// The mount roots the NVIDIA driver at `driver_root` (a host path) contributes: the
/// driver root as a whole (a driver container's `/run/nvidia/driver`), or
/// [`NVIDIA_HOST_ROOTS`] when the driver is installed on the host itself (`/`). Here, not
/// in graft-driver's NVIDIA backend, because graft-nri, which has no backends, needs it too.
pub fn nvidia_mount_roots(driver_root: &Path) -> Vec<String> {
    if driver_root == Path::new("/") {
        NVIDIA_HOST_ROOTS.iter().map(|s| s.to_string()).collect()
    } else {
        vec![driver_root.to_string_lossy().into_owned()]
    }
}

/// With the NVIDIA driver installed on the host itself (driver root `/`), the host
/// directories its user-space files live in on the layouts graft supports: these, not the
/// whole host, are the allowed mount roots. A driver root other than `/` (a driver
/// container's `/run/nvidia/driver`) is allowed as a whole.
pub const NVIDIA_HOST_ROOTS: &[&str] = &[
    "/usr/lib",
    "/usr/lib64",
    "/lib",
    "/lib64",
    "/usr/bin",
    "/usr/sbin",
    "/bin",
    "/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/local/nvidia",
    "/usr/share/nvidia",
    "/usr/share/vulkan",
    "/usr/share/glvnd",
    "/usr/share/egl",
    "/etc/vulkan",
    "/etc/OpenCL",
    "/run/nvidia-persistenced",
    "/run/nvidia-fabricmanager",
];
/// Container paths no record may mount onto, nor onto anything below them.
const FORBIDDEN_BELOW: &[&str] = &["/proc", "/sys"];
/// Container paths no record may mount onto, below, or above (a bind onto `/etc` or
/// `/var/run/secrets` would replace them just the same): what the runtime and kubelet put
/// there is the container's identity, name service and credentials.
pub const PROTECTED_DESTINATIONS: &[&str] = &[
    "/etc/passwd",
    "/etc/shadow",
    "/etc/group",
    "/etc/gshadow",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/var/run/secrets/kubernetes.io",
    "/run/secrets/kubernetes.io",
    "/var/run/secrets/eks.amazonaws.com",
    "/run/secrets/eks.amazonaws.com",
];
/// What graft serves from its state directory, below it: `mps/<gpu uuid>/t-<n>/pipe` and
/// `.../shm`, an MPS tenancy's directories (graft-driver's `mps` module), and
/// `nvidia/driver/<key>`, a driver version's prepared files (`crate::driver_dir`).
const MPS_DIR: &str = "mps";
const MPS_ENTRIES: &[&str] = &["pipe", "shm"];

/// Whether `source` (clean absolute, below `state`) is a directory graft serves from its
/// state directory.
fn served_from_state(state: &str, source: &str) -> bool {
    let Some(rest) = source.strip_prefix(state).and_then(|r| r.strip_prefix('/')) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let uuid_ok = crate::names::is_device_uuid;
    let tenancy_ok = |t: &str| {
        t.strip_prefix("t-")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    matches!(parts.as_slice(), [m, u, t, e]
        if *m == MPS_DIR && uuid_ok(u) && tenancy_ok(t) && MPS_ENTRIES.contains(e))
        || driver_copy(state, source)
}

/// Whether `source` is a driver's prepared directory, `<state>/nvidia/driver/<key>`.
fn driver_copy(state: &str, source: &str) -> bool {
    let base = format!(
        "{}/{}",
        state.trim_end_matches('/'),
        driver_dir::BELOW_STATE
    );
    source
        .strip_prefix(&base)
        .and_then(|r| r.strip_prefix('/'))
        .is_some_and(driver_dir::is_key)
}

pub(super) fn check(p: &InjectionPolicy, f: &str, m: &Mount) -> Result<(), InvalidRecord> {
    let bad = |field: &str, reason: String| {
        Err(InvalidRecord {
            field: format!("{f}.{field}"),
            reason,
        })
    };
    if m.kind != "bind" {
        return bad(
            "type",
            format!("mount type {:?}: graft only bind-mounts", m.kind),
        );
    }
    let src = m.source.as_str();
    if !is_clean_absolute(src) {
        return bad(
            "source",
            format!("mount source {src:?} is not a clean absolute path"),
        );
    }
    // A source holding the state directory or graft-hook would hand a tenant graft's own
    // records and binary, whatever root it falls under.
    for (what, own) in [
        ("graft's state directory", p.state_dir.as_str()),
        ("graft-hook", p.hook_path.as_str()),
    ] {
        if is_under(own, src) {
            return bad(
                "source",
                format!("mount source {src:?} holds {what} {own:?}"),
            );
        }
    }
    if is_under(src, &p.state_dir) {
        if !served_from_state(&p.state_dir, src) {
            return bad(
                "source",
                format!(
                    "mount source {src:?} is in graft's state directory but not a directory \
                     graft serves from it (an MPS tenancy's pipe or shm, a driver's prepared \
                     directory)"
                ),
            );
        }
    } else if !p.mount_roots.iter().any(|r| is_under(src, r)) {
        return bad(
            "source",
            format!(
                "mount source {src:?} is outside the allowed roots {:?}",
                p.mount_roots
            ),
        );
    }
    check_destination(&m.destination).or_else(|why| {
        bad(
            "destination",
            format!(
                "mount destination {:?} is not allowed: {why}",
                m.destination
            ),
        )
    })?;
    if let Some(o) = m
        .options
        .iter()
        .find(|o| !MOUNT_OPTIONS.contains(&o.as_str()))
    {
        return bad(
            "options",
            format!("mount option {o:?} is not one of {MOUNT_OPTIONS:?}"),
        );
    }
    let has = |o: &str| m.options.iter().any(|x| x == o);
    for needed in ["nosuid", "nodev"] {
        if !has(needed) {
            return bad("options", format!("mount of {src:?} lacks {needed}"));
        }
    }
    if has("ro") && has("rw") {
        return bad("options", "both ro and rw given".to_string());
    }
    // Every GPU container shares it: a writable bind would be a channel between tenants.
    if is_under(src, &p.state_dir) && driver_copy(&p.state_dir, src) && !has("ro") {
        return bad(
            "options",
            format!("mount of the driver's prepared directory {src:?} lacks ro"),
        );
    }
    Ok(())
}

/// Why a mount destination is refused; the message follows "mount destination ... is not
/// allowed: ".
#[derive(Debug, thiserror::Error)]
pub(super) enum BadDestination {
    #[error("not a clean absolute path")]
    Unclean,
    #[error("it would replace the container's root or its device directory")]
    RootOrDev,
    #[error("the kernel's views (/proc, /sys)")]
    KernelViews,
    #[error("it would replace {0}, the container's identity or credentials")]
    Protected(&'static str),
}

pub(super) fn check_destination(d: &str) -> Result<(), BadDestination> {
    // Clean: runc resolves it in the container's root, and `..` must not walk a rule.
    if !is_clean_absolute(d) {
        return Err(BadDestination::Unclean);
    }
    if d == "/" || d == "/dev" {
        return Err(BadDestination::RootOrDev);
    }
    if FORBIDDEN_BELOW.iter().any(|r| is_under(d, r)) {
        return Err(BadDestination::KernelViews);
    }
    if let Some(p) = PROTECTED_DESTINATIONS
        .iter()
        .find(|p| is_under(d, p) || is_under(p, d))
    {
        return Err(BadDestination::Protected(p));
    }
    Ok(())
}
