//! One tenancy's files and mounts: its directories and tmpfs made and taken
//! down, the device nodes its daemon's sandbox gets, and its status file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::daemon::DaemonError;
use super::files::{GpuPaths, MigIds, Status, TenancyPaths};
use super::fsops;
use super::sandbox::Node;

/// Why a tenancy could not be set up, run or taken down.
#[derive(Debug, thiserror::Error)]
pub enum TenancyError {
    /// A tenancy directory could not be made, emptied or removed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A tmpfs (pipe directory, shared memory) could not be mounted.
    #[error("mounting a tmpfs at {path}: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The kernel's error.
        #[source]
        source: nix::errno::Errno,
    },
    /// A tmpfs could not be unmounted.
    #[error("unmounting {path}: {source}")]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// The kernel's error.
        #[source]
        source: nix::errno::Errno,
    },
    /// The daemon could not be started or given its limits.
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    /// A MIG device's access capabilities could not be found: its daemon could not open it.
    #[error("MIG device gi {gi} ci {ci}: {reason}")]
    MigCapabilities {
        /// GPU instance id.
        gi: u32,
        /// Compute instance id.
        ci: u32,
        /// What was missing.
        reason: String,
    },
}

/// Writes the GPU's status for graft-driver (a failure is logged: the next pass writes it).
pub fn write_status(gpu: &GpuPaths, status: &Status) {
    let bytes = serde_json::to_vec_pretty(status).unwrap_or_default();
    if let Err(e) = graft_record::atomic::write_file(&gpu.status(), &bytes) {
        tracing::error!(path = %gpu.status().display(), error = %e, "cannot write the MPS status");
    }
}

/// The major of a character driver in /proc/devices.
pub fn char_major(proc_root: &Path, driver: &str) -> Option<u64> {
    let text = std::fs::read_to_string(proc_root.join("devices")).ok()?;
    text.lines()
        .take_while(|l| !l.starts_with("Block"))
        .find_map(|l| {
            let (major, name) = l.trim().split_once(' ')?;
            (name.trim() == driver)
                .then(|| major.parse().ok())
                .flatten()
        })
}

/// What the daemon's /dev holds: the basics and the GPU's NVIDIA nodes (195 is the fixed
/// major of nvidiactl and `nvidia<N>`; nvidia-uvm's is the kernel's choice); for a MIG
/// device, also the access capabilities of its GPU and compute instance
/// (`nvidia-caps/nvidia-cap<N>`, found as graft-driver finds them), which CUDA needs to open
/// it. A MIG device whose capabilities cannot be found is an error: its daemon would fail.
pub fn nodes(proc_root: &Path, minor: u32, mig: Option<MigIds>) -> Result<Vec<Node>, TenancyError> {
    let n = |name: &str, major: u64, minor: u64| Node {
        name: name.into(),
        major,
        minor,
    };
    let mut v = vec![
        n("null", 1, 3),
        n("zero", 1, 5),
        n("urandom", 1, 9),
        n("nvidiactl", 195, 255),
        n(&format!("nvidia{minor}"), 195, u64::from(minor)),
    ];
    if let Some(uvm) = char_major(proc_root, "nvidia-uvm") {
        v.push(n("nvidia-uvm", uvm, 0));
        v.push(n("nvidia-uvm-tools", uvm, 1));
    }
    if let Some(m) = mig {
        let missing = |reason: String| TenancyError::MigCapabilities {
            gi: m.gi,
            ci: m.ci,
            reason,
        };
        let caps = char_major(proc_root, "nvidia-caps")
            .ok_or_else(|| missing("/proc/devices has no nvidia-caps entry".into()))?;
        for ci in [None, Some(m.ci)] {
            let cap = crate::driver_files::mig_access_cap(proc_root, minor, m.gi, ci)
                .map_err(|e| missing(e.to_string()))?;
            let minor = u64::from(cap.minor);
            v.push(n(&format!("nvidia-caps/nvidia-cap{minor}"), caps, minor));
        }
    }
    Ok(v)
}

/// The generations of the GPU's tenancy directories (`t-<n>`).
pub fn generations(gpu: &GpuPaths) -> Vec<u64> {
    graft_record::read::list_names(&gpu.dir)
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.strip_prefix("t-")?.parse().ok())
        .collect()
}

/// None after a first failure, then 2, 4, ... 64 s after the `failures`th in a row.
pub fn backoff(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        n => Duration::from_secs(1 << (n - 1).min(6)),
    }
}

/// The pipe directory's tmpfs: room for the daemon's and servers' sockets, pipes and pid
/// file, and no more, so that what tenants write there is capped and never on the host's
/// disk (its pages are charged to whoever writes them).
const PIPE_TMPFS: &str = "size=4194304,nr_inodes=4096,mode=1777";

/// Unmounts a tenancy's tmpfs and removes its directories. The tmpfs go first: unmounting
/// frees whatever a tenant left in them, however deep, without a walk.
pub fn remove_tenancy(t: &TenancyPaths) -> Result<(), TenancyError> {
    for mount in [t.shm(), t.pipe()] {
        if fsops::is_mount_point(&mount) {
            nix::mount::umount2(&mount, nix::mount::MntFlags::MNT_DETACH).map_err(|source| {
                TenancyError::Unmount {
                    path: mount.clone(),
                    source,
                }
            })?;
        }
    }
    Ok(fsops::remove_tree(&t.dir)?)
}

fn mount_tmpfs(path: &Path, opts: &str) -> Result<(), TenancyError> {
    use nix::mount::MsFlags;
    nix::mount::mount(
        Some("tmpfs"),
        path,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(opts),
    )
    .map_err(|source| TenancyError::Mount {
        path: path.to_path_buf(),
        source,
    })
}

/// The tenancy's directories (fresh, or emptied of what the last daemon or a tenant left),
/// its pipe tmpfs and its shared-memory tmpfs of `shm_bytes`. Mounted tmpfs are kept (pods
/// have them mounted): a restarted daemon, or graft-mps, finds the same ones.
pub fn make_dirs(t: &TenancyPaths, shm_bytes: u64) -> Result<(), TenancyError> {
    fsops::ensure_dir(&t.dir, 0o711)?;
    // A shared-memory tmpfs without one on the pipe directory: a tenancy a graft-mps
    // before pipe tmpfs made, whose pods have the pipe directory itself mounted. It keeps
    // it; it is removed with the tenancy, by a walk.
    let legacy = fsops::is_mount_point(&t.shm()) && !fsops::is_mount_point(&t.pipe());
    fsops::ensure_dir(&t.pipe(), 0o1777)?;
    if !legacy && !fsops::is_mount_point(&t.pipe()) {
        mount_tmpfs(&t.pipe(), PIPE_TMPFS)?;
    }
    // What the last daemon (or a tenant) left there: the new daemon starts clean.
    fsops::clear_dir(&t.pipe())?;
    fsops::ensure_dir(&t.log(), 0o700)?;
    fsops::ensure_dir(&t.root(), 0o700)?;
    fsops::ensure_dir(&t.shm(), 0o700)?;
    if !fsops::is_mount_point(&t.shm()) {
        mount_tmpfs(&t.shm(), &format!("size={shm_bytes},mode=1777"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_root(minors: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(
            p.join("devices"),
            "Character devices:\n195 nvidia\n235 nvidia-caps\n510 nvidia-uvm\n\nBlock devices:\n",
        )
        .unwrap();
        std::fs::create_dir_all(p.join("driver/nvidia-caps")).unwrap();
        std::fs::write(p.join("driver/nvidia-caps/mig-minors"), minors).unwrap();
        dir
    }

    fn names(nodes: &[Node]) -> Vec<String> {
        nodes
            .iter()
            .map(|n| format!("{} {}:{}", n.name, n.major, n.minor))
            .collect()
    }

    #[test]
    fn a_mig_devices_daemon_gets_its_instances_capabilities() {
        let proc = proc_root("gpu3/gi13/access 400\ngpu3/gi13/ci0/access 401\n");
        let whole = nodes(proc.path(), 3, None).unwrap();
        assert!(names(&whole).contains(&"nvidia3 195:3".to_string()));
        assert!(!names(&whole).iter().any(|n| n.starts_with("nvidia-caps/")));
        let mig = nodes(proc.path(), 3, Some(MigIds { gi: 13, ci: 0 })).unwrap();
        let got = names(&mig);
        for want in [
            "nvidia3 195:3",
            "nvidia-caps/nvidia-cap400 235:400",
            "nvidia-caps/nvidia-cap401 235:401",
        ] {
            assert!(got.contains(&want.to_string()), "{want} not in {got:?}");
        }
    }

    #[test]
    fn a_mig_device_without_its_capabilities_is_an_error() {
        let proc = proc_root("gpu3/gi13/access 400\n");
        let err = nodes(proc.path(), 3, Some(MigIds { gi: 13, ci: 2 }))
            .unwrap_err()
            .to_string();
        assert!(err.contains("gi 13 ci 2"), "{err}");
        let none = tempfile::tempdir().unwrap();
        std::fs::write(
            none.path().join("devices"),
            "Character devices:\n195 nvidia\n",
        )
        .unwrap();
        let err = nodes(none.path(), 3, Some(MigIds { gi: 13, ci: 0 }))
            .unwrap_err()
            .to_string();
        assert!(err.contains("nvidia-caps"), "{err}");
    }
}
