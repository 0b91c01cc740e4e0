//! What graft-nri injected into each container, for `graftctl explain`:
//!
//! ```text
//! <root>/containers/<container-id>.json   one ContainerEntry per injected container
//! ```
//!
//! Diagnostics, not a contract the daemons act on: written on a successful injection with an
//! atomic replace but no fsync (CreateContainer must stay fast), removed when the runtime
//! removes the container, pruned at every Synchronize. Environment values are never stored,
//! only names: they can be secrets, and the entry is shown to people.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic;
use crate::error::{RecordError, Result};
use crate::format::{DeviceNode, HookStage, Mount};
use crate::read::{list_names, read_state_file, SMALL_FILE_CAP};
use crate::validate::check_id;

/// Version of the entry format.
pub const CONTAINER_ENTRY_VERSION: u32 = 1;
const DIR: &str = "containers";

/// One injected container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEntry {
    /// [`CONTAINER_ENTRY_VERSION`] when written.
    pub version: u32,
    /// The runtime's container id.
    pub id: String,
    /// The pod the container is in.
    pub pod: PodRef,
    /// The container's name in its pod.
    pub container: String,
    /// When graft-nri answered CreateContainer (milliseconds since the epoch).
    pub injected_ms: u64,
    /// The claim records it was injected from.
    pub records: Vec<RecordRef>,
    /// The edits applied, merged over all records.
    pub edits: AppliedEdits,
}

/// A pod by uid, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    /// The pod's uid.
    pub uid: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
}

/// One claim record a container received devices from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordRef {
    /// The claim's uid.
    pub claim_uid: String,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The record file, relative to the state directory.
    pub record: String,
    /// The claim's requests the devices were allocated for.
    pub requests: Vec<String>,
    /// The record's devices the container received.
    pub devices: Vec<String>,
}

/// [`crate::ContainerEdits`] as shown to people: env names only, hooks without their env.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedEdits {
    /// Device nodes created.
    #[serde(default)]
    pub device_nodes: Vec<DeviceNode>,
    /// Mounts added.
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// Names of the variables set (their values are left out).
    #[serde(default)]
    pub env_names: Vec<String>,
    /// Hooks added.
    #[serde(default)]
    pub hooks: Vec<AppliedHook>,
}

/// A hook as shown: its environment is left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedHook {
    /// Its OCI stage.
    pub stage: HookStage,
    /// Host path of the executable.
    pub path: String,
    /// Its argv.
    #[serde(default)]
    pub args: Vec<String>,
}

impl AppliedEdits {
    /// What a container got from `edits`, without env values.
    pub fn from_edits(edits: &crate::ContainerEdits) -> Self {
        AppliedEdits {
            device_nodes: edits.device_nodes.clone(),
            mounts: edits.mounts.clone(),
            env_names: edits.env.iter().map(|v| v.name.clone()).collect(),
            hooks: edits
                .hooks
                .iter()
                .map(|h| AppliedHook {
                    stage: h.stage,
                    path: h.path.clone(),
                    args: h.args.clone(),
                })
                .collect(),
        }
    }
}

/// Checks that `id` can name an entry file: a runtime id, nothing that leaves the directory.
pub fn check_container_id(id: &str) -> Result<()> {
    check_id("container id", id).map_err(|_| {
        RecordError::io(
            "look up",
            DIR,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{id:?} is not a valid container id (letters, digits, '-', '_', '.', \
                     at most 128, no leading '.')"
                ),
            ),
        )
    })
}

fn entry_path(root: &Path, id: &str) -> PathBuf {
    root.join(DIR).join(format!("{id}.json"))
}

/// Writes the entry (graft-nri). Not durable on purpose; an entry over the size cap is not
/// written (an error says so).
pub fn write_entry(root: &Path, entry: &ContainerEntry) -> Result<()> {
    check_container_id(&entry.id)?;
    let path = entry_path(root, &entry.id);
    let data = serde_json::to_vec_pretty(entry).map_err(|e| RecordError::Corrupt {
        path: path.clone(),
        reason: format!("cannot encode: {e}"),
    })?;
    if data.len() as u64 > SMALL_FILE_CAP {
        return Err(RecordError::io(
            "write",
            path,
            std::io::Error::other(format!("entry larger than {SMALL_FILE_CAP} bytes")),
        ));
    }
    let dir = root.join(DIR);
    if !dir.is_dir() {
        atomic::create_dir(&dir)?;
    }
    atomic::replace_file(&path, &data)
}

/// Removes a container's entry (graft-nri, RemoveContainer). Missing is fine.
pub fn remove_entry(root: &Path, id: &str) -> Result<()> {
    if check_container_id(id).is_err() {
        return Ok(());
    }
    match std::fs::remove_file(entry_path(root, id)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RecordError::io("remove", entry_path(root, id), e)),
    }
}

/// Whether a file last written at `meta`'s time was written before `since`. A file whose
/// time cannot be read counts as written since: it is kept.
pub fn written_before(meta: &std::fs::Metadata, since: std::time::SystemTime) -> bool {
    meta.modified().is_ok_and(|t| t < since)
}

/// Removes the entries of containers not in `live` (graft-nri, Synchronize) written before
/// `since`: one written since may be a container created after `live` was taken. Returns
/// how many it removed.
pub fn prune_entries(
    root: &Path,
    live: &HashSet<String>,
    since: std::time::SystemTime,
) -> Result<usize> {
    let dir = root.join(DIR);
    let mut removed = 0;
    for name in list_names(&dir)? {
        let Some(id) = name.strip_suffix(".json") else {
            continue;
        };
        let old =
            std::fs::symlink_metadata(dir.join(&name)).is_ok_and(|m| written_before(&m, since));
        if !live.contains(id) && old {
            remove_entry(root, id)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Ids of every entry, sorted.
pub fn entry_ids(root: &Path) -> Result<Vec<String>> {
    Ok(list_names(&root.join(DIR))?
        .into_iter()
        .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
        .filter(|id| check_container_id(id).is_ok())
        .collect())
}

/// Reads one entry: no symlink, capped, its id matching its file name. `None` when absent.
pub fn read_entry(root: &Path, id: &str) -> Result<Option<ContainerEntry>> {
    check_container_id(id)?;
    let path = entry_path(root, id);
    let Some(data) = read_state_file(&path, SMALL_FILE_CAP)? else {
        return Ok(None);
    };
    let entry: ContainerEntry =
        serde_json::from_slice(&data).map_err(|e| RecordError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    if entry.version != CONTAINER_ENTRY_VERSION {
        return Err(RecordError::UnknownVersion {
            path,
            version: entry.version as u64,
            supported: CONTAINER_ENTRY_VERSION,
        });
    }
    if entry.id != id {
        return Err(RecordError::Corrupt {
            path,
            reason: format!("names container {:?}, not {id:?}", entry.id),
        });
    }
    Ok(Some(entry))
}

/// What a container id prefix (as `crictl` takes them) matches.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Exactly one entry: its full id.
    Found(String),
    /// No entry.
    None,
    /// Several entries: their full ids.
    Ambiguous(Vec<String>),
}

/// Resolves a full id or an unambiguous prefix of one against the entries.
pub fn find_entry(root: &Path, prefix: &str) -> Result<Lookup> {
    check_container_id(prefix)?;
    let ids = entry_ids(root)?;
    if ids.iter().any(|i| i == prefix) {
        return Ok(Lookup::Found(prefix.to_string()));
    }
    let mut hits: Vec<String> = ids.into_iter().filter(|i| i.starts_with(prefix)).collect();
    Ok(match hits.len() {
        0 => Lookup::None,
        1 => Lookup::Found(hits.remove(0)),
        _ => Lookup::Ambiguous(hits),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContainerEdits, EnvVar};

    fn entry(id: &str) -> ContainerEntry {
        let edits = ContainerEdits {
            env: vec![EnvVar {
                name: "TOKEN".into(),
                value: "secret".into(),
            }],
            ..Default::default()
        };
        ContainerEntry {
            version: CONTAINER_ENTRY_VERSION,
            id: id.into(),
            pod: PodRef {
                uid: "pod-1".into(),
                namespace: "ns".into(),
                name: "p".into(),
            },
            container: "app".into(),
            injected_ms: 1,
            records: vec![],
            edits: AppliedEdits::from_edits(&edits),
        }
    }

    #[test]
    fn write_find_prune_and_no_env_values() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        write_entry(root, &entry("abc123")).unwrap();
        write_entry(root, &entry("abd456")).unwrap();
        let text = std::fs::read_to_string(root.join("containers/abc123.json")).unwrap();
        assert!(text.contains("TOKEN") && !text.contains("secret"), "{text}");
        assert_eq!(
            find_entry(root, "abc").unwrap(),
            Lookup::Found("abc123".into())
        );
        assert!(matches!(find_entry(root, "ab").unwrap(), Lookup::Ambiguous(v) if v.len() == 2));
        assert_eq!(find_entry(root, "x").unwrap(), Lookup::None);
        assert_eq!(
            read_entry(root, "abc123").unwrap().unwrap(),
            entry("abc123")
        );
        let live = HashSet::from(["abc123".to_string()]);
        // Written since the cut-off: kept, whatever the live list says.
        let before = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        assert_eq!(prune_entries(root, &live, before).unwrap(), 0);
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        assert_eq!(prune_entries(root, &live, later).unwrap(), 1);
        assert_eq!(entry_ids(root).unwrap(), vec!["abc123".to_string()]);
        remove_entry(root, "abc123").unwrap();
        assert!(read_entry(root, "abc123").unwrap().is_none());
    }

    #[test]
    fn hostile_ids_and_files_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        for bad in ["../x", "a/b", ".hidden", ""] {
            let e = find_entry(root, bad).unwrap_err().to_string();
            assert!(e.contains("not a valid"), "{bad}: {e}");
            assert!(write_entry(root, &entry(bad)).is_err());
        }
        std::fs::create_dir_all(root.join("containers")).unwrap();
        std::fs::write(root.join("target.json"), b"{}").unwrap();
        std::os::unix::fs::symlink(root.join("target.json"), root.join("containers/l.json"))
            .unwrap();
        let e = read_entry(root, "l").unwrap_err().to_string();
        assert!(
            e.contains("containers/l.json") && e.contains("symlink"),
            "{e}"
        );
        // An entry naming another container is not believed.
        let other = serde_json::to_vec(&entry("zzz")).unwrap();
        std::fs::write(root.join("containers/yyy.json"), other).unwrap();
        assert!(read_entry(root, "yyy")
            .unwrap_err()
            .to_string()
            .contains("zzz"));
    }
}
