//! A claim's opaque configuration laid over its devices' edits.

use graft_record::{ContainerEdits, DeviceRecord, EnvVar};

use crate::model::Device;
use crate::opaque;

/// Why a device's configuration cannot be applied to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigRefused {
    /// The configuration sets a variable the device itself sets.
    #[error(
        "opaque configuration sets {name}, which the device itself sets; it cannot be \
         overridden"
    )]
    SetsDeviceEnv {
        /// The variable.
        name: String,
    },
    /// A family's optional edits asked of a device they do not apply to.
    #[error("{} apply to {}, not to {device}", .applies.setting, .applies.to)]
    NotApplicable {
        /// The device.
        device: String,
        /// The setting, and what it applies to.
        applies: opaque::Applies,
    },
    /// An optional edit whose files the node lacks.
    #[error("{item} {capability} was asked for, but {provider} has no {capability} files")]
    NoCapabilityFiles {
        /// The edit asked for.
        capability: String,
        /// What one is called, in its family's words.
        item: &'static str,
        /// What provides its files.
        provider: &'static str,
    },
}

/// Splits the configuration's variables of each device (`config_env`, in `records` order)
/// into those every device has with the same value, returned to be stored once as the
/// claim's own, and the rest, added to their device's edits. A container receives the
/// claim's own with any of its devices, so either way it gets the same variables.
pub fn share_config_env(records: &mut [DeviceRecord], config_env: Vec<Vec<EnvVar>>) -> Vec<EnvVar> {
    let shared: Vec<EnvVar> = match config_env.split_first() {
        Some((first, rest)) => first
            .iter()
            .filter(|v| rest.iter().all(|r| r.contains(v)))
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    for (rec, env) in records.iter_mut().zip(config_env) {
        rec.edits
            .env
            .extend(env.into_iter().filter(|v| !shared.contains(v)));
    }
    shared
}

/// The device's edits with the claim's configuration on top, and the variables the
/// configuration adds (kept apart: [`share_config_env`] places them). Configuration may
/// add environment variables but not replace one the device itself sets (its path
/// variable, or graft's own), and may add the device's optional edits it names (NVIDIA
/// driver capabilities).
pub fn apply_config(
    dev: &Device,
    config: Option<&opaque::DeviceConfig>,
) -> Result<(ContainerEdits, Vec<EnvVar>), ConfigRefused> {
    let base = &dev.edits;
    let mut edits = base.clone();
    let mut env = Vec::new();
    let Some(c) = config else {
        return Ok((edits, env));
    };
    for n in &mut edits.device_nodes {
        if c.file_mode.is_some() {
            n.file_mode = c.file_mode;
        }
        if c.uid.is_some() {
            n.uid = c.uid;
        }
        if c.gid.is_some() {
            n.gid = c.gid;
        }
    }
    for (name, value) in &c.env {
        if base.env.iter().any(|e| &e.name == name) {
            return Err(ConfigRefused::SetsDeviceEnv { name: name.clone() });
        }
        env.push(EnvVar {
            name: name.clone(),
            value: value.clone(),
        });
    }
    if let Some(asked) = c.family.optional_edits() {
        if !dev.kind.is_accelerator() {
            return Err(ConfigRefused::NotApplicable {
                device: dev.name.clone(),
                applies: asked.applies,
            });
        }
        for name in asked.names {
            let extra =
                dev.optional_edits
                    .get(name)
                    .ok_or_else(|| ConfigRefused::NoCapabilityFiles {
                        capability: name.to_string(),
                        item: asked.item,
                        provider: asked.provider,
                    })?;
            for m in &extra.mounts {
                if !edits.mounts.iter().any(|x| x.destination == m.destination) {
                    edits.mounts.push(m.clone());
                }
            }
        }
    }
    Ok((edits, env))
}
