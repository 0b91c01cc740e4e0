//! The driver's two-phase prepare checkpoint: per claim, `PrepareStarted` is made durable
//! before any side effect and `PrepareCompleted` after the last one, so a driver killed at
//! any point knows on restart what to roll back and what it holds.
//!
//! Two slot files, `checkpoint-a.json` and `checkpoint-b.json`, each a whole checkpoint
//! with a schema version, a sequence number, the boot id it belongs to and a checksum over
//! its claims. A write goes in place into the slot that does not hold the current state,
//! then fdatasync: no temp file, rename or directory fsync on the prepare path, and a torn
//! write leaves the other slot, one step older, to read. Readers take the valid slot with
//! the highest sequence. Every read-modify-write happens under an exclusive flock on a
//! sibling file, so two driver instances on a node (a rolling update) never interleave;
//! each transaction re-reads the slots rather than trusting memory.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{DriverError, Result};

mod entry;
mod slot;

use super::keylocks::{KeyGuard, KeyLocks};
pub use super::lifecycle::ClaimState;
pub use entry::{ClaimEntry, PreparedDevice};
pub use slot::CHECKPOINT_VERSION;
use slot::{boot_time, checksum, needed_version, read_slot, OnDisk};

const SLOTS: [&str; 2] = ["checkpoint-a.json", "checkpoint-b.json"];
const LOCK_NAME: &str = "checkpoint.lock";
/// How long a transaction waits for another one to finish.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// What opening found besides the current claims.
#[derive(Debug, Default)]
pub struct OpenReport {
    /// Claims of a checkpoint written during another boot, discarded.
    pub discarded_other_boot: Option<(String, BTreeMap<String, ClaimEntry>)>,
    /// A file that failed its checks, moved aside to this path.
    pub quarantined: Option<Quarantined>,
}

/// A checkpoint file that failed its checks, and where it went.
#[derive(Debug)]
pub struct Quarantined {
    /// Where it was moved.
    pub moved_to: PathBuf,
    /// Which check it failed.
    pub reason: String,
    /// Last written before this boot began: its claims, whatever they were, belong to a
    /// boot that is over.
    pub from_earlier_boot: bool,
}

/// The prepare checkpoint: what each claim in flight or prepared has on the node, written
/// durably to one of two slots so that a torn write never loses the last good one.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    dir: PathBuf,
    boot_id: String,
    /// This process's transactions queue here and are woken as soon as the one before
    /// ends; the flock then only ever waits for another driver instance.
    local: Arc<KeyLocks>,
}

impl Checkpoint {
    /// A checkpoint in `dir` for boot `boot_id`, with no claims loaded yet.
    pub fn new(dir: impl Into<PathBuf>, boot_id: impl Into<String>) -> Result<Self> {
        let dir = dir.into();
        graft_record::atomic::create_dir(&dir)?;
        Ok(Checkpoint {
            dir,
            boot_id: boot_id.into(),
            local: KeyLocks::new(),
        })
    }

    /// The slot files.
    pub fn paths(&self) -> [PathBuf; 2] {
        SLOTS.map(|n| self.dir.join(n))
    }

    /// Validates the file once at start: a checkpoint from another boot is discarded and
    /// a corrupt one moved aside (the caller rebuilds from the records, which are the
    /// durable truth of completed prepares).
    pub fn open(&self) -> Result<OpenReport> {
        let mut txn = self.begin()?;
        let report = std::mem::take(&mut txn.report);
        if report.discarded_other_boot.is_some() || report.quarantined.is_some() {
            txn.save()?;
        }
        Ok(report)
    }

    /// Takes the lock (waiting up to 10 s for another transaction, of this process or of
    /// another instance) and loads the file. Blocking: call from a blocking thread.
    pub fn begin(&self) -> Result<Txn> {
        let lock_path = self.dir.join(LOCK_NAME);
        let deadline = Instant::now() + LOCK_WAIT;
        let local = self
            .local
            .acquire(&[LOCK_NAME.to_string()], deadline)
            .ok_or_else(|| DriverError::Checkpoint {
                path: lock_path.clone(),
                reason: format!("another transaction held it for {LOCK_WAIT:?}"),
            })?;
        let lock = graft_record::atomic::open_lock(&lock_path)?;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(source) => {
                    return Err(DriverError::CheckpointLock {
                        path: lock_path,
                        source,
                    })
                }
            }
        }
        let mut txn = Txn {
            _lock: lock,
            _local: local,
            dir: self.dir.clone(),
            paths: self.paths(),
            current: None,
            seq: 0,
            boot_id: self.boot_id.clone(),
            claims: BTreeMap::new(),
            report: OpenReport::default(),
        };
        txn.load()?;
        Ok(txn)
    }
}

impl Checkpoint {
    /// The claims of the newest valid slot of this boot, read without taking the lock and
    /// without moving anything aside: start-up does that, and reports it, later.
    pub fn peek(&self) -> Result<BTreeMap<String, ClaimEntry>> {
        let mut best: Option<OnDisk> = None;
        for path in self.paths() {
            if let Some(Ok(f)) = read_slot(&path)? {
                if best.as_ref().is_none_or(|b| f.seq > b.seq) {
                    best = Some(f);
                }
            }
        }
        Ok(best
            .filter(|f| f.boot_id == self.boot_id)
            .map(|f| f.claims)
            .unwrap_or_default())
    }
}

/// A locked view of the checkpoint. Changes are durable once `save` returns.
pub struct Txn {
    // Dropped in this order: the flock, then the local turn.
    _lock: File,
    _local: KeyGuard,
    dir: PathBuf,
    paths: [PathBuf; 2],
    /// The slot holding the state loaded or last saved.
    current: Option<usize>,
    seq: u64,
    boot_id: String,
    claims: BTreeMap<String, ClaimEntry>,
    report: OpenReport,
}

impl Txn {
    fn load(&mut self) -> Result<()> {
        let mut best: Option<(usize, OnDisk)> = None;
        let mut problems = Vec::new();
        for (i, path) in self.paths.iter().enumerate() {
            match read_slot(path)? {
                None => {}
                Some(Err(reason)) => problems.push((i, reason.to_string())),
                Some(Ok(f)) if best.as_ref().is_none_or(|(_, b)| f.seq > b.seq) => {
                    best = Some((i, f));
                }
                Some(Ok(_)) => {}
            }
        }
        match best {
            Some((i, f)) => {
                // The other slot failing is a write torn by a crash: it is overwritten
                // by the next save.
                self.current = Some(i);
                self.seq = f.seq;
                if f.boot_id != self.boot_id {
                    self.report.discarded_other_boot = Some((f.boot_id, f.claims));
                } else {
                    self.claims = f.claims;
                }
            }
            None if problems.is_empty() => {}
            None => {
                let reason = problems
                    .iter()
                    .map(|(i, r)| format!("{}: {r}", SLOTS[*i]))
                    .collect::<Vec<_>>()
                    .join("; ");
                let boot = boot_time();
                let mut from_earlier_boot = boot.is_some();
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or_default();
                let mut moved_to = self.dir.clone();
                for (i, _) in &problems {
                    let path = &self.paths[*i];
                    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
                    from_earlier_boot &= matches!((mtime, boot), (Some(m), Some(b)) if m < b);
                    moved_to = path.with_extension(format!("json.corrupt-{stamp}"));
                    std::fs::rename(path, &moved_to)
                        .map_err(|e| DriverError::io("move aside", path, e))?;
                }
                self.report.quarantined = Some(Quarantined {
                    moved_to,
                    reason,
                    from_earlier_boot,
                });
            }
        }
        Ok(())
    }

    /// The entry of claim `uid`.
    pub fn get(&self, uid: &str) -> Option<&ClaimEntry> {
        self.claims.get(uid)
    }

    /// Every entry, by claim UID.
    pub fn claims(&self) -> &BTreeMap<String, ClaimEntry> {
        &self.claims
    }

    /// Sets an entry in memory; `save` makes it durable.
    pub fn set(&mut self, uid: &str, entry: ClaimEntry) {
        self.claims.insert(uid.to_string(), entry);
    }

    /// Drops an entry in memory; `save` makes it durable.
    pub fn unset(&mut self, uid: &str) {
        self.claims.remove(uid);
    }

    /// Sets an entry and writes the file.
    pub fn put(&mut self, uid: &str, entry: ClaimEntry) -> Result<()> {
        self.claims.insert(uid.to_string(), entry);
        self.save()
    }

    /// Removes an entry and writes the file; a missing entry is not an error.
    pub fn remove(&mut self, uid: &str) -> Result<()> {
        if self.claims.remove(uid).is_some() {
            self.save()?;
        }
        Ok(())
    }

    /// Writes the entries to the older slot, durably.
    pub fn save(&mut self) -> Result<()> {
        let seq = self.seq + 1;
        let file = OnDisk {
            version: needed_version(&self.claims),
            seq,
            boot_id: self.boot_id.clone(),
            checksum: checksum(&self.claims),
            claims: self.claims.clone(),
        };
        let slot = self.current.map_or(0, |c| 1 - c);
        let path = &self.paths[slot];
        let data = serde_json::to_vec(&file).map_err(|source| DriverError::CheckpointEncode {
            path: path.clone(),
            source,
        })?;
        let io = |what, e| DriverError::io(what, path, e);
        let created = !path.exists();
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(graft_record::atomic::FILE_MODE)
            .open(path)
            .map_err(|e| io("open", e))?;
        f.write_all(&data).map_err(|e| io("write", e))?;
        f.set_len(data.len() as u64)
            .map_err(|e| io("truncate", e))?;
        f.sync_data().map_err(|e| io("fsync", e))?;
        if created {
            graft_record::atomic::sync_dir(&self.dir)?;
        }
        self.current = Some(slot);
        self.seq = seq;
        Ok(())
    }
}

/// Where the checkpoint lives under the shared state directory.
pub fn default_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("driver")
}

#[cfg(test)]
mod tests;
