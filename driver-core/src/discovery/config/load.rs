//! Reading devices.toml: the whole file, each entry checked.

use std::path::Path;

use serde::Deserialize;

use super::char_entry::{self, CharEntry};
use super::files_entry::{self, FilesEntry};
use crate::error::{DriverError, Result};

/// Where the device config is read from unless a flag says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/graft/devices.toml";

/// The device config: what the char and files backends serve.
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
    let text = std::fs::read_to_string(path).map_err(|source| DriverError::ConfigRead {
        path: path.to_path_buf(),
        source,
    })?;
    let config: DevicesConfig =
        toml::from_str(&text).map_err(|source| DriverError::ConfigParse {
            path: path.to_path_buf(),
            source: Box::new(source),
        })?;
    let refused = |entry: String| {
        move |source| DriverError::ConfigEntry {
            path: path.to_path_buf(),
            entry,
            source: Box::new(source),
        }
    };
    for (i, entry) in config.devices.iter().enumerate() {
        char_entry::check_entry(entry)
            .map_err(refused(format!("devices[{i}] ({})", entry.path)))?;
    }
    for (i, entry) in config.files.iter().enumerate() {
        files_entry::check_entry(entry).map_err(refused(format!("files[{i}] ({})", entry.dir)))?;
    }
    Ok(config)
}
