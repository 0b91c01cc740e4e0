//! One `[[devices]]` entry of devices.toml (the char backend's): its fields and the checks
//! made when the config is read.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::attribute::ConfigAttribute;
use super::invalid::InvalidEntry;
use crate::limits;

/// One `[[devices]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CharEntry {
    /// A device path under /dev, or a glob of them.
    pub path: String,
    /// Device name in the ResourceSlice; only for a single path. Default: the path below
    /// /dev with `/` turned into `-`, lowercased.
    pub name: Option<String>,
    /// Where the node appears in the container; only for a single path. Default: `path`.
    pub container_path: Option<String>,
    /// Permission bits of the node in the container. Default: the host node's.
    pub mode: Option<u32>,
    /// Owner of the node in the container. Default: the host node's.
    pub uid: Option<u32>,
    /// Group of the node in the container. Default: the host node's.
    pub gid: Option<u32>,
    /// The devices' attributes; `type` is required.
    #[serde(default)]
    pub attributes: BTreeMap<String, ConfigAttribute>,
    /// Environment variables a container that gets the device receives.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl CharEntry {
    /// The path is a glob (one device per match).
    pub fn is_glob(&self) -> bool {
        self.path.contains(['*', '?', '['])
    }
}

/// The checks made when the config is read.
pub fn check_entry(e: &CharEntry) -> Result<(), InvalidEntry> {
    // Clean: `/dev/../etc` would leave /dev (and, with a glob, walk the whole host).
    if !e.path.starts_with("/dev/") || !graft_record::paths::is_clean_absolute(&e.path) {
        return Err(InvalidEntry::field(
            "path: must be a clean path under /dev/ (no '..', '.' or '//')",
        ));
    }
    if e.is_glob() && (e.name.is_some() || e.container_path.is_some()) {
        return Err(InvalidEntry::field(
            "name and container_path apply to a single path, not a glob",
        ));
    }
    if let Some(n) = &e.name {
        limits::check_device_name(n).map_err(InvalidEntry::limit("name"))?;
    }
    if let Some(cp) = &e.container_path {
        if !cp.starts_with("/dev/") || !graft_record::paths::is_clean_absolute(cp) {
            return Err(InvalidEntry::field(
                "container_path: must be a clean path under /dev/ (no '..', '.' or '//')",
            ));
        }
    }
    if let Some(m) = e.mode {
        if m > 0o7777 {
            return Err(InvalidEntry::field(format!(
                "mode: {m:#o} has bits beyond 0o7777"
            )));
        }
    }
    for (k, v) in &e.attributes {
        limits::check_attribute(k, &v.into())
            .map_err(InvalidEntry::limit(format!("attributes.{k}")))?;
    }
    // The backend adds path, major and minor (and maybe pcieRoot) itself.
    if e.attributes.len() + 4 > limits::MAX_ATTRIBUTES_AND_CAPACITY {
        return Err(InvalidEntry::field(format!(
            "attributes: at most {} may be configured",
            limits::MAX_ATTRIBUTES_AND_CAPACITY - 4
        )));
    }
    for (k, v) in &e.env {
        graft_record::env::check_env(&format!("env[{k:?}]"), k, v)?;
    }
    Ok(())
}
