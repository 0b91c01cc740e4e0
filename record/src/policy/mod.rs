//! What a record may ask of a container beyond being well formed: the injection policy both
//! daemons apply, graft-driver before it writes a record (so a violation fails the claim at
//! prepare, where `kubectl describe` shows it) and graft-nri before it edits a spec (so a
//! record written by anything else, or by a bug, is refused).
//!
//! - Mounts are binds whose source lies under one of the allowed roots (`/dev`, graft's state
//!   directory, and what the node configures: the NVIDIA driver root, served directories),
//!   with options from a fixed list that always include `nosuid` (and `nodev`, except for
//!   sources under `/dev`), never onto `/`, `/proc` or `/sys`.
//! - Hooks are graft-hook at its installed path, with a known subcommand, the fixed minimal
//!   environment [`HOOK_ENV`], at the createContainer stage, with a timeout.
//! - Environment follows [`crate::env::check_env`] (checked with the record's structure).

use std::path::Path;

use crate::error::InvalidRecord;
use crate::format::{ClaimRecord, ContainerEdits, HookStage};
use crate::paths::{is_clean_absolute, is_under};

/// argv[0] of every hook graft emits.
pub const HOOK_NAME: &str = "graft-hook";
/// Where graft-driver installs graft-hook on the host unless told otherwise.
pub const DEFAULT_HOOK_PATH: &str = "/var/lib/graft/bin/graft-hook";
/// The whole environment of every hook graft emits. Explicit, so that no runtime passes the
/// container's own environment (`LD_PRELOAD`...) to a process that runs as root on the host.
pub const HOOK_ENV: &[&str] = &["PATH=/usr/sbin:/usr/bin:/sbin:/bin"];
/// The subcommands graft-hook has.
pub const HOOK_SUBCOMMANDS: &[&str] = &[
    "nvidia-container",
    "create-symlinks",
    "update-ldcache",
    "disable-device-node-modification",
];
/// Longest hook timeout accepted, in seconds.
pub const MAX_HOOK_TIMEOUT_S: i64 = 60;
/// Where, below the state directory, disable-device-node-modification keeps its per-container
/// copies of the driver's params file (`<this>.<container id>`).
pub const PARAMS_COPY: &str = "nvidia/params";
/// Mount options a record may use.
pub const MOUNT_OPTIONS: &[&str] = &[
    "ro", "rw", "nosuid", "nodev", "noexec", "bind", "rbind", "private", "rprivate", "slave",
    "rslave",
];
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
/// Container paths no record may mount onto.
const FORBIDDEN_DESTINATIONS: &[&str] = &["/proc", "/sys"];

/// The node's injection policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectionPolicy {
    mount_roots: Vec<String>,
    /// The operator's own roots (served directories): sources there are also checked on
    /// the host when a container is created ([`InjectionPolicy::is_served`]).
    served_roots: Vec<String>,
    hook_path: String,
}

impl InjectionPolicy {
    /// `/dev` and `state_dir` are always allowed as mount sources; `extra_roots` adds the
    /// node's own (each a clean absolute path, else an error naming it).
    pub fn new(
        state_dir: &Path,
        hook_path: &str,
        extra_roots: &[String],
    ) -> Result<Self, InvalidRecord> {
        let mut roots = vec!["/dev".to_string(), state_dir.to_string_lossy().into_owned()];
        roots.extend(extra_roots.iter().cloned());
        for r in &roots {
            if !is_clean_absolute(r) {
                return Err(InvalidRecord {
                    field: "allowed mount roots".into(),
                    reason: format!("{r:?} is not a clean absolute path"),
                });
            }
        }
        if !is_clean_absolute(hook_path) {
            return Err(InvalidRecord {
                field: "hook path".into(),
                reason: format!("{hook_path:?} is not a clean absolute path"),
            });
        }
        roots.sort();
        roots.dedup();
        Ok(InjectionPolicy {
            mount_roots: roots,
            served_roots: Vec::new(),
            hook_path: hook_path.to_string(),
        })
    }

    /// The policy of a node: `extra_roots` (as given on a command line: entries are
    /// trimmed, empty ones ignored) plus, when the NVIDIA backend is on, its driver root (or
    /// [`NVIDIA_HOST_ROOTS`] when that is `/`).
    pub fn for_node(
        state_dir: &Path,
        hook_path: &str,
        nvidia_driver_root: Option<&Path>,
        extra_roots: &[String],
    ) -> Result<Self, InvalidRecord> {
        let mut roots: Vec<String> = extra_roots
            .iter()
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect();
        let served = roots.clone();
        match nvidia_driver_root {
            Some(r) if r == Path::new("/") => {
                roots.extend(NVIDIA_HOST_ROOTS.iter().map(|s| s.to_string()))
            }
            Some(r) => roots.push(r.to_string_lossy().into_owned()),
            None => {}
        }
        let mut policy = Self::new(state_dir, hook_path, &roots)?;
        policy.served_roots = served;
        Ok(policy)
    }

    /// Whether `source` is an entry of a served directory: under one of the operator's own
    /// roots and not under a root graft itself provides (`/dev`, the state directory, the
    /// NVIDIA driver's). Such entries are opened without following symlinks
    /// ([`crate::nofollow`]) before a container gets them.
    pub fn is_served(&self, source: &str) -> bool {
        let own = |r: &&String| !self.served_roots.contains(r);
        self.served_roots.iter().any(|r| is_under(source, r))
            && !self
                .mount_roots
                .iter()
                .filter(own)
                .any(|r| is_under(source, r))
    }

    pub fn mount_roots(&self) -> &[String] {
        &self.mount_roots
    }

    pub fn hook_path(&self) -> &str {
        &self.hook_path
    }

    /// Every device of a record.
    pub fn check_record(&self, rec: &ClaimRecord) -> Result<(), InvalidRecord> {
        for (i, dev) in rec.devices.iter().enumerate() {
            self.check_edits(&format!("devices[{i}]({}).edits", dev.name), &dev.edits)?;
        }
        Ok(())
    }

    /// What one device adds to a container. `at` names it in errors.
    pub fn check_edits(&self, at: &str, edits: &ContainerEdits) -> Result<(), InvalidRecord> {
        let bad = |field: String, reason: String| InvalidRecord { field, reason };
        for (i, m) in edits.mounts.iter().enumerate() {
            let f = format!("{at}.mounts[{i}]");
            if m.kind != "bind" {
                return Err(bad(
                    format!("{f}.type"),
                    format!("mount type {:?}: graft only bind-mounts", m.kind),
                ));
            }
            if !self
                .mount_roots
                .iter()
                .any(|r| is_clean_absolute(&m.source) && is_under(&m.source, r))
            {
                return Err(bad(
                    format!("{f}.source"),
                    format!(
                        "mount source {:?} is outside the allowed roots {:?}",
                        m.source, self.mount_roots
                    ),
                ));
            }
            if m.destination == "/"
                || FORBIDDEN_DESTINATIONS
                    .iter()
                    .any(|d| is_under(&m.destination, d))
            {
                return Err(bad(
                    format!("{f}.destination"),
                    format!("mount destination {:?} is not allowed", m.destination),
                ));
            }
            if let Some(o) = m
                .options
                .iter()
                .find(|o| !MOUNT_OPTIONS.contains(&o.as_str()))
            {
                return Err(bad(
                    format!("{f}.options"),
                    format!("mount option {o:?} is not one of {MOUNT_OPTIONS:?}"),
                ));
            }
            let has = |o: &str| m.options.iter().any(|x| x == o);
            if !has("nosuid") {
                return Err(bad(
                    format!("{f}.options"),
                    format!("mount of {:?} lacks nosuid", m.source),
                ));
            }
            if !has("nodev") && !is_under(&m.source, "/dev") {
                return Err(bad(
                    format!("{f}.options"),
                    format!("mount of {:?} lacks nodev", m.source),
                ));
            }
            if has("ro") && has("rw") {
                return Err(bad(
                    format!("{f}.options"),
                    "both ro and rw given".to_string(),
                ));
            }
        }
        for (i, h) in edits.hooks.iter().enumerate() {
            let f = format!("{at}.hooks[{i}]");
            if h.path != self.hook_path {
                return Err(bad(
                    format!("{f}.path"),
                    format!(
                        "hook {:?} is not graft-hook at its installed path {:?}",
                        h.path, self.hook_path
                    ),
                ));
            }
            if h.args.first().map(String::as_str) != Some(HOOK_NAME) {
                return Err(bad(
                    format!("{f}.args"),
                    format!("argv[0] must be {HOOK_NAME:?}"),
                ));
            }
            match h.args.get(1) {
                Some(cmd) if HOOK_SUBCOMMANDS.contains(&cmd.as_str()) => {}
                other => {
                    return Err(bad(
                        format!("{f}.args"),
                        format!("subcommand {other:?} is not one of {HOOK_SUBCOMMANDS:?}"),
                    ))
                }
            }
            if h.env
                .iter()
                .map(String::as_str)
                .ne(HOOK_ENV.iter().copied())
            {
                return Err(bad(
                    format!("{f}.env"),
                    format!("hook environment must be exactly {HOOK_ENV:?}"),
                ));
            }
            if h.stage != HookStage::CreateContainer {
                return Err(bad(
                    format!("{f}.stage"),
                    format!("stage {:?}: graft-hook runs at createContainer", h.stage),
                ));
            }
            match h.timeout {
                Some(t) if (1..=MAX_HOOK_TIMEOUT_S).contains(&t) => {}
                other => {
                    return Err(bad(
                        format!("{f}.timeout"),
                        format!("timeout {other:?} must be 1 to {MAX_HOOK_TIMEOUT_S} seconds"),
                    ))
                }
            }
        }
        Ok(())
    }
}

/// The path of the params copy for one container, below the state directory.
pub fn params_copy_path(state_dir: &Path, container_id: &str) -> Option<std::path::PathBuf> {
    let ok = !container_id.is_empty()
        && container_id.len() <= 128
        && container_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then(|| state_dir.join(format!("{PARAMS_COPY}.{container_id}")))
}

#[cfg(test)]
mod tests;
