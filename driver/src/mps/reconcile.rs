//! graft-mps's work: make what runs match the shares graft-driver wrote. Per GPU, the
//! shares' namespace gets a tenancy (fresh directories, a shared-memory tmpfs, a sandboxed
//! daemon with the namespace's limits); when its last share goes the tenancy is taken down
//! and nothing of it is left. A daemon that exits (a tenant's `quit`) is started again on
//! the same directories, emptied of what was planted there; one that no longer takes
//! control commands is replaced. At start graft-mps adopts the tenancies its status files
//! name: its daemons died with its previous container, the directories did not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::sandbox::{Node, Spec};
use super::{daemon, fsops, GpuPaths, Phase, ShareMarker, Status, TenancyPaths};

pub struct Config {
    pub state_dir: PathBuf,
    /// The driver root as a host path.
    pub driver_root: PathBuf,
    /// Bytes of each tenancy's shared-memory tmpfs.
    pub shm_bytes: u64,
    /// The host's /proc (the NVIDIA character majors).
    pub proc_root: PathBuf,
}

/// A tenancy graft-mps runs.
struct Tenancy {
    generation: u64,
    namespace: String,
    pid: Option<i32>,
    started: Instant,
    /// The limits and shares last applied.
    applied: Option<(u32, Option<u64>, Vec<String>)>,
    /// Consecutive failed starts, and when to try again.
    failures: u32,
    retry_at: Instant,
}

pub struct Reconciler {
    cfg: Config,
    gpus: BTreeMap<String, Tenancy>,
}

fn write_status(gpu: &GpuPaths, status: &Status) {
    let bytes = serde_json::to_vec_pretty(status).unwrap_or_default();
    if let Err(e) = graft_record::atomic::write_file(&gpu.status(), &bytes) {
        tracing::error!(path = %gpu.status().display(), error = %e, "cannot write the MPS status");
    }
}

/// The major of a character driver in /proc/devices.
fn char_major(proc_root: &Path, driver: &str) -> Option<u64> {
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
/// major of nvidiactl and nvidia<N>; nvidia-uvm's is the kernel's choice).
fn nodes(proc_root: &Path, minor: u32) -> Vec<Node> {
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

fn generations(gpu: &GpuPaths) -> Vec<u64> {
    graft_record::read::list_names(&gpu.dir)
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.strip_prefix("t-")?.parse().ok())
        .collect()
}

/// None after a first failure, then 2, 4, ... 64 s after the `failures`th in a row.
fn backoff(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        n => Duration::from_secs(1 << (n - 1).min(6)),
    }
}

/// Unmounts a tenancy's tmpfs and removes its directories.
fn remove_tenancy(t: &TenancyPaths) -> Result<(), String> {
    let shm = t.shm();
    if fsops::is_mount_point(&shm) {
        nix::mount::umount2(&shm, nix::mount::MntFlags::MNT_DETACH)
            .map_err(|e| format!("unmounting {}: {e}", shm.display()))?;
    }
    fsops::remove_tree(&t.dir).map_err(|e| e.to_string())
}

impl Reconciler {
    pub fn new(cfg: Config) -> Self {
        Reconciler {
            cfg,
            gpus: BTreeMap::new(),
        }
    }

    /// The GPUs with MPS state, by UUID.
    pub fn gpu_dirs(&self) -> Vec<GpuPaths> {
        let root = super::root(&self.cfg.state_dir);
        graft_record::read::list_names(&root)
            .unwrap_or_default()
            .into_iter()
            .filter(|n| super::valid_uuid(n) && root.join(n).is_dir())
            .filter_map(|n| GpuPaths::new(&self.cfg.state_dir, &n))
            .collect()
    }

    /// One pass over every GPU; `resync` also sets the limits again where nothing changed
    /// (a tenant may have changed them through its control socket).
    pub fn pass(&mut self, resync: bool) {
        for gpu in self.gpu_dirs() {
            let uuid = gpu
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            if let Some(uuid) = uuid {
                self.gpu(&uuid, &gpu, resync);
            }
        }
    }

    /// A child exited: if it was a daemon, its tenancy starts it again on the next pass.
    pub fn child_exited(&mut self, pid: i32) -> bool {
        for (uuid, t) in &mut self.gpus {
            if t.pid == Some(pid) {
                tracing::warn!(gpu = %uuid, namespace = %t.namespace, pid, "MPS control daemon exited; starting it again");
                daemon::collect(pid);
                t.pid = None;
                t.applied = None;
                // One that keeps exiting (a tenant quitting it in a loop) waits longer.
                if t.started.elapsed() < Duration::from_secs(60) {
                    t.failures += 1;
                    t.retry_at = Instant::now() + backoff(t.failures);
                } else {
                    t.failures = 0;
                }
                return true;
            }
        }
        false
    }

    /// graft-mps is stopping: its daemons stop (their directories stay for the next one).
    pub fn shutdown(&mut self) {
        for t in self.gpus.values_mut() {
            if let Some(pid) = t.pid.take() {
                daemon::stop(pid);
            }
        }
    }

    fn gpu(&mut self, uuid: &str, gpu: &GpuPaths, resync: bool) {
        let shares = super::read_shares(gpu);
        let current = self.gpus.get(uuid).map(|t| t.namespace.clone());
        // One namespace: the running tenancy's while it has shares, else the first's.
        let namespace = match &current {
            Some(ns) if shares.iter().any(|(_, m)| &m.namespace == ns) => Some(ns.clone()),
            _ => shares.first().map(|(_, m)| m.namespace.clone()),
        };
        if current.is_some() && current != namespace {
            self.take_down(uuid, gpu);
        }
        let Some(namespace) = namespace else {
            self.remove_leftovers(gpu, None);
            if super::read_status(gpu).is_some_and(|s| s.phase != Phase::Stopped) {
                let mut s = self.status(uuid, Phase::Stopped, Vec::new(), String::new());
                s.generation = super::read_status(gpu).map(|s| s.generation).unwrap_or(0);
                write_status(gpu, &s);
            }
            return;
        };
        let served: Vec<&(String, ShareMarker)> = shares
            .iter()
            .filter(|(_, m)| m.namespace == namespace)
            .collect();
        if served.len() < shares.len() {
            tracing::error!(
                gpu = uuid,
                namespace,
                "MPS shares of several namespaces on one GPU; serving only this one"
            );
        }
        if !self.gpus.contains_key(uuid) {
            let t = self.adopt_or_create(gpu, &namespace);
            self.gpus.insert(uuid.to_string(), t);
        }
        let minor = served[0].1.minor;
        self.run(uuid, gpu, &served, minor, resync);
        let keep = self.gpus.get(uuid).map(|t| t.generation);
        self.remove_leftovers(gpu, keep);
    }

    /// The tenancy a previous graft-mps ran for this namespace (same directories, which
    /// running pods have mounted), else a new generation.
    fn adopt_or_create(&self, gpu: &GpuPaths, namespace: &str) -> Tenancy {
        let status = super::read_status(gpu);
        let last = status.as_ref().map(|s| s.generation).unwrap_or(0);
        let newest = generations(gpu).into_iter().max().unwrap_or(0).max(last);
        let generation = match status {
            Some(s)
                if s.namespace == namespace
                    && matches!(s.phase, Phase::Ready | Phase::Starting | Phase::Failed)
                    && gpu.tenancy(s.generation).dir.is_dir() =>
            {
                tracing::info!(gpu = %gpu.dir.display(), namespace, generation = s.generation, "adopting the MPS tenancy");
                s.generation
            }
            _ => newest + 1,
        };
        Tenancy {
            generation,
            namespace: namespace.to_string(),
            pid: None,
            started: Instant::now(),
            applied: None,
            failures: 0,
            retry_at: Instant::now(),
        }
    }

    fn status(&self, uuid: &str, phase: Phase, shares: Vec<String>, message: String) -> Status {
        let t = self.gpus.get(uuid);
        let applied = t.and_then(|t| t.applied.as_ref());
        Status {
            generation: t.map(|t| t.generation).unwrap_or(0),
            namespace: t.map(|t| t.namespace.clone()).unwrap_or_default(),
            phase,
            shares,
            compute: applied.map(|a| a.0).unwrap_or(0),
            memory_mib: applied.and_then(|a| a.1),
            message,
        }
    }

    fn run(
        &mut self,
        uuid: &str,
        gpu: &GpuPaths,
        served: &[&(String, ShareMarker)],
        minor: u32,
        resync: bool,
    ) {
        let (compute, memory) = super::tenancy_limits(served.iter().map(|(_, m)| m));
        let ids: Vec<String> = served.iter().map(|(id, _)| id.clone()).collect();
        let Some((generation, pid, retry_at)) = self
            .gpus
            .get(uuid)
            .map(|t| (t.generation, t.pid, t.retry_at))
        else {
            return;
        };
        if pid.is_none() && Instant::now() < retry_at {
            return;
        }
        let fresh = pid.is_none();
        let mut result = if fresh {
            self.start(uuid, gpu, &gpu.tenancy(generation), minor, ids.clone())
        } else {
            Ok(())
        };
        let wanted = (compute, memory, ids.clone());
        if let (Ok(()), Some(t)) = (&result, self.gpus.get_mut(uuid)) {
            if let Some(pid) = t.pid {
                if resync || fresh || t.applied.as_ref() != Some(&wanted) {
                    result = daemon::apply_limits(pid, compute, memory, Duration::from_secs(5));
                    if result.is_ok() {
                        t.applied = Some(wanted);
                    }
                }
            }
        }
        match result {
            Ok(()) => {
                let status = self.status(uuid, Phase::Ready, ids, String::new());
                if super::read_status(gpu).as_ref() != Some(&status) {
                    write_status(gpu, &status);
                }
            }
            Err(message) => {
                tracing::error!(gpu = uuid, error = %message, "MPS tenancy not ready");
                if let Some(t) = self.gpus.get_mut(uuid) {
                    if let Some(pid) = t.pid.take() {
                        // A daemon that does not take its limits is replaced.
                        daemon::stop(pid);
                    }
                    t.applied = None;
                    t.failures += 1;
                    t.retry_at = Instant::now() + backoff(t.failures);
                }
                write_status(gpu, &self.status(uuid, Phase::Failed, Vec::new(), message));
            }
        }
    }

    /// Directories (fresh or emptied), the tmpfs, and the daemon.
    fn start(
        &mut self,
        uuid: &str,
        gpu: &GpuPaths,
        t: &TenancyPaths,
        minor: u32,
        shares: Vec<String>,
    ) -> Result<(), String> {
        write_status(
            gpu,
            &self.status(uuid, Phase::Starting, shares, String::new()),
        );
        let io = |e: std::io::Error| e.to_string();
        fsops::ensure_dir(&t.dir, 0o711).map_err(io)?;
        fsops::ensure_dir(&t.pipe(), 0o1777).map_err(io)?;
        // What the last daemon (or a tenant) left there: the new daemon starts clean.
        fsops::clear_dir(&t.pipe()).map_err(io)?;
        fsops::ensure_dir(&t.log(), 0o700).map_err(io)?;
        fsops::ensure_dir(&t.root(), 0o700).map_err(io)?;
        fsops::ensure_dir(&t.shm(), 0o700).map_err(io)?;
        if !fsops::is_mount_point(&t.shm()) {
            use nix::mount::MsFlags;
            let opts = format!("size={},mode=1777", self.cfg.shm_bytes);
            nix::mount::mount(
                Some("tmpfs"),
                &t.shm(),
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some(opts.as_str()),
            )
            .map_err(|e| {
                format!(
                    "mounting the shared-memory tmpfs at {}: {e}",
                    t.shm().display()
                )
            })?;
        }
        let spec = Spec {
            driver_root: self.cfg.driver_root.clone(),
            tenancy: t.clone(),
            gpu_uuid: uuid.to_string(),
            nodes: nodes(&self.cfg.proc_root, minor),
        };
        let pid = daemon::start(&spec)?;
        if let Some(t) = self.gpus.get_mut(uuid) {
            tracing::info!(gpu = uuid, namespace = %t.namespace, generation = t.generation, pid, "MPS control daemon started");
            t.pid = Some(pid);
            t.started = Instant::now();
        }
        Ok(())
    }

    /// The tenancy's last share went: daemon, tmpfs and directories go.
    fn take_down(&mut self, uuid: &str, gpu: &GpuPaths) {
        write_status(
            gpu,
            &self.status(uuid, Phase::Stopping, Vec::new(), String::new()),
        );
        let Some(t) = self.gpus.remove(uuid) else {
            return;
        };
        if let Some(pid) = t.pid {
            daemon::stop(pid);
        }
        if let Err(e) = remove_tenancy(&gpu.tenancy(t.generation)) {
            tracing::error!(gpu = uuid, error = %e, "removing the MPS tenancy; retried");
        }
        tracing::info!(gpu = uuid, namespace = %t.namespace, generation = t.generation, "MPS tenancy ended");
        let mut s = self.status(uuid, Phase::Stopped, Vec::new(), String::new());
        s.generation = t.generation;
        write_status(gpu, &s);
    }

    /// Tenancy directories other than `keep`'s: what ended or was never adopted.
    fn remove_leftovers(&self, gpu: &GpuPaths, keep: Option<u64>) {
        for g in generations(gpu) {
            if Some(g) != keep {
                if let Err(e) = remove_tenancy(&gpu.tenancy(g)) {
                    tracing::warn!(dir = %gpu.tenancy(g).dir.display(), error = %e, "removing an old MPS tenancy");
                }
            }
        }
    }
}
