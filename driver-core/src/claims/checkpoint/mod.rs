//! The driver's two-phase prepare checkpoint: per claim, `PrepareStarted` is written
//! before any side effect and `PrepareCompleted` after the last one, so a driver killed at
//! any point knows on restart what to roll back and what it holds.
//!
//! Two slot files, `checkpoint-a.json` and `checkpoint-b.json`, each a whole checkpoint
//! with a schema version, a sequence number, the boot id it belongs to and a checksum over
//! its claims. A write goes in place into the slot that does not hold the current state,
//! not synced (graft-record's `durability` gives the rule): no temp file, rename or sync on
//! the prepare path, and a write torn by a kill leaves the other slot, one step older, to
//! read. Readers take the valid slot with
//! the highest sequence. Every read-modify-write happens under an exclusive flock on a
//! sibling file, so two driver instances on a node (a rolling update) never interleave;
//! the slots are read again whenever this process takes the flock, and it holds it only
//! while its transactions follow one another (see `group`: one write for the changes of
//! every transaction that came while the previous write was under way).

use std::collections::BTreeMap;
use std::fs::{OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{DriverError, Result};

mod entry;
mod group;
mod slot;

pub use super::lifecycle::ClaimState;
pub use entry::{ClaimEntry, PreparedDevice};
use group::{Batch, Group, Turn, View};
pub use slot::{boot_time, checksum, CHECKPOINT_VERSION};
use slot::{needed_version, read_slot, OnDisk};

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
#[derive(Clone)]
pub struct Checkpoint {
    disk: Arc<Disk>,
    /// This process's transactions take turns here, and share writes (see `group`); the
    /// flock then only ever waits for another driver instance.
    group: Arc<Group>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("dir", &self.disk.dir)
            .field("boot_id", &self.disk.boot_id)
            .finish_non_exhaustive()
    }
}

/// Where the slots are, and whose boot they belong to.
struct Disk {
    dir: PathBuf,
    paths: [PathBuf; 2],
    boot_id: String,
}

impl Checkpoint {
    /// A checkpoint in `dir` for boot `boot_id`, with no claims loaded yet.
    pub fn new(dir: impl Into<PathBuf>, boot_id: impl Into<String>) -> Result<Self> {
        let dir = dir.into();
        graft_record::atomic::create_dir(&dir)?;
        Ok(Checkpoint {
            disk: Arc::new(Disk {
                paths: SLOTS.map(|n| dir.join(n)),
                dir,
                boot_id: boot_id.into(),
            }),
            group: Arc::default(),
        })
    }

    /// The slot files.
    pub fn paths(&self) -> [PathBuf; 2] {
        self.disk.paths.clone()
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

    /// Takes the turn (waiting up to 10 s for other transactions, of this process or of
    /// another instance) and, unless this process holds it already, the flock, loading the
    /// slots. Blocking: call from a blocking thread.
    pub fn begin(&self) -> Result<Txn> {
        let deadline = Instant::now() + LOCK_WAIT;
        let (turn, s) = self
            .group
            .turn(deadline)
            .ok_or_else(|| DriverError::Checkpoint {
                path: self.disk.dir.join(LOCK_NAME),
                reason: format!("other transactions held it for {LOCK_WAIT:?}"),
            })?;
        let cached = s.view.as_ref().map(|v| v.claims.clone());
        let epoch = s.epoch;
        drop(s);
        let mut report = OpenReport::default();
        let (claims, epoch) = match cached {
            Some(claims) => (claims, epoch),
            None => {
                let view = self.disk.load(deadline, &mut report)?;
                let claims = view.claims.clone();
                let mut s = self.group.lock();
                s.view = Some(view);
                (claims, s.epoch)
            }
        };
        Ok(Txn {
            turn,
            group: Arc::clone(&self.group),
            disk: Arc::clone(&self.disk),
            epoch,
            claims,
            report,
        })
    }

    /// Writes made so far by this process (tests check that batches share them).
    #[cfg(test)]
    pub(crate) fn writes(&self) -> u64 {
        self.group.lock().writes
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
            .filter(|f| f.boot_id == self.disk.boot_id)
            .map(|f| f.claims)
            .unwrap_or_default())
    }
}

/// A view of the checkpoint, with the turn to change it. Changes are durable once `save`
/// or `commit` returns; dropped without either, they are forgotten.
pub struct Txn {
    turn: Turn,
    group: Arc<Group>,
    disk: Arc<Disk>,
    /// The view this transaction began on.
    epoch: u64,
    claims: BTreeMap<String, ClaimEntry>,
    report: OpenReport,
}

impl Disk {
    /// Takes the flock (waiting until `deadline` for another instance) and reads the
    /// slots into a view.
    fn load(&self, deadline: Instant, report: &mut OpenReport) -> Result<View> {
        let lock_path = self.dir.join(LOCK_NAME);
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
        let mut view = View {
            _lock: lock,
            current: None,
            seq: 0,
            claims: BTreeMap::new(),
        };
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
                view.current = Some(i);
                view.seq = f.seq;
                if f.boot_id != self.boot_id {
                    report.discarded_other_boot = Some((f.boot_id, f.claims));
                } else {
                    view.claims = f.claims;
                }
            }
            None if problems.is_empty() => {}
            None => report.quarantined = Some(self.quarantine(&problems)?),
        }
        Ok(view)
    }

    /// Moves slots that failed their checks aside.
    fn quarantine(&self, problems: &[(usize, String)]) -> Result<Quarantined> {
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
        for (i, _) in problems {
            let path = &self.paths[*i];
            let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
            from_earlier_boot &= matches!((mtime, boot), (Some(m), Some(b)) if m < b);
            moved_to = path.with_extension(format!("json.corrupt-{stamp}"));
            std::fs::rename(path, &moved_to).map_err(|e| DriverError::io("move aside", path, e))?;
        }
        Ok(Quarantined {
            moved_to,
            reason,
            from_earlier_boot,
        })
    }

    /// Writes a batch into its slot, in place (not synced: a kill keeps it, a reboot discards it).
    fn write(&self, batch: &Batch) -> Result<()> {
        let file = OnDisk {
            version: needed_version(&batch.claims),
            seq: batch.seq,
            boot_id: self.boot_id.clone(),
            checksum: checksum(&batch.claims),
            claims: batch.claims.clone(),
        };
        let path = &self.paths[batch.slot];
        let data = serde_json::to_vec(&file).map_err(|source| DriverError::CheckpointEncode {
            path: path.clone(),
            source,
        })?;
        let io = |what, e| DriverError::io(what, path, e);
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(graft_record::atomic::FILE_MODE)
            .open(path)
            .map_err(|e| io("open", e))?;
        #[cfg(test)]
        group_tests::before_write(path, &mut f, &data).map_err(|e| io("write", e))?;
        f.write_all(&data).map_err(|e| io("write", e))?;
        f.set_len(data.len() as u64)
            .map_err(|e| io("truncate", e))?;
        #[cfg(test)]
        group_tests::written(path, &data);
        Ok(())
    }
}

impl Txn {
    /// The entry of claim `uid`.
    pub fn get(&self, uid: &str) -> Option<&ClaimEntry> {
        self.claims.get(uid)
    }

    /// Every entry, by claim UID.
    pub fn claims(&self) -> &BTreeMap<String, ClaimEntry> {
        &self.claims
    }

    /// Sets an entry in memory; `save` or `commit` makes it durable.
    pub fn set(&mut self, uid: &str, entry: ClaimEntry) {
        self.claims.insert(uid.to_string(), entry);
    }

    /// Drops an entry in memory; `save` or `commit` makes it durable.
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

    /// Makes the changes durable and keeps the turn: the transaction goes on, and nobody
    /// else's changes come in between.
    pub fn save(&mut self) -> Result<()> {
        let ticket = self.apply()?;
        let disk = &self.disk;
        self.group
            .wait(ticket, |b| disk.write(b))
            .map_err(|reason| failed(disk, reason.to_string()))
    }

    /// Makes the changes durable and ends the transaction: the turn goes to the next one
    /// at once, and this returns once a write holding these changes is done (it may hold
    /// the next transactions' changes too).
    pub fn commit(mut self) -> Result<()> {
        let ticket = self.apply()?;
        let Txn {
            turn, group, disk, ..
        } = self;
        drop(turn);
        group
            .wait(ticket, |b| disk.write(b))
            .map_err(|reason| failed(&disk, reason.to_string()))
    }

    fn apply(&mut self) -> Result<u64> {
        self.group.apply(self.epoch, &self.claims).ok_or_else(|| {
            failed(
                &self.disk,
                "an earlier write failed while this transaction ran".into(),
            )
        })
    }
}

fn failed(disk: &Disk, reason: String) -> DriverError {
    DriverError::Checkpoint {
        path: disk.dir.clone(),
        reason: format!("saving failed: {reason}"),
    }
}

/// Where the checkpoint lives under the shared state directory.
pub fn default_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("driver")
}

#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod tests;
