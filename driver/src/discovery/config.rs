//! The devices config (`devices.toml`) that the char and files backends share: `[[devices]]`
//! entries name device nodes, `[[files]]` entries name served directories. Each backend
//! reads it on every scan, so edits apply without a restart.

use std::path::Path;

use serde::Deserialize;

use super::char::{self as char_backend, CharEntry};
use super::files::{self as files_backend, FilesEntry};
use super::Attribute;
use crate::error::{DriverError, Result};

pub const DEFAULT_CONFIG_PATH: &str = "/etc/graft/devices.toml";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevicesConfig {
    /// Device nodes (the char backend).
    #[serde(default)]
    pub devices: Vec<CharEntry>,
    /// Served directories (the files backend).
    #[serde(default)]
    pub files: Vec<FilesEntry>,
}

/// An attribute value as the config writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ConfigAttribute {
    Bool(bool),
    Int(i64),
    String(String),
    Version { version: String },
}

impl From<&ConfigAttribute> for Attribute {
    fn from(a: &ConfigAttribute) -> Self {
        match a {
            ConfigAttribute::Bool(b) => Attribute::Bool(*b),
            ConfigAttribute::Int(i) => Attribute::Int(*i),
            ConfigAttribute::String(s) => Attribute::String(s.clone()),
            ConfigAttribute::Version { version } => Attribute::Version(version.clone()),
        }
    }
}

/// Reads and checks the config; every error names the file, the entry and the field.
pub fn load_config(path: &Path) -> Result<DevicesConfig> {
    let err = |reason: String| DriverError::Config {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let config: DevicesConfig = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
    for (i, entry) in config.devices.iter().enumerate() {
        char_backend::check_entry(entry)
            .map_err(|r| err(format!("devices[{i}] ({}): {r}", entry.path)))?;
    }
    for (i, entry) in config.files.iter().enumerate() {
        files_backend::check_entry(entry)
            .map_err(|r| err(format!("files[{i}] ({}): {r}", entry.dir)))?;
    }
    Ok(config)
}
