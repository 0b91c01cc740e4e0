//! NodePrepareResources, in three phases:
//!
//! 1. under the checkpoint's lock (short): completed claims refreshed, interrupted ones
//!    rolled back, new ones planned and checked for double assignment, then `Started` saved
//!    for the batch, before any side effect;
//! 2. with no shared lock, each claim with its devices locked, claims in parallel: device
//!    setups, then the record graft-nri reads; a claim whose step fails is undone;
//! 3. under the checkpoint's lock (short): `Completed` saved for the claims that made it,
//!    the others' entries dropped.

use std::collections::BTreeMap;
use std::time::Instant;

use super::checkpoint::{ClaimState, PreparedDevice};
use super::engine::{Core, CoreResult};
use super::input::{ClaimError, ClaimInput, Outcome};
use super::lifecycle::{Stage, Step};
use super::plan::{Plan, Planned};
use super::seams::CrashPoint;
use crate::claims::setup_port::Setup;

impl Core {
    /// Prepares a kubelet call's claims. Waits for other operations on the same claims and
    /// devices until `deadline`; a device setup already under way runs to its end. Per-claim
    /// failures are in the map; a `CoreError` fails the whole call (the kubelet retries).
    pub fn prepare(
        &self,
        inputs: Vec<ClaimInput>,
        deadline: Instant,
    ) -> CoreResult<BTreeMap<String, Outcome<Vec<PreparedDevice>>>> {
        let mut out = BTreeMap::new();
        if inputs.is_empty() {
            return Ok(out);
        }
        // No container may start without its devices: while graft-nri is not there to
        // inject, every claim fails and the kubelet retries.
        if let Err(why) = self.gate.ready() {
            for i in inputs {
                out.insert(i.id.uid.clone(), Err(ClaimError::NriNotReady(why.clone())));
            }
            return Ok(out);
        }
        let mut guards = Vec::new();
        let mut mine = Vec::new();
        for input in inputs {
            match self
                .claims
                .acquire(std::slice::from_ref(&input.id.uid), deadline)
            {
                Some(g) => {
                    guards.push(g);
                    mine.push(input);
                }
                None => {
                    let claim = input.id.to_string();
                    out.insert(input.id.uid.clone(), Err(ClaimError::InProgress { claim }));
                }
            }
        }

        // Phase 1.
        let inventory = self.inventory();
        let mut plans: Vec<Plan> = Vec::new();
        {
            let mut txn = self.checkpoint.begin()?;
            for input in &mine {
                let _span = super::engine::id_span(&input.id).entered();
                match self.plan_one(&mut txn, &inventory, input, &plans)? {
                    Ok(Planned::Done(devices)) => {
                        out.insert(input.id.uid.clone(), Ok(devices));
                    }
                    Ok(Planned::New(plan)) => plans.push(*plan),
                    Err(e) => {
                        tracing::warn!(claim = %input.id, error = %e, "prepare failed");
                        out.insert(input.id.uid.clone(), Err(e));
                    }
                }
            }
            if plans.is_empty() {
                return Ok(out);
            }
            for p in &plans {
                Self::step(&p.uid, Stage::Absent, Step::Begin)?;
                txn.set(&p.uid, p.entry.clone());
            }
            // Shares its write with the calls that come meanwhile.
            txn.commit()?;
        }
        self.crash.at(CrashPoint::AfterStarted)?;

        // Phase 2: in parallel when more than one claim has a setup to wait for.
        let slow = plans
            .iter()
            .filter(|p| p.entry.devices.iter().any(|d| d.setup.is_some()))
            .count();
        let results: Vec<CoreResult<Outcome<()>>> = if slow > 1 {
            let claims: Vec<String> = plans.iter().map(Plan::claim).collect();
            std::thread::scope(|s| {
                let handles: Vec<_> = plans
                    .iter_mut()
                    .map(|p| s.spawn(|| self.carry_out(p, deadline)))
                    .collect();
                handles
                    .into_iter()
                    .zip(claims)
                    .map(|(h, claim)| {
                        h.join().unwrap_or_else(|_| {
                            tracing::error!(%claim, "a device setup panicked");
                            Ok(Err(ClaimError::SetupPanicked { claim }))
                        })
                    })
                    .collect()
            })
        } else {
            plans
                .iter_mut()
                .map(|p| self.carry_out(p, deadline))
                .collect()
        };
        let mut done = Vec::new();
        for (plan, r) in plans.into_iter().zip(results) {
            match r? {
                Ok(()) => done.push(plan),
                Err(e) => {
                    let _span = plan.span().entered();
                    tracing::warn!(error = %e, "prepare failed");
                    out.insert(plan.uid.clone(), Err(e));
                }
            }
        }

        // Phase 3.
        {
            let mut txn = self.checkpoint.begin()?;
            for plan in &done {
                Self::step(&plan.uid, Stage::Started, Step::Complete)?;
                let mut entry = plan.entry.clone();
                entry.state = ClaimState::PrepareCompleted;
                txn.set(&plan.uid, entry);
            }
            for uid in out.iter().filter(|(_, o)| o.is_err()).map(|(u, _)| u) {
                if txn
                    .get(uid)
                    .is_some_and(|e| e.state == ClaimState::PrepareStarted)
                {
                    txn.unset(uid);
                }
            }
            txn.commit()?;
        }
        self.crash.at(CrashPoint::AfterCompleted)?;
        for plan in done {
            let _span = plan.span().entered();
            tracing::info!(
                devices = plan.entry.devices.len(),
                pods = plan.record.pods.len(),
                "prepared"
            );
            out.insert(plan.uid, Ok(plan.entry.devices));
        }
        drop(guards);
        Ok(out)
    }

    /// Phase 2 for one claim: its devices locked, its setups applied (a setup may replace
    /// the device's edits, as VFIO's group node does), its record checked and written. On
    /// a failure, what was done is undone and the claim's error returned; a crash point
    /// stops everything where it is.
    fn carry_out(&self, plan: &mut Plan, deadline: Instant) -> CoreResult<Outcome<()>> {
        let _span = plan.span().entered();
        let names = plan.device_names();
        let _devices = match self.lock_devices(&plan.uid, &names, deadline) {
            Ok(g) => g,
            Err(e) => return Ok(Err(e)),
        };
        let mut applied: Vec<Setup> = Vec::new();
        for d in &plan.entry.devices {
            let Some(s) = &d.setup else { continue };
            match self.setup.apply(s) {
                Ok(edits) => {
                    tracing::info!(device = d.device, setup = ?s, "set up");
                    if let Some(edits) = edits {
                        if let Some(rec) =
                            plan.record.devices.iter_mut().find(|r| r.name == d.device)
                        {
                            rec.edits = crate::claims::setup_port::with_setup_edits(
                                std::mem::take(&mut rec.edits),
                                edits,
                            );
                        }
                    }
                    applied.push(s.clone());
                }
                Err(source) => {
                    // The failed one may be half done (unbound, not yet rebound): undone
                    // too; undo is idempotent.
                    applied.push(s.clone());
                    self.undo_applied(&applied);
                    return Ok(Err(ClaimError::Setup {
                        device: d.device.clone(),
                        source,
                    }));
                }
            }
        }
        self.crash.at(CrashPoint::AfterSetup)?;
        // The same policy graft-nri applies: a violation fails here, on the claim.
        if let Err(source) = self.policy.check_record(&plan.record) {
            self.undo_applied(&applied);
            return Ok(Err(ClaimError::Policy {
                claim: format!("{}/{}", plan.entry.namespace, plan.entry.name),
                source,
            }));
        }
        if let Err(e) = self.store.put_claim(&plan.record) {
            // Leave nothing half-done.
            let _ = self.store.remove_claim(&plan.uid);
            self.undo_applied(&applied);
            return Ok(Err(ClaimError::Local {
                claim: format!("prepare {}/{}", plan.entry.namespace, plan.entry.name),
                source: e.into(),
            }));
        }
        self.crash.at(CrashPoint::AfterRecord)?;
        Ok(Ok(()))
    }

    fn undo_applied(&self, applied: &[Setup]) {
        for s in applied.iter().rev() {
            if let Err(e) = self.setup.undo(s) {
                tracing::error!(setup = ?s, error = %e, "undoing a setup failed");
            }
        }
    }
}
