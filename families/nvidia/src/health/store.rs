//! Health that survives graft-driver's restarts: the conditions, each with the boot it was
//! last seen in, in `<state-dir>/health/conditions.json`. Written whole, atomically and
//! durably, when the reported health changes; read at start with the state directory's
//! capped no-follow reads. The monitor re-evaluates what it loads at its first probe.
//!
//! The directory is graft's own (root only), but what is read back is still checked: an
//! entry that could not have been written (a reason no taint takes, an overlong name) is
//! dropped with a warning, and an unreadable file starts graft with no conditions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use graft_record::atomic;
use graft_record::read::{read_state_file, SMALL_FILE_CAP};
use serde::{Deserialize, Serialize};

use super::state::Entry;
use graft_driver_core::error::{DriverError, Result};
use graft_driver_core::health::{Condition, DeviceHealth};

const VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    version: u32,
    conditions: BTreeMap<String, Saved>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Saved {
    /// `Unhealthy` or `Degraded`.
    condition: String,
    reason: String,
    message: String,
    since_ms: u64,
    last_event_ms: u64,
    boot_id: String,
}

/// `<state-dir>/health/conditions.json`.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("health").join("conditions.json")
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn time(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// Replaces the file with `entries`.
pub fn save(state_dir: &Path, entries: &BTreeMap<String, Entry>) -> Result<()> {
    let p = path(state_dir);
    let dir = p.parent().unwrap_or(state_dir);
    atomic::private_dir(dir)?;
    let file = File {
        version: VERSION,
        conditions: entries
            .iter()
            .map(|(name, e)| {
                let condition = match e.health.condition {
                    Condition::Unhealthy => "Unhealthy",
                    Condition::Degraded => "Degraded",
                };
                let saved = Saved {
                    condition: condition.into(),
                    reason: e.health.reason.clone(),
                    message: e.health.message.clone(),
                    since_ms: ms(e.health.since),
                    last_event_ms: ms(e.last_event),
                    boot_id: e.boot_id.clone(),
                };
                (name.clone(), saved)
            })
            .collect(),
    };
    let data = serde_json::to_vec_pretty(&file).map_err(|e| DriverError::Io {
        what: "encode",
        path: p.clone(),
        source: std::io::Error::other(e),
    })?;
    Ok(atomic::write_file(&p, &data)?)
}

/// The conditions saved; none when there is no file. Entries that fail the checks are
/// dropped with a warning.
pub fn load(state_dir: &Path) -> Result<BTreeMap<String, Entry>> {
    let p = path(state_dir);
    let Some(data) = read_state_file(&p, SMALL_FILE_CAP)? else {
        return Ok(BTreeMap::new());
    };
    let file: File = serde_json::from_slice(&data).map_err(|e| DriverError::Io {
        what: "parse",
        path: p.clone(),
        source: std::io::Error::other(e),
    })?;
    if file.version != VERSION {
        return Err(DriverError::Io {
            what: "read",
            path: p,
            source: std::io::Error::other(format!(
                "version {} (this graft-driver writes {VERSION})",
                file.version
            )),
        });
    }
    let mut out = BTreeMap::new();
    for (name, s) in file.conditions {
        match entry(&name, s) {
            Ok(e) => {
                out.insert(name, e);
            }
            Err(why) => tracing::warn!(device = name, %why, "saved health condition dropped"),
        }
    }
    Ok(out)
}

/// Why a saved condition is dropped: the file is hostile input.
#[derive(Debug, thiserror::Error)]
enum Dropped {
    #[error("unknown condition {0:?}")]
    Condition(String),
    #[error("device name length")]
    NameLength,
    #[error("reason {0:?} is no taint value")]
    Reason(String),
    #[error("message or boot id too long")]
    TooLong,
}

fn entry(name: &str, s: Saved) -> std::result::Result<Entry, Dropped> {
    let condition = match s.condition.as_str() {
        "Unhealthy" => Condition::Unhealthy,
        "Degraded" => Condition::Degraded,
        other => return Err(Dropped::Condition(other.to_string())),
    };
    if name.is_empty() || name.len() > 128 {
        return Err(Dropped::NameLength);
    }
    // A taint value: a label value (at most 63 of [A-Za-z0-9-_.]).
    let label = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if s.reason.is_empty() || s.reason.len() > 63 || !s.reason.chars().all(label) {
        return Err(Dropped::Reason(s.reason));
    }
    if s.message.len() > graft_driver_core::events::NOTE_LIMIT || s.boot_id.len() > 64 {
        return Err(Dropped::TooLong);
    }
    Ok(Entry {
        health: DeviceHealth {
            condition,
            reason: s.reason,
            message: s.message,
            since: time(s.since_ms),
        },
        last_event: time(s.last_event_ms),
        boot_id: s.boot_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(reason: &str) -> Entry {
        Entry {
            health: DeviceHealth {
                condition: Condition::Unhealthy,
                reason: reason.into(),
                message: "XID 79 (GPU has fallen off the bus)".into(),
                since: time(1_790_000_000_000),
            },
            last_event: time(1_790_000_000_300),
            boot_id: "b0".into(),
        }
    }

    #[test]
    fn round_trip_and_checks() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_empty());
        let entries = BTreeMap::from([("gpu-2".to_string(), e("xid-79"))]);
        save(dir.path(), &entries).unwrap();
        assert_eq!(load(dir.path()).unwrap(), entries);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(path(dir.path())).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);

        // An entry no taint could carry is dropped; the rest loads.
        let both = BTreeMap::from([
            ("gpu-2".to_string(), e("xid-79")),
            ("gpu-3".to_string(), e("bad reason!")),
        ]);
        save(dir.path(), &both).unwrap();
        assert_eq!(load(dir.path()).unwrap(), entries);

        // Garbage and symlinks are errors, not panics or followed links.
        std::fs::write(path(dir.path()), b"{").unwrap();
        assert!(load(dir.path()).is_err());
        std::fs::remove_file(path(dir.path())).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", path(dir.path())).unwrap();
        assert!(load(dir.path())
            .unwrap_err()
            .to_string()
            .contains("symlink"));
    }
}
