//! The container edits that make an NVIDIA device usable, given explicitly (type, major,
//! minor, mode) so that neither the runtime nor graft-nri has to stat anything: the GPU's
//! node, MIG access capabilities, IMEX channels, the control nodes, the driver's files
//! mounted read-only, and graft-hook's createContainer hook (see `hook_edits`).

use std::collections::BTreeMap;

use graft_record::{ContainerEdits, DeviceNode, EnvVar, Mount};

use super::hook_edits::{container_hook, HookConfig};
use super::prepared::Prepared;
use crate::driver_files::{Capability, CapabilityFile, DriverFile, DriverFiles, Roots};

/// The fixed major of `/dev/nvidia*` (and of nvidiactl and nvidia-modeset).
pub const NVIDIA_MAJOR: i64 = 195;
pub const NVIDIACTL_MINOR: i64 = 255;
pub const MODESET_MINOR: i64 = 254;
const NODE_MODE: u32 = 0o666;

pub const DRIVER_MOUNT_OPTIONS: &[&str] = &["ro", "nosuid", "nodev", "rbind", "rprivate"];
/// Sockets must stay writable (connect needs it); like the toolkit, no `ro` here.
pub const IPC_MOUNT_OPTIONS: &[&str] = &["nosuid", "nodev", "rbind", "rprivate", "noexec"];

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
/// compute and utility files and firmware (one prepared directory when there is one, else
/// a mount each), the sockets, the environment and the hooks.
/// Identical for every device of a node, so that graft-nri's merge keeps one copy per
/// container.
pub fn common(
    roots: &Roots,
    files: &DriverFiles,
    majors: &BTreeMap<String, u32>,
    has_modeset: bool,
    hook: &HookConfig,
    prepared: Option<&Prepared>,
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
    e.mounts = match prepared {
        Some(p) => prepared_mounts(roots, files, p),
        None => default_mounts(roots, files),
    };
    // Keeps the legacy NVIDIA runtime hook, if the node has one, from injecting again.
    e.env.push(EnvVar {
        name: "NVIDIA_VISIBLE_DEVICES".into(),
        value: "void".into(),
    });
    e.hooks.push(container_hook(files, hook, prepared));
    e
}

/// The mounts every GPU container gets: the compute and utility files, GSP firmware and
/// the IPC sockets.
pub fn default_mounts(roots: &Roots, files: &DriverFiles) -> Vec<Mount> {
    let mut mounts = Vec::new();
    for cap in Capability::DEFAULT {
        mounts.extend(
            files
                .files_of(cap)
                .map(|f| bind(roots, f, DRIVER_MOUNT_OPTIONS)),
        );
    }
    let in_place = |p: &String| DriverFile {
        capability: Capability::Compute,
        path: p.clone(),
        destination: p.clone(),
    };
    for p in &files.firmware {
        mounts.push(bind(roots, &in_place(p), DRIVER_MOUNT_OPTIONS));
    }
    mounts.extend(sockets(roots, files));
    mounts
}

/// With a prepared directory: it, bound read-only where graft-hook links its files to, and
/// the sockets (a socket cannot be copied).
pub fn prepared_mounts(roots: &Roots, files: &DriverFiles, p: &Prepared) -> Vec<Mount> {
    let mut mounts = vec![Mount {
        source: p.path.to_string_lossy().into_owned(),
        destination: graft_record::driver_dir::IN_CONTAINER.into(),
        kind: "bind".into(),
        options: DRIVER_MOUNT_OPTIONS.iter().map(|s| s.to_string()).collect(),
    }];
    mounts.extend(sockets(roots, files));
    mounts
}

fn sockets<'a>(roots: &'a Roots, files: &'a DriverFiles) -> impl Iterator<Item = Mount> + 'a {
    files.sockets.iter().map(|p| {
        let f = DriverFile {
            capability: Capability::Compute,
            path: p.clone(),
            destination: p.clone(),
        };
        bind(roots, &f, IPC_MOUNT_OPTIONS)
    })
}

/// The edits of each other capability the node's driver has files for, keyed by its name
/// (`graphics`, `video`, `display`): exactly that capability's mounts. Its links
/// ([`DriverFiles::optional_symlinks`]) are not here: graft-hook recreates links.
pub fn optional(roots: &Roots, files: &DriverFiles) -> BTreeMap<String, ContainerEdits> {
    let mut out = BTreeMap::new();
    for cap in Capability::OPTIONAL {
        let mounts: Vec<Mount> = files
            .files_of(cap)
            .map(|f| bind(roots, f, DRIVER_MOUNT_OPTIONS))
            .collect();
        if !mounts.is_empty() {
            out.insert(
                cap.name().to_string(),
                ContainerEdits {
                    mounts,
                    ..ContainerEdits::default()
                },
            );
        }
    }
    out
}

/// A bind mount of a driver file from the host.
fn bind(roots: &Roots, f: &DriverFile, options: &[&str]) -> Mount {
    Mount {
        source: roots.host_path(&f.path).to_string_lossy().into_owned(),
        destination: f.destination.clone(),
        kind: "bind".into(),
        options: options.iter().map(|s| s.to_string()).collect(),
    }
}

/// `own` first, then the common part.
pub fn with_common(own: Vec<DeviceNode>, common: &ContainerEdits) -> ContainerEdits {
    let mut e = common.clone();
    let mut nodes = own;
    nodes.append(&mut e.device_nodes);
    e.device_nodes = nodes;
    e
}
