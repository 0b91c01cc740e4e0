//! Start-up: the checkpoint settled (one of another boot discarded with its records, a
//! corrupt one rebuilt from the records), and the records made to agree with it.

use std::path::PathBuf;

use graft_record::ClaimRecord;

use super::checkpoint::{ClaimEntry, ClaimState, PreparedDevice};
use super::engine::{Core, CoreResult};
use super::lifecycle::{Stage, Step};

/// A checkpoint that failed its checks at start-up, and what became of its claims: for the
/// operator's Event (`CheckpointRebuilt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuilt {
    /// Where the file that failed was moved.
    pub moved_to: PathBuf,
    /// Which check it failed.
    pub reason: String,
    /// Written before this boot: its claims were over, and their records were removed.
    pub from_earlier_boot: bool,
    /// Claims rebuilt from their records (prepared still, setups not known).
    pub rebuilt: usize,
    /// Claim records removed because the new checkpoint does not hold them.
    pub removed: usize,
}

impl Core {
    /// Settles the checkpoint at start and makes the records agree with it; see the module's
    /// note. Blocking: call before serving the kubelet. `Some` when the checkpoint failed its
    /// checks and was rebuilt.
    pub fn startup(&self) -> CoreResult<Option<Rebuilt>> {
        let report = self.checkpoint.open()?;
        let mut txn = self.checkpoint.begin()?;
        if let Some((boot, claims)) = report.discarded_other_boot {
            tracing::warn!(
                previous_boot = boot,
                claims = claims.len(),
                "checkpoint is from another boot; discarded with its records (the kubelet prepares again)"
            );
            for (uid, e) in &claims {
                Self::step(uid, e.state.into(), Step::Discard)?;
                self.store.remove_claim(uid)?;
            }
        }
        let mut rebuilt = None;
        if let Some(q) = report.quarantined {
            let mut r = Rebuilt {
                moved_to: q.moved_to.clone(),
                reason: q.reason.clone(),
                from_earlier_boot: q.from_earlier_boot,
                rebuilt: 0,
                removed: 0,
            };
            if q.from_earlier_boot {
                // Written before this boot: like a checkpoint of another boot, its records
                // go (below, as records the checkpoint does not hold).
                tracing::error!(
                    moved_to = %q.moved_to.display(),
                    reason = q.reason,
                    "checkpoint from an earlier boot failed its checks; discarding it and its records"
                );
            } else {
                tracing::error!(
                    moved_to = %q.moved_to.display(),
                    reason = q.reason,
                    "checkpoint failed its checks; rebuilding it from the claim records"
                );
                for uid in self.store.claim_uids()? {
                    if let Ok(Some(rec)) = self.store.get_claim(&uid) {
                        Self::step(&uid, Stage::Absent, Step::Rebuild)?;
                        txn.set(&uid, entry_from_record(&rec));
                        r.rebuilt += 1;
                    }
                }
                txn.save()?;
            }
            rebuilt = Some(r);
        }
        // Records with no checkpoint entry belong to nothing the driver tracks.
        for uid in self.store.claim_uids()? {
            if txn.get(&uid).is_none() {
                tracing::warn!(
                    claim_uid = uid,
                    "removing a record the checkpoint does not hold"
                );
                self.store.remove_claim(&uid)?;
                if let Some(r) = &mut rebuilt {
                    r.removed += 1;
                }
            }
        }
        if let Some(boot) = super::checkpoint::boot_time() {
            let n = self.store.remove_stale_temps(boot)?;
            if n > 0 {
                tracing::info!(
                    files = n,
                    "removed temp files of record writes from an earlier boot"
                );
            }
        }
        self.store.repair_index()?;
        Ok(rebuilt)
    }
}

/// A completed entry from a claim's record, for a checkpoint rebuilt after corruption.
fn entry_from_record(rec: &ClaimRecord) -> ClaimEntry {
    ClaimEntry {
        state: ClaimState::PrepareCompleted,
        namespace: rec.claim.namespace.clone(),
        name: rec.claim.name.clone(),
        devices: rec
            .devices
            .iter()
            .map(|d| PreparedDevice {
                pool: d.pool.clone(),
                device: d.name.clone(),
                requests: d.requests.clone(),
                share_id: None,
                admin_access: false,
                // Not in the record: a checkpoint rebuilt after corruption cannot undo
                // setups (see docs/daemons.md).
                setup: None,
            })
            .collect(),
    }
}
