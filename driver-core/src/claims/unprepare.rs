//! NodeUnprepareResources, and the cleanup pass's rollback of prepares whose claim is gone.
//! The checkpoint's lock is held only to read the entry and, at the end, to remove it; the
//! setups are undone in between, with the claim's devices locked.

use std::collections::BTreeMap;
use std::time::Instant;

use super::checkpoint::ClaimState;
use super::engine::{Core, CoreResult};
use super::input::{ClaimError, Outcome};
use super::lifecycle::{Stage, Step};
use super::seams::CrashPoint;
use crate::model::ClaimId;

impl Core {
    /// Unprepares claims: setups undone, record removed, entry removed, in that order, so
    /// that a crash in between leaves an entry the next unprepare or cleanup finishes. An
    /// unknown claim is success.
    pub fn unprepare(
        &self,
        ids: &[ClaimId],
        deadline: Instant,
    ) -> CoreResult<BTreeMap<String, Outcome<()>>> {
        let mut out = BTreeMap::new();
        for id in ids {
            let _span = super::engine::id_span(id).entered();
            let r = self.unprepare_one(id, Step::Unprepare, deadline)?;
            if let Err(e) = &r {
                tracing::warn!(error = %e, "unprepare failed");
            }
            out.insert(id.uid.clone(), r.map(|_| ()));
        }
        Ok(out)
    }

    /// One claim, by `step` (Unprepare, or RollBack for a `Started` claim whose
    /// ResourceClaim is gone). Returns whether an entry was removed.
    fn unprepare_one(
        &self,
        id: &ClaimId,
        step: Step,
        deadline: Instant,
    ) -> CoreResult<Outcome<bool>> {
        let uid = id.uid.as_str();
        let local = |e: crate::error::DriverError| ClaimError::Local {
            claim: format!("unprepare {id}"),
            source: e,
        };
        let Some(_claim) = self.claims.acquire(std::slice::from_ref(&id.uid), deadline) else {
            return Ok(Err(ClaimError::InProgress {
                claim: id.to_string(),
            }));
        };
        let entry = match self.checkpoint.begin() {
            Ok(txn) => txn.get(uid).cloned(),
            Err(e) => return Ok(Err(local(e))),
        };
        let stage = entry.as_ref().map_or(Stage::Absent, |e| e.state.into());
        // The cleanup pass rolls back only what is still `Started`.
        if step == Step::RollBack && stage != Stage::Started {
            return Ok(Ok(false));
        }
        Self::step(uid, stage, step)?;
        if let Some(entry) = &entry {
            let names: Vec<String> = entry.devices.iter().map(|d| d.device.clone()).collect();
            let undone = self
                .lock_devices(uid, &names, deadline)
                .and_then(|_g| self.undo_setups(entry));
            if let Err(e) = undone {
                return Ok(Err(e));
            }
        }
        self.crash.at(CrashPoint::UnprepareAfterUndo)?;
        // Record first, entry second.
        if let Err(e) = self.store.remove_claim(uid) {
            return Ok(Err(local(e.into())));
        }
        self.crash.at(CrashPoint::UnprepareAfterRecord)?;
        let removed = match self.checkpoint.begin().and_then(|mut txn| {
            let had = txn.get(uid).is_some();
            txn.unset(uid);
            // Shares its write with other calls'; nothing to write when it had no entry.
            if had {
                txn.commit()?;
            }
            Ok(had)
        }) {
            Ok(had) => had,
            Err(e) => return Ok(Err(local(e))),
        };
        match (stage, step) {
            (Stage::Completed, _) => tracing::info!(uid, "unprepared"),
            (Stage::Started, Step::RollBack) => {
                tracing::info!(uid, "cleaned up a started prepare whose claim is gone")
            }
            (Stage::Started, _) => tracing::info!(uid, "rolled back a started prepare"),
            (Stage::Absent, _) => tracing::debug!(uid, "unprepare of an unknown claim"),
        }
        Ok(Ok(removed))
    }

    /// Claims whose prepare started and never completed: the cleanup pass asks the API
    /// server whether each still exists.
    pub fn started_claims(&self) -> CoreResult<Vec<ClaimId>> {
        let txn = self.checkpoint.begin()?;
        Ok(txn
            .claims()
            .iter()
            .filter(|(_, e)| e.state == ClaimState::PrepareStarted)
            .map(|(uid, e)| ClaimId {
                namespace: e.namespace.clone(),
                uid: uid.clone(),
                name: e.name.clone(),
            })
            .collect())
    }

    /// Rolls back the started prepares of `gone` (claims the API server no longer has);
    /// one completed meanwhile is left for the kubelet. Returns how many were rolled back.
    pub fn roll_back_gone(&self, gone: &[ClaimId], deadline: Instant) -> CoreResult<usize> {
        let mut n = 0;
        for id in gone {
            let _span = super::engine::id_span(id).entered();
            match self.unprepare_one(id, Step::RollBack, deadline)? {
                Ok(true) => n += 1,
                Ok(false) => {}
                Err(e) => tracing::warn!(claim = %id, error = %e, "cleanup failed"),
            }
        }
        Ok(n)
    }
}
