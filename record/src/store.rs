//! The record store under the state directory:
//!
//! ```text
//! <root>/claims/<claim-uid>.json      one ClaimRecord per prepared claim (the durable truth)
//! <root>/pods/<pod-uid>/<claim-uid>   empty markers: the index from a pod to its claims
//! <root>/writer.lock                  serialises writers (flock)
//! ```
//!
//! The pod index makes the NRI plugin's lookup cost independent of how many claims the node
//! holds: a pod without claims costs one failed directory open. Writers keep it in step
//! with the records: a claim file is written before its markers appear and outlives them
//! on removal, so a reader that finds a marker finds its record (or a removal in progress,
//! which it skips).
//!
//! [`RecordStore::pod_claims_shared`] (graft-nri's lookup) parses a record again only when
//! its file changed since the last parse; the `cache` module says why a hit is never stale.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::atomic;
use crate::cache::RecordCache;
use crate::durability::WritebackCheck;
use crate::error::{RecordError, Result};
use crate::format::ClaimRecord;
use crate::read::list_names;
use crate::stored::{parse_stored, read_record};
use crate::validate::{check_id, validate_record};

/// Default state directory shared by the two daemons.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/graft";

/// The claim records and the pod index in graft's state directory.
#[derive(Debug, Clone)]
pub struct RecordStore {
    root: PathBuf,
    claims: PathBuf,
    pods: PathBuf,
    /// Parsed records that [`RecordStore::pod_claims_shared`] reuses while their files are
    /// unchanged (shared by the store's clones).
    cache: Arc<RecordCache>,
    /// The state disk's write-back check: records are written unsynced (`durability`),
    /// and refused while its last check failed.
    writeback: Arc<WritebackCheck>,
}

impl RecordStore {
    /// Opens the store, creating its directories if needed.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        atomic::private_dir(&root)?;
        let store = RecordStore {
            claims: root.join("claims"),
            pods: root.join("pods"),
            writeback: Arc::new(WritebackCheck::new(&root)),
            root,
            cache: Arc::default(),
        };
        atomic::create_dir(&store.claims)?;
        atomic::create_dir(&store.pods)?;
        Ok(store)
    }

    /// The state directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The state disk's write-back check, which the driver runs every few seconds.
    pub fn writeback(&self) -> &Arc<WritebackCheck> {
        &self.writeback
    }

    fn claim_path(&self, uid: &str) -> PathBuf {
        self.claims.join(format!("{uid}.json"))
    }

    /// Writes (or replaces) a claim record and brings the pod index in line with it.
    /// Atomic, not synced (`durability` says why); refused while the state disk's last
    /// write-back check failed.
    pub fn put_claim(&self, rec: &ClaimRecord) -> Result<()> {
        self.writeback.refuse_if_failed()?;
        validate_record(rec).map_err(|source| RecordError::Rejected {
            claim: rec.claim.to_string(),
            source,
        })?;
        let data = serde_json::to_vec_pretty(rec).map_err(|e| RecordError::Corrupt {
            path: self.claim_path(&rec.claim.uid),
            reason: format!("cannot encode: {e}"),
        })?;
        if data.len() as u64 > crate::read::SMALL_FILE_CAP {
            // Readers refuse a record this large; writing it would only fail the pod later.
            return Err(RecordError::Corrupt {
                path: self.claim_path(&rec.claim.uid),
                reason: format!(
                    "the record would be {} bytes, more than readers accept ({})",
                    data.len(),
                    crate::read::SMALL_FILE_CAP
                ),
            });
        }
        // Written before the lock, so that writers of different claims only take turns
        // for the rename and the index.
        let path = self.claim_path(&rec.claim.uid);
        let staged = atomic::stage(&path, &data, atomic::FILE_MODE)?;
        let _lock = self.writer_lock()?;
        let previous = self.get_claim(&rec.claim.uid);
        staged.install(&path)?;
        self.writeback.dirtied(&path);
        // Markers follow the record; repair_index rebuilds missing ones from it when the
        // driver starts.
        for pod in &rec.pods {
            let dir = self.pods.join(&pod.uid);
            DirBuilder::new()
                .recursive(true)
                .mode(atomic::DIR_MODE)
                .create(&dir)
                .map_err(|e| RecordError::io("mkdir", &dir, e))?;
            self.writeback.dirtied(&dir);
            let marker = dir.join(&rec.claim.uid);
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(atomic::FILE_MODE)
                .custom_flags(atomic::NOFOLLOW_CLOEXEC)
                .open(&marker)
                .map_err(|e| RecordError::io("create", &marker, e))?;
        }
        let keep = |uid: &str| rec.pods.iter().any(|p| p.uid == uid);
        match previous {
            Ok(Some(prev)) => {
                for pod in prev.pods.iter().filter(|p| !keep(&p.uid)) {
                    self.unindex(&pod.uid, &rec.claim.uid)?;
                }
            }
            // No record, so no markers: a record is written before its markers and
            // removed after them. Skipping the sweep keeps a write independent of how
            // many pods the node has.
            Ok(None) => {}
            // Unreadable previous state: sweep the whole index for this claim.
            Err(_) => {
                for pod_uid in self.indexed_pods_of(&rec.claim.uid)? {
                    if !keep(&pod_uid) {
                        self.unindex(&pod_uid, &rec.claim.uid)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Removes a claim record and its index entries. Returns whether a record existed.
    pub fn remove_claim(&self, claim_uid: &str) -> Result<bool> {
        check_id("claim uid", claim_uid).map_err(|source| RecordError::Rejected {
            claim: claim_uid.to_string(),
            source,
        })?;
        let _lock = self.writer_lock()?;
        // The record names the pods it indexed; only an unreadable one needs a sweep.
        let pods = match self.get_claim(claim_uid) {
            Ok(Some(rec)) => rec.pods.into_iter().map(|p| p.uid).collect(),
            Ok(None) => Vec::new(),
            Err(_) => self.indexed_pods_of(claim_uid)?,
        };
        for pod_uid in pods {
            self.unindex(&pod_uid, claim_uid)?;
        }
        let path = self.claim_path(claim_uid);
        self.writeback.dirtied(&path);
        match fs::remove_file(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(RecordError::io("remove", &path, e)),
            Ok(()) => Ok(true),
        }
    }

    /// Reads one claim record; `None` if there is none. Corrupt, unknown-version and
    /// invalid records are errors.
    pub fn get_claim(&self, claim_uid: &str) -> Result<Option<ClaimRecord>> {
        check_id("claim uid", claim_uid).map_err(|source| RecordError::Rejected {
            claim: claim_uid.to_string(),
            source,
        })?;
        read_record(&self.claim_path(claim_uid))
    }

    /// UIDs of every stored claim, in no particular order.
    pub fn claim_uids(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for name in list_names(&self.claims)? {
            if let Some(uid) = name.strip_suffix(".json") {
                if !uid.starts_with('.') {
                    out.push(uid.to_string());
                }
            }
        }
        Ok(out)
    }

    /// The records of every claim the pod holds. Fails if any of them cannot be read, so
    /// that the caller fails closed for the whole pod. Markers whose record is gone
    /// (a removal in progress) and records that no longer list the pod are skipped.
    pub fn pod_claims(&self, pod_uid: &str) -> Result<Vec<ClaimRecord>> {
        Ok(self
            .pod_claims_shared(pod_uid)?
            .into_iter()
            .map(Arc::unwrap_or_clone)
            .collect())
    }

    /// [`RecordStore::pod_claims`] without copying: each record is opened and checked as
    /// always, and parsed again only when its file changed since this store last parsed it
    /// (`cache` module).
    pub fn pod_claims_shared(&self, pod_uid: &str) -> Result<Vec<Arc<ClaimRecord>>> {
        if check_id("pod uid", pod_uid).is_err() {
            // Not a UID any record can hold, so no record can name it.
            return Ok(Vec::new());
        }
        let dir = self.pods.join(pod_uid);
        // Never through a symlink: the index is read as the records are.
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let names = match Dir::open(&dir, flags, Mode::empty()) {
            Ok(d) => d,
            Err(Errno::ENOENT) => return Ok(Vec::new()),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(RecordError::io(
                    "read dir",
                    dir,
                    std::io::Error::other("is a symlink or not a directory"),
                ))
            }
            Err(e) => return Err(RecordError::io("read dir", dir, e.into())),
        };
        let mut out = Vec::new();
        for entry in names {
            let entry = entry.map_err(|e| RecordError::io("read dir", &dir, e.into()))?;
            let Ok(claim_uid) = entry.file_name().to_str() else {
                continue;
            };
            if claim_uid.starts_with('.') {
                continue;
            }
            let path = self.claim_path(claim_uid);
            match self.cache.read(claim_uid, &path, parse_stored)? {
                Some(rec) if rec.holds_pod(pod_uid) => out.push(rec),
                _ => {}
            }
        }
        // Directory order is arbitrary; a stable order gives a stable spec.
        out.sort_by(|a, b| a.claim.uid.cmp(&b.claim.uid));
        Ok(out)
    }

    /// Brings the pod index in line with the records: drops markers whose record is gone
    /// (a crash between steps of a removal) and restores markers a record names but that
    /// are missing. Returns how many markers changed.
    pub fn repair_index(&self) -> Result<usize> {
        let _lock = self.writer_lock()?;
        let mut changed = 0;
        for pod_uid in list_names(&self.pods)? {
            for claim_uid in list_names(&self.pods.join(&pod_uid))? {
                if !self.claim_path(&claim_uid).exists() {
                    self.unindex(&pod_uid, &claim_uid)?;
                    changed += 1;
                }
            }
        }
        for claim_uid in self.claim_uids()? {
            let Ok(Some(rec)) = self.get_claim(&claim_uid) else {
                continue;
            };
            for pod in &rec.pods {
                let dir = self.pods.join(&pod.uid);
                let marker = dir.join(&claim_uid);
                if !marker.exists() {
                    atomic::create_dir(&dir)?;
                    atomic::touch(&marker)?;
                    changed += 1;
                }
            }
        }
        Ok(changed)
    }

    /// Removes the temp files of record writes begun before `before` (this boot's start):
    /// a rename a power loss kept from the disk leaves one. Newer ones may be another
    /// driver instance's write under way, and stay. Returns how many went.
    pub fn remove_stale_temps(&self, before: std::time::SystemTime) -> Result<usize> {
        let mut removed = 0;
        let entries =
            fs::read_dir(&self.claims).map_err(|e| RecordError::io("read dir", &self.claims, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| RecordError::io("read dir", &self.claims, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !(name.starts_with('.') && name.contains(".json.tmp.")) {
                continue;
            }
            let path = entry.path();
            let stale = fs::symlink_metadata(&path)
                .and_then(|m| m.modified())
                .is_ok_and(|m| m < before);
            if stale && atomic::remove_file(&path)? {
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn indexed_pods_of(&self, claim_uid: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for pod_uid in list_names(&self.pods)? {
            if self.pods.join(&pod_uid).join(claim_uid).exists() {
                out.push(pod_uid);
            }
        }
        Ok(out)
    }

    fn unindex(&self, pod_uid: &str, claim_uid: &str) -> Result<()> {
        let dir = self.pods.join(pod_uid);
        atomic::remove_file(&dir.join(claim_uid))?;
        // Only succeeds once the pod holds no claim; anything else leaves the directory.
        if fs::remove_dir(&dir).is_ok() {
            atomic::sync_dir(&self.pods)?;
        }
        Ok(())
    }

    fn writer_lock(&self) -> Result<File> {
        let path = self.root.join("writer.lock");
        let f = atomic::open_lock(&path)?;
        f.lock().map_err(|e| RecordError::io("lock", &path, e))?;
        Ok(f)
    }
}
