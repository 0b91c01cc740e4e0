//! The char family's discovery (see the family's module for what it serves).

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use graft_api::attributes as attr;
use graft_record::{validate_edits, ContainerEdits, DeviceKind, DeviceNode, EnvVar};
use nix::sys::stat::{major, minor};

use graft_driver_core::backend::scan::Discovery;
use graft_driver_core::discovery::config::{load_config, CharEntry};
use graft_driver_core::discovery::pcie::pcie_root;
use graft_driver_core::error::{DriverError, Result};
use graft_driver_core::limits;
use graft_driver_core::model::{Attribute, Device, Kind, PCIE_ROOT_ATTRIBUTE};

/// The default device name for a host path: `/dev/net/tun` becomes `net-tun`.
pub fn default_name(path: &str) -> String {
    limits::label_from(path.strip_prefix("/dev/").unwrap_or(path))
}

/// The char backend's discovery: the configured device nodes of the host.
pub struct CharDiscovery {
    config_path: PathBuf,
    sysfs: PathBuf,
    /// Where the host's root is visible (`/`, or e.g. `/host` in a container that mounts
    /// the host's /dev at /host/dev). Configured paths are host paths below it.
    host_root: PathBuf,
}

impl CharDiscovery {
    /// Fails if the config is invalid now; later scans keep the last good inventory when
    /// an edit breaks it.
    pub fn new(config_path: PathBuf, sysfs: PathBuf, host_root: PathBuf) -> Result<Self> {
        load_config(&config_path)?;
        Ok(CharDiscovery {
            config_path,
            sysfs,
            host_root,
        })
    }

    /// A host path as seen from here.
    fn seen(&self, host_path: &str) -> PathBuf {
        self.host_root.join(host_path.trim_start_matches('/'))
    }

    /// `seen` is where the node is visible here; `host_str` its path on the host, which is
    /// what gets published and injected.
    fn device_for(&self, entry: &CharEntry, seen: &Path, host_str: &str) -> Option<Device> {
        let meta = match std::fs::metadata(seen) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(path = host_str, error = %e, "device not present");
                return None;
            }
        };
        let ft = meta.file_type();
        let kind = if ft.is_char_device() {
            DeviceKind::Char
        } else if ft.is_block_device() {
            DeviceKind::Block
        } else {
            tracing::warn!(
                path = host_str,
                "configured path is not a device node; skipped"
            );
            return None;
        };
        let rdev = meta.rdev();
        let (major, minor) = (
            i64::try_from(major(rdev)).unwrap_or(i64::MAX),
            i64::try_from(minor(rdev)).unwrap_or(i64::MAX),
        );
        let name = entry.name.clone().unwrap_or_else(|| default_name(host_str));
        if let Err(r) = limits::check_device_name(&name) {
            tracing::warn!(
                path = host_str,
                name,
                reason = %r,
                "cannot name device; skipped"
            );
            return None;
        }

        let mut attributes = BTreeMap::new();
        if host_str.len() <= limits::MAX_ATTRIBUTE_VALUE {
            attributes.insert(attr::PATH.into(), Attribute::String(host_str.into()));
        }
        attributes.insert(attr::MAJOR.into(), Attribute::Int(major));
        attributes.insert(attr::MINOR.into(), Attribute::Int(minor));
        let class = if kind == DeviceKind::Char {
            "char"
        } else {
            "block"
        };
        // /sys/dev/<class>/<major>:<minor> resolves into the device tree; a node on PCI
        // sits below its root complex there.
        let link = self.sysfs.join(format!("dev/{class}/{major}:{minor}"));
        if let Some(root) = pcie_root(&self.sysfs, &link) {
            attributes.insert(PCIE_ROOT_ATTRIBUTE.into(), Attribute::String(root));
        }
        for (k, v) in &entry.attributes {
            attributes.insert(k.clone(), v.into());
        }

        let edits = ContainerEdits {
            device_nodes: vec![DeviceNode {
                path: entry
                    .container_path
                    .clone()
                    .unwrap_or_else(|| host_str.to_string()),
                kind,
                major,
                minor,
                file_mode: Some(entry.mode.unwrap_or(meta.mode() & 0o777)),
                uid: Some(entry.uid.unwrap_or(meta.uid())),
                gid: Some(entry.gid.unwrap_or(meta.gid())),
            }],
            env: entry
                .env
                .iter()
                .map(|(name, value)| EnvVar {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            ..Default::default()
        };
        if let Err(e) = validate_edits(host_str, &edits) {
            tracing::warn!(path = host_str, error = %e, "device edits invalid; skipped");
            return None;
        }
        Some(Device {
            attributes,
            edits,
            ..Device::new(name, Kind::Char)
        })
    }
}

impl Discovery for CharDiscovery {
    fn name(&self) -> &'static str {
        "char"
    }

    fn discover(&self) -> Result<Vec<Device>> {
        let config = load_config(&self.config_path)?;
        let mut out: Vec<Device> = Vec::new();
        for entry in &config.devices {
            let pattern = self.seen(&entry.path);
            let paths: Vec<PathBuf> = if entry.is_glob() {
                let mut v: Vec<PathBuf> = glob::glob(&pattern.to_string_lossy())
                    .map_err(|source| DriverError::ConfigGlob {
                        path: self.config_path.clone(),
                        pattern: entry.path.clone(),
                        source,
                    })?
                    .filter_map(|p| p.ok())
                    .collect();
                v.sort();
                v
            } else {
                vec![pattern]
            };
            for p in paths {
                let Some(host) = p
                    .strip_prefix(&self.host_root)
                    .ok()
                    .and_then(|r| r.to_str())
                    .map(|r| format!("/{r}"))
                else {
                    continue;
                };
                let Some(dev) = self.device_for(entry, &p, &host) else {
                    continue;
                };
                if out.iter().any(|d| d.name == dev.name) {
                    // Two entries (or a glob and a path) reaching the same name: keep the
                    // first, which is what the config lists first.
                    tracing::warn!(name = dev.name, path = %p.display(), "duplicate device name; skipped");
                    continue;
                }
                out.push(dev);
            }
        }
        Ok(out)
    }

    fn watch_paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.config_path.clone()];
        if let Ok(config) = load_config(&self.config_path) {
            for e in &config.devices {
                // The deepest directory without glob characters.
                let dir = e
                    .path
                    .split('/')
                    .take_while(|c| !c.contains(['*', '?', '[']))
                    .collect::<Vec<_>>()
                    .join("/");
                let dir = if e.path.contains(['*', '?', '[']) {
                    self.seen(&dir)
                } else {
                    self.seen(&e.path)
                        .parent()
                        .map(Path::to_path_buf)
                        .unwrap_or_default()
                };
                if !paths.contains(&dir) {
                    paths.push(dir);
                }
            }
        }
        paths
    }
}

#[cfg(test)]
mod tests;
