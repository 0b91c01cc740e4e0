//! What a record may ask of a container beyond being well formed: the injection policy both
//! daemons apply, graft-driver before it writes a record (so a violation fails the claim at
//! prepare, where `kubectl describe` shows it) and graft-nri before it edits a spec (so a
//! record written by anything else, or by a bug, is refused).
//!
//! - Mounts ([`mounts`]): binds from the node's allowed roots or the few directories graft
//!   serves from its state directory, with fixed safe options, never onto a path that
//!   holds the container's identity, credentials or kernel views.
//! - Hooks ([`hooks`]): graft-hook at its installed path, with the exact arguments
//!   graft-driver emits, the fixed environment [`HOOK_ENV`], at createContainer.
//! - Device nodes ([`nodes`]): never one of the kernel's raw memory, port or log devices.
//! - Environment follows [`crate::env::check_env`] (checked with the record's structure).

pub mod hooks;
pub mod mounts;
pub mod nodes;
pub mod published;

use std::path::Path;

use crate::error::InvalidRecord;
use crate::format::{ClaimRecord, ContainerEdits};
use crate::paths::{is_clean_absolute, is_under};

pub use hooks::{
    default_ldconfig, HOOK_ENV, HOOK_NAME, HOOK_SUBCOMMANDS, LDCONFIG_CANDIDATES,
    MAX_HOOK_TIMEOUT_S,
};
pub use mounts::{nvidia_mount_roots, MOUNT_OPTIONS, NVIDIA_HOST_ROOTS};

/// Where graft-driver installs graft-hook on the host unless told otherwise.
pub const DEFAULT_HOOK_PATH: &str = "/var/lib/graft/bin/graft-hook";

/// The node's injection policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectionPolicy {
    mount_roots: Vec<String>,
    /// The operator's own roots (served directories): sources there are also checked on
    /// the host when a container is created ([`InjectionPolicy::is_served`]).
    served_roots: Vec<String>,
    hook_path: String,
    /// graft's state directory: only what [`mounts`] names of it may be mounted.
    state_dir: String,
    /// The host ldconfigs graft-hook may run (one when configured, else the candidates
    /// graft-driver picks from); empty: no record may name one.
    ldconfigs: Vec<String>,
}

fn unclean(field: &str, p: &str) -> InvalidRecord {
    InvalidRecord {
        field: field.into(),
        reason: format!("{p:?} is not a clean absolute path"),
    }
}

impl InjectionPolicy {
    /// `extra_roots` are the node's allowed mount roots (each a clean absolute path, else an
    /// error naming it); of `state_dir` only what graft serves from it is allowed.
    pub fn new(
        state_dir: &Path,
        hook_path: &str,
        extra_roots: &[String],
    ) -> Result<Self, InvalidRecord> {
        let mut roots = extra_roots.to_vec();
        for r in &roots {
            if !is_clean_absolute(r) {
                return Err(unclean("allowed mount roots", r));
            }
        }
        if !is_clean_absolute(hook_path) {
            return Err(unclean("hook path", hook_path));
        }
        let state = state_dir.to_string_lossy().into_owned();
        if !is_clean_absolute(&state) || state == "/" {
            return Err(unclean("state directory", &state));
        }
        roots.sort();
        roots.dedup();
        Ok(InjectionPolicy {
            mount_roots: roots,
            served_roots: Vec::new(),
            hook_path: hook_path.to_string(),
            state_dir: state,
            ldconfigs: Vec::new(),
        })
    }

    /// The policy of a node: `extra_roots` (the operator's, as given on a command line:
    /// entries are trimmed, empty ones ignored) plus `family_roots`, the mount roots the
    /// enabled device families contribute (NVIDIA's: [`nvidia_mount_roots`]).
    pub fn for_node(
        state_dir: &Path,
        hook_path: &str,
        family_roots: &[String],
        extra_roots: &[String],
    ) -> Result<Self, InvalidRecord> {
        let mut roots: Vec<String> = extra_roots
            .iter()
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect();
        let served = roots.clone();
        roots.extend(family_roots.iter().cloned());
        let mut policy = Self::new(state_dir, hook_path, &roots)?;
        policy.served_roots = served;
        Ok(policy)
    }

    /// The host ldconfig graft-hook's `--ldconfig` must name (graft-driver's configured or
    /// detected one, [`default_ldconfig`]).
    pub fn with_ldconfig(mut self, ldconfig: &str) -> Result<Self, InvalidRecord> {
        if !is_clean_absolute(ldconfig) {
            return Err(unclean("ldconfig", ldconfig));
        }
        self.ldconfigs = vec![ldconfig.to_string()];
        Ok(self)
    }

    /// `--ldconfig` may name any of the ldconfigs graft-driver picks from for
    /// `driver_root` ([`LDCONFIG_CANDIDATES`]): for graft-nri, which may not see the host's
    /// files to pick the same one. All are the system's own; graft-hook runs one only when
    /// root owns it and nobody else may write it.
    pub fn with_ldconfig_candidates(self, driver_root: &Path) -> Result<Self, InvalidRecord> {
        let root = driver_root.to_string_lossy();
        let root = root.trim_end_matches('/');
        let mut out = self;
        out.ldconfigs.clear();
        for c in LDCONFIG_CANDIDATES {
            let c = c.replace("{root}", root);
            if !is_clean_absolute(&c) {
                return Err(unclean("ldconfig", &c));
            }
            if !out.ldconfigs.contains(&c) {
                out.ldconfigs.push(c);
            }
        }
        Ok(out)
    }

    /// Whether `source` is an entry of a served directory: under one of the operator's own
    /// roots and not under a root graft itself provides (`/dev`, the state directory, the
    /// NVIDIA driver's). Such entries are opened without following symlinks
    /// ([`crate::nofollow`]) before a container gets them.
    pub fn is_served(&self, source: &str) -> bool {
        let own = |r: &&String| !self.served_roots.contains(r);
        self.served_roots.iter().any(|r| is_under(source, r))
            && !is_under(source, "/dev")
            && !is_under(source, &self.state_dir)
            && !self
                .mount_roots
                .iter()
                .filter(own)
                .any(|r| is_under(source, r))
    }

    /// The allowed mount roots, sorted.
    pub fn mount_roots(&self) -> &[String] {
        &self.mount_roots
    }

    /// graft-hook's installed host path.
    pub fn hook_path(&self) -> &str {
        &self.hook_path
    }

    /// graft's state directory.
    pub fn state_dir(&self) -> &str {
        &self.state_dir
    }

    /// The ldconfigs `--ldconfig` may name.
    pub fn ldconfigs(&self) -> &[String] {
        &self.ldconfigs
    }

    /// The only `--params-copy` graft-hook may be given ([`crate::params::params_copy_base`]).
    pub fn params_copy(&self) -> String {
        crate::params::params_copy_base(Path::new(&self.state_dir))
            .to_string_lossy()
            .into_owned()
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
        for (i, m) in edits.mounts.iter().enumerate() {
            mounts::check(self, &format!("{at}.mounts[{i}]"), m)?;
        }
        for (i, h) in edits.hooks.iter().enumerate() {
            hooks::check(self, &format!("{at}.hooks[{i}]"), h)?;
        }
        for (i, n) in edits.device_nodes.iter().enumerate() {
            nodes::check(&format!("{at}.device_nodes[{i}]"), n)?;
        }
        Ok(())
    }
}

/// The path of the params copy for one container, below the state directory (the rule is
/// [`crate::params`]'s).
pub fn params_copy_path(state_dir: &Path, container_id: &str) -> Option<std::path::PathBuf> {
    crate::params::params_copy_for(&crate::params::params_copy_base(state_dir), container_id)
}

#[cfg(test)]
mod driver_dir_tests;
#[cfg(test)]
mod tests;
