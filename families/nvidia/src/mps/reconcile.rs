//! graft-mps's work: make what runs match the shares graft-driver wrote. Per GPU, the
//! shares' namespace gets a tenancy (fresh directories, a shared-memory tmpfs, a sandboxed
//! daemon with the namespace's limits); when its last share goes the tenancy is taken down
//! and nothing of it is left. A daemon that exits (a tenant's `quit`) is started again on
//! the same directories, emptied of what was planted there; one that no longer takes
//! control commands is replaced. At start graft-mps adopts the tenancies its status files
//! name: its daemons died with its previous container, the directories did not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::daemon;
use super::files::{GpuPaths, MigIds, Phase, ShareMarker, Status, TenancyPaths};
use super::protocol::Protocol;
use super::sandbox::Spec;
use super::tenancy::{
    backoff, generations, make_dirs, nodes, remove_tenancy, write_status, TenancyError,
};

/// What graft-mps is run with.
pub struct Config {
    /// graft's state directory (the share markers and status files under `mps/`).
    pub state_dir: PathBuf,
    /// The driver root as a host path.
    pub driver_root: PathBuf,
    /// Bytes of each tenancy's shared-memory tmpfs.
    pub shm_bytes: u64,
    /// The host's /proc (the NVIDIA character majors).
    pub proc_root: PathBuf,
    /// The daemons' protocol.
    pub protocol: Protocol,
}

/// A tenancy graft-mps runs.
struct Tenancy {
    generation: u64,
    namespace: String,
    pid: Option<i32>,
    started: Instant,
    /// The limits and shares last applied.
    applied: Option<(u32, Option<u64>, Vec<String>)>,
    /// MPS v3: the servers (name/pid) that have those limits.
    limited: BTreeSet<String>,
    /// Consecutive failed starts, and when to try again.
    failures: u32,
    retry_at: Instant,
}

/// The tenancies of every GPU, and the work that makes them match the shares.
pub struct Reconciler {
    cfg: Config,
    gpus: BTreeMap<String, Tenancy>,
}

impl Reconciler {
    /// A reconciler with no tenancy known yet.
    pub fn new(cfg: Config) -> Self {
        Reconciler {
            cfg,
            gpus: BTreeMap::new(),
        }
    }

    /// The GPUs with MPS state, by UUID.
    pub fn gpu_dirs(&self) -> Vec<GpuPaths> {
        let root = super::files::root(&self.cfg.state_dir);
        graft_record::read::list_names(&root)
            .unwrap_or_default()
            .into_iter()
            .filter(|n| super::files::valid_uuid(n) && root.join(n).is_dir())
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
                daemon::stop(pid, self.cfg.protocol);
            }
        }
    }

    fn gpu(&mut self, uuid: &str, gpu: &GpuPaths, resync: bool) {
        let shares = super::files::read_shares(gpu);
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
            if super::files::read_status(gpu).is_some_and(|s| s.phase != Phase::Stopped) {
                let mut s = self.status(uuid, Phase::Stopped, Vec::new(), String::new());
                s.generation = super::files::read_status(gpu)
                    .map(|s| s.generation)
                    .unwrap_or(0);
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
        let device = (served[0].1.minor, served[0].1.mig);
        self.run(uuid, gpu, &served, device, resync);
        let keep = self.gpus.get(uuid).map(|t| t.generation);
        self.remove_leftovers(gpu, keep);
    }

    /// The tenancy a previous graft-mps ran for this namespace (same directories, which
    /// running pods have mounted), else a new generation.
    fn adopt_or_create(&self, gpu: &GpuPaths, namespace: &str) -> Tenancy {
        let status = super::files::read_status(gpu);
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
            limited: BTreeSet::new(),
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
        device: (u32, Option<MigIds>),
        resync: bool,
    ) {
        let (compute, memory) = super::files::tenancy_limits(served.iter().map(|(_, m)| m));
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
            self.start(uuid, gpu, &gpu.tenancy(generation), device, ids.clone())
        } else {
            Ok(())
        };
        let wanted = (compute, memory, ids.clone());
        let protocol = self.cfg.protocol;
        if let (Ok(()), Some(t)) = (&result, self.gpus.get_mut(uuid)) {
            if let Some(pid) = t.pid {
                let all = resync || fresh || t.applied.as_ref() != Some(&wanted);
                let ready = Duration::from_secs(5);
                result = match protocol {
                    Protocol::Legacy if all => daemon::apply_limits(pid, compute, memory, ready),
                    Protocol::Legacy => Ok(()),
                    // Every pass: servers of UIDs that connected since get the limits.
                    Protocol::V3 => {
                        super::v3::apply_limits(pid, compute, memory, ready, &mut t.limited, all)
                    }
                }
                .map_err(TenancyError::from);
                if result.is_ok() {
                    t.applied = Some(wanted);
                }
            }
        }
        match result {
            Ok(()) => {
                let status = self.status(uuid, Phase::Ready, ids, String::new());
                if super::files::read_status(gpu).as_ref() != Some(&status) {
                    write_status(gpu, &status);
                }
            }
            Err(message) => {
                tracing::error!(gpu = uuid, error = %message, "MPS tenancy not ready");
                if let Some(t) = self.gpus.get_mut(uuid) {
                    if let Some(pid) = t.pid.take() {
                        // A daemon that does not take its limits is replaced.
                        daemon::stop(pid, self.cfg.protocol);
                    }
                    t.applied = None;
                    t.failures += 1;
                    t.retry_at = Instant::now() + backoff(t.failures);
                }
                let message = message.to_string();
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
        (minor, mig): (u32, Option<MigIds>),
        shares: Vec<String>,
    ) -> Result<(), TenancyError> {
        write_status(
            gpu,
            &self.status(uuid, Phase::Starting, shares, String::new()),
        );
        let nodes = nodes(&self.cfg.proc_root, minor, mig)?;
        make_dirs(t, self.cfg.shm_bytes)?;
        let spec = Spec {
            driver_root: self.cfg.driver_root.clone(),
            tenancy: t.clone(),
            gpu_uuid: uuid.to_string(),
            nodes,
            protocol: self.cfg.protocol,
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
            daemon::stop(pid, self.cfg.protocol);
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
