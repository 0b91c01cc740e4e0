//! GPU requests the NVIDIA container toolkit would honour, in containers graft gives no GPU.
//!
//! Where the toolkit's runtime is still containerd's default (a node moved from the GPU
//! Operator), it gives a container GPUs from the container's own spec, whoever wrote it: an
//! image's `NVIDIA_VISIBLE_DEVICES=all` (every CUDA base image sets it), a legacy CUDA image
//! (`CUDA_VERSION` without `NVIDIA_REQUIRE_CUDA`, which it reads as "all"), `NVIDIA_IMEX_CHANNELS`,
//! a `/dev/null` bind under `/var/run/nvidia-container-devices`, or a `cdi.k8s.io/`
//! annotation.
//! A container without a GPU claim would so get every GPU of the node, beside graft's
//! allocations. Facts from the toolkit's source (`internal/config/image/cuda_image.go`: which
//! variables, mounts and annotations it reads; "void" or an empty value requests nothing).
//!
//! [`Mode::Clear`] rewrites those requests to nothing (`NVIDIA_VISIBLE_DEVICES=void`, the
//! other variables emptied, the mounts and annotations removed). A variable is emptied, not
//! removed: the NRI of the testbed's containerd 2.x passes a plugin's removal of a variable
//! only to other plugins' additions, not to the spec (`cluster_gpu::unclaimed_container_sees_no_gpu`
//! saw the image's value stay), and the toolkit reads an empty value as no request.
//! [`Mode::Refuse`] refuses the container, naming what it asked;
//! [`Mode::Keep`] leaves them, for a node where NVIDIA's device plugin deliberately runs
//! beside graft (its pods get their GPUs through these very variables). What graft's own
//! records set wins over all of it: a variable the plan sets is not touched here.

use std::collections::HashMap;

use graft_proto::nri;

/// The variable the toolkit reads the GPUs from.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// Variables that ask the toolkit for devices besides GPUs; emptied when they ask anything.
pub const OTHER_REQUESTS: &[&str] = &[
    "NVIDIA_IMEX_CHANNELS",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
];
/// Where the toolkit reads device requests as mounts of `/dev/null`.
pub const MOUNT_ROOT: &str = "/var/run/nvidia-container-devices";
/// The annotation prefix the toolkit reads CDI device requests from (its default
/// `annotation-prefixes`).
pub const ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// What graft-nri does with the requests (`--unclaimed-gpu-requests`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// Rewrite them to request nothing.
    Clear,
    /// Refuse the container.
    Refuse,
    /// Leave them (NVIDIA's device plugin on the same node).
    #[default]
    Keep,
}

/// The requests a container's spec makes of the toolkit, as found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Requests {
    /// `NAME=value` of each variable that asks for something (for `NVIDIA_VISIBLE_DEVICES`
    /// of a legacy image without it: `CUDA_VERSION=<v>`).
    pub env: Vec<String>,
    /// Whether `NVIDIA_VISIBLE_DEVICES` must be set to `void` (it asks, or a legacy image
    /// asks by leaving it out).
    pub void_gpus: bool,
    /// Variables to empty.
    pub blank_env: Vec<String>,
    /// Mount destinations to remove.
    pub mounts: Vec<String>,
    /// Annotation keys to remove.
    pub annotations: Vec<String>,
}

impl Requests {
    /// Whether the container asks for nothing.
    pub fn is_empty(&self) -> bool {
        !self.void_gpus
            && self.blank_env.is_empty()
            && self.mounts.is_empty()
            && self.annotations.is_empty()
    }

    /// What it asks, for a refusal or a log line.
    pub fn describe(&self) -> String {
        let mut parts = self.env.clone();
        parts.extend(self.mounts.iter().map(|m| format!("mount {m}")));
        parts.extend(self.annotations.iter().map(|a| format!("annotation {a}")));
        parts.join(", ")
    }

    /// The adjustment that makes them ask nothing.
    pub fn clear(&self, adj: &mut nri::ContainerAdjustment) {
        if self.void_gpus {
            adj.env.push(key_value(VISIBLE_DEVICES, "void"));
        }
        for name in &self.blank_env {
            adj.env.push(key_value(name, ""));
        }
        for dest in &self.mounts {
            adj.mounts.push(nri::Mount {
                destination: format!("-{dest}"),
                ..Default::default()
            });
        }
        for key in &self.annotations {
            adj.annotations.insert(format!("-{key}"), String::new());
        }
    }
}

fn key_value(key: &str, value: &str) -> nri::KeyValue {
    nri::KeyValue {
        key: key.into(),
        value: value.into(),
        ..Default::default()
    }
}

/// Whether a value of a request variable asks for something: the toolkit reads an empty
/// value, or one that lists `void`, as no request.
fn asks(value: &str) -> bool {
    let items: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    !items.is_empty() && !items.contains(&"void")
}

/// The variables [`find`] reads.
const READ: [&str; 6] = [
    VISIBLE_DEVICES,
    "CUDA_VERSION",
    "NVIDIA_REQUIRE_CUDA",
    OTHER_REQUESTS[0],
    OTHER_REQUESTS[1],
    OTHER_REQUESTS[2],
];

/// The values in force of [`READ`]'s variables.
struct Vars<'a, 'e>(&'a [Option<&'e str>; READ.len()]);

impl<'e> Vars<'_, 'e> {
    fn get(&self, name: &str) -> Option<&'e str> {
        READ.iter().position(|n| *n == name).and_then(|i| self.0[i])
    }
}

/// `path` with `.` and `..` resolved as text, as Go's `filepath.Clean` does.
fn lexical(path: &str) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::from("/");
    for c in std::path::Path::new(path).components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// The requests in a container's `env`, `mounts` and `annotations`, leaving out the
/// variables graft's plan sets (`planned`).
pub fn find(
    env: &[String],
    mounts: &[nri::Mount],
    annotations: &HashMap<String, String>,
    planned: &[&str],
) -> Requests {
    // One pass, no allocation (this runs on every CreateContainer): the last entry of a
    // name is the one in force.
    let mut last: [Option<&str>; READ.len()] = [None; READ.len()];
    for e in env {
        let (k, v) = e.split_once('=').unwrap_or((e.as_str(), ""));
        if let Some(i) = READ.iter().position(|n| *n == k) {
            last[i] = Some(v);
        }
    }
    let vars = Vars(&last);
    let mut r = Requests::default();
    if !planned.contains(&VISIBLE_DEVICES) {
        match vars.get(VISIBLE_DEVICES) {
            Some(v) if asks(v) => {
                r.env.push(format!("{VISIBLE_DEVICES}={v}"));
                r.void_gpus = true;
            }
            Some(_) => {}
            None => {
                let cuda = vars.get("CUDA_VERSION").filter(|v| !v.is_empty());
                let required = vars
                    .get("NVIDIA_REQUIRE_CUDA")
                    .is_some_and(|v| !v.is_empty());
                if let (Some(v), false) = (cuda, required) {
                    r.env
                        .push(format!("CUDA_VERSION={v} (a legacy CUDA image: all GPUs)"));
                    r.void_gpus = true;
                }
            }
        }
    }
    for name in OTHER_REQUESTS.iter().filter(|n| !planned.contains(n)) {
        if let Some(v) = vars.get(name).filter(|v| asks(v)) {
            r.env.push(format!("{name}={v}"));
            r.blank_env.push(name.to_string());
        }
    }
    // Any mount there, whatever its source (the toolkit reads those of /dev/null, after
    // cleaning both paths): none of graft's, and no other use of that directory is known.
    // A path without the directory's name cannot clean to it, and is not cleaned.
    for m in mounts {
        let named = m.destination.contains("nvidia-container-devices");
        if named
            && lexical(&m.destination).starts_with(MOUNT_ROOT)
            && !r.mounts.contains(&m.destination)
        {
            r.mounts.push(m.destination.clone());
        }
    }
    let mut keys: Vec<&String> = annotations
        .keys()
        .filter(|k| k.starts_with(ANNOTATION_PREFIX))
        .collect();
    keys.sort();
    r.annotations = keys.into_iter().cloned().collect();
    r
}

#[cfg(test)]
mod tests;
