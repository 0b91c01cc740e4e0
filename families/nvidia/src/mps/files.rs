//! The files graft-driver and graft-mps share: share markers, status, and their paths.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where a client finds the daemon: the CUDA default, so images need no setting. The
/// sandboxed daemon sees the pipe directory at the same path.
pub const CLIENT_PIPE_DIR: &str = "/tmp/nvidia-mps";
/// Files graft reads here are its own and small.
pub const FILE_CAP: u64 = 64 << 10;

/// One prepared share, as graft-driver writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareMarker {
    /// The claim's namespace: a GPU's daemon serves one at a time.
    pub namespace: String,
    /// The claim's UID.
    pub claim_uid: String,
    /// Active thread percentage.
    pub compute: u32,
    /// Pinned device memory; `None`: the whole GPU's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// The GPU's minor number (its device node in the daemon's sandbox); of a MIG device,
    /// its parent GPU's.
    pub minor: u32,
    /// Of a share of a static MIG device: its instances, whose access capabilities the
    /// daemon's sandbox gets too. `None`: a whole GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigIds>,
}

/// A MIG device's GPU and compute instance ids on its parent GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigIds {
    /// GPU instance id.
    pub gi: u32,
    /// Compute instance id.
    pub ci: u32,
}

/// Where a tenancy stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// Directories being made, daemon starting, limits being set.
    Starting,
    /// The daemon runs with the limits for `shares`.
    Ready,
    /// It could not start or keep running; `message` says why. Retried.
    Failed,
    /// Its last share went: being taken down.
    Stopping,
    /// None runs.
    Stopped,
}

/// The tenancy graft-mps runs on a GPU, as it reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Which tenancy (its directory `t-<generation>`).
    pub generation: u64,
    /// The namespace the daemon serves.
    pub namespace: String,
    /// Where it stands.
    pub phase: Phase,
    /// The shares the running daemon's limits account for.
    pub shares: Vec<String>,
    /// The active thread percentage in force.
    pub compute: u32,
    /// The pinned device memory limit in force; `None`: the whole GPU's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// Why it failed; empty otherwise.
    #[serde(default)]
    pub message: String,
}

/// A GPU or MIG device UUID as a directory name (the record policy checks the same rule).
pub fn valid_uuid(uuid: &str) -> bool {
    graft_record::names::is_device_uuid(uuid)
}

/// A share's marker name: letters, digits and dashes (a UUID the API server checked).
pub fn valid_share(share: &str) -> bool {
    !share.is_empty()
        && share.len() <= 80
        && share.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// The paths of one GPU's MPS state.
#[derive(Debug, Clone)]
pub struct GpuPaths {
    /// `<state>/mps/<gpu uuid>`.
    pub dir: PathBuf,
}

impl GpuPaths {
    /// `None` for a UUID that is not one.
    pub fn new(state_dir: &Path, uuid: &str) -> Option<GpuPaths> {
        valid_uuid(uuid).then(|| GpuPaths {
            dir: root(state_dir).join(uuid),
        })
    }

    /// The lock graft-driver and graft-mps take to change the GPU's state.
    pub fn lock(&self) -> PathBuf {
        self.dir.with_extension("lock")
    }

    /// The directory of share markers.
    pub fn shares(&self) -> PathBuf {
        self.dir.join("shares")
    }

    /// The marker of share `id`.
    pub fn share(&self, id: &str) -> PathBuf {
        self.shares().join(format!("{id}.json"))
    }

    /// The status graft-mps writes.
    pub fn status(&self) -> PathBuf {
        self.dir.join("status.json")
    }

    /// The directories of tenancy `generation`.
    pub fn tenancy(&self, generation: u64) -> TenancyPaths {
        TenancyPaths {
            dir: self.dir.join(format!("t-{generation}")),
        }
    }
}

/// The directories of one tenancy.
#[derive(Debug, Clone)]
pub struct TenancyPaths {
    /// `<gpu dir>/t-<generation>`.
    pub dir: PathBuf,
}

impl TenancyPaths {
    /// The daemon's pipe directory.
    pub fn pipe(&self) -> PathBuf {
        self.dir.join("pipe")
    }
    /// The daemon's own shared memory mount.
    pub fn shm(&self) -> PathBuf {
        self.dir.join("shm")
    }
    /// The daemon's log directory.
    pub fn log(&self) -> PathBuf {
        self.dir.join("log")
    }
    /// The root of the daemon's sandbox.
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }
}

/// `<state>/mps`.
pub fn root(state_dir: &Path) -> PathBuf {
    state_dir.join("mps")
}

/// The shares of a GPU: marker names (without `.json`) and contents; unreadable or
/// malformed markers are skipped with a warning (graft-driver writes them whole).
pub fn read_shares(gpu: &GpuPaths) -> Vec<(String, ShareMarker)> {
    let names = graft_record::read::list_names(&gpu.shares()).unwrap_or_default();
    let mut out = Vec::new();
    for name in names {
        let Some(id) = name.strip_suffix(".json").filter(|i| valid_share(i)) else {
            continue;
        };
        match graft_record::read::read_state_file(&gpu.share(id), FILE_CAP) {
            Ok(Some(bytes)) => match serde_json::from_slice::<ShareMarker>(&bytes) {
                Ok(m) => out.push((id.to_string(), m)),
                Err(e) => tracing::warn!(share = id, error = %e, "malformed MPS share marker"),
            },
            Ok(None) => {}
            Err(e) => tracing::warn!(share = id, error = %e, "unreadable MPS share marker"),
        }
    }
    out
}

/// graft-mps's status for a GPU, if it wrote one.
pub fn read_status(gpu: &GpuPaths) -> Option<Status> {
    let bytes = graft_record::read::read_state_file(&gpu.status(), FILE_CAP)
        .ok()
        .flatten()?;
    serde_json::from_slice(&bytes).ok()
}

/// A tenancy's server-side limits: each client may use at most what the whole namespace
/// was allocated on the GPU (compute capped at 100 %); memory only when every share has a
/// memory amount.
pub fn tenancy_limits<'a>(shares: impl IntoIterator<Item = &'a ShareMarker>) -> (u32, Option<u64>) {
    let mut compute = 0u32;
    let mut memory = Some(0u64);
    for s in shares {
        compute = compute.saturating_add(s.compute);
        memory = match (memory, s.memory_mib) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            _ => None,
        };
    }
    (compute.min(100), memory)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(ns: &str, compute: u32, memory: Option<u64>) -> ShareMarker {
        ShareMarker {
            namespace: ns.into(),
            claim_uid: "u".into(),
            compute,
            memory_mib: memory,
            minor: 0,
            mig: None,
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_uuid("GPU-6a1f0000-93c1-4d4e-8f7b-0c5e2a900000"));
        assert!(valid_uuid("MIG-0d2b0000-51a0-5b7e-9c3d-7e11f4a00000"));
        for bad in [
            "", "GPU-", "MIG-", "MIG-x1", "GPU-../x", "GPU-a/b", "gpu-1", "MIG/1",
        ] {
            assert!(!valid_uuid(bad), "{bad:?}");
        }
        assert!(valid_share("3f1c2b7e-8d4a-4e8b-9a55-0c2d1e6f7a90"));
        for bad in ["", "../x", "a/b", ".hidden", &"a".repeat(81)] {
            assert!(!valid_share(bad), "{bad:?}");
        }
        assert!(GpuPaths::new(Path::new("/s"), "GPU-../x").is_none());
        let g = GpuPaths::new(Path::new("/s"), "GPU-12").unwrap();
        assert_eq!(g.lock(), Path::new("/s/mps/GPU-12.lock"));
        assert_eq!(g.share("a"), Path::new("/s/mps/GPU-12/shares/a.json"));
        assert_eq!(g.tenancy(3).pipe(), Path::new("/s/mps/GPU-12/t-3/pipe"));
    }

    #[test]
    fn limits_are_the_namespace_total() {
        let a = share("a", 40, Some(100));
        let b = share("a", 70, Some(50));
        assert_eq!(tenancy_limits([&a]), (40, Some(100)));
        assert_eq!(tenancy_limits([&a, &b]), (100, Some(150)));
        let whole = share("a", 10, None);
        assert_eq!(tenancy_limits([&a, &whole]), (50, None));
        assert_eq!(tenancy_limits([]), (0, Some(0)));
    }
}
