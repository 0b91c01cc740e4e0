//! One `[[files]]` entry of devices.toml: its fields, the checks made when the config is
//! read, and the names and variables derived from it.

use std::collections::BTreeMap;

use graft_record::nofollow::EntryType;
use graft_record::paths::{is_clean_absolute, is_under};
use serde::Deserialize;

use super::OWN_ATTRIBUTES;
use crate::discovery::config::ConfigAttribute;
use crate::limits;

/// Host directories a served directory may not be in: the kernel's, and device nodes
/// (the char backend's).
const NOT_SERVED: &[&str] = &["/proc", "/sys", "/dev"];

/// Which entries of the directory are devices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Entries {
    #[default]
    Files,
    Directories,
    Sockets,
}

impl Entries {
    pub(super) fn entry_type(self) -> EntryType {
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
    #[serde(default)]
    pub read_write: bool,
    #[serde(default)]
    pub exec: bool,
    #[serde(default)]
    pub attributes: BTreeMap<String, ConfigAttribute>,
}

fn check_container_path(p: &str) -> std::result::Result<(), String> {
    if !is_clean_absolute(p) || p == "/" || ["/proc", "/sys"].iter().any(|r| is_under(p, r)) {
        return Err(format!(
            "container_path {p:?}: must be a clean absolute path, not /, /proc or /sys"
        ));
    }
    Ok(())
}

pub(crate) fn check_entry(e: &FilesEntry) -> std::result::Result<(), String> {
    if !is_clean_absolute(&e.dir) || e.dir == "/" {
        return Err(
            "dir: must be a clean absolute path other than / (no '..', '.' or '//')".into(),
        );
    }
    if let Some(r) = NOT_SERVED.iter().find(|r| is_under(&e.dir, r)) {
        return Err(format!("dir: nothing under {r} is served"));
    }
    if let Some(p) = &e.pattern {
        if p.contains('/') {
            return Err("pattern: matches entry names, so it cannot contain '/'".into());
        }
        glob::Pattern::new(p).map_err(|err| format!("pattern: {err}"))?;
    }
    if let Some(cp) = &e.container_path {
        check_container_path(cp)?;
    }
    if let Some(v) = &e.env {
        graft_record::env::check_env("env", v, "/").map_err(|err| err.to_string())?;
    }
    if let Some(p) = &e.name_prefix {
        limits::check_device_name(&format!("{p}x")).map_err(|r| format!("name_prefix: {r}"))?;
    }
    match e.attributes.get("type") {
        Some(ConfigAttribute::String(_)) => {}
        _ => {
            return Err(
                "attributes.type: required, a string naming what the entries are \
                 (DeviceClasses select on it)"
                    .into(),
            )
        }
    }
    for (k, v) in &e.attributes {
        limits::check_attribute(k, &v.into()).map_err(|r| format!("attributes.{k}: {r}"))?;
    }
    // The size capacity counts too.
    if e.attributes.len() + OWN_ATTRIBUTES + 1 > limits::MAX_ATTRIBUTES_AND_CAPACITY {
        return Err(format!(
            "attributes: at most {} may be configured",
            limits::MAX_ATTRIBUTES_AND_CAPACITY - OWN_ATTRIBUTES - 1
        ));
    }
    Ok(())
}

/// A device name from an entry name: `Seat_01.lic` becomes `seat-01-lic`; an error when
/// nothing is left or the result breaks the API's rules (too long).
pub fn device_name(prefix: Option<&str>, entry: &str) -> std::result::Result<String, String> {
    let name = format!(
        "{}{}",
        prefix.unwrap_or_default(),
        limits::label_from(entry)
    );
    limits::check_device_name(&name)?;
    Ok(name)
}

/// `GRAFT_FILE_<NAME>`: the default variable, one per device so that two never clash.
pub(super) fn default_env(device: &str) -> String {
    let mut v = String::from("GRAFT_FILE_");
    v.extend(device.chars().map(|c| {
        if c == '-' {
            '_'
        } else {
            c.to_ascii_uppercase()
        }
    }));
    v
}
