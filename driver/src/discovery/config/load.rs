//! Reading devices.toml: the whole file, each entry checked.

use std::path::Path;

use serde::Deserialize;

use super::char_entry::{self, CharEntry};
use super::files_entry::{self, FilesEntry};
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

/// Reads and checks the config; every error names the file, the entry and the field.
pub fn load_config(path: &Path) -> Result<DevicesConfig> {
    let err = |reason: String| DriverError::Config {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let config: DevicesConfig = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
    for (i, entry) in config.devices.iter().enumerate() {
        char_entry::check_entry(entry)
            .map_err(|r| err(format!("devices[{i}] ({}): {r}", entry.path)))?;
    }
    for (i, entry) in config.files.iter().enumerate() {
        files_entry::check_entry(entry)
            .map_err(|r| err(format!("files[{i}] ({}): {r}", entry.dir)))?;
    }
    Ok(config)
}
