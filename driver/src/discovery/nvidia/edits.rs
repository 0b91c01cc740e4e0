//! The container edits that make an NVIDIA device usable, given explicitly (type, major,
//! minor, mode) so that neither the runtime nor graft-nri has to stat anything: the GPU's
//! node, MIG access capabilities, IMEX channels, the control nodes, the driver's files
//! mounted read-only, and graft-hook's createContainer hooks.

use std::collections::BTreeMap;

use graft_record::policy::{HOOK_ENV, HOOK_NAME};
use graft_record::{ContainerEdits, DeviceNode, EnvVar, Hook, HookStage, Mount};

use super::driver_files::{DriverFiles, Roots};
use super::procfs::CapabilityFile;

/// The fixed major of `/dev/nvidia*` (and of nvidiactl and nvidia-modeset).
pub const NVIDIA_MAJOR: i64 = 195;
pub const NVIDIACTL_MINOR: i64 = 255;
pub const MODESET_MINOR: i64 = 254;
const NODE_MODE: u32 = 0o666;

pub const DRIVER_MOUNT_OPTIONS: &[&str] = &["ro", "nosuid", "nodev", "rbind", "rprivate"];
/// Sockets must stay writable (connect needs it); like the toolkit, no `ro` here.
pub const IPC_MOUNT_OPTIONS: &[&str] = &["nosuid", "nodev", "rbind", "rprivate", "noexec"];

/// Where graft-hook and the tools it runs live on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookConfig {
    /// Host path of the graft-hook binary (hook paths resolve on the host).
    pub path: String,
    /// Host path of the ldconfig update-ldcache runs against the container's root.
    pub ldconfig: String,
    /// Host path where disable-device-node-modification keeps its copy of the driver's
    /// params file.
    pub params_copy: String,
}

fn char_node(path: String, major: i64, minor: i64, mode: u32) -> DeviceNode {
    DeviceNode::char(path, major, minor, mode)
}

/// `/dev/nvidia<minor>`.
pub fn gpu_node(minor: u32) -> DeviceNode {
    char_node(
        format!("/dev/nvidia{minor}"),
        NVIDIA_MAJOR,
        i64::from(minor),
        NODE_MODE,
    )
}

/// A MIG capability node under `/dev/nvidia-caps`.
pub fn cap_node(caps_major: u32, cap: CapabilityFile) -> DeviceNode {
    char_node(
        format!("/dev/nvidia-caps/nvidia-cap{}", cap.minor),
        i64::from(caps_major),
        i64::from(cap.minor),
        cap.mode,
    )
}

/// `/dev/nvidia-caps-imex-channels/channel<n>`.
pub fn imex_node(major: u32, channel: u32) -> DeviceNode {
    char_node(
        format!("/dev/nvidia-caps-imex-channels/channel{channel}"),
        i64::from(major),
        i64::from(channel),
        NODE_MODE,
    )
}

/// What every GPU or MIG device brings besides its own nodes: control nodes, the driver's
/// files, the environment and the hooks. Identical for every device of a node, so that
/// graft-nri's merge keeps one copy per container.
pub fn common(
    roots: &Roots,
    files: &DriverFiles,
    majors: &BTreeMap<String, u32>,
    has_modeset: bool,
    hook: &HookConfig,
) -> ContainerEdits {
    let mut e = ContainerEdits::default();
    e.device_nodes.push(char_node(
        "/dev/nvidiactl".into(),
        NVIDIA_MAJOR,
        NVIDIACTL_MINOR,
        NODE_MODE,
    ));
    if has_modeset {
        e.device_nodes.push(char_node(
            "/dev/nvidia-modeset".into(),
            NVIDIA_MAJOR,
            MODESET_MINOR,
            NODE_MODE,
        ));
    }
    if let Some(&uvm) = majors.get("nvidia-uvm") {
        e.device_nodes.push(char_node(
            "/dev/nvidia-uvm".into(),
            i64::from(uvm),
            0,
            NODE_MODE,
        ));
        e.device_nodes.push(char_node(
            "/dev/nvidia-uvm-tools".into(),
            i64::from(uvm),
            1,
            NODE_MODE,
        ));
    }
    let bind = |path: &String, options: &[&str]| Mount {
        source: roots.host_path(path).to_string_lossy().into_owned(),
        destination: path.clone(),
        kind: "bind".into(),
        options: options.iter().map(|s| s.to_string()).collect(),
    };
    for p in files
        .libraries
        .iter()
        .chain(&files.binaries)
        .chain(&files.firmware)
    {
        e.mounts.push(bind(p, DRIVER_MOUNT_OPTIONS));
    }
    for p in &files.sockets {
        e.mounts.push(bind(p, IPC_MOUNT_OPTIONS));
    }
    // Keeps the legacy NVIDIA runtime hook, if the node has one, from injecting again.
    e.env.push(EnvVar {
        name: "NVIDIA_VISIBLE_DEVICES".into(),
        value: "void".into(),
    });
    // An explicit, minimal environment: runc versions whose createContainer hooks inherit
    // the container's environment would otherwise hand an image's LD_PRELOAD to a process
    // that runs as root on the host.
    let graft_hook = |args: Vec<String>| Hook {
        stage: HookStage::CreateContainer,
        path: hook.path.clone(),
        args: std::iter::once(HOOK_NAME.to_string()).chain(args).collect(),
        env: HOOK_ENV.iter().map(|s| s.to_string()).collect(),
        timeout: Some(30),
    };
    if !files.symlinks.is_empty() {
        let mut args = vec!["create-symlinks".to_string()];
        for (target, link) in &files.symlinks {
            args.push("--link".into());
            args.push(format!("{target}::{link}"));
        }
        e.hooks.push(graft_hook(args));
    }
    let mut args = vec![
        "update-ldcache".to_string(),
        "--ldconfig".into(),
        hook.ldconfig.clone(),
    ];
    for d in &files.lib_dirs {
        args.push("--folder".into());
        args.push(d.clone());
    }
    e.hooks.push(graft_hook(args));
    e.hooks.push(graft_hook(vec![
        "disable-device-node-modification".into(),
        "--params-copy".into(),
        hook.params_copy.clone(),
    ]));
    e
}

/// `own` first, then the common part.
pub fn with_common(own: Vec<DeviceNode>, common: &ContainerEdits) -> ContainerEdits {
    let mut e = common.clone();
    let mut nodes = own;
    nodes.append(&mut e.device_nodes);
    e.device_nodes = nodes;
    e
}
