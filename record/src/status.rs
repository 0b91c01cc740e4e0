//! The NRI plugin's status file, which the driver reads before preparing a claim.
//!
//! ```text
//! <root>/nri-status.json   what the plugin last reported (atomic replace)
//! <root>/nri.lock          held (flock, exclusive) for as long as the plugin runs
//! ```
//!
//! The file alone cannot tell a live plugin from one that was killed with SIGKILL, so the
//! lock is the liveness signal: the kernel drops it with the process. The boot id guards
//! against a status written before a reboot.

use std::fs::{self, File, TryLockError};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::atomic;
use crate::error::{RecordError, Result};
use crate::format::FORMAT_VERSION;

const STATUS_FILE: &str = "nri-status.json";
const LOCK_FILE: &str = "nri.lock";
/// Where the kernel publishes this boot's id.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// What graft-nri publishes about itself (`nri-status.json`), for graft-driver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NriStatus {
    /// [`crate::FORMAT_VERSION`] when written.
    pub version: u32,
    /// `NN-name` as registered with the runtime.
    pub plugin: String,
    /// Registered and configured on a live connection.
    pub connected: bool,
    /// The initial Synchronize of the current connection has been answered.
    pub synchronized: bool,
    /// The container runtime's name, as it told the plugin.
    #[serde(default)]
    pub runtime_name: String,
    /// The container runtime's version.
    #[serde(default)]
    pub runtime_version: String,
    /// graft-nri's process id.
    pub pid: u32,
    /// The boot the status was written in (see [`read_boot_id`]).
    pub boot_id: String,
    /// Milliseconds since the epoch.
    pub updated_ms: u64,
    /// Running containers found, at a Synchronize, without the devices recorded for them
    /// (started while the plugin was away), since the plugin started.
    #[serde(default)]
    pub uninjected_found: u64,
    /// Synchronize requests whose running containers have been checked against their
    /// records, since the plugin started. The check runs after the answer, so a reader
    /// that wants its outcome (`uninjected_found`) waits for this to grow.
    #[serde(default)]
    pub verified_syncs: u64,
    /// Why the plugin is not connected, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The plugin side: holds the liveness lock and rewrites the status on every change.
pub struct StatusPublisher {
    path: PathBuf,
    _lock: File,
    current: NriStatus,
}

impl StatusPublisher {
    /// Takes the liveness lock; fails if another plugin instance holds it.
    pub fn acquire(root: &Path, plugin: &str, boot_id: String) -> Result<Self> {
        atomic::private_dir(root)?;
        let lock_path = root.join(LOCK_FILE);
        let lock = atomic::open_lock(&lock_path)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(RecordError::io(
                    "lock",
                    &lock_path,
                    std::io::Error::new(
                        ErrorKind::WouldBlock,
                        "another graft-nri instance is running on this state directory",
                    ),
                ))
            }
            Err(TryLockError::Error(e)) => return Err(RecordError::io("lock", &lock_path, e)),
        }
        let mut publisher = StatusPublisher {
            path: root.join(STATUS_FILE),
            _lock: lock,
            current: NriStatus {
                version: FORMAT_VERSION,
                plugin: plugin.to_string(),
                pid: std::process::id(),
                boot_id,
                message: Some("starting".into()),
                ..Default::default()
            },
        };
        publisher.write()?;
        Ok(publisher)
    }

    /// The status as last written.
    pub fn status(&self) -> &NriStatus {
        &self.current
    }

    /// Applies a change and writes the file if anything changed.
    pub fn update(&mut self, change: impl FnOnce(&mut NriStatus)) -> Result<()> {
        let before = self.current.clone();
        change(&mut self.current);
        if self.current == before {
            return Ok(());
        }
        self.write()
    }

    fn write(&mut self) -> Result<()> {
        self.current.updated_ms = now_ms();
        let data = serde_json::to_vec_pretty(&self.current).map_err(|e| RecordError::Corrupt {
            path: self.path.clone(),
            reason: format!("cannot encode: {e}"),
        })?;
        atomic::write_file(&self.path, &data)
    }
}

/// What the driver learns about the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NriReadiness {
    /// Ready, with the status that says so.
    Ready(NriStatus),
    /// Not ready, and why, in words for an error message.
    NotReady(String),
}

/// Reads the status and checks it is current: the plugin process alive (lock held), this
/// boot, connected and synchronized.
pub fn nri_readiness(root: &Path, boot_id: &str) -> Result<NriReadiness> {
    let path = root.join(STATUS_FILE);
    let data = match fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Ok(NriReadiness::NotReady(format!(
                "graft-nri has never run on this node ({} missing)",
                path.display()
            )))
        }
        Err(e) => return Err(RecordError::io("read", &path, e)),
    };
    let status: NriStatus = serde_json::from_slice(&data).map_err(|e| RecordError::Corrupt {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if status.version != FORMAT_VERSION {
        return Err(RecordError::UnknownVersion {
            path,
            version: status.version as u64,
            supported: FORMAT_VERSION,
        });
    }
    if !plugin_alive(root)? {
        return Ok(NriReadiness::NotReady(format!(
            "graft-nri (pid {}) is not running",
            status.pid
        )));
    }
    if status.boot_id != boot_id {
        return Ok(NriReadiness::NotReady(
            "graft-nri status is from an earlier boot".into(),
        ));
    }
    if !status.connected {
        let why = status.message.as_deref().unwrap_or("not connected");
        return Ok(NriReadiness::NotReady(format!(
            "graft-nri is not connected to the container runtime: {why}"
        )));
    }
    if !status.synchronized {
        return Ok(NriReadiness::NotReady(
            "graft-nri has not yet synchronized with the container runtime".into(),
        ));
    }
    Ok(NriReadiness::Ready(status))
}

/// The status file as it is, read as one trusting nothing there would: no symlink, a size
/// cap (graftctl). `None` when graft-nri never ran.
pub fn read_status(root: &Path) -> Result<Option<NriStatus>> {
    let path = root.join(STATUS_FILE);
    let Some(data) = crate::read::read_state_file(&path, crate::read::SMALL_FILE_CAP)? else {
        return Ok(None);
    };
    serde_json::from_slice(&data)
        .map(Some)
        .map_err(|e| RecordError::Corrupt {
            path,
            reason: e.to_string(),
        })
}

/// Whether some process holds the plugin's liveness lock.
pub fn plugin_alive(root: &Path) -> Result<bool> {
    let lock_path = root.join(LOCK_FILE);
    let f = match File::open(&lock_path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(RecordError::io("open", &lock_path, e)),
    };
    match f.try_lock_shared() {
        // Nobody holds it exclusively; dropping `f` releases our shared lock.
        Ok(()) => Ok(false),
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(e)) => Err(RecordError::io("lock", &lock_path, e)),
    }
}

/// This boot's id.
pub fn read_boot_id(path: &Path) -> Result<String> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| RecordError::io("read", path, e))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
