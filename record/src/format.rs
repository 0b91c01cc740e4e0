//! The record format: one JSON document per prepared claim.
//!
//! A record says which devices the claim holds, what each device puts into a container
//! (device nodes, mounts, env, hooks), the environment the claim itself gives, and which
//! containers of which pods receive which devices. The driver writes it; the NRI plugin
//! reads it. Any change that alters what a reader must do bumps the version, and readers
//! refuse versions they do not know.
//!
//! Versions ([`OLDEST_RECORD_VERSION`] to [`RECORD_VERSION`]):
//! - 1: every variable is in a device's edits.
//! - 2: adds the claim's own `env`, stored once: a container that receives any device of
//!   the claim receives it, before its devices' variables. A writer uses version 2 only for
//!   a record that has claim `env`, so a record without it reads the same to a version-1
//!   reader (one left from before an upgrade, or not yet upgraded).
//!
//! The rule that keeps a rolling update safe (docs/upgrading.md): during an update a node
//! runs the old release's graft-nri beside the new graft-driver, and a rollback runs the old
//! graft-driver over the new one's records. So a release
//! - reads every version the releases it may follow wrote ([`OLDEST_RECORD_VERSION`] never
//!   rises past the version the previous release wrote);
//! - writes each record as the oldest version that holds it ([`ClaimRecord::needed_version`]),
//!   never the newest by default;
//! - adds a version only for content an older reader would mishandle, and a reader refuses a
//!   version it does not know (the container is refused, never injected half).

use serde::{Deserialize, Serialize};

/// Version of the status and absent-device files, and of a record that needs nothing
/// newer.
pub const FORMAT_VERSION: u32 = 1;
/// Newest record version this build reads and writes.
pub const RECORD_VERSION: u32 = 2;
/// Oldest record version this build reads (written by earlier releases).
pub const OLDEST_RECORD_VERSION: u32 = 1;

/// One prepared ResourceClaim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRecord {
    /// Format version, [`OLDEST_RECORD_VERSION`] to [`RECORD_VERSION`]: what
    /// [`ClaimRecord::needed_version`] says when written.
    pub version: u32,
    /// The claim this record is for.
    pub claim: ClaimRef,
    /// The devices allocated to this claim on this node, by this driver.
    pub devices: Vec<DeviceRecord>,
    /// Variables the claim gives every container that receives any of its devices, stored
    /// once rather than in each device's edits (version 2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// The pods that hold the claim (its `status.reservedFor`) and what each container gets.
    #[serde(default)]
    pub pods: Vec<PodRecord>,
}

/// A ResourceClaim by uid, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClaimRef {
    /// The claim's uid.
    pub uid: String,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
}

impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} ({})", self.namespace, self.name, self.uid)
    }
}

/// One allocated device. `name` is unique within the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRecord {
    /// The device's name in the node's ResourceSlice.
    pub name: String,
    /// The pool the device was published in (the node's name).
    #[serde(default)]
    pub pool: String,
    /// The claim's request names this device was allocated for.
    #[serde(default)]
    pub requests: Vec<String>,
    /// What the device adds to a container that receives it.
    #[serde(default)]
    pub edits: ContainerEdits,
}

/// What a device adds to a container's OCI spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerEdits {
    /// Device nodes to create in the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    /// Bind mounts to add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// Environment variables to set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// OCI hooks to add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<Hook>,
}

impl ContainerEdits {
    /// Whether the edits add nothing.
    pub fn is_empty(&self) -> bool {
        self.device_nodes.is_empty()
            && self.mounts.is_empty()
            && self.env.is_empty()
            && self.hooks.is_empty()
    }
}

/// A device node, given explicitly so that the runtime never has to stat the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceNode {
    /// Path inside the container, under /dev.
    pub path: String,
    /// Character or block device.
    #[serde(rename = "type")]
    pub kind: DeviceKind,
    /// The device's major number.
    pub major: i64,
    /// The device's minor number.
    pub minor: i64,
    /// Permission bits; the runtime's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_mode: Option<u32>,
    /// Owner inside the container; the runtime's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Group inside the container; the runtime's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

impl DeviceNode {
    /// A character device with explicit numbers and mode, owner left to the runtime.
    pub fn char(path: impl Into<String>, major: i64, minor: i64, mode: u32) -> Self {
        DeviceNode {
            path: path.into(),
            kind: DeviceKind::Char,
            major,
            minor,
            file_mode: Some(mode),
            uid: None,
            gid: None,
        }
    }
}

/// The kind of a device node, spelled as in the OCI spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeviceKind {
    /// A character device (`c`).
    #[serde(rename = "c")]
    Char,
    /// A block device (`b`).
    #[serde(rename = "b")]
    Block,
}

impl DeviceKind {
    /// The OCI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Char => "c",
            DeviceKind::Block => "b",
        }
    }
}

/// A mount added to the container's OCI spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// Host path of what is mounted.
    pub source: String,
    /// Path inside the container.
    pub destination: String,
    /// Mount type (`bind` when absent).
    #[serde(rename = "type", default = "default_mount_type")]
    pub kind: String,
    /// Mount options (checked against [`crate::policy::MOUNT_OPTIONS`]).
    #[serde(default)]
    pub options: Vec<String>,
}

fn default_mount_type() -> String {
    "bind".to_string()
}

/// An environment variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    /// The variable's name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// An OCI hook. Paths resolve on the host, since the runtime runs the hook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hook {
    /// When the runtime runs it (createContainer when absent).
    #[serde(default)]
    pub stage: HookStage,
    /// Host path of the executable.
    pub path: String,
    /// Its argv, `argv[0]` included.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment (`NAME=value`).
    #[serde(default)]
    pub env: Vec<String>,
    /// Seconds the runtime waits before it kills the hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
}

/// The OCI hook stage a hook runs at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HookStage {
    /// Deprecated by OCI in favour of createRuntime; runs in the runtime's namespace.
    Prestart,
    /// After the container's namespaces are made, in the runtime's namespace.
    CreateRuntime,
    /// In the container's namespaces, before pivot_root (graft-hook's stage).
    #[default]
    CreateContainer,
    /// In the container, before its process starts.
    StartContainer,
    /// After the container's process has started.
    Poststart,
    /// After the container is deleted.
    Poststop,
}

/// A pod holding the claim, and what each of its containers receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRecord {
    /// The pod's uid.
    pub uid: String,
    /// The pod's namespace.
    #[serde(default)]
    pub namespace: String,
    /// The pod's name.
    #[serde(default)]
    pub name: String,
    /// Containers (init containers too) that reference the claim. A container not listed
    /// gets nothing from this claim.
    #[serde(default)]
    pub containers: Vec<ContainerRecord>,
}

/// A container of a pod that references the claim, and the devices it receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    /// The container's name in its pod.
    pub name: String,
    /// Names of [`DeviceRecord`]s of this claim.
    pub devices: Vec<String>,
}

impl ClaimRecord {
    /// The devices a given container of a given pod receives from this claim, in record
    /// order. Empty when the pod or container is not listed.
    pub fn devices_for<'a>(&'a self, pod_uid: &str, container: &str) -> Vec<&'a DeviceRecord> {
        let Some(pod) = self.pods.iter().find(|p| p.uid == pod_uid) else {
            return Vec::new();
        };
        let Some(ctr) = pod.containers.iter().find(|c| c.name == container) else {
            return Vec::new();
        };
        self.devices
            .iter()
            .filter(|d| ctr.devices.iter().any(|n| n == &d.name))
            .collect()
    }

    /// The claim's own variables for a container of a pod: [`ClaimRecord::env`] when the
    /// container receives any device of the claim, else nothing.
    pub fn env_for<'a>(&'a self, pod_uid: &str, container: &str) -> &'a [EnvVar] {
        if self.env.is_empty() || self.devices_for(pod_uid, container).is_empty() {
            return &[];
        }
        &self.env
    }

    /// The oldest version that holds everything in this record: what a writer puts in
    /// `version`.
    pub fn needed_version(&self) -> u32 {
        if self.env.is_empty() {
            OLDEST_RECORD_VERSION
        } else {
            RECORD_VERSION
        }
    }

    /// Whether the record lists this pod at all.
    pub fn holds_pod(&self, pod_uid: &str) -> bool {
        self.pods.iter().any(|p| p.uid == pod_uid)
    }
}
