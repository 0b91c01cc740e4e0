//! One tenancy's files and mounts: its directories and shared-memory tmpfs made and taken
//! down, the device nodes its daemon's sandbox gets, and its status file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::daemon::DaemonError;
use super::files::{GpuPaths, Status, TenancyPaths};
use super::fsops;
use super::sandbox::Node;

/// Why a tenancy could not be set up, run or taken down.
#[derive(Debug, thiserror::Error)]
pub enum TenancyError {
    /// A tenancy directory could not be made, emptied or removed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The shared-memory tmpfs could not be mounted.
    #[error("mounting the shared-memory tmpfs at {path}: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The kernel's error.
        #[source]
        source: nix::errno::Errno,
    },
    /// The shared-memory tmpfs could not be unmounted.
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
/// major of nvidiactl and `nvidia<N>`; nvidia-uvm's is the kernel's choice).
pub fn nodes(proc_root: &Path, minor: u32) -> Vec<Node> {
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
    v
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

/// Unmounts a tenancy's tmpfs and removes its directories.
pub fn remove_tenancy(t: &TenancyPaths) -> Result<(), TenancyError> {
    let shm = t.shm();
    if fsops::is_mount_point(&shm) {
        nix::mount::umount2(&shm, nix::mount::MntFlags::MNT_DETACH).map_err(|source| {
            TenancyError::Unmount {
                path: shm.clone(),
                source,
            }
        })?;
    }
    Ok(fsops::remove_tree(&t.dir)?)
}

/// The tenancy's directories (fresh, or emptied of what the last daemon or a tenant left)
/// and its tmpfs of `shm_bytes`.
pub fn make_dirs(t: &TenancyPaths, shm_bytes: u64) -> Result<(), TenancyError> {
    fsops::ensure_dir(&t.dir, 0o711)?;
    fsops::ensure_dir(&t.pipe(), 0o1777)?;
    // What the last daemon (or a tenant) left there: the new daemon starts clean.
    fsops::clear_dir(&t.pipe())?;
    fsops::ensure_dir(&t.log(), 0o700)?;
    fsops::ensure_dir(&t.root(), 0o700)?;
    fsops::ensure_dir(&t.shm(), 0o700)?;
    if !fsops::is_mount_point(&t.shm()) {
        use nix::mount::MsFlags;
        let opts = format!("size={},mode=1777", shm_bytes);
        nix::mount::mount(
            Some("tmpfs"),
            &t.shm(),
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some(opts.as_str()),
        )
        .map_err(|source| TenancyError::Mount {
            path: t.shm(),
            source,
        })?;
    }
    Ok(())
}
