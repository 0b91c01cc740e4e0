//! One `[[files]]` entry of devices.toml (the files backend's): its fields and the checks
//! made when the config is read.

use std::collections::BTreeMap;

use graft_record::nofollow::EntryType;
use graft_record::paths::{is_clean_absolute, is_under};
use serde::Deserialize;

use super::attribute::ConfigAttribute;
use super::invalid::InvalidEntry;
use crate::limits;

/// What the files backend adds to the configured attributes: path, entry.
pub const OWN_ATTRIBUTES: usize = 2;

/// Host directories a served directory may not be in: the kernel's, and device nodes
/// (the char backend's).
const NOT_SERVED: &[&str] = &["/proc", "/sys", "/dev"];

/// Which entries of the directory are devices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Entries {
    /// Regular files (the default).
    #[default]
    Files,
    /// Subdirectories.
    Directories,
    /// Unix sockets.
    Sockets,
}

impl Entries {
    /// The entry type of the served directory's devices.
    pub fn entry_type(self) -> EntryType {
        match self {
            Entries::Files => EntryType::File,
            Entries::Directories => EntryType::Directory,
            Entries::Sockets => EntryType::Socket,
        }
    }
}

/// One `[[files]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesEntry {
    /// The served directory, a host path without symlinks.
    pub dir: String,
    /// Which entries are devices (default: files).
    #[serde(default)]
    pub entries: Entries,
    /// A glob the entry names must match.
    pub pattern: Option<String>,
    /// Where the entry appears in the container. Default: its host path.
    pub container_path: Option<String>,
    /// The variable that tells the container where the entry is.
    pub env: Option<String>,
    /// Prepended to the device names (derived from the entry names).
    pub name_prefix: Option<String>,
    /// Mounted read-write; read-only by default.
    #[serde(default)]
    pub read_write: bool,
    /// Mounted without `noexec`.
    #[serde(default)]
    pub exec: bool,
    /// The devices' attributes; `type` is required.
    #[serde(default)]
    pub attributes: BTreeMap<String, ConfigAttribute>,
}

fn check_container_path(p: &str) -> Result<(), InvalidEntry> {
    if !is_clean_absolute(p) || p == "/" || ["/proc", "/sys"].iter().any(|r| is_under(p, r)) {
        return Err(InvalidEntry::field(format!(
            "container_path {p:?}: must be a clean absolute path, not /, /proc or /sys"
        )));
    }
    Ok(())
}

/// The checks made when the config is read.
pub fn check_entry(e: &FilesEntry) -> Result<(), InvalidEntry> {
    if !is_clean_absolute(&e.dir) || e.dir == "/" {
        return Err(InvalidEntry::field(
            "dir: must be a clean absolute path other than / (no '..', '.' or '//')",
        ));
    }
    if let Some(r) = NOT_SERVED.iter().find(|r| is_under(&e.dir, r)) {
        return Err(InvalidEntry::field(format!(
            "dir: nothing under {r} is served"
        )));
    }
    if let Some(p) = &e.pattern {
        if p.contains('/') {
            return Err(InvalidEntry::field(
                "pattern: matches entry names, so it cannot contain '/'",
            ));
        }
        glob::Pattern::new(p)?;
    }
    if let Some(cp) = &e.container_path {
        check_container_path(cp)?;
    }
    if let Some(v) = &e.env {
        graft_record::env::check_env("env", v, "/")?;
    }
    if let Some(p) = &e.name_prefix {
        limits::check_device_name(&format!("{p}x")).map_err(InvalidEntry::limit("name_prefix"))?;
    }
    match e.attributes.get(graft_api::attributes::TYPE) {
        Some(ConfigAttribute::String(_)) => {}
        _ => {
            return Err(InvalidEntry::field(
                "attributes.type: required, a string naming what the entries are \
                 (DeviceClasses select on it)",
            ))
        }
    }
    for (k, v) in &e.attributes {
        limits::check_attribute(k, &v.into())
            .map_err(InvalidEntry::limit(format!("attributes.{k}")))?;
    }
    // The size capacity counts too.
    if e.attributes.len() + OWN_ATTRIBUTES + 1 > limits::MAX_ATTRIBUTES_AND_CAPACITY {
        return Err(InvalidEntry::field(format!(
            "attributes: at most {} may be configured",
            limits::MAX_ATTRIBUTES_AND_CAPACITY - OWN_ATTRIBUTES - 1
        )));
    }
    Ok(())
}
