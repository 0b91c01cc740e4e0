//! GPUs shared through NVIDIA MPS: one control daemon per shared GPU, started by the first
//! prepared share and stopped with the last, its pipe, log and shared-memory directories
//! private to graft under `<state>/mps/gpu-<minor>/` (never the host's own MPS, never
//! another GPU's). Each prepared share is a marker file in `clients/`, so what runs is
//! always derivable from disk: a driver restart (which takes the daemon down with its
//! container) starts it again for the shares the checkpoint holds, once.
//!
//! The daemon is the driver root's `nvidia-cuda-mps-control`, run in graft-driver's
//! container with an explicit environment (the GPU by UUID, the directories, the driver's
//! library directory) and in a mount namespace of its own whose `/dev/shm` is the GPU's
//! shared-memory directory, which clients get as their `/dev/shm` too.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use graft_record::{ContainerEdits, EnvVar, Mount};

use super::edits::IPC_MOUNT_OPTIONS;
use crate::setup::{Setup, SetupError};

/// Where a client finds the daemon: the CUDA default, so images need no setting.
pub const CLIENT_PIPE_DIR: &str = "/tmp/nvidia-mps";

#[derive(Debug, Clone)]
pub struct MpsManager {
    /// `nvidia-cuda-mps-control` as this process can run it; `None` when the driver root
    /// has none (kept current by discovery).
    pub control: std::sync::Arc<std::sync::RwLock<Option<PathBuf>>>,
    /// The driver's library directory as this process sees it (libcuda for the server).
    pub lib_dir: PathBuf,
    /// graft's state directory: the same path on the host and here.
    pub state_dir: PathBuf,
}

fn io(op: &str, path: &Path, source: std::io::Error) -> SetupError {
    SetupError::Io {
        op: op.to_string(),
        path: path.to_path_buf(),
        source,
    }
}

fn mps(reason: impl Into<String>) -> SetupError {
    SetupError::Mps {
        reason: reason.into(),
    }
}

/// A share's marker name: its share id (a UUID the API server checked), or `whole`.
fn marker(share: &str) -> Result<&str, SetupError> {
    if !share.is_empty()
        && share.len() <= 64
        && share.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        Ok(share)
    } else {
        Err(mps(format!("share id {share:?} is not a UUID")))
    }
}

impl MpsManager {
    fn gpu_dir(&self, minor: u32) -> PathBuf {
        self.state_dir.join("mps").join(format!("gpu-{minor}"))
    }

    fn control(&self) -> Result<PathBuf, SetupError> {
        self.control
            .read()
            .ok()
            .and_then(|c| c.clone())
            .ok_or_else(|| {
                mps("the driver root has no nvidia-cuda-mps-control of the running driver's version")
            })
    }

    /// The control program with only what it needs in its environment.
    fn command(&self, uuid: Option<&str>, minor: u32) -> Result<Command, SetupError> {
        let dir = self.gpu_dir(minor);
        let mut c = Command::new(self.control()?);
        c.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LD_LIBRARY_PATH", &self.lib_dir)
            .env("CUDA_MPS_PIPE_DIRECTORY", dir.join("pipe"))
            .env("CUDA_MPS_LOG_DIRECTORY", dir.join("log"));
        if let Some(u) = uuid {
            c.env("CUDA_VISIBLE_DEVICES", u);
        }
        Ok(c)
    }

    /// Sends one command to the GPU's daemon; `Ok(false)` when none answers.
    fn ask(&self, minor: u32, line: &str) -> Result<bool, SetupError> {
        let control = self.control()?;
        let mut child = self
            .command(None, minor)?
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| io("running", &control, e))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A daemon that is not there makes the client exit before reading.
            let _ = writeln!(stdin, "{line}");
        }
        let status = child.wait().map_err(|e| io("waiting for", &control, e))?;
        Ok(status.success())
    }

    fn running(&self, minor: u32) -> Result<bool, SetupError> {
        self.ask(minor, "get_server_list")
    }

    /// Starts the GPU's daemon unless one answers already.
    fn ensure_running(&self, uuid: &str, minor: u32) -> Result<(), SetupError> {
        if self.running(minor)? {
            return Ok(());
        }
        let dir = self.gpu_dir(minor);
        for sub in ["pipe", "log", "shm", "clients"] {
            let p = dir.join(sub);
            std::fs::create_dir_all(&p).map_err(|e| io("creating", &p, e))?;
        }
        let shm = dir.join("shm");
        let control = self.control()?;
        let mut cmd = self.command(Some(uuid), minor)?;
        cmd.arg("-d")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: between fork and exec only unshare and mount run, both async-signal-safe
        // system calls; the paths were built before the fork.
        unsafe {
            cmd.pre_exec(move || {
                use nix::mount::{mount, MsFlags};
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)?;
                mount(
                    None::<&str>,
                    "/",
                    None::<&str>,
                    MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                    None::<&str>,
                )?;
                mount(
                    Some(&shm),
                    "/dev/shm",
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )?;
                Ok(())
            });
        }
        let out = cmd.output().map_err(|e| io("starting", &control, e))?;
        if !out.status.success() {
            return Err(mps(format!(
                "nvidia-cuda-mps-control -d for GPU {uuid} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        tracing::info!(gpu = uuid, minor, dir = %dir.display(), "MPS control daemon started");
        Ok(())
    }

    fn stop(&self, minor: u32) -> Result<(), SetupError> {
        if self.running(minor)? {
            let pid = std::fs::read_to_string(
                self.gpu_dir(minor).join("pipe/nvidia-cuda-mps-control.pid"),
            )
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
            self.ask(minor, "quit")?;
            if let Some(pid) = pid {
                reap(pid);
            }
            tracing::info!(minor, "MPS control daemon stopped");
        }
        Ok(())
    }

    /// A share prepared: its marker, the daemon, and what its containers get.
    pub fn open_share(
        &self,
        uuid: &str,
        minor: u32,
        share: &str,
        compute: u32,
        memory_mib: Option<u64>,
    ) -> Result<ContainerEdits, SetupError> {
        let clients = self.gpu_dir(minor).join("clients");
        std::fs::create_dir_all(&clients).map_err(|e| io("creating", &clients, e))?;
        let m = clients.join(marker(share)?);
        std::fs::write(&m, uuid).map_err(|e| io("writing", &m, e))?;
        self.ensure_running(uuid, minor)?;
        let dir = self.gpu_dir(minor);
        let bind = |from: &str, to: &str| Mount {
            source: dir.join(from).to_string_lossy().into_owned(),
            destination: to.to_string(),
            kind: "bind".into(),
            options: IPC_MOUNT_OPTIONS.iter().map(|s| s.to_string()).collect(),
        };
        let env = |name: &str, value: String| EnvVar {
            name: name.into(),
            value,
        };
        let mut e = ContainerEdits {
            mounts: vec![bind("pipe", CLIENT_PIPE_DIR), bind("shm", "/dev/shm")],
            env: vec![
                env("CUDA_MPS_PIPE_DIRECTORY", CLIENT_PIPE_DIR.into()),
                env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", compute.to_string()),
            ],
            ..Default::default()
        };
        if let Some(mib) = memory_mib {
            // The container sees one GPU: ordinal 0.
            e.env
                .push(env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", format!("0={mib}M")));
        }
        Ok(e)
    }

    /// A share unprepared: its marker goes, and with the last one the daemon.
    pub fn close_share(&self, minor: u32, share: &str) -> Result<(), SetupError> {
        let clients = self.gpu_dir(minor).join("clients");
        let m = clients.join(marker(share)?);
        match std::fs::remove_file(&m) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("removing", &m, e)),
        }
        if markers(&clients).is_empty() {
            self.stop(minor)?;
        }
        Ok(())
    }

    /// At start: markers made to match the checkpoint's shares, a daemon for every GPU that
    /// has shares (the last one died with graft-driver's container) and none for the others.
    pub fn restore(&self, setups: &[Setup]) -> Result<(), SetupError> {
        let mut wanted: BTreeMap<u32, (String, BTreeSet<String>)> = BTreeMap::new();
        for s in setups {
            if let Setup::Mps {
                gpu_uuid,
                minor,
                share,
                ..
            } = s
            {
                wanted
                    .entry(*minor)
                    .or_insert_with(|| (gpu_uuid.clone(), BTreeSet::new()))
                    .1
                    .insert(share.clone());
            }
        }
        let root = self.state_dir.join("mps");
        let mut minors: BTreeSet<u32> = wanted.keys().copied().collect();
        if let Ok(rd) = std::fs::read_dir(&root) {
            for e in rd.flatten() {
                if let Some(m) = e
                    .file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("gpu-"))
                    .and_then(|n| n.parse().ok())
                {
                    minors.insert(m);
                }
            }
        }
        for minor in minors {
            let clients = self.gpu_dir(minor).join("clients");
            let want = wanted.get(&minor);
            for m in markers(&clients) {
                if !want.is_some_and(|(_, s)| s.contains(&m)) {
                    let p = clients.join(&m);
                    std::fs::remove_file(&p).map_err(|e| io("removing", &p, e))?;
                }
            }
            match want {
                Some((uuid, shares)) => {
                    std::fs::create_dir_all(&clients).map_err(|e| io("creating", &clients, e))?;
                    for s in shares {
                        let p = clients.join(marker(s)?);
                        std::fs::write(&p, uuid).map_err(|e| io("writing", &p, e))?;
                    }
                    self.ensure_running(uuid, minor)?;
                }
                None => self.stop(minor)?,
            }
        }
        Ok(())
    }
}

/// The daemon detached from the process that started it, so in graft-driver's container it
/// is a child of graft-driver (PID 1 there): collected once it exits, not left a zombie.
/// Elsewhere it is someone else's child and this returns at once.
fn reap(pid: i32) {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let pid = nix::unistd::Pid::from_raw(pid);
    for _ in 0..40 {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(std::time::Duration::from_millis(50)),
            _ => return,
        }
    }
}

fn markers(clients: &Path) -> Vec<String> {
    std::fs::read_dir(clients)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_markers_are_uuids_only() {
        assert!(marker("3f1c2b7e-8d4a-4e8b-9a55-0c2d1e6f7a90").is_ok());
        assert!(marker("whole").is_ok());
        for bad in ["", "../x", "a/b", ".hidden", &"a".repeat(65)] {
            assert!(marker(bad).is_err(), "{bad:?}");
        }
    }
}
