//! The one createContainer hook a GPU container gets: `graft-hook nvidia-container`, which
//! in a single process recreates the driver's library links, decides whether the image's
//! linker needs its cache rebuilt (and runs the host's ldconfig against the container's
//! root only then), turns on CUDA forward compatibility when the image ships a newer
//! `cuda/compat` libcuda, and hides `ModifyDeviceFiles` from the driver's libraries.

use graft_record::policy::{HOOK_ENV, HOOK_NAME};
use graft_record::{Hook, HookStage};

use super::prepared::Prepared;
use crate::driver_files::DriverFiles;

/// Where graft-hook and the tools it runs live on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookConfig {
    /// Host path of the graft-hook binary (hook paths resolve on the host).
    pub path: String,
    /// Host path of the ldconfig run against the container's root when its cache must be
    /// rebuilt.
    pub ldconfig: String,
    /// Host path prefix of the per-container copies of the driver's params file.
    pub params_copy: String,
}

/// The subcommand graft-hook runs for a GPU container.
pub const SUBCOMMAND: &str = "nvidia-container";

/// `graft-hook nvidia-container ...` for a node's driver files, with `--driver-dir` and a
/// `--driver-file` per file when they are in a prepared directory. An explicit, minimal
/// environment: runc versions whose createContainer hooks inherit the container's
/// environment would otherwise hand an image's LD_PRELOAD to a process that runs as root
/// on the host.
pub fn container_hook(files: &DriverFiles, hook: &HookConfig, prepared: Option<&Prepared>) -> Hook {
    let mut args = vec![HOOK_NAME.to_string(), SUBCOMMAND.to_string()];
    if let Some(p) = prepared {
        args.push("--driver-dir".into());
        args.push(graft_record::driver_dir::IN_CONTAINER.into());
        for f in &p.files {
            args.push("--driver-file".into());
            args.push(f.clone());
        }
    }
    // Every capability's links: graft-hook makes those whose target the claim's mounts put
    // in the container, so one hook serves whatever capabilities a claim asks for.
    let optional = files.optional_symlinks.values().flatten();
    for (target, link) in files.symlinks.iter().chain(optional) {
        args.push("--link".into());
        args.push(format!("{target}::{link}"));
    }
    for d in &files.lib_dirs {
        args.push("--folder".into());
        args.push(d.clone());
    }
    args.extend([
        "--ldconfig".into(),
        hook.ldconfig.clone(),
        "--params-copy".into(),
        hook.params_copy.clone(),
        "--driver-version".into(),
        files.version.clone(),
    ]);
    Hook {
        stage: HookStage::CreateContainer,
        path: hook.path.clone(),
        args,
        env: HOOK_ENV.iter().map(|s| s.to_string()).collect(),
        timeout: Some(30),
    }
}
