//! The files family's discovery (see the family's module for what it serves).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use graft_api::{attributes as attr, capacity};
use graft_record::nofollow::{open_entry, open_served, EntryError, EntryType};
use graft_record::paths::is_under;
use graft_record::{validate_edits, ContainerEdits, EnvVar, Mount};

use super::entry::default_env;
use super::entry::device_name;
use super::refused::RefusedDirs;

use graft_driver_core::backend::scan::{Discovery, Unavailable};
use graft_driver_core::discovery::config::{load_config, FilesEntry};
use graft_driver_core::error::{DriverError, Result};
use graft_driver_core::limits;
use graft_driver_core::model::{Attribute, Device, Kind};

/// A directory's size is the sum of its regular files' up to this many entries; beyond,
/// it is not published (a walk must not stall a scan).
const MAX_SIZE_WALK: usize = 10_000;
/// The files backend's discovery: the entries of the configured served directories.
pub struct FilesDiscovery {
    config_path: PathBuf,
    /// Where the host's root is visible here (`/`, or `/host`).
    host_root: PathBuf,
    /// The operator's allowed mount roots: graft-nri refuses mounts from anywhere else.
    served_roots: Vec<String>,
    refused: RefusedDirs,
}

impl FilesDiscovery {
    /// Fails if the config is invalid now, or names a directory graft-nri would refuse.
    pub fn new(config_path: PathBuf, host_root: PathBuf, served_roots: &[String]) -> Result<Self> {
        let d = FilesDiscovery {
            config_path,
            host_root,
            served_roots: served_roots
                .iter()
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty())
                .collect(),
            refused: RefusedDirs::default(),
        };
        d.load()?;
        Ok(d)
    }

    /// Reports refused directories through `refused` (the metrics' handle).
    pub fn with_refusals(mut self, refused: RefusedDirs) -> Self {
        self.refused = refused;
        self
    }

    /// The directories the last scan refused, and why.
    pub fn refused(&self) -> BTreeMap<String, String> {
        self.refused.get()
    }

    fn load(&self) -> Result<Vec<FilesEntry>> {
        let config = load_config(&self.config_path)?;
        for (i, e) in config.files.iter().enumerate() {
            if !self.served_roots.iter().any(|r| is_under(&e.dir, r)) {
                return Err(DriverError::Config {
                    path: self.config_path.clone(),
                    reason: format!(
                        "files[{i}] ({}): not under the allowed mount roots {:?}, so \
                         graft-nri would refuse its mounts; add it (or a parent) to \
                         GRAFT_ALLOWED_MOUNT_ROOTS of both graft-driver and graft-nri",
                        e.dir, self.served_roots
                    ),
                });
            }
        }
        Ok(config.files)
    }

    fn seen(&self, host_path: &str) -> PathBuf {
        self.host_root.join(host_path.trim_start_matches('/'))
    }

    /// The devices of one `[[files]]` entry, in name order; `Err` when the directory is
    /// refused, with the reason.
    fn scan(&self, e: &FilesEntry) -> std::result::Result<Vec<Device>, EntryError> {
        match open_entry(&self.host_root, &e.dir) {
            Ok(d) if d.kind == EntryType::Directory => {
                d.check_trusted_dir(&e.dir)?;
                if e.read_write && !d.private && d.mode & 0o077 != 0 {
                    return Err(EntryError::NotPrivate {
                        path: e.dir.clone(),
                    });
                }
            }
            Ok(d) => {
                tracing::warn!(dir = e.dir, found = %d.kind, "served directory is not a directory");
                return Ok(Vec::new());
            }
            Err(err) if err.is_missing() => {
                tracing::debug!(dir = e.dir, "served directory not present");
                return Ok(Vec::new());
            }
            Err(err) => return Err(err),
        }
        let mut names: Vec<String> = match std::fs::read_dir(self.seen(&e.dir)) {
            Ok(rd) => rd
                .filter_map(|r| r.ok())
                .filter_map(|entry| match entry.file_name().into_string() {
                    Ok(n) => Some(n),
                    Err(raw) => {
                        tracing::warn!(dir = e.dir, name = ?raw, "entry name is not UTF-8; skipped");
                        None
                    }
                })
                .collect(),
            Err(err) => {
                tracing::warn!(dir = e.dir, error = %err, "cannot list served directory");
                return Ok(Vec::new());
            }
        };
        names.sort();
        let pattern = e
            .pattern
            .as_deref()
            .and_then(|p| glob::Pattern::new(p).ok());
        let mut out: Vec<Device> = Vec::new();
        for n in names {
            if n.starts_with('.') || pattern.as_ref().is_some_and(|p| !p.matches(&n)) {
                continue;
            }
            let Some(dev) = self.device_for(e, &n) else {
                continue;
            };
            if out.iter().any(|d| d.name == dev.name) {
                tracing::warn!(
                    dir = e.dir,
                    entry = n,
                    name = dev.name,
                    "duplicate device name; skipped"
                );
                continue;
            }
            out.push(dev);
        }
        Ok(out)
    }

    fn device_for(&self, e: &FilesEntry, entry_name: &str) -> Option<Device> {
        let host = format!("{}/{entry_name}", e.dir);
        let want = e.entries.entry_type();
        let found = match open_served(&self.host_root, &host, e.read_write) {
            Ok(f) => f,
            Err(
                err @ (EntryError::Symlink { .. }
                | EntryError::Unsupported { .. }
                | EntryError::Writable { .. }
                | EntryError::NotPrivate { .. }),
            ) => {
                tracing::warn!(path = host, reason = %err, "entry not served");
                return None;
            }
            Err(err) => {
                tracing::debug!(path = host, error = %err, "entry gone");
                return None;
            }
        };
        if found.kind != want {
            tracing::debug!(path = host, found = %found.kind, "entry of another type; skipped");
            return None;
        }
        let name = match device_name(e.name_prefix.as_deref(), entry_name) {
            Ok(n) => n,
            Err(reason) => {
                tracing::warn!(
                    path = host,
                    %reason,
                    "cannot name a device after this entry; skipped"
                );
                return None;
            }
        };
        let mut attributes: BTreeMap<String, Attribute> = e
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), v.into()))
            .collect();
        for (k, v) in [(attr::PATH, &host), (attr::ENTRY, &entry_name.to_string())] {
            if v.len() <= limits::MAX_ATTRIBUTE_VALUE {
                attributes.insert(k.into(), Attribute::String(v.clone()));
            }
        }
        let size = match found.kind {
            EntryType::File => Some(found.size),
            EntryType::Directory => dir_size(&self.seen(&host)),
            EntryType::Socket => None,
        };
        let capacity = size
            .map(|s| BTreeMap::from([(capacity::SIZE.to_string(), s.to_string())]))
            .unwrap_or_default();

        let destination = e.container_path.clone().unwrap_or_else(|| host.clone());
        let mut options = vec![
            "bind",
            if e.read_write { "rw" } else { "ro" },
            "nosuid",
            "nodev",
        ];
        if !e.exec {
            options.push("noexec");
        }
        let edits = ContainerEdits {
            mounts: vec![Mount {
                source: host.clone(),
                destination: destination.clone(),
                kind: "bind".into(),
                options: options.into_iter().map(String::from).collect(),
            }],
            env: vec![EnvVar {
                name: e.env.clone().unwrap_or_else(|| default_env(&name)),
                value: destination,
            }],
            ..Default::default()
        };
        if let Err(err) = validate_edits(&host, &edits) {
            tracing::warn!(path = host, error = %err, "entry's edits invalid; skipped");
            return None;
        }
        Some(Device {
            attributes,
            capacity,
            edits,
            ..Device::new(name, Kind::Entry(want))
        })
    }
}

/// Bytes in the regular files below `dir`, symlinks not followed; `None` past
/// [`MAX_SIZE_WALK`] entries or on an error.
fn dir_size(dir: &Path) -> Option<u64> {
    let mut total = 0u64;
    let mut seen = 0usize;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).ok()? {
            seen += 1;
            if seen > MAX_SIZE_WALK {
                return None;
            }
            let entry = entry.ok()?;
            let meta = entry.path().symlink_metadata().ok()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.len());
            }
        }
    }
    Some(total)
}

impl Discovery for FilesDiscovery {
    fn name(&self) -> &'static str {
        "files"
    }

    fn discover(&self) -> Result<Vec<Device>> {
        let mut out: Vec<Device> = Vec::new();
        let mut refused = BTreeMap::new();
        for e in self.load()? {
            let devices = match self.scan(&e) {
                Ok(d) => d,
                Err(reason) => {
                    refused.insert(e.dir.clone(), reason.to_string());
                    continue;
                }
            };
            for dev in devices {
                if out.iter().any(|d| d.name == dev.name) {
                    tracing::warn!(
                        name = dev.name,
                        dir = e.dir,
                        "device name used by an earlier [[files]] entry; skipped"
                    );
                    continue;
                }
                out.push(dev);
            }
        }
        self.refused.scanned(refused);
        Ok(out)
    }

    /// Each refused directory: a `ServedDirectoryRefused` Warning Event on the Node.
    fn unavailable(&self) -> Vec<Unavailable> {
        self.refused
            .get()
            .into_iter()
            .map(|(dir, reason)| Unavailable {
                key: format!("served-dir:{dir}"),
                reason: "ServedDirectoryRefused",
                message: format!("served directory {dir} is not served: {reason}"),
            })
            .collect()
    }

    fn watch_paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.config_path.clone()];
        if let Ok(files) = self.load() {
            for e in files {
                let seen = self.seen(&e.dir);
                // The directory itself, and its parent so that it is seen to appear.
                for p in [Some(seen.clone()), seen.parent().map(Path::to_path_buf)]
                    .into_iter()
                    .flatten()
                {
                    if !paths.contains(&p) {
                        paths.push(p);
                    }
                }
            }
        }
        paths
    }
}

#[cfg(test)]
mod tests;
