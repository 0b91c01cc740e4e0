//! GPUs shared through MPS, graft-driver's side (the design is in crate::mps): a
//! prepared share is a marker file graft-mps serves; prepare refuses a share whose GPU
//! serves another namespace (MPS cannot keep two apart), waits until graft-mps reports the
//! tenancy ready with this share's limits counted, and hands the containers the tenancy's
//! pipe directory and shared memory. graft-driver starts no daemon and reads nothing a
//! tenant can write.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use graft_record::{ContainerEdits, EnvVar, Mount};

use super::kinds::NvidiaWork;
use crate::devices::IPC_MOUNT_OPTIONS;
use crate::mps::{self, GpuPaths, Phase, ShareMarker, CLIENT_PIPE_DIR};
use crate::setup_error::NvidiaSetupError;
use graft_driver_core::claims::setup_port::SetupError;

/// How long prepare waits for graft-mps by default: well within the kubelet's deadline.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(20);
/// How long prepare waits for another prepare of the same GPU.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Marks the MPS shares graft-mps serves, and waits for them.
#[derive(Debug, Clone)]
pub struct MpsManager {
    /// graft's state directory: the same host path in graft-driver's and graft-mps's pods.
    pub state_dir: PathBuf,
    /// How long a prepare waits for graft-mps to report the share served.
    pub wait: Duration,
    /// Told whenever a GPU's markers may have changed (its tenant with them).
    pub changed: Arc<tokio::sync::Notify>,
}

/// One share as its setup names it.
pub struct Share<'a> {
    /// The GPU shared.
    pub gpu_uuid: &'a str,
    /// The GPU's device-node minor (of a MIG device, its parent's).
    pub minor: u32,
    /// Of a static MIG device: its instances.
    pub mig: Option<mps::MigIds>,
    /// The share id, `whole` for a claim of the whole GPU.
    pub share: &'a str,
    /// Compute percentage, 1 to 100.
    pub compute: u32,
    /// Memory limit; `None`: the whole GPU.
    pub memory_mib: Option<u64>,
    /// The claim's namespace.
    pub namespace: &'a str,
    /// The claim's UID.
    pub claim_uid: &'a str,
}

impl<'a> Share<'a> {
    /// The share of an MPS setup; `None` for other setups.
    pub fn of(s: &'a NvidiaWork) -> Option<Share<'a>> {
        match s {
            NvidiaWork::Mps {
                gpu_uuid,
                minor,
                mig,
                share,
                compute,
                memory_mib,
                namespace,
                claim_uid,
            } => Some(Share {
                gpu_uuid,
                minor: *minor,
                mig: *mig,
                share,
                compute: *compute,
                memory_mib: *memory_mib,
                namespace,
                claim_uid,
            }),
            _ => None,
        }
    }

    /// Its marker's name: the share id; a whole-GPU allocation (no share id) by claim.
    fn marker(&self) -> Result<String, SetupError> {
        let id = match (self.share, self.claim_uid) {
            ("whole", uid) if !uid.is_empty() => format!("whole-{uid}"),
            (share, _) => share.to_string(),
        };
        if mps::valid_share(&id) {
            Ok(id)
        } else {
            Err(err(format!("share id {id:?} is not a UUID")))
        }
    }

    fn content(&self) -> ShareMarker {
        ShareMarker {
            namespace: self.namespace.to_string(),
            claim_uid: self.claim_uid.to_string(),
            compute: self.compute,
            memory_mib: self.memory_mib,
            minor: self.minor,
            mig: self.mig,
        }
    }
}

fn err(reason: impl Into<String>) -> SetupError {
    NvidiaSetupError::Mps {
        reason: reason.into(),
    }
    .into()
}

fn io(op: &str, path: &std::path::Path, e: impl std::fmt::Display) -> SetupError {
    err(format!("{op} {}: {e}", path.display()))
}

impl MpsManager {
    /// Marks shares in `state_dir`, a prepare waiting up to `wait` for graft-mps.
    pub fn new(state_dir: PathBuf, wait: Duration) -> MpsManager {
        MpsManager {
            state_dir,
            wait,
            changed: Arc::default(),
        }
    }

    fn gpu(&self, uuid: &str) -> Result<GpuPaths, SetupError> {
        GpuPaths::new(&self.state_dir, uuid).ok_or_else(|| err(format!("GPU UUID {uuid:?}")))
    }

    /// The GPU's lock, held across a namespace check and the marker it allows: prepares
    /// of one GPU (also those of a surge pod during a rollout) take turns.
    fn lock(&self, gpu: &GpuPaths) -> Result<File, SetupError> {
        let root = mps::root(&self.state_dir);
        graft_record::atomic::create_dir(&root).map_err(|e| err(e.to_string()))?;
        let f = graft_record::atomic::open_lock(&gpu.lock()).map_err(|e| err(e.to_string()))?;
        let start = Instant::now();
        loop {
            // SAFETY: flock on a descriptor this function owns; released when it is closed.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(f);
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) || start.elapsed() >= LOCK_WAIT {
                return Err(io("lock", &gpu.lock(), e));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A share prepared: checked against the GPU's namespace, marked, served by graft-mps.
    pub fn open_share(&self, s: &Share) -> Result<ContainerEdits, SetupError> {
        let gpu = self.gpu(s.gpu_uuid)?;
        let id = s.marker()?;
        {
            let _lock = self.lock(&gpu)?;
            if let Some((_, other)) = mps::read_shares(&gpu)
                .into_iter()
                .find(|(other, m)| m.namespace != s.namespace && other != &id)
            {
                return Err(err(format!(
                    "GPU {} is shared through MPS with namespace {:?} now, and MPS cannot keep \
                     two namespaces apart on one GPU (they would share its server, pipe \
                     directory and /dev/shm): this share of namespace {:?} is prepared once \
                     {:?} holds no share of it any more",
                    s.gpu_uuid, other.namespace, s.namespace, other.namespace
                )));
            }
            graft_record::atomic::create_dir(&gpu.shares()).map_err(|e| err(e.to_string()))?;
            let bytes = serde_json::to_vec(&s.content()).map_err(|e| err(e.to_string()))?;
            graft_record::atomic::write_file(&gpu.share(&id), &bytes)
                .map_err(|e| err(e.to_string()))?;
            self.changed.notify_one();
        }
        match self.wait_served(&gpu, s.namespace, &id) {
            Ok(generation) => Ok(edits(&gpu, generation, s)),
            Err(e) => {
                // Not served: the share must not hold the GPU for its namespace.
                let _ = self.close(&gpu, &id);
                Err(e)
            }
        }
    }

    /// Until graft-mps reports `namespace`'s tenancy ready with share `id` counted; its
    /// generation.
    fn wait_served(&self, gpu: &GpuPaths, namespace: &str, id: &str) -> Result<u64, SetupError> {
        let start = Instant::now();
        loop {
            let status = mps::read_status(gpu);
            if let Some(s) = &status {
                if s.phase == Phase::Ready
                    && s.namespace == namespace
                    && s.shares.iter().any(|x| x == id)
                {
                    return Ok(s.generation);
                }
            }
            if start.elapsed() >= self.wait {
                let last = match status {
                    Some(s) if !s.message.is_empty() => format!("{:?}: {}", s.phase, s.message),
                    Some(s) => format!("{:?} for namespace {:?}", s.phase, s.namespace),
                    None => "none".into(),
                };
                return Err(err(format!(
                    "graft-mps did not report this share served within {:?} (is the graft-mps \
                     DaemonSet running on this node?); its last status for GPU {}: {last}",
                    self.wait,
                    gpu.dir
                        .file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn close(&self, gpu: &GpuPaths, id: &str) -> Result<(), SetupError> {
        let _lock = self.lock(gpu)?;
        let removed = graft_record::atomic::remove_file(&gpu.share(id))
            .map(|_| ())
            .map_err(|e| err(e.to_string()));
        self.changed.notify_one();
        removed
    }

    /// A share unprepared: its marker goes (graft-mps ends the tenancy with the last one).
    pub fn close_share(&self, s: &Share) -> Result<(), SetupError> {
        let gpu = self.gpu(s.gpu_uuid)?;
        self.close(&gpu, &s.marker()?)
    }

    /// At start: each GPU's markers made to match the checkpoint's shares (`setups` reads
    /// it, under each GPU's lock: a prepare of another instance writes its checkpoint
    /// entry before its marker).
    pub fn restore<E: std::fmt::Display>(
        &self,
        setups: impl Fn() -> Result<Vec<NvidiaWork>, E>,
    ) -> Result<(), SetupError> {
        let mut uuids: Vec<String> = graft_record::read::list_names(&mps::root(&self.state_dir))
            .unwrap_or_default()
            .into_iter()
            .filter(|n| mps::valid_uuid(n))
            .collect();
        for s in setups().map_err(|e| err(e.to_string()))? {
            if let Some(share) = Share::of(&s) {
                uuids.push(share.gpu_uuid.to_string());
            }
        }
        uuids.sort();
        uuids.dedup();
        for uuid in uuids {
            let gpu = self.gpu(&uuid)?;
            let _lock = self.lock(&gpu)?;
            let all = setups().map_err(|e| err(e.to_string()))?;
            let wanted: Vec<Share> = all
                .iter()
                .filter_map(Share::of)
                .filter(|s| s.gpu_uuid == uuid)
                .collect();
            let mut keep = Vec::new();
            for s in &wanted {
                let id = s.marker()?;
                graft_record::atomic::create_dir(&gpu.shares()).map_err(|e| err(e.to_string()))?;
                let bytes = serde_json::to_vec(&s.content()).map_err(|e| err(e.to_string()))?;
                if mps::read_shares(&gpu)
                    .iter()
                    .all(|(x, m)| x != &id || m != &s.content())
                {
                    graft_record::atomic::write_file(&gpu.share(&id), &bytes)
                        .map_err(|e| err(e.to_string()))?;
                }
                keep.push(id);
            }
            for (id, _) in mps::read_shares(&gpu) {
                if !keep.contains(&id) {
                    tracing::info!(gpu = %uuid, share = %id, "dropping an MPS share the checkpoint no longer holds");
                    graft_record::atomic::remove_file(&gpu.share(&id))
                        .map_err(|e| err(e.to_string()))?;
                }
            }
        }
        self.changed.notify_one();
        Ok(())
    }

    /// Each GPU's tenant now: the namespace its markers name (one at a time, which
    /// [`MpsManager::open_share`] keeps), by GPU UUID.
    pub fn tenants(&self) -> std::collections::BTreeMap<String, String> {
        graft_record::read::list_names(&mps::root(&self.state_dir))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|uuid| {
                let gpu = GpuPaths::new(&self.state_dir, &uuid)?;
                let (_, first) = mps::read_shares(&gpu).into_iter().next()?;
                Some((uuid, first.namespace))
            })
            .collect()
    }
}

/// What a share's containers get: the tenancy's pipe directory and shared memory, and
/// their own limits (the server holds them to the namespace's whatever they set).
fn edits(gpu: &GpuPaths, generation: u64, s: &Share) -> ContainerEdits {
    let t = gpu.tenancy(generation);
    let bind = |from: PathBuf, to: &str| Mount {
        source: from.to_string_lossy().into_owned(),
        destination: to.to_string(),
        kind: "bind".into(),
        options: IPC_MOUNT_OPTIONS.iter().map(|s| s.to_string()).collect(),
    };
    let env = |name: &str, value: String| EnvVar {
        name: name.into(),
        value,
    };
    let mut e = ContainerEdits {
        mounts: vec![bind(t.pipe(), CLIENT_PIPE_DIR), bind(t.shm(), "/dev/shm")],
        env: vec![
            env("CUDA_MPS_PIPE_DIRECTORY", CLIENT_PIPE_DIR.into()),
            env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", s.compute.to_string()),
        ],
        ..Default::default()
    };
    if let Some(mib) = s.memory_mib {
        // The container sees one GPU: ordinal 0.
        e.env
            .push(env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", format!("0={mib}M")));
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn setup(ns: &str, share: &str) -> NvidiaWork {
        NvidiaWork::Mps {
            gpu_uuid: "GPU-1234".into(),
            minor: 2,
            mig: None,
            share: share.into(),
            compute: 40,
            memory_mib: Some(1024),
            namespace: ns.into(),
            claim_uid: "c1".into(),
        }
    }

    fn manager(dir: &std::path::Path) -> MpsManager {
        MpsManager::new(dir.to_path_buf(), Duration::from_millis(200))
    }

    #[test]
    fn markers_are_named_by_share_or_claim() {
        let a = setup("a", "3f1c2b7e-8d4a-4e8b-9a55-0c2d1e6f7a90");
        assert_eq!(
            Share::of(&a).unwrap().marker().unwrap(),
            "3f1c2b7e-8d4a-4e8b-9a55-0c2d1e6f7a90"
        );
        assert_eq!(
            Share::of(&setup("a", "whole")).unwrap().marker().unwrap(),
            "whole-c1"
        );
        assert!(Share::of(&setup("a", "../x")).unwrap().marker().is_err());
    }

    #[test]
    fn another_namespace_is_refused_and_an_unserved_share_leaves_no_marker() {
        let t = tempfile::tempdir().unwrap();
        let m = manager(t.path());
        let gpu = GpuPaths::new(t.path(), "GPU-1234").unwrap();
        // graft-mps is not there: the share times out, and its marker goes.
        let a = setup("a", "s1");
        let e = m
            .open_share(&Share::of(&a).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("graft-mps did not report"), "{e}");
        assert!(mps::read_shares(&gpu).is_empty());

        // A marker of namespace a (as restore writes them) holds the GPU for a.
        m.restore(|| Ok::<_, Infallible>(vec![a.clone()])).unwrap();
        assert_eq!(mps::read_shares(&gpu).len(), 1);
        let b = setup("b", "s2");
        let e = m
            .open_share(&Share::of(&b).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("namespace \"a\"") && e.contains("one GPU"),
            "{e}"
        );
        assert_eq!(mps::read_shares(&gpu).len(), 1);

        // graft-mps reports a's tenancy ready with the new share: it is served.
        let a2 = setup("a", "s3");
        let status = mps::Status {
            generation: 7,
            namespace: "a".into(),
            phase: Phase::Ready,
            shares: vec!["s1".into(), "s3".into()],
            compute: 80,
            memory_mib: Some(2048),
            message: String::new(),
        };
        graft_record::atomic::write_file(&gpu.status(), &serde_json::to_vec(&status).unwrap())
            .unwrap();
        let edits = m.open_share(&Share::of(&a2).unwrap()).unwrap();
        let srcs: Vec<&str> = edits.mounts.iter().map(|m| m.source.as_str()).collect();
        assert!(
            srcs[0].ends_with("GPU-1234/t-7/pipe") && srcs[1].ends_with("GPU-1234/t-7/shm"),
            "{srcs:?}"
        );
        m.close_share(&Share::of(&a2).unwrap()).unwrap();
        m.close_share(&Share::of(&a2).unwrap()).unwrap();
        m.restore(|| Ok::<_, Infallible>(vec![])).unwrap();
        assert!(mps::read_shares(&gpu).is_empty());
    }
}
