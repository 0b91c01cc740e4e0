//! Group commit for the checkpoint: this process's transactions take turns applying their
//! changes to one in-memory view, and one write saves every change applied
//! since the last write. A caller is answered only once the write that holds its change is
//! written; a failed write fails every caller whose change it held, and every caller whose
//! change was applied after it (the view is dropped and reloaded from disk).
//!
//! Only one write is ever in flight, and it goes into the slot that does not hold the last
//! written state, so a process killed during it leaves that state to read. Changes applied
//! while a write is in flight wait for the next one: writing them into the slot being
//! written could tear what that write is about to acknowledge. Writes are not synced
//! (graft-record's `durability` says why).
//!
//! The view lives only while this process holds the checkpoint's flock: it is taken with
//! the first turn and released as soon as nothing is in flight, no turn is held and nobody
//! waits for one, so another driver instance waits at most for the end of a burst, and a
//! later transaction reads the slots again.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::entry::ClaimEntry;
use crate::error::DriverError;

/// Why a change was not saved: the same answer for every caller whose change a failed
/// write held, hence shared rather than copied.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum Unsaved {
    /// The view was gone while a change was pending (fails safe rather than hang).
    #[error("the checkpoint was dropped")]
    Dropped,
    /// The write that held the change failed.
    #[error(transparent)]
    Write(Arc<DriverError>),
}

/// The checkpoint as this process holds it between its flock and its release.
pub(super) struct View {
    /// The open lock file: its flock lives as long as the view.
    pub _lock: File,
    /// The slot holding the last written state.
    pub current: Option<usize>,
    /// That state's sequence number.
    pub seq: u64,
    /// Every change applied, written or not.
    pub claims: BTreeMap<String, ClaimEntry>,
}

/// What a write must hold, taken from the view by the caller that writes it.
pub(super) struct Batch {
    pub seq: u64,
    pub slot: usize,
    pub claims: BTreeMap<String, ClaimEntry>,
    tickets: Vec<u64>,
}

#[derive(Default)]
pub(super) struct State {
    /// A transaction holds the turn.
    busy: bool,
    /// Callers waiting for the turn.
    waiting: usize,
    pub view: Option<View>,
    /// Bumped whenever the view is dropped: a transaction begun on an older view may not
    /// apply its changes.
    pub epoch: u64,
    /// A write is in flight.
    writing: bool,
    next_ticket: u64,
    /// Changes applied and not yet in a write.
    pending: Vec<u64>,
    /// Answers not yet collected by their callers.
    outcomes: HashMap<u64, Result<(), Unsaved>>,
    /// Writes made (tests count them).
    pub writes: u64,
}

/// The shared state and its wake-ups.
#[derive(Default)]
pub(super) struct Group {
    state: Mutex<State>,
    changed: Condvar,
}

/// The turn to read and change the view; released when dropped.
pub(super) struct Turn {
    group: Arc<Group>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut s = self.group.lock();
        s.busy = false;
        s.settle();
        self.group.changed.notify_all();
    }
}

impl State {
    /// Drops the view, and with it the flock, when nothing needs it.
    fn settle(&mut self) {
        let idle = !self.busy && !self.writing && self.pending.is_empty() && self.waiting == 0;
        if idle && self.view.take().is_some() {
            self.epoch += 1;
        }
    }
}

impl Group {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for the turn until `deadline`; `None` when it passes first.
    pub fn turn(self: &Arc<Self>, deadline: Instant) -> Option<(Turn, MutexGuard<'_, State>)> {
        let mut s = self.lock();
        s.waiting += 1;
        while s.busy {
            let now = Instant::now();
            if now >= deadline {
                s.waiting -= 1;
                s.settle();
                return None;
            }
            s = self
                .changed
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        s.waiting -= 1;
        s.busy = true;
        let turn = Turn {
            group: Arc::clone(self),
        };
        Some((turn, s))
    }

    /// Applies `claims` (the caller holds the turn, on a view of `epoch`) and returns the
    /// ticket to wait on; `None` when the view was dropped meanwhile (a write failed).
    pub fn apply(&self, epoch: u64, claims: &BTreeMap<String, ClaimEntry>) -> Option<u64> {
        let mut s = self.lock();
        if s.epoch != epoch {
            return None;
        }
        s.view.as_mut()?.claims = claims.clone();
        s.next_ticket += 1;
        let t = s.next_ticket;
        s.pending.push(t);
        Some(t)
    }

    /// Waits until the write holding `ticket` is done, writing it with `write` when no
    /// other write is in flight. `Err` carries why the write failed.
    pub fn wait(
        &self,
        ticket: u64,
        mut write: impl FnMut(&Batch) -> crate::error::Result<()>,
    ) -> Result<(), Unsaved> {
        let mut s = self.lock();
        loop {
            if let Some(r) = s.outcomes.remove(&ticket) {
                return r;
            }
            if s.writing {
                s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            let tickets = std::mem::take(&mut s.pending);
            let Some(view) = s.view.as_ref() else {
                // Unreachable while a change is pending; fail safe rather than hang.
                for t in tickets {
                    s.outcomes.insert(t, Err(Unsaved::Dropped));
                }
                continue;
            };
            let batch = Batch {
                seq: view.seq + 1,
                slot: view.current.map_or(0, |c| 1 - c),
                claims: view.claims.clone(),
                tickets,
            };
            s.writing = true;
            s.writes += 1;
            drop(s);
            let r = write(&batch);
            s = self.lock();
            s.writing = false;
            match r {
                Ok(()) => {
                    if let Some(v) = s.view.as_mut() {
                        v.current = Some(batch.slot);
                        v.seq = batch.seq;
                    }
                    for t in batch.tickets {
                        s.outcomes.insert(t, Ok(()));
                    }
                }
                Err(e) => {
                    // The view holds changes no file holds: drop it, and fail every caller
                    // whose change it holds.
                    tracing::error!(error = %e, "saving the checkpoint failed");
                    let why = Unsaved::Write(Arc::new(e));
                    let later = std::mem::take(&mut s.pending);
                    for t in batch.tickets.into_iter().chain(later) {
                        s.outcomes.insert(t, Err(why.clone()));
                    }
                    s.view = None;
                    s.epoch += 1;
                }
            }
            s.settle();
            self.changed.notify_all();
        }
    }
}
